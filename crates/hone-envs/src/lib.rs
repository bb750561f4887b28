//! hone's built-in environments, the simulated users that drive `hone demo`
//! and the benchmarks, and an agent loop with its `POST /run` endpoint.
//!
//! An environment is one file behind [`Environment`]: it makes a [`Task`]
//! from a seed, executes the agent's tool calls, and keeps a **hidden,
//! verifiable score** that measures the agent and drives the simulated users
//! ([`users`]) but is never sent to hone as feedback: hone learns only from
//! the implicit signals those users give, as it would in production.
//!
//! - [`calc`]: arithmetic word problems of graded difficulty, with a `calc` tool.
//! - [`lookup`]: questions about a generated customer table, answered with
//!   `search` then `read` (the ART-E pattern).
//! - [`suite`]: verifiable questions read from a file, e.g. exported from
//!   reasoning-gym's task generators.
//! - [`users`]: simulated users turning a hidden score into implicit signals,
//!   as the bodies `POST /v1/feedback` takes.
//! - [`runner`]: the agent loop against a gateway's chat-completions API;
//!   [`endpoint`]: that loop served as `POST /run`, the agent endpoint
//!   `hone eval --endpoint` calls.
//!
//! # Plugging in your own environment
//!
//! Two ways, depending on where your agent lives:
//!
//! 1. **Serve `POST /run` yourself** (any language). hone's evaluation posts
//!    `{"input": "<the task's first user message>"}` with the headers
//!    `X-Hone-Version` and `X-Hone-Episode`; send every model call of the run
//!    to the gateway's `POST /v1/chat/completions` with those two headers
//!    passed on, and answer any 2xx JSON (this crate's endpoint answers
//!    `{"output", "score", "calls"}`). Point `hone eval --endpoint` at it.
//! 2. **Implement [`Environment`]** in Rust and hand it to
//!    [`runner::Runner`] and [`endpoint::router`]: you get the agent loop,
//!    the endpoint and the simulated users for free. Keep your task's typed
//!    data in [`TaskData::Custom`] (serialise your own struct into it and read
//!    it back with `serde_json::from_value`). Rules an implementation must
//!    keep: generation is a pure function of the seed, the split is
//!    [`Split::of`] the prompt (so train and held-out never share a task),
//!    [`Environment::task_from_prompt`] recovers every task it generates, and
//!    every [`Environment::demonstration`] scores 1.
//!
//! Task generation uses this crate's own small generator ([`seeded`]) rather
//! than `rand`'s, so a seed names the same tasks on every platform and across
//! `rand` upgrades: held-out sets stay held out.

pub mod calc;
pub mod endpoint;
pub mod episode;
pub mod lookup;
pub mod runner;
pub mod seeded;
pub mod suite;
mod text;
pub mod users;

use hone_types::openai::{Content, Extra, FunctionCall, Message, Role, Tool, ToolCall};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

pub use calc::{Calc, CalcTask};
pub use hone_types::FeedbackRequest;
pub use lookup::{Lookup, LookupTask};
pub use runner::{RunContext, RunError, RunOutcome, Runner, RunnerConfig};
pub use suite::{Suite, SuiteError, SuiteTask};
pub use users::{ImplicitSignal, SimulatedUser};

/// One environment: tasks from a seed, tools the agent may call, and a
/// hidden verifiable score. Object-safe, so hone holds `Arc<dyn Environment>`.
pub trait Environment: Send + Sync {
    /// Short, stable name (`calc`, `lookup`): the prefix of task ids.
    fn name(&self) -> &'static str;

    /// The `index`-th task of `split` at `difficulty`; the same arguments
    /// always give the same task, and no task is in both splits.
    fn task(&self, split: Split, index: u64, difficulty: Difficulty) -> Task;

    /// The tools the agent is offered (OpenAI function tools).
    fn tools(&self) -> Vec<Tool>;

    /// Tells the model its tools and the answer format the score expects.
    fn system_prompt(&self) -> String;

