//! What the learning cycle stores (docs/ARCHITECTURE.md, "Concepts":
//! the loop, candidates, deployments, monitors): cycles and the step each is in, candidates with
//! their provenance and fate, an agent's live deployment, alerts, and the
//! history that ties them together.

use crate::ids::VersionId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The steps of a cycle, in order. A cycle is persisted with the step it is
/// in; after a crash it resumes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CycleState {
    Collect,
    Reward,
    Datasets,
    Propose,
    Evaluate,
    Gate,
    Front,
    Deploy,
    Done,
    Failed,
}

impl CycleState {
    pub const ALL: [CycleState; 10] = [
        CycleState::Collect,
        CycleState::Reward,
        CycleState::Datasets,
        CycleState::Propose,
        CycleState::Evaluate,
        CycleState::Gate,
        CycleState::Front,
        CycleState::Deploy,
        CycleState::Done,
        CycleState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CycleState::Collect => "collect",
            CycleState::Reward => "reward",
            CycleState::Datasets => "datasets",
            CycleState::Propose => "propose",
            CycleState::Evaluate => "evaluate",
            CycleState::Gate => "gate",
            CycleState::Front => "front",
            CycleState::Deploy => "deploy",
            CycleState::Done => "done",
            CycleState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// The step after this one (`Done` and `Failed` end).
    pub fn next(self) -> Self {
        match self {
            CycleState::Collect => CycleState::Reward,
            CycleState::Reward => CycleState::Datasets,
            CycleState::Datasets => CycleState::Propose,
            CycleState::Propose => CycleState::Evaluate,
            CycleState::Evaluate => CycleState::Gate,
            CycleState::Gate => CycleState::Front,
            CycleState::Front => CycleState::Deploy,
            CycleState::Deploy | CycleState::Done => CycleState::Done,
            CycleState::Failed => CycleState::Failed,
        }
    }

    pub fn is_finished(self) -> bool {
        matches!(self, CycleState::Done | CycleState::Failed)
    }
}

/// One cycle of one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CycleInfo {
    /// `AGENT-N`, N counting the agent's cycles from 1.
    pub id: String,
    pub agent: String,
    pub state: CycleState,
    /// `episodes`, `minutes` or `manual`.
    pub trigger: String,
    /// What earlier steps decided (watermark, dataset ids, champion), so a
    /// resumed step sees exactly what the crashed one saw.
    pub detail: CycleDetail,
    pub error: Option<String>,
    pub started_at: i64,
    pub updated_at: i64,
}

impl CycleInfo {
    /// The id of the agent's cycle number `seq`.
    pub fn id_of(agent: &str, seq: i64) -> String {
        format!("{agent}-{seq}")
    }

    /// N of `AGENT-N`: the cycle's place among the agent's cycles, from 1.
    pub fn number(&self) -> u64 {
        self.id.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(1)
    }
}

/// What the steps of a cycle decided, each field written by one step and
/// read by later ones (stored as a JSON object inside the cycle's record).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CycleDetail {
    /// collect: episodes started from `since` to `until` (unix ms) are this
    /// cycle's traffic; the next cycle starts at `until`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    /// collect: the champion when the cycle began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub champion: Option<VersionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_episodes: Option<u64>,
    /// reward: episodes scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewarded: Option<u64>,
    /// datasets: the target dataset's id (the half of the window's sample
    /// that candidates are evaluated and gated on), the train set's (the
    /// other half, what optimisers learn from; disjoint from the target),
    /// and the regression set's when it has instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression: Option<String>,
    /// propose: candidates stored for this cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<u64>,
    /// evaluate: the champion's scores on the same datasets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub champion_scores: Option<CandidateScores>,
    /// deploy: what was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Why the cycle ended early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// propose: what each optimiser that calls models spent, by name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub spend: std::collections::BTreeMap<String, Spend>,
    /// reward: the reward model learned from users' signals this cycle,
    /// measured on episodes it was not trained on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_model: Option<RewardModelQuality>,
}

