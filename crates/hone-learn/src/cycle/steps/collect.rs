//! collect: fix this cycle's traffic window (from where the last finished
//! cycle stopped, to now) and the champion it is measured against.

use super::{Learner, Stepped};
use crate::error::Result;
use crate::release::deploy;
use hone_config::AgentConfig;
use hone_types::time::now_ms;
use hone_types::{CycleDetail, CycleInfo};

pub(super) async fn run(learner: &Learner, agent: &AgentConfig, cycle: &CycleInfo, _: CycleDetail) -> Result<Stepped> {
    let name = agent.name.as_str();
    let since = super::super::schedule::watermark(learner.store.as_ref(), name, Some(&cycle.id))?;
    learner.flush_recorder().await;
    let (deployment, _) = deploy::current(learner.store.as_ref(), agent)?;
    let new_episodes = learner.store.episodes_since(name, since)?;
    learner.say(
        name,
        &format!("{new_episodes} new episodes; champion {}", deployment.champion),
    );
    let detail = CycleDetail {
        since: Some(since),
        until: Some(now_ms()),
        champion: Some(deployment.champion),
        new_episodes: Some(new_episodes),
        ..CycleDetail::default()
    };
    Ok(Stepped::next(cycle, detail))
}
