//! reward: score every episode of the window that has no reward under the
//! current spec yet; then, with `[agents.NAME.reward.model]`, train the
//! reward model on the episodes users reacted to and measure it on those
//! held out (`reward_model`), stored in the cycle and its history.

use super::{Learner, Stepped};
use crate::error::Result;
use crate::scoring::reward::reward_pending;
use hone_config::AgentConfig;
use hone_types::time::now_ms;
use hone_types::{CycleDetail, CycleInfo, HistoryEvent};

pub(super) async fn run(
    learner: &Learner,
    agent: &AgentConfig,
    cycle: &CycleInfo,
    mut detail: CycleDetail,
) -> Result<Stepped> {
    let name = agent.name.as_str();
    let rewarder = learner.rewarder(agent)?;
    let scored = reward_pending(learner.store.as_ref(), &rewarder, None, detail.until, now_ms()).await?;
    let (count, mean) = learner.store.reward_summary(name, &rewarder.spec_version)?;
    learner.say(
        name,
        &format!(
            "scored {scored} episodes; {count} rewarded, mean {}",
            mean.map_or("-".into(), |m| format!("{m:.3}"))
        ),
    );
    detail.rewarded = Some(scored);
    let mut events = Vec::new();
    if let Some(spec) = &agent.reward.model {
        use crate::scoring::reward_model::{saved_path, train, Saved, Source};
        let path = saved_path(&learner.config.gateway.data_dir, name);
        let source = match champion_checkpoint(learner, &detail).await? {
            Ok(checkpoint) => Ok(Source::HiddenStates(checkpoint)),
            // A hosted agent: its judge, calibrated against its users.
            Err(why) => rewarder.llm_judge().map(Source::Judge).ok_or(why),
        };
        let line = match source {
            Err(why) => format!("reward model: {why}; not trained"),
            Ok(source) => {
                let trained = train(
                    learner.store.as_ref(),
                    name,
                    &rewarder.spec_version,
                    spec,
                    source,
                    Saved::read(&path),
                )
                .await?;
                // The latest model replaces the one before, usable or not:
                // a model that fell below min_auc stops standing in.
                trained.saved.save(&path)?;
                detail.reward_model = Some(trained.quality);
                events.push(
                    HistoryEvent::new(name, now_ms(), "reward_model", &trained.line)
                        .cycle(&cycle.id)
                        .evidence(serde_json::json!(trained.quality)),
                );
                trained.line
            }
        };
        learner.say(name, &line);
    }
    Ok(Stepped::next(cycle, detail).with_events(events))
}

/// The checkpoint of the champion's first route, when the embedded engine
/// serves it (the reward model reads the token ids it recorded); else why not.
async fn champion_checkpoint(
    learner: &Learner,
    detail: &CycleDetail,
) -> Result<std::result::Result<std::path::PathBuf, String>> {
    let champion = super::champion(detail)?;
    let Some(record) = learner.store.version(champion)? else {
        return Ok(Err(format!("the champion {champion} is not stored")));
    };
    let Some(route) = record.spec.routes.first() else {
        return Ok(Err("the champion has no route".to_owned()));
    };
    let local = learner
        .config
        .providers
        .get(&route.provider)
        .is_some_and(|p| p.kind == hone_config::ProviderKind::Local);
    if !local {
        return Ok(Err(format!(
            "provider `{}` is not the embedded engine, whose token ids the base model reads, and the reward has no judge to calibrate against users instead",
            route.provider
        )));
    }
    let artefacts = hone_artefacts::Artefacts::new(&learner.config.artefacts)
        .map_err(|e| crate::error::LearnError::config(e.to_string()))?;
    Ok(Ok(artefacts.checkpoint(&route.model).await.map_err(
        crate::error::LearnError::training(format!("fetching the checkpoint {}", route.model)),
    )?))
}