/// A reward model's quality, measured on production episodes users
/// reacted to that it was not trained on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RewardModelQuality {
    /// Recent episodes users reacted to.
    pub reacted: usize,
    /// Of those with token ids: trained on, and held out to measure it.
    pub trained_on: usize,
    pub held_out: usize,
    /// How well its pass probability ranks passed above failed episodes.
    pub auc: Option<f64>,
    /// Spearman's rank correlation of its expected reward with the spec's.
    pub rank_correlation: Option<f64>,
    /// Expected calibration error of its pass probability (10 bins).
    pub calibration_error: Option<f64>,
    /// The spec's least AUC for it to be used.
    pub min_auc: f64,
    /// Its AUC reached `min_auc`.
    pub usable: bool,
    /// What read the episodes for it.
    #[serde(default)]
    pub reads: RewardModelReads,
}

/// What reads episodes for a reward model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RewardModelReads {
    /// The agent's base model, through the token ids the embedded engine recorded.
    #[default]
    HiddenStates,
    /// The spec's LLM judge, under the chosen of `of` rubrics (from 1).
    Judge { rubric: usize, of: usize },
}

impl RewardModelQuality {
    /// E.g. "AUC 0.912, rank correlation 0.640, calibration error 0.081 on
    /// 20 held-out episodes (trained on 58): usable (min AUC 0.75)".
    pub fn summary(&self) -> String {
        let shown = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
        let reader = match self.reads {
            RewardModelReads::HiddenStates => String::new(),
            RewardModelReads::Judge { rubric, of } => format!("the judge, rubric {rubric} of {of}: "),
        };
        if self.auc.is_none() && self.trained_on + self.held_out == 0 {
            return format!("{reader}not trained: {} episodes users reacted to", self.reacted);
        }
        format!(
            "{reader}AUC {}, rank correlation {}, calibration error {} on {} held-out episodes (trained on {}): {} (min AUC {})",
            shown(self.auc),
            shown(self.rank_correlation),
            shown(self.calibration_error),
            self.held_out,
            self.trained_on,
            if self.usable { "usable" } else { "not used" },
            self.min_auc
        )
    }
}

/// What calling models cost an optimiser: calls, tokens and dollars
/// (priced by the provider's `prices`; 0 where it names none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub calls: u64,
    pub tokens: u64,
    pub cost_usd: f64,
}

impl Spend {
    pub fn add(&mut self, other: Spend) {
        self.calls += other.calls;
        self.tokens += other.tokens;
        self.cost_usd += other.cost_usd;
    }

    pub fn is_zero(&self) -> bool {
        self.calls == 0
    }

    /// What was spent since `earlier` (a reading of the same meter).
    pub fn since(self, earlier: Spend) -> Spend {
        Spend {
            calls: self.calls.saturating_sub(earlier.calls),
            tokens: self.tokens.saturating_sub(earlier.tokens),
            cost_usd: (self.cost_usd - earlier.cost_usd).max(0.0),
        }
    }
}

impl std::fmt::Display for Spend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} call{}, {} tokens, ${:.6}",
            self.calls,
            if self.calls == 1 { "" } else { "s" },
            self.tokens,
            self.cost_usd
        )
    }
}

/// Where a candidate is in its life (docs/ARCHITECTURE.md, "Concepts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateStatus {
    Proposed,
    Evaluated,
    /// Passed the gate, waiting for the front.
    Gated,
    Pruned,
    OnFront,
    Approved,
    Canary,
    Champion,
    RolledBack,
}

impl CandidateStatus {
    pub const ALL: [CandidateStatus; 9] = [
        CandidateStatus::Proposed,
        CandidateStatus::Evaluated,
        CandidateStatus::Gated,
        CandidateStatus::Pruned,
        CandidateStatus::OnFront,
        CandidateStatus::Approved,
        CandidateStatus::Canary,
        CandidateStatus::Champion,
        CandidateStatus::RolledBack,
    ];

    /// On the front or past it (approved, canary, champion): what the
    /// front shows; the rest were pruned, rolled back or are still on the way.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            CandidateStatus::OnFront | CandidateStatus::Approved | CandidateStatus::Canary | CandidateStatus::Champion
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CandidateStatus::Proposed => "proposed",
            CandidateStatus::Evaluated => "evaluated",
            CandidateStatus::Gated => "gated",
            CandidateStatus::Pruned => "pruned",
            CandidateStatus::OnFront => "on_front",
            CandidateStatus::Approved => "approved",
            CandidateStatus::Canary => "canary",
            CandidateStatus::Champion => "champion",
            CandidateStatus::RolledBack => "rolled_back",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }
}

