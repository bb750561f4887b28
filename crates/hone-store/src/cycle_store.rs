//! What the learning cycle persists: cycles with the step they are in,
//! candidates, live deployments, alerts and the append-only history. Every
//! decision is one transaction that also writes its history, and deployment
//! changes are compare-and-swap on a revision, so a resumed or concurrent
//! cycle can never apply the same decision twice.

use crate::{LearnStore, StoreError};
use hone_types::openai::{task_of, Message};
use hone_types::{
    Alert, Candidate, CandidateScores, CandidateStatus, CycleDetail, CycleInfo, CycleState, Deployment, EpisodeId,
    HistoryEvent, VersionId, VersionRecord,
};

/// A cycle's move from one step to the next, with the new detail (and an
/// error for `Failed`).
#[derive(Debug, Clone, PartialEq)]
pub struct Step<'a> {
    pub from: CycleState,
    pub to: CycleState,
    pub detail: &'a CycleDetail,
    pub error: Option<&'a str>,
}

/// A change of a candidate's status (and what was found).
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateUpdate {
    pub cycle_id: String,
    pub version_id: VersionId,
    pub status: CandidateStatus,
    pub reason: Option<String>,
    /// `None` keeps the stored scores.
    pub scores: Option<CandidateScores>,
}

/// One recent episode of a version, as the monitors see it.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowEpisode {
    pub id: EpisodeId,
    pub started_at: i64,
    pub calls: u32,
    pub error: bool,
    pub invalid_tool_call: bool,
    pub clarifying_question: bool,
    pub refusal: bool,
    pub empty: bool,
    pub tool_use: bool,
    /// Mean answer length of its calls, in characters.
    pub answer_chars: f64,
    pub cost_usd: f64,
    pub latency_ms: f64,
    /// Under the spec version asked for, when computed.
    pub reward: Option<f64>,
    /// The names of the signals its users (or anyone) gave it, each once.
    pub signals: Vec<String>,
}

impl WindowEpisode {
    /// A behaviour rate's indicator by metric name (`RATE_METRICS`).
    pub fn shows(&self, metric: &str) -> Option<bool> {
        Some(match metric {
            "invalid_tool_call" => self.invalid_tool_call,
            "clarifying_question" => self.clarifying_question,
            "refusal" => self.refusal,
            "empty" => self.empty,
            "error" => self.error,
            "tool_use" => self.tool_use,
            _ => return None,
        })
    }
}

/// A successful episode as episodic memory keeps it: the task (its first
/// user message) and the final answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Success {
    pub episode_id: EpisodeId,
    pub task: String,
    pub answer: String,
    pub reward: f64,
}

/// A learner's hold on an agent: while it lives, no other learner on the same
/// store (another `hone learn` process, on this machine or another) takes it;
/// dropping it, or the process dying, lets one. Backed by what the database
/// offers: a PostgreSQL session advisory lock, a lock file beside SQLite's.
pub struct Lead {
    _held: Box<dyn Send + Sync>,
}

impl Lead {
    pub(crate) fn new(held: impl Send + Sync + 'static) -> Self {
        Lead { _held: Box::new(held) }
    }
}

impl std::fmt::Debug for Lead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lead")
    }
}

pub trait CycleStore: LearnStore {
    /// Takes the agent's learner lead, or `None` while another learner holds it.
    fn lead(&self, agent: &str) -> Result<Option<Lead>, StoreError>;

    /// The agent's unfinished cycle, if any.
    fn open_cycle(&self, agent: &str) -> Result<Option<CycleInfo>, StoreError>;

    /// Starts a cycle in `Collect`, or returns the agent's unfinished one.
    fn start_cycle(&self, agent: &str, trigger: &str, now: i64) -> Result<CycleInfo, StoreError>;

