//! The learning cycle of each agent, as a persisted state machine
//! (docs/ARCHITECTURE.md, "Concepts"): collect → reward → datasets → propose → evaluate
//! → gate → front → deploy → done.
//!
//! - [`Learner`] (here): what the cycle works with — config, store, the
//!   gateway it reaches models through — and its one `impl`.
//! - `run.rs`: the loop that runs one cycle step by step and persists each
//!   move; `steps/`: one file per step; [`cancel`]: ending an open cycle.
//! - [`schedule`]: when cycles run (`hone learn`); [`watch`]: a look at the
//!   canary (monitors, promote, roll back).
//!
//! Each step reads what earlier steps stored (the typed
//! [`CycleDetail`](hone_types::CycleDetail), the candidates, evaluation
//! runs), does its work idempotently, and then moves the cycle on in one
//! transaction, so a process killed at any point resumes where it was.

pub mod cancel;
mod run;
pub mod schedule;
mod steps;
pub mod watch;

use crate::client::{ChatClient, GatewayClient};
use crate::error::{LearnError, Result};
use crate::scoring::reward::Rewarder;
use crate::search::eval::Evaluator;
use hone_config::{AgentConfig, Config};
use hone_store::{CycleStore, Recorder};
use hone_types::{CycleInfo, CycleState};
use std::sync::Arc;
use watch::Verdict;

/// Reports progress: (agent, message).
pub type Progress = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// Runs cycles and watches canaries for every agent of a config.
pub struct Learner {
    pub config: Arc<Config>,
    pub store: Arc<dyn CycleStore>,
    pub gateway: GatewayClient,
    /// The recorder of an in-process gateway (flushed before reading back).
    pub recorder: Option<Arc<Recorder>>,
    pub progress: Progress,
    /// Fault injection for crash tests (`HONE_LEARN_PAUSE_AT`): on entering
    /// this step (after it is persisted) the cycle waits for an hour.
    pub pause_at: Option<CycleState>,
    /// The agents this learner leads.
    pub leads: Leads,
    /// Each agent's reward model as last loaded.
    pub stand_ins: StandIns,
}

/// Each agent's usable reward model, loaded once per saved model (by the
/// file's modification time) rather than on every look.
#[derive(Default)]
#[allow(clippy::type_complexity)]
pub struct StandIns(
    std::sync::Mutex<
        std::collections::HashMap<
            String,
            (
                std::time::SystemTime,
                Option<Arc<crate::scoring::reward_model::StandIn>>,
            ),
        >,
    >,
);

/// The agents a learner leads: each lead is taken from the store on first
/// use and kept until the process ends, so of several `hone learn`
/// processes on one store exactly one runs an agent's cycles and the others
/// stand by, taking over when it dies.
#[derive(Default)]
pub struct Leads(std::sync::Mutex<std::collections::HashMap<String, hone_store::Lead>>);

impl Learner {
    pub fn agent(&self, name: &str) -> Result<&AgentConfig> {
        self.config.agents.get(name).ok_or_else(|| {
            LearnError::config(format!(
                "no agent `{name}` in the config (agents: {})",
                self.config.agents.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }

    /// The agent's reward spec, judging through the gateway.
    pub fn rewarder(&self, agent: &AgentConfig) -> Result<Arc<Rewarder>> {
        let client: Arc<dyn ChatClient> = Arc::new(self.gateway.clone());
        Ok(Arc::new(Rewarder::new(&agent.name, &agent.reward, Some(client))?))
    }

    /// What runs and scores offline runs: with `[agents.NAME.reward.model]`,
    /// its rewarder has the agent's latest usable reward model standing in
    /// for users.
    pub fn evaluator(&self, agent: &AgentConfig) -> Result<Evaluator> {
        let client: Arc<dyn ChatClient> = Arc::new(self.gateway.clone());
        let rewarder = Rewarder::new(&agent.name, &agent.reward, Some(client))?.with_stand_in(self.stand_in(agent));
        Ok(Evaluator {
            store: self.store.clone(),
            gateway: self.gateway.clone(),
            rewarder: Arc::new(rewarder),
            recorder: self.recorder.clone(),
        })
    }

    /// The agent's reward model when it has one (`[agents.NAME.reward.model]`)
    /// and the latest is usable under the current spec.
    pub fn stand_in(&self, agent: &AgentConfig) -> Option<Arc<crate::scoring::reward_model::StandIn>> {
        agent.reward.model.as_ref()?;
        let path = crate::scoring::reward_model::saved_path(&self.config.gateway.data_dir, &agent.name);
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
        let mut loaded = self
            .stand_ins
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, stand_in)) = loaded.get(&agent.name) {
            if *at == modified {
                return stand_in.clone();
            }
        }
        let client: Arc<dyn ChatClient> = Arc::new(self.gateway.clone());
        let judge = agent.reward.judge.clone().map(|spec| crate::scoring::judge::Judge {
            spec,
            agent: agent.name.clone(),
            client,
        });
        let stand_in =
            crate::scoring::reward_model::StandIn::load(&path, &agent.reward.version(), judge.as_ref()).map(Arc::new);
        loaded.insert(agent.name.clone(), (modified, stand_in.clone()));
        stand_in
    }

    /// Tells the operator (the progress callback) and the debug log.
    pub(crate) fn say(&self, agent: &str, message: &str) {
        tracing::debug!(agent, "{message}");
        (self.progress)(agent, message);
    }

    /// Makes the in-process gateway's accepted calls readable, if there is one.
    pub async fn flush_recorder(&self) {
        if let Some(recorder) = &self.recorder {
            let _ = recorder.flush(std::time::Duration::from_secs(5)).await;
        }
    }

    /// Whether this learner leads `agent`, taking the lead when it is free.
    pub fn leads(&self, agent: &str) -> Result<bool> {
        let mut held = self.leads.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.contains_key(agent) {
            return Ok(true);
        }
        match self.store.lead(agent)? {
            Some(lead) => {
                held.insert(agent.to_owned(), lead);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Runs the agent's unfinished cycle to its end, or a new one — only
    /// while this learner leads the agent, so no step runs twice.
    pub async fn run_cycle(&self, agent: &str, trigger: &str) -> Result<CycleInfo> {
        if !self.leads(agent)? {
            return Err(LearnError::state(format!(
                "another learner leads agent `{agent}` on this store (one `hone learn` per store runs an agent's cycles); this one stands by"
            )));
        }
        run::run_cycle(self, agent, trigger).await
    }

    /// One cycle (resuming an unfinished one), then a look at the canary.
    pub async fn run_once(&self, agent: &str) -> Result<(CycleInfo, Verdict)> {
        let cycle = self.run_cycle(agent, "manual").await?;
        let verdict = self.watch(self.agent(agent)?).await?;
        Ok((cycle, verdict))
    }

    /// Runs until `stop` resolves: every poll, watches canaries and starts
    /// due cycles within the concurrency budget.
    pub async fn run_forever(self: Arc<Self>, agents: Vec<String>, stop: impl std::future::Future<Output = ()>) {
        schedule::run_forever(self, agents, stop).await;
    }

    /// Looks at the agent's canary: monitors, then promote, roll back or wait.
    pub async fn watch(&self, agent: &AgentConfig) -> Result<Verdict> {
        watch::watch(self, agent).await
    }
}