    /// Runs one tool call (`arguments` is the call's JSON text). A bad call is
    /// an error whose text the agent sees as the tool's result.
    fn call_tool(&self, task: &Task, name: &str, arguments: &str) -> Result<String, ToolError>;

    /// The hidden score in [0, 1] of a final answer: for measuring and for
    /// simulated users, never sent to hone as feedback.
    fn score(&self, task: &Task, answer: &str) -> f64;

    /// The task whose prompt is `prompt` (the first user message, which is
    /// all hone's datasets keep of an instance), or `None` if no task of this
    /// environment reads so.
    fn task_from_prompt(&self, prompt: &str) -> Option<Task>;

    /// The family of `task`: a kind of problem whose tasks share their
    /// wording, for users whose mix of tasks changes
    /// (`hone demo --scenario shift`). `None`: this environment names none.
    fn family(&self, _task: &Task) -> Option<&'static str> {
        None
    }

    /// A correct episode after the opening ([`opening`]): assistant tool
    /// calls, tool results exactly as [`Environment::call_tool`] returns
    /// them, and a final answer that scores 1.
    fn demonstration(&self, task: &Task) -> Vec<Message>;
}

/// Which side of the train / held-out cut a task is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Train,
    HeldOut,
}

impl Split {
    /// The split a prompt belongs to: held out iff a stable hash of its
    /// (trimmed) text falls in one fifth of the hash space. A function of the
    /// text alone, so the two splits are disjoint by construction.
    pub fn of(prompt: &str) -> Split {
        if seeded::stable_hash(prompt.trim().as_bytes()).is_multiple_of(5) {
            Split::HeldOut
        } else {
            Split::Train
        }
    }
}

/// How hard a task is; each environment says what the levels mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Difficulty {
    Easy,
    Medium,
    Hard,
}

impl Difficulty {
    pub const ALL: [Difficulty; 3] = [Difficulty::Easy, Difficulty::Medium, Difficulty::Hard];

    /// 1, 2 or 3.
    pub fn level(self) -> u8 {
        match self {
            Difficulty::Easy => 1,
            Difficulty::Medium => 2,
            Difficulty::Hard => 3,
        }
    }

    pub fn from_level(level: u8) -> Option<Difficulty> {
        match level {
            1 => Some(Difficulty::Easy),
            2 => Some(Difficulty::Medium),
            3 => Some(Difficulty::Hard),
            _ => None,
        }
    }
}

/// One task: what the agent is asked, and what the environment needs to
/// run its tools and score the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// `{environment}-{16 hex digits of the prompt's hash}`: a prompt always
    /// has the same id, whichever way the task was made.
    pub id: String,
    pub environment: String,
    /// The user message, exactly as the agent receives it.
    pub prompt: String,
    pub difficulty: Difficulty,
    pub data: TaskData,
}

impl Task {
    pub fn new(environment: &str, prompt: String, difficulty: Difficulty, data: TaskData) -> Task {
        let hash = seeded::stable_hash(prompt.trim().as_bytes());
        Task {
            id: format!("{environment}-{hash:016x}"),
            environment: environment.to_owned(),
            prompt,
            difficulty,
            data,
        }
    }

    pub fn split(&self) -> Split {
        Split::of(&self.prompt)
    }
}

/// Each environment's own typed data about a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TaskData {
    Calc(CalcTask),
    Lookup(LookupTask),
    /// An environment outside this crate: its own typed data, serialised.
    Custom {
        data: serde_json::Value,
    },
}

/// A tool call the environment refused; its text is what the agent sees.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    #[error("unknown tool `{name}`; the tools are: {available}")]
    UnknownTool { name: String, available: String },
    #[error("bad arguments for `{tool}`: {message}")]
    BadArguments { tool: String, message: String },
    #[error("`{tool}` failed: {message}")]
    Failed { tool: String, message: String },
    #[error("task `{task}` is not a task of environment `{environment}`")]
    WrongTask { task: String, environment: &'static str },
}

