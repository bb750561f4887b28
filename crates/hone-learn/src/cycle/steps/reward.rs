//! reward: score every episode of the window that has no reward under the
//! current spec yet.

use super::{Learner, Stepped};
use crate::error::Result;
use crate::reward::reward_pending;
use hone_config::AgentConfig;
use hone_types::time::now_ms;
use hone_types::{CycleDetail, CycleInfo};

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
    Ok(Stepped::next(cycle, detail))
}
