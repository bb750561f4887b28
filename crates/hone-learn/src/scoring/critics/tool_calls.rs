//! Tool-call validity: every tool call names a tool the request offered, its
//! arguments parse as JSON and match that tool's schema. Scored per call.

use super::{Critic, CriticFailure, CriticInput, CriticScore};
use hone_types::behaviour::tool_call_error;

pub struct ToolCallsCritic {
    pub name: String,
}

impl Critic for ToolCallsCritic {
    fn name(&self) -> &str {
        &self.name
    }

    fn score(&self, input: CriticInput<'_>) -> Result<CriticScore, CriticFailure> {
        let mut per_call = Vec::new();
        let mut problems = Vec::new();
        for call in &input.episode.calls {
            let Some(message) = call
                .response
                .as_ref()
                .and_then(|r| r.choices.first())
                .map(|c| &c.message)
            else {
                continue;
            };
            if message.tool_calls().is_empty() {
                continue;
            }
            let errors: Vec<String> = message
                .tool_calls()
                .iter()
                .filter_map(|t| tool_call_error(&call.request, &t.function.name, &t.function.arguments))
                .collect();
            per_call.push((call.id, if errors.is_empty() { 1.0 } else { 0.0 }));
            problems.extend(errors);
        }
        let score = if per_call.is_empty() {
            1.0
        } else {
            per_call.iter().map(|(_, s)| s).sum::<f64>() / per_call.len() as f64
        };
        let reason = if per_call.is_empty() {
            "no tool calls".to_owned()
        } else if problems.is_empty() {
            format!("{} calls with valid tool calls", per_call.len())
        } else {
            problems.join("; ")
        };
        Ok(CriticScore {
            score,
            per_call,
            reason: Some(reason),
        })
    }
}
