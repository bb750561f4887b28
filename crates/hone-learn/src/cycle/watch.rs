//! Watching a canary: score its new episodes, run the monitors against the
//! champion's episodes of the same period, and then alert (log, store,
//! webhook) and roll back, promote it after enough quiet episodes, or wait.

use super::Learner;
use crate::deploy::{self, Change};
use crate::error::{LearnError, Result};
use crate::monitor::{check, Firing};
use crate::reward::reward_pending;
use crate::stats::{mean, mean_greater_p};
use hone_config::AgentConfig;
use hone_types::time::now_ms;
use hone_types::{Alert, Deployment, HistoryEvent};
use serde_json::json;

/// What a look at the canary decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    NoCanary,
    /// Still collecting: canary episodes with rewards so far.
    Waiting(u64),
    Promoted(String),
    RolledBack(String),
    /// A monitor fired and the policy does not roll back.
    Alerted(String),
}

fn alert_of(d: &Deployment, f: &Firing, action: &str) -> Option<Alert> {
    Some(Alert {
        id: 0,
        agent: d.agent.clone(),
        version_id: d.canary.clone()?,
        champion_id: d.champion.clone(),
        metric: f.metric.clone(),
        canary_rate: f.canary_rate,
        champion_rate: f.champion_rate,
        canary_episodes: f.canary_episodes,
        champion_episodes: f.champion_episodes,
        p_value: f.p_value,
        episodes: f.episodes.clone(),
        action: action.to_owned(),
        at: now_ms(),
    })
}

/// Scores the canary's new episodes, runs the monitors, and alerts, rolls
/// back, promotes or waits.
pub async fn watch(learner: &Learner, agent: &AgentConfig) -> Result<Verdict> {
    let name = agent.name.as_str();
    let (deployment, _) = deploy::current(learner.store.as_ref(), agent)?;
    let (Some(canary), Some(since)) = (deployment.canary.clone(), deployment.canary_since) else {
        return Ok(Verdict::NoCanary);
    };
    learner.flush_recorder().await;
    let rewarder = learner.rewarder(agent)?;
    reward_pending(learner.store.as_ref(), &rewarder, Some(since), None, now_ms()).await?;
    let spec = &agent.learn.monitor;
    let window = |v| {
        learner
            .store
            .version_window(name, v, since, &rewarder.spec_version, spec.window)
    };
    let (c, h) = (window(&canary)?, window(&deployment.champion)?);
    let predicted = crate::monitor::expected(learner.store.as_ref(), name, &canary)?;
    let firings = check(spec, &c, &h, predicted);
    if let Some(first) = firings.first() {
        let action = if spec.rollback { "rolled_back" } else { "alerted" };
        let alert = alert_of(&deployment, first, action).ok_or_else(|| LearnError::state("no canary"))?;
        let line = format!(
            "ALERT {name}: {} of canary {canary} is {:.3} vs champion {} {:.3} over {} / {} episodes (p = {:.4}); episodes: {}",
            first.metric,
            first.canary_rate,
            deployment.champion,
            first.champion_rate,
            first.canary_episodes,
            first.champion_episodes,
            first.p_value,
            first.episodes.join(", ")
        );
        tracing::warn!(agent = name, version = %canary, metric = %first.metric, "{line}");
        learner.say(name, &line);
        if let Some(url) = &spec.webhook {
            notify(learner, url, &alert).await;
        }
        if spec.rollback {
            let why = format!("monitor `{}` fired", first.metric);
            let change = deploy::rollback(learner.store.as_ref(), agent, &why, Some(&alert))?;
            return Ok(match change {
                Change::Applied(s) => Verdict::RolledBack(s),
                Change::AlreadyDone(s) | Change::Refused(s) => Verdict::Alerted(s),
            });
        }
        let seen = learner
            .store
            .alerts(Some(name), 100)?
            .iter()
            .any(|a| a.version_id == canary && a.metric == first.metric && a.at >= since);
        if !seen {
            let (d, revision) = deploy::current(learner.store.as_ref(), agent)?;
            let event = HistoryEvent::new(name, alert.at, "alert", &line).version(&canary);
            learner
                .store
                .change_deployment(&d, revision, &[], &[event], Some(&alert), alert.at)?;
        }
        return Ok(Verdict::Alerted(line));
    }
    let canary_rewards: Vec<f64> = c.iter().filter_map(|e| e.reward).collect();
    let champion_rewards: Vec<f64> = h.iter().filter_map(|e| e.reward).collect();
    let n = canary_rewards.len() as u64;
    if n < agent.deployment.canary_episodes as u64 {
        return Ok(Verdict::Waiting(n));
    }
    let (mc, mh) = (mean(&canary_rewards), mean(&champion_rewards));
    // Not worse: the champion's mean is not significantly above the canary's.
    let p_worse = mean_greater_p(&canary_rewards, &champion_rewards);
    let evidence = json!({"canary_mean": mc, "champion_mean": mh, "canary_episodes": n,
        "champion_episodes": champion_rewards.len(), "p_champion_better": p_worse});
    let summary = format!(
        "online reward {} over {n} episodes vs champion {} over {} (p = {p_worse:.3})",
        mc.map_or("-".into(), |m| format!("{m:.3}")),
        mh.map_or("-".into(), |m| format!("{m:.3}")),
        champion_rewards.len()
    );
    let change = if p_worse >= 1.0 - spec.confidence {
        deploy::promote(learner.store.as_ref(), agent, evidence, &summary)?
    } else {
        deploy::rollback(learner.store.as_ref(), agent, &format!("worse online: {summary}"), None)?
    };
    learner.say(name, &format!("{change:?}"));
    Ok(match change {
        Change::Applied(s) if p_worse >= 1.0 - spec.confidence => Verdict::Promoted(s),
        Change::Applied(s) => Verdict::RolledBack(s),
        Change::AlreadyDone(s) | Change::Refused(s) => Verdict::Alerted(s),
    })
}

/// The canary's offline cost and latency relative to the champion's in
/// the cycle that proposed it.
pub(crate) async fn notify(learner: &Learner, url: &str, alert: &Alert) {
    let sent = learner
        .gateway
        .http()
        .post(url)
        .json(&json!({"type": "hone.alert", "alert": alert}))
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => tracing::warn!(url, status = %r.status(), "alert webhook refused the alert"),
        Err(e) => tracing::warn!(url, error = %e, "alert webhook unreachable"),
    }
}
