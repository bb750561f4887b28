//! datasets: snapshot the window's traffic (a stratified sample), split it
//! into a train set (what optimisers learn from) and a target set (what
//! candidates are evaluated and gated on), disjoint by instance, and the
//! champion's past successes as the regression set, less anything in the
//! train set; ends the cycle early when there is too little traffic.
//!
//! Training and gating never share an instance: a candidate gated on the
//! prompts it was trained on would pass on memory, not on skill.

use super::{Learner, Stepped};
use crate::dataset::{self, BuildOptions, Builder};
use crate::error::Result;
use hone_config::AgentConfig;
use hone_store::EpisodeFilter;
use hone_types::time::now_ms;
use hone_types::{CycleDetail, CycleInfo, CycleState};

pub(super) async fn run(
    learner: &Learner,
    agent: &AgentConfig,
    cycle: &CycleInfo,
    mut detail: CycleDetail,
) -> Result<Stepped> {
    let name = agent.name.as_str();
    let champion = super::champion(&detail)?.clone();
    let seed = cycle.id.rsplit('-').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let options = |builder: Builder| BuildOptions {
        builder,
        name: format!("{name}.{}", builder.name()),
        filter: EpisodeFilter {
            agent: name.to_owned(),
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
    let now = now_ms();
    let (train, target, regression) = tokio::task::spawn_blocking(move || {
        let sample = dataset::build(store.as_ref(), &traffic, now, &mut |_| {})?.0;
        let (train, target) = dataset::split(store.as_ref(), &sample, seed, now)?;
        let regression = dataset::build(store.as_ref(), &previously_passing, now, &mut |_| {})?.0;
        let regression = dataset::without(store.as_ref(), &regression, &train, now)?;
        Ok::<_, hone_store::StoreError>((train, target, regression))
    })
    .await??;
    learner.say(
        name,
        &format!(
            "datasets: train {} ({} instances), target {} ({} instances), regression {} ({} instances)",
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
