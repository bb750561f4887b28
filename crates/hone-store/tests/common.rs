//! Builders for test records.

use hone_types::openai::{ChatCompletionRequest, Message, Role};
use hone_types::{BehaviourFlags, CallId, CallOutcome, CallRecord, EpisodeId, EvalRunInfo, RewardRecord, VersionId};

pub fn version_id() -> VersionId {
    VersionId::parse("0123456789abcdef").unwrap()
}

pub fn call(episode: &EpisodeId, started_at: i64) -> CallRecord {
    CallRecord {
        id: CallId::new_v7(),
        episode_id: episode.clone(),
        agent: "assistant".into(),
        version_id: version_id(),
        started_at,
        outcome: CallOutcome::Ok,
        stream: false,
        request: ChatCompletionRequest::from_json(
            br#"{"model":"assistant","messages":[{"role":"user","content":"hi"}]}"#,
        )
        .unwrap(),
        response: None,
        error: None,
        provider: Some("up".into()),
        model: Some("m".into()),
        attempts: vec![],
        usage: None,
        cost_usd: Some(0.001),
        latency_ms: 1.0,
        ttft_ms: None,
        upstream_ms: 0.5,
        flags: BehaviourFlags {
            clarifying_question: true,
            ..Default::default()
        },
        shadow: vec![],
        door: Default::default(),
    }
}

#[allow(dead_code)]
pub fn message(text: &str) -> Message {
    Message::new(Role::User, text)
}

/// A reward of `assistant`'s episode under spec `spec`, computed at `at`.
pub fn reward(episode: &EpisodeId, value: f64, signals_seen: u32, at: i64) -> RewardRecord {
    RewardRecord {
        episode_id: episode.clone(),
        agent: "assistant".into(),
        spec_version: "spec".into(),
        value,
        passed: value > 0.5,
        components: vec![],
        calls: vec![],
        failures: vec![],
        computed_at: at,
        signals_seen,
        shadows: vec![],
    }
}

/// Evaluation run `run-1` of dataset `qa@1`.
pub fn eval_run() -> EvalRunInfo {
    EvalRunInfo {
        id: "run-1".into(),
        dataset_id: "qa@1".into(),
        agent: "assistant".into(),
        version_id: version_id(),
        target: "gateway".into(),
        created_at: 50,
        finished_at: None,
    }
}