impl ToolError {
    pub(crate) fn unknown(name: &str, tools: &[Tool]) -> ToolError {
        let available = tools
            .iter()
            .map(|t| format!("`{}`", t.function.name))
            .collect::<Vec<_>>()
            .join(", ");
        ToolError::UnknownTool {
            name: name.to_owned(),
            available,
        }
    }
}

/// Reads a tool call's JSON arguments into the tool's typed arguments
/// (empty text counts as `{}`, as some models send it).
pub(crate) fn parse_arguments<T: serde::de::DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, ToolError> {
    let text = if arguments.trim().is_empty() { "{}" } else { arguments };
    serde_json::from_str(text).map_err(|e| ToolError::BadArguments {
        tool: tool.to_owned(),
        message: format!("{e} (arguments were `{arguments}`)"),
    })
}

/// A function tool with a JSON-schema object of string parameters, all required.
pub(crate) fn function_tool(name: &str, description: &str, parameters: &[(&str, &str)]) -> Tool {
    let properties: serde_json::Map<String, serde_json::Value> = parameters
        .iter()
        .map(|(param, about)| {
            (
                (*param).to_owned(),
                serde_json::json!({"type": "string", "description": about}),
            )
        })
        .collect();
    let required: Vec<&str> = parameters.iter().map(|(param, _)| *param).collect();
    Tool {
        kind: "function".to_owned(),
        function: hone_types::openai::FunctionDefinition {
            name: name.to_owned(),
            description: Some(description.to_owned()),
            parameters: Some(serde_json::json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            })),
            strict: None,
        },
    }
}

/// The conversation an episode opens with: the system prompt, then the task.
pub fn opening(environment: &dyn Environment, task: &Task) -> Vec<Message> {
    vec![
        Message::new(Role::System, environment.system_prompt()),
        Message::new(Role::User, task.prompt.clone()),
    ]
}

/// An assistant message that calls tools: `(id, name, arguments JSON)` each.
pub fn assistant_tool_calls(calls: Vec<(String, String, String)>) -> Message {
    Message {
        role: Role::Assistant,
        content: None,
        name: None,
        tool_calls: Some(
            calls
                .into_iter()
                .map(|(id, name, arguments)| ToolCall {
                    id,
                    kind: "function".to_owned(),
                    function: FunctionCall { name, arguments },
                })
                .collect(),
        ),
        tool_call_id: None,
        refusal: None,
        extra: Extra::new(),
        nulls: Default::default(),
    }
}

/// A tool's result, answering the call `tool_call_id`.
pub fn tool_result(tool_call_id: &str, content: String) -> Message {
    Message {
        role: Role::Tool,
        content: Some(Content::Text(content)),
        name: None,
        tool_calls: None,
        tool_call_id: Some(tool_call_id.to_owned()),
        refusal: None,
        extra: Extra::new(),
        nulls: Default::default(),
    }
}

/// A tool call's result text as the agent sees it: the output, or the error.
pub fn tool_result_text(result: Result<String, ToolError>) -> String {
    match result {
        Ok(output) => output,
        Err(e) => format!("error: {e}"),
    }
}

/// The built-in environments, by name (`calc`, `lookup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Builtin {
    Calc,
    Lookup,
}

impl Builtin {
    pub const ALL: [Builtin; 2] = [Builtin::Calc, Builtin::Lookup];

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Calc => calc::NAME,
            Builtin::Lookup => lookup::NAME,
        }
    }

    /// The environment with its generation seed.
    pub fn build(self, seed: u64) -> Arc<dyn Environment> {
        match self {
            Builtin::Calc => Arc::new(Calc::new(seed)),
            Builtin::Lookup => Arc::new(Lookup::new(seed)),
        }
    }
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Builtin {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Builtin::ALL
            .into_iter()
            .find(|b| b.name() == raw.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = Builtin::ALL.iter().map(|b| b.name()).collect();
                format!(
                    "unknown environment `{raw}`; the built-in environments are {}",
                    names.join(", ")
                )
            })
    }
}
