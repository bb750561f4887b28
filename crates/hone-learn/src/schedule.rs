//! When cycles run: per agent, after `every.episodes` new episodes or
//! `every.minutes` since the last cycle began (or on demand, `--once`), an
//! unfinished cycle first; cycles of different agents run concurrently, at
//! most `[learn] max_concurrent_cycles` at a time. Every poll also watches
//! each agent's canary.

use crate::cycle::Learner;
use crate::watch::Verdict;
use hone_config::AgentConfig;
use hone_gateway::state::now_ms;
use hone_types::{CycleInfo, CycleState};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Why a cycle should start now, if it should.
pub fn due(learner: &Learner, agent: &AgentConfig, now: i64) -> Result<Option<&'static str>, String> {
    let store = learner.store.as_ref();
    if store.open_cycle(&agent.name).map_err(|e| e.to_string())?.is_some() {
        return Ok(Some("resume"));
    }
    if agent.learn.optimisers.is_empty() {
        return Ok(None);
    }
    let cycles = store.cycles(Some(&agent.name), 50).map_err(|e| e.to_string())?;
    let last_started = cycles.first().map(|c| c.started_at);
    let since = cycles
        .iter()
        .filter(|c| c.state == CycleState::Done)
        .find_map(|c| c.detail["until"].as_i64())
        .unwrap_or(0);
    if let Some(n) = agent.learn.every_episodes {
        if store.episodes_since(&agent.name, since).map_err(|e| e.to_string())? >= n {
            return Ok(Some("episodes"));
        }
    }
    if let Some(minutes) = agent.learn.every_minutes {
        let waited = last_started.is_none_or(|t| now - t >= minutes as i64 * 60_000);
        let any = store.episodes_since(&agent.name, since).map_err(|e| e.to_string())? > 0;
        if waited && any {
            return Ok(Some("minutes"));
        }
    }
    Ok(None)
}

impl Learner {
    /// One cycle (resuming an unfinished one), then a look at the canary.
    pub async fn run_once(&self, agent: &str) -> Result<(CycleInfo, Verdict), String> {
        let cycle = self.run_cycle(agent, "manual").await?;
        let verdict = self.watch(self.agent(agent)?).await?;
        Ok((cycle, verdict))
    }

    /// Runs until `stop` resolves: every poll, watches canaries and starts
    /// due cycles within the concurrency budget.
    pub async fn run_forever(self: Arc<Self>, agents: Vec<String>, stop: impl std::future::Future<Output = ()>) {
        let budget = Arc::new(tokio::sync::Semaphore::new(self.config.learn.max_concurrent_cycles));
        let running: Arc<Mutex<HashSet<String>>> = Arc::default();
        let mut tick = tokio::time::interval(Duration::from_secs(self.config.learn.poll_seconds));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                _ = tick.tick() => {}
            }
            for name in &agents {
                let Ok(agent) = self.agent(name) else { continue };
                if !running.lock().unwrap_or_else(PoisonError::into_inner).contains(name) {
                    if let Err(e) = self.watch(agent).await {
                        self.say(name, &format!("watching the canary failed: {e}"));
                    }
                }
                let trigger = match due(&self, agent, now_ms()) {
                    Ok(Some(t)) => t,
                    Ok(None) => continue,
                    Err(e) => {
                        self.say(name, &format!("cannot check triggers: {e}"));
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
                    self.say(name, "cycle due; waiting for the concurrency budget");
                    continue;
                };
                let (learner, running, name) = (self.clone(), running.clone(), name.clone());
                tokio::spawn(async move {
                    if let Err(e) = learner.run_cycle(&name, trigger).await {
                        learner.say(&name, &format!("cycle failed: {e}"));
                    }
                    running.lock().unwrap_or_else(PoisonError::into_inner).remove(&name);
                    drop(permit);
                });
            }
        }
    }
}