/// What evaluation found for one version on one cycle's datasets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CandidateScores {
    pub target_mean: Option<f64>,
    pub target_pass_rate: f64,
    /// The pass rate on the regression set; none when the cycle had none
    /// (a first cycle's champion has no past successes outside its sets).
    #[serde(default)]
    pub regression_pass_rate: Option<f64>,
    pub mean_cost_usd: f64,
    pub mean_latency_ms: f64,
    pub errors: usize,
    /// Behaviour rates on the target set (names as in monitors).
    pub rates: std::collections::BTreeMap<String, f64>,
    /// The gain over the champion the gate judged (set by the gate step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_gain: Option<PairedGain>,
    /// The gate passed it on what offline runs show, leaving its gain to
    /// users online: no offline run carried the users' signals the reward
    /// spec weighs (set by the gate step).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub users_decide: bool,
    /// No offline run carried the users' signals the spec weighs and
    /// nothing predicted them: its offline reward and gain show penalties
    /// only, and what users made of it is the evidence (set by the gate).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offline_blind: bool,
}

/// A candidate's reward gain over the champion as the gate judges it: the
/// mean of the paired differences (candidate − champion, per held-out
/// instance, each the mean over its samples) and its bootstrap interval
/// at the gate's confidence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedGain {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
    /// The interval's confidence, e.g. 0.95.
    pub confidence: f64,
    /// Instances paired.
    pub instances: usize,
}

impl std::fmt::Display for PairedGain {
    /// `+0.23 [+0.08, +0.38]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:+.2} [{:+.2}, {:+.2}]", self.mean, self.low, self.high)
    }
}

/// A proposed version and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub cycle_id: String,
    pub agent: String,
    pub version_id: VersionId,
    pub parent: VersionId,
    pub optimiser: String,
    /// Human-readable difference from the parent.
    pub diff: String,
    pub status: CandidateStatus,
    /// Why it was pruned or rolled back; what the gate saw when it passed.
    pub reason: Option<String>,
    pub scores: Option<CandidateScores>,
    /// How a weight candidate's adapter was trained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<TrainingSummary>,
    /// What proposing it cost (reflective optimisers' model calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<Spend>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A weight candidate's training, from its last step: how far it moved
/// from the base checkpoint (forgetting shows here first) and on what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingSummary {
    pub steps: u64,
    pub final_loss: f64,
    /// Mean k3 KL(candidate ‖ base checkpoint) over the last step's scored
    /// tokens: the adapter's distance from the base, accumulated over every
    /// cycle it continues.
    pub kl_to_base: f64,
    /// Training examples (rows) and earlier successes replayed with them.
    pub examples: u64,
    pub replayed: u64,
}

/// An agent's live traffic split as the learner left it (the config's
/// `[deployment]` is only the starting point).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployment {
    pub agent: String,
    pub champion: VersionId,
    pub canary: Option<VersionId>,
    pub canary_share: f64,
    /// When the canary started taking traffic (ms).
    pub canary_since: Option<i64>,
    /// Earlier champions, most recent last (what `hone rollback` restores).
    pub previous: Vec<VersionId>,
    /// Bumped by every change; a change names the revision it saw, so two
    /// writers (or a resumed cycle) can never apply the same decision twice.
    pub revision: u64,
    /// `config` until the learner first changes it.
    pub source: String,
    pub updated_at: i64,
}

/// What a monitor saw when it fired: a canary's rate (or mean) against the
/// champion's over the same period, beyond its bound and significant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Firing {
    pub metric: String,
    pub canary_rate: f64,
    pub champion_rate: f64,
    pub canary_episodes: u64,
    pub champion_episodes: u64,
    /// One-sided p-value of the two-proportion test (or the mean comparison).
    pub p_value: f64,
    /// Canary episodes that show the behaviour (a few, for a human to open).
    pub episodes: Vec<String>,
}

