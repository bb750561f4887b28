//! datasets: snapshot the window's traffic (a stratified sample), split it
//! into a train set (what optimisers learn from) and a target set (what
//! candidates are evaluated and gated on), disjoint by instance, and the
//! champion's past successes as the regression set, less anything in the
//! train or the target set; ends the cycle early when there is too little
//! traffic.
//!
//! Training and gating never share an instance: a candidate gated on the
//! prompts it was trained on would pass on memory, not on skill. The
//! regression set also leaves out the target set's instances: the gate
//! already compares every target instance (a case the champion passes and
//! the candidate breaks is flagged there, with the same re-runs), so
//! running them a second time would only double the evaluation's work.
//!
//! First the window is checked for drift (`crate::data::drift`): when the task or
//! failure mix moved, an alert is raised and this cycle's traffic sample is
//! drawn from the window alone, so the new traffic weighs fully.
//!
//! Then, unless the window drifted, the recent gates are mined
//! (`search::flipped`): cases on which a champion and a candidate
//! disagreed join this cycle's train set (the champion failed them) or
//! regression set (it passed them), and leave the target set, so train and
//! gate stay disjoint.

use super::{Learner, Stepped};
use crate::data::dataset::{self, BuildOptions, Builder};
use crate::data::drift;
use crate::error::Result;
use crate::search::eval::Target;
use hone_config::AgentConfig;
use hone_store::EpisodeFilter;
use hone_types::time::now_ms;
use hone_types::{Alert, AlertAction, CycleDetail, CycleInfo, CycleState, Firing, HistoryEvent, VersionId};
use serde_json::json;

pub(super) async fn run(
    learner: &Learner,
    agent: &AgentConfig,
    cycle: &CycleInfo,
    mut detail: CycleDetail,
) -> Result<Stepped> {
    let name = agent.name.as_str();
    let champion = super::champion(&detail)?.clone();
    let seed = cycle.id.rsplit('-').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let drifted = check_drift(learner, agent, &detail, &champion, seed).await?;
    let options = |builder: Builder| BuildOptions {
        builder,
        name: format!("{name}.{}", builder.name()),
        filter: EpisodeFilter {
            agent: name.to_owned(),
            since: if drifted && builder == Builder::Traffic {
                detail.since
            } else {
                None
            },
            until: detail.until,
            spec_version: Some(agent.reward.version()),
            ..EpisodeFilter::default()
        },
        size: agent.learn.dataset_size,
        seed,
        dedup: true,
        champion: Some(champion.clone()),
        reference_signal: agent.reward.reference_signal.clone(),
    };
    let store = learner.store.clone();
    let (traffic, previously_passing) = (options(Builder::Traffic), options(Builder::Regression));
    let mining = (
        name.to_owned(),
        cycle.id.clone(),
        // After a drift the new window weighs fully: no older cases mined in.
        (
            if drifted { 0 } else { agent.learn.flipped_cycles },
            agent.learn.dataset_size / 2,
        ),
        Target::of(agent),
        agent.learn.gate.samples,
    );
    let now = now_ms();
    let (train, target, regression, flipped) = tokio::task::spawn_blocking(move || {
        let store = store.as_ref();
        let sample = dataset::build(store, &traffic, now, &mut |_| {})?.0;
        let (train, target) = dataset::split(store, &sample, seed, now)?;
        let (agent, current, limits, via, samples) = mining;
        let flipped = crate::search::flipped::recently_flipped(store, &agent, &current, limits, &via, samples)?;
        let why = json!({"of": train.id, "flipped_in": flipped.cycles});
        let train = dataset::with(store, &train, &flipped.learnable, &why, now)?;
        let mined = json!({"of": target.id, "without_flipped_in": flipped.cycles});
        let target = dataset::without_ids(store, &target, &flipped.ids(), &mined, now)?;
        let regression = dataset::build(store, &previously_passing, now, &mut |_| {})?.0;
        let why = json!({"of": regression.id, "flipped_in": flipped.cycles});
        let regression = dataset::with(store, &regression, &flipped.fragile, &why, now)?;
        let regression = dataset::without(store, &regression, &[&train, &target], now)?;
        Ok::<_, hone_store::StoreError>((train, target, regression, flipped))
    })
    .await??;
    let mined = if flipped.cycles.is_empty() {
        String::new()
    } else {
        format!(
            "; mined from the gates of {}: {} flipped cases the champion failed (to train on), {} it passed (to gate on)",
            flipped.cycles.join(", "),
            flipped.learnable.len(),
            flipped.fragile.len()
        )
    };
    learner.say(
        name,
        &format!(
            "datasets: train {} ({} instances), target {} ({} instances), regression {} ({} instances){mined}",
            train.id, train.item_count, target.id, target.item_count, regression.id, regression.item_count
        ),
    );
    detail.train = Some(train.id);
    detail.target = Some(target.id);
    detail.regression = (regression.item_count > 0).then_some(regression.id);
    if target.item_count < 2 || train.item_count < 2 {
        detail.note = Some(format!(
            "not enough traffic: {} instances to train on, {} to gate on",
            train.item_count, target.item_count
        ));
        return Ok(Stepped::to(CycleState::Done, detail));
    }
    Ok(Stepped::next(cycle, detail))
}

/// Runs the drift check on the cycle's window; each drift becomes an
/// alert (stored with a history line, sent to the monitor's webhook).
/// Whether any was found.
async fn check_drift(
    learner: &Learner,
    agent: &AgentConfig,
    detail: &CycleDetail,
    champion: &VersionId,
    seed: u64,
) -> Result<bool> {
    let (Some(since), spec) = (detail.since, &agent.learn.drift) else {
        return Ok(false);
    };
    if spec.min_episodes == 0 {
        return Ok(false);
    }
    let (store, name, until, spec2, version) = (
        learner.store.clone(),
        agent.name.clone(),
        detail.until,
        spec.clone(),
        agent.reward.version(),
    );
    let drifts =
        tokio::task::spawn_blocking(move || drift::check(store.as_ref(), &name, &version, since, until, &spec2, seed))
            .await??;
    for d in &drifts {
        let line = format!(
            "DRIFT {}: {} moved (Jensen–Shannon {:.3} bits, p = {:.4}; {} window episodes vs {} before); rising words: {}; \
             this cycle samples the window only",
            agent.name,
            d.mix.metric(),
            d.divergence,
            d.p_value,
            d.recent,
            d.earlier,
            d.rising.join(", ")
        );
        tracing::warn!(agent = %agent.name, metric = d.mix.metric(), "{line}");
        learner.say(&agent.name, &line);
        let alert = Alert {
            id: 0,
            agent: agent.name.clone(),
            version_id: champion.clone(),
            champion_id: champion.clone(),
            firing: Firing {
                metric: d.mix.metric().to_owned(),
                canary_rate: d.divergence,
                champion_rate: 0.0,
                canary_episodes: d.recent as u64,
                champion_episodes: d.earlier as u64,
                p_value: d.p_value,
                episodes: d.examples.iter().map(|e| e.to_string()).collect(),
            },
            action: AlertAction::Reweighted,
            at: now_ms(),
        };
        let (deployment, revision) = crate::release::deploy::current(learner.store.as_ref(), agent)?;
        let event = HistoryEvent::new(&agent.name, alert.at, "alert", &line).version(champion);
        learner
            .store
            .change_deployment(&deployment, revision, &[], &[event], Some(&alert), alert.at)?;
        if let Some(url) = &agent.learn.monitor.webhook {
            crate::cycle::watch::notify(learner, url, &alert).await;
        }
    }
    Ok(!drifts.is_empty())
}
