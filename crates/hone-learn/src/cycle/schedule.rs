//! When cycles run: per agent, after `every.episodes` new episodes or
//! `every.minutes` since the last cycle began (or on demand, `--once`), an
//! unfinished cycle first; cycles of different agents run concurrently, at
//! most `[learn] max_concurrent_cycles` at a time. Every poll also watches
//! each agent's canary.

use super::Learner;
use crate::error::Result;
use hone_config::AgentConfig;
use hone_store::CycleStore;
use hone_types::time::now_ms;
use hone_types::CycleState;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Where the agent's next cycle's traffic starts: the `until` of its newest
/// finished cycle (other than `except`, the cycle asking), or the beginning.
pub fn watermark(store: &dyn CycleStore, agent: &str, except: Option<&str>) -> Result<i64> {
    Ok(store
        .cycles(Some(agent), 50)?
        .iter()
        .filter(|c| c.state == CycleState::Done && Some(c.id.as_str()) != except)
        .find_map(|c| c.detail.until)
        .unwrap_or(0))
}

/// Why a cycle should start now, if it should.
pub fn due(learner: &Learner, agent: &AgentConfig, now: i64) -> Result<Option<&'static str>> {
    let store = learner.store.as_ref();
    if store.open_cycle(&agent.name)?.is_some() {
        return Ok(Some("resume"));
    }
    if agent.learn.optimisers.is_empty() {
        return Ok(None);
    }
    let last_started = store.cycles(Some(&agent.name), 1)?.first().map(|c| c.started_at);
    let since = watermark(store, &agent.name, None)?;
    if let Some(n) = agent.learn.every_episodes {
        if store.episodes_since(&agent.name, since)? >= n {
            return Ok(Some("episodes"));
        }
    }
    if let Some(minutes) = agent.learn.every_minutes {
        let waited = last_started.is_none_or(|t| now - t >= minutes as i64 * 60_000);
        let any = store.episodes_since(&agent.name, since)? > 0;
        if waited && any {
            return Ok(Some("minutes"));
        }
    }
    Ok(None)
}

/// Runs until `stop` resolves: every poll, watches canaries and starts due
/// cycles within the concurrency budget. Cycles still running when `stop`
/// resolves are dropped where they are; they resume at their step next time.
pub async fn run_forever(learner: Arc<Learner>, agents: Vec<String>, stop: impl std::future::Future<Output = ()>) {
    let budget = Arc::new(tokio::sync::Semaphore::new(learner.config.learn.max_concurrent_cycles));
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut tick = tokio::time::interval(Duration::from_secs(learner.config.learn.poll_seconds));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Owned here: dropping the set at `stop` aborts the cycles it holds.
    let mut cycles = tokio::task::JoinSet::new();
    // Agents another learner leads (said once, not every poll).
    let mut standing_by = HashSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        while cycles.try_join_next().is_some() {}
        for name in &agents {
            let Ok(agent) = learner.agent(name) else { continue };
            match learner.leads(name) {
                Ok(true) => {
                    if standing_by.remove(name) {
                        learner.say(name, "leading this agent now");
                    }
                }
                Ok(false) => {
                    if standing_by.insert(name.clone()) {
                        learner.say(name, "standing by: another learner leads this agent on this store");
                    }
                    continue;
                }
                Err(e) => {
                    learner.say(name, &format!("cannot take the lead: {}", e.report()));
                    continue;
                }
            }
            if !running.lock().unwrap_or_else(PoisonError::into_inner).contains(name) {
                if let Err(e) = learner.watch(agent).await {
                    learner.say(name, &format!("watching the canary failed: {}", e.report()));
                }
            }
            let trigger = match due(&learner, agent, now_ms()) {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(e) => {
                    learner.say(name, &format!("cannot check triggers: {}", e.report()));
                    continue;
                }
            };
            if !running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(name.clone())
            {
                continue;
            }
            let Ok(permit) = budget.clone().try_acquire_owned() else {
                running.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
                learner.say(name, "cycle due; waiting for the concurrency budget");
                continue;
            };
            let (learner, running, name) = (learner.clone(), running.clone(), name.clone());
            cycles.spawn(async move {
                if let Err(e) = learner.run_cycle(&name, trigger).await {
                    learner.say(&name, &format!("cycle failed: {}", e.report()));
                }
                running.lock().unwrap_or_else(PoisonError::into_inner).remove(&name);
                drop(permit);
            });
        }
    }
}