/// What hone did about a firing monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertAction {
    /// The canary was taken off traffic and the champion kept.
    RolledBack,
    /// Said and stored only: the monitor's policy does not roll back.
    Alerted,
    /// The users' requests drifted: the next cycle samples the recent window.
    Reweighted,
}

impl AlertAction {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertAction::RolledBack => "rolled_back",
            AlertAction::Alerted => "alerted",
            AlertAction::Reweighted => "reweighted",
        }
    }
}

/// A monitor that fired, and what hone did about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub id: i64,
    pub agent: String,
    pub version_id: VersionId,
    pub champion_id: VersionId,
    #[serde(flatten)]
    pub firing: Firing,
    pub action: AlertAction,
    pub at: i64,
}

/// One line of an agent's history: what changed, why, on what evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub id: i64,
    pub agent: String,
    pub at: i64,
    /// `version`, `candidate`, `evaluation`, `gate`, `front`, `approve`,
    /// `canary`, `promote`, `rollback`, `alert`, `cycle`, `reward_model`,
    /// `train` (a weight optimiser's training progress).
    pub kind: String,
    pub version_id: Option<VersionId>,
    pub cycle_id: Option<String>,
    pub summary: String,
    pub evidence: Value,
}

impl HistoryEvent {
    pub fn new(agent: &str, at: i64, kind: &str, summary: impl Into<String>) -> Self {
        Self {
            id: 0,
            agent: agent.to_owned(),
            at,
            kind: kind.to_owned(),
            version_id: None,
            cycle_id: None,
            summary: summary.into(),
            evidence: Value::Null,
        }
    }

    pub fn version(mut self, id: &VersionId) -> Self {
        self.version_id = Some(id.clone());
        self
    }

    pub fn cycle(mut self, id: &str) -> Self {
        self.cycle_id = Some(id.to_owned());
        self
    }

    pub fn evidence(mut self, evidence: Value) -> Self {
        self.evidence = evidence;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_knows_its_number_from_its_id_whatever_the_agent_is_called() {
        for (agent, seq) in [("calc", 1), ("support-bot", 12), ("a-b-c", 7)] {
            let cycle = CycleInfo {
                id: CycleInfo::id_of(agent, seq),
                agent: agent.into(),
                state: CycleState::Collect,
                trigger: "manual".into(),
                detail: CycleDetail::default(),
                error: None,
                started_at: 0,
                updated_at: 0,
            };
            assert_eq!(cycle.number(), seq as u64, "{}", cycle.id);
        }
    }

    #[test]
    fn states_and_statuses_round_trip_and_steps_are_ordered() {
        for s in CycleState::ALL {
            assert_eq!(CycleState::parse(s.as_str()), Some(s));
        }
        for s in CandidateStatus::ALL {
            assert_eq!(CandidateStatus::parse(s.as_str()), Some(s));
        }
        let mut s = CycleState::Collect;
        let mut seen = vec![s];
        while !s.is_finished() {
            s = s.next();
            seen.push(s);
        }
        assert_eq!(seen.len(), 9);
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_detail_stored_as_untyped_json_reads_back_and_writes_the_same_keys() {
        let stored = serde_json::json!({"since": 0, "until": 1_700_000_000_000_i64,
            "champion": "0123456789abcdef", "new_episodes": 40, "rewarded": 40,
            "target": "support.traffic-1", "regression": null, "candidates": 2,
            "champion_scores": {"target_mean": 0.5, "target_pass_rate": 0.5, "regression_pass_rate": 1.0,
                "mean_cost_usd": 0.0, "mean_latency_ms": 3.0, "errors": 0, "rates": {}},
            "decision": "manual: 1 candidate(s) await approval"});
        let detail: CycleDetail = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(
            detail.champion.as_ref().map(VersionId::as_str),
            Some("0123456789abcdef")
        );
        assert_eq!(detail.regression, None);
        assert_eq!(detail.champion_scores.as_ref().and_then(|s| s.target_mean), Some(0.5));
        let mut expected = stored;
        expected.as_object_mut().unwrap().remove("regression");
        assert_eq!(serde_json::to_value(&detail).unwrap(), expected);
        let empty: CycleDetail = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(empty, CycleDetail::default());
    }
}
