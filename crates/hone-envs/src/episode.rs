//! One episode of a task, whoever plays the model: the model's next message
//! comes from `next` (a gateway over HTTP in the runner, the engine in the
//! base policy's measurement); its tool calls run in the environment and the
//! results go back, until it answers without a tool call or has been asked
//! `max_steps` times; then the answer gets the hidden score.

use crate::{opening, tool_result, tool_result_text, Environment, Task};
use hone_types::openai::{Message, Role};
use std::future::Future;

/// What an episode did.
#[derive(Debug, Clone, PartialEq)]
pub struct Played {
    /// The final answer's text (the last assistant text if it ran out of steps).
    pub answer: String,
    /// Model turns asked for.
    pub calls: u32,
    /// Tool calls executed, and how many of them the environment refused.
    pub tool_calls: u32,
    pub tool_errors: u32,
    /// Whether the model gave a final answer within `max_steps`.
    pub finished: bool,
    /// The hidden score of `answer`.
    pub score: f64,
    /// The whole conversation, opening included.
    pub messages: Vec<Message>,
}

/// Plays `task` with `next` as the model (given the conversation so far).
pub async fn play<E, F, Fut>(
    environment: &dyn Environment,
    task: &Task,
    max_steps: usize,
    mut next: F,
) -> Result<Played, E>
where
    F: FnMut(Vec<Message>) -> Fut,
    Fut: Future<Output = Result<Message, E>>,
{
    let mut played = Played {
        answer: String::new(),
        calls: 0,
        tool_calls: 0,
        tool_errors: 0,
        finished: false,
        score: 0.0,
        messages: opening(environment, task),
    };
    while (played.calls as usize) < max_steps.max(1) {
        let message = next(played.messages.clone()).await?;
        played.calls += 1;
        let text = message.text();
        let calls = message.tool_calls().to_vec();
        // A final answer counts even when empty; text beside tool calls
        // stands in only if the episode runs out of steps.
        if calls.is_empty() || !text.trim().is_empty() {
            played.answer = text;
        }
        played.messages.push(Message {
            role: Role::Assistant,
            ..message
        });
        if calls.is_empty() {
            played.finished = true;
            break;
        }
        for call in calls {
            let result = environment.call_tool(task, &call.function.name, &call.function.arguments);
            played.tool_calls += 1;
            if result.is_err() {
                played.tool_errors += 1;
            }
            played.messages.push(tool_result(&call.id, tool_result_text(result)));
        }
    }
    played.score = environment.score(task, &played.answer);
    Ok(played)
}
