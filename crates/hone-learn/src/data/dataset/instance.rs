//! An episode as a dataset instance: the task, the first request (for
//! replay), the reference, and the recorded conversation after the request.

use crate::episode::{first_request, reference_from_signals};
use crate::scoring::judge::conversation;
use hone_types::openai::task_of;
use hone_types::{EpisodeDetail, Instance, SignalValue};
use serde_json::Value;

pub fn instance_from_episode(episode: &EpisodeDetail, reference_signal: Option<&str>, reward: Option<f64>) -> Instance {
    let request = first_request(episode);
    let prompt_len = request.map(|r| r.messages.len()).unwrap_or(0);
    let whole = conversation(episode);
    let reference = reference_from_signals(episode, reference_signal).or_else(|| {
        episode.signals.iter().rev().find_map(|s| match &s.value {
            SignalValue::Demonstration(m) => Some(m.clone()),
            _ => None,
        })
    });
    let cost: f64 = episode.calls.iter().filter_map(|c| c.cost_usd).sum();
    Instance {
        id: episode.summary.id.to_string(),
        agent: episode.summary.agent.clone(),
        episode_id: Some(episode.summary.id.clone()),
        version_id: episode.calls.first().map(|c| c.version_id.clone()),
        input: Value::String(request.map(|r| task_of(&r.messages)).unwrap_or_default()),
        request: request.and_then(|r| {
            let mut v = serde_json::to_value(r).ok()?;
            if let Some(o) = v.as_object_mut() {
                // Replays stream nothing and name the agent themselves.
                o.remove("stream");
                o.remove("stream_options");
            }
            Some(v)
        }),
        reference,
        output: whole.into_iter().skip(prompt_len).collect(),
        reward,
        cost_usd: episode.calls.iter().any(|c| c.cost_usd.is_some()).then_some(cost),
    }
}
