//! datasets: snapshot the window's traffic as the target set (a stratified
//! sample) and the champion's past successes as the regression set; ends
//! the cycle early when there is too little traffic to learn from.

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
    let (target, regression) = tokio::task::spawn_blocking(move || {
        let target = dataset::build(store.as_ref(), &traffic, now, &mut |_| {})?;
        let regression = dataset::build(store.as_ref(), &previously_passing, now, &mut |_| {})?;
        Ok::<_, hone_store::StoreError>((target.0, regression.0))
    })
    .await??;
    learner.say(
        name,
        &format!(
            "datasets: target {} ({} instances), regression {} ({} instances)",
            target.id, target.item_count, regression.id, regression.item_count
        ),
    );
    detail.target = Some(target.id);
    detail.regression = (regression.item_count > 0).then_some(regression.id);
    if target.item_count < 2 {
        detail.note = Some(format!("not enough traffic: {} instances", target.item_count));
        return Ok(Stepped::to(CycleState::Done, detail));
    }
    Ok(Stepped::next(cycle, detail))
}
