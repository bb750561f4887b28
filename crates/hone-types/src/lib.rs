//! Domain and wire types shared by every hone crate.
//!
//! This crate owns the domain's names (episode, call, signal, version; see
//! docs/ARCHITECTURE.md, "Concepts") and
//! the OpenAI chat-completions wire format that the gateway speaks (and the
//! `<tool_call>` text blocks open-weight models write it with), and the
//! domain rules every crate applies to them (behaviour flags, what counts as
//! an evaluation episode, the task of a request). No IO and no async; the one
//! clock every crate reads is [`time::now_ms`].

pub mod behaviour;
pub mod call;
pub mod cycle;
pub mod episode;
pub mod harness;
pub mod ids;
pub mod learn;
pub mod openai;
pub mod playbook;
pub mod signal;
pub mod stream;
pub mod time;
pub mod tool_calls;
pub mod version;

pub use call::{Attempt, BehaviourFlags, CallError, CallOutcome, CallRecord, SampledTokens};
pub use cycle::{
    Alert, AlertAction, Candidate, CandidateScores, CandidateStatus, CycleDetail, CycleInfo, CycleState, Deployment,
    Firing, HistoryEvent, PairedGain, RewardModelQuality, RewardModelReads, Spend, TrainingSummary,
};
pub use episode::{EpisodeDetail, EpisodePage, EpisodeQuery, EpisodeSummary, RewardRange};
pub use ids::{CallId, EpisodeId, IdError, VersionId};
pub use learn::{
    CallCredit, ComponentKind, DatasetInfo, EvalRunInfo, Instance, InstanceResult, RewardComponent, RewardRecord,
    ShadowScores,
};
pub use playbook::Lesson;
pub use signal::{FeedbackRequest, MetricLevel, MetricType, Signal, SignalSource, SignalValue};
pub use version::{ExamplePolicy, MemoryKind, MemoryPolicy, Route, Setting, VersionRecord, VersionSpec};