    /// Moves a cycle along `step`, writing `events`, if it is still in
    /// `step.from`. Returns false (writing nothing) when it is not.
    fn advance_cycle(&self, id: &str, step: &Step<'_>, events: &[HistoryEvent], now: i64) -> Result<bool, StoreError>;

    fn cycle(&self, id: &str) -> Result<Option<CycleInfo>, StoreError>;

    /// Whether cycle `id` has ended (done, failed or cancelled) while a step
    /// of it may still run: the step's work would go nowhere. A store that
    /// cannot answer says no, and the step goes on.
    fn cycle_ended(&self, id: &str) -> bool {
        matches!(self.cycle(id), Ok(Some(c)) if c.state.is_finished())
    }

    /// Cycles newest first (of one agent, or all).
    fn cycles(&self, agent: Option<&str>, limit: usize) -> Result<Vec<CycleInfo>, StoreError>;

    /// Stores the candidates' versions and the candidates (both idempotent:
    /// what exists is kept) and `events`, in one transaction.
    fn add_candidates(
        &self,
        versions: &[VersionRecord],
        candidates: &[Candidate],
        events: &[HistoryEvent],
    ) -> Result<(), StoreError>;

    fn update_candidates(
        &self,
        updates: &[CandidateUpdate],
        events: &[HistoryEvent],
        now: i64,
    ) -> Result<(), StoreError>;

    /// The agent's candidates, oldest first, of one cycle or all.
    fn candidates(&self, agent: &str, cycle: Option<&str>) -> Result<Vec<Candidate>, StoreError>;

    fn deployment(&self, agent: &str) -> Result<Option<Deployment>, StoreError>;

    fn deployments(&self) -> Result<Vec<Deployment>, StoreError>;

    /// Writes `next` (with revision `expected + 1`, or 1 for a new row) if
    /// the stored revision is `expected` (`None`: no row yet), together with
    /// the candidate updates, events and alert, in one transaction. Returns
    /// false, writing nothing, when the deployment changed meanwhile.
    fn change_deployment(
        &self,
        next: &Deployment,
        expected: Option<u64>,
        updates: &[CandidateUpdate],
        events: &[HistoryEvent],
        alert: Option<&Alert>,
        now: i64,
    ) -> Result<bool, StoreError>;

    fn add_history(&self, events: &[HistoryEvent]) -> Result<(), StoreError>;

    /// The agent's history, oldest first (the last `limit` events).
    fn history(&self, agent: &str, limit: usize) -> Result<Vec<HistoryEvent>, StoreError>;

    /// Alerts newest first.
    fn alerts(&self, agent: Option<&str>, limit: usize) -> Result<Vec<Alert>, StoreError>;

    /// The version's `limit` non-evaluation episodes with the latest calls
    /// at or after `since`, each summed over its calls since then, newest
    /// first by their first such call, with rewards under `spec_version`.
    /// Reads the newest calls only (`rows::recent_episodes`), so it costs
    /// the same a minute or a month after `since`.
    fn version_window(
        &self,
        agent: &str,
        version: &VersionId,
        since: i64,
        spec_version: &str,
        limit: usize,
    ) -> Result<Vec<WindowEpisode>, StoreError>;

    /// The newest `limit` non-evaluation episodes the version served, newest
    /// first: each one's start (unix ms) and reward under `spec_version`
    /// (`None` when not scored). Reads only those episodes' calls, however
    /// long the version has served (the dashboard's charts).
    fn version_rewards(
        &self,
        agent: &str,
        version: &VersionId,
        spec_version: &str,
        limit: usize,
    ) -> Result<Vec<(i64, Option<f64>)>, StoreError>;

    /// The agent's most recent `limit` non-evaluation episodes whose reward
    /// under `spec_version` is at least `min_reward` and that ended in a
    /// text answer, newest first.
    fn successes(
        &self,
        agent: &str,
        spec_version: &str,
        min_reward: f64,
        limit: usize,
    ) -> Result<Vec<Success>, StoreError>;

    /// Non-evaluation episodes of the agent started at or after `since`.
    fn episodes_since(&self, agent: &str, since: i64) -> Result<u64, StoreError>;
}

/// The rules every backend applies to the records it changes, in one place.
pub(crate) mod rules {
    use super::*;

    /// Cycle number `seq` of the agent, in `Collect`, with its "started" event.
    pub fn new_cycle(agent: &str, seq: i64, trigger: &str, now: i64) -> (CycleInfo, HistoryEvent) {
        let cycle = CycleInfo {
            id: CycleInfo::id_of(agent, seq),
            agent: agent.to_owned(),
            state: CycleState::Collect,
            trigger: trigger.to_owned(),
            detail: CycleDetail::default(),
            error: None,
            started_at: now,
            updated_at: now,
        };
        let started =
            HistoryEvent::new(agent, now, "cycle", format!("cycle {} started ({trigger})", cycle.id)).cycle(&cycle.id);
        (cycle, started)
    }

    /// The cycle as `step` leaves it.
    pub fn stepped(mut cycle: CycleInfo, step: &Step<'_>, now: i64) -> CycleInfo {
        cycle.state = step.to;
        cycle.detail = step.detail.clone();
        cycle.error = step.error.map(str::to_owned);
        cycle.updated_at = now;
        cycle
    }

    /// The candidate as `update` leaves it (absent reason and scores kept).
    pub fn updated(mut c: Candidate, u: &CandidateUpdate, now: i64) -> Candidate {
        c.status = u.status;
        if u.reason.is_some() {
            c.reason.clone_from(&u.reason);
        }
        if u.scores.is_some() {
            c.scores.clone_from(&u.scores);
        }
        c.updated_at = now;
        c
    }

    /// The deployment as stored over revision `expected` (`None`: the first).
    pub fn next_revision(next: &Deployment, expected: Option<u64>, now: i64) -> Deployment {
        let mut written = next.clone();
        written.revision = expected.map_or(1, |r| r + 1);
        written.updated_at = now;
        written
    }

    /// A successful episode from its first request's messages and its last
    /// answer (JSON text as stored); `None` when either is missing or empty.
    pub fn success(
        id: &str,
        reward: f64,
        messages: Option<String>,
        answer: Option<String>,
    ) -> Result<Option<Success>, StoreError> {
        let (Some(messages), Some(answer)) = (messages, answer) else {
            return Ok(None);
        };
        let messages: Vec<Message> = serde_json::from_str(&messages)?;
        let task = task_of(&messages);
        if task.is_empty() || answer.trim().is_empty() {
            return Ok(None);
        }
        Ok(Some(Success {
            episode_id: crate::rows::episode_id(id)?,
            task,
            answer,
            reward,
        }))
    }

    /// The learner's lock key of an agent (PostgreSQL advisory locks, lock
    /// file names): the first 8 bytes of SHA-256 over `hone.learn/AGENT`.
    pub fn lead_key(agent: &str) -> i64 {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(format!("hone.learn/{agent}").as_bytes());
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&digest[..8]);
        i64::from_be_bytes(bytes)
    }
}
