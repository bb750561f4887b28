//! What a reflector is shown: the train set's episodes, each with the
//! conversation, its reward and whether it passed, the critics' messages and
//! the judge's rationale, the users' signals with their comments, and the
//! tool calls that went wrong — read from the store, never from the model.

use crate::error::Result;
use crate::search::optimiser::ProposeContext;
use hone_store::CycleStore;
use hone_types::behaviour::tool_call_error;
use hone_types::openai::{ChatCompletionRequest, Tool};
use hone_types::{EpisodeId, Instance, SignalValue};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A tool call that did not fit the tools offered.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProblem {
    pub tool: String,
    pub arguments: String,
    pub problem: String,
}

/// One episode of the train set, as a reflector reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub instance: String,
    pub episode: Option<String>,
    /// The conversation (the system prompt left out: it is shown apart).
    pub conversation: String,
    pub reward: Option<f64>,
    pub passed: bool,
    /// Served by the version being improved (not an earlier one whose
    /// failures it may already have fixed).
    pub by_champion: bool,
    /// Critics' messages, the judge's rationale, parts that failed.
    pub notes: Vec<String>,
    /// The users' signals: `name = value — comment`.
    pub feedback: Vec<String>,
    pub tools_called: Vec<String>,
    pub tool_problems: Vec<ToolProblem>,
}

/// The evidence of every instance of the cycle's train set, read once per
/// propose step and shared by the optimisers that reflect on it.
pub fn of<'c>(ctx: &ProposeContext<'c>) -> Result<&'c [Evidence]> {
    if let Some(read) = ctx.evidence.get() {
        return Ok(read);
    }
    let read = gather(ctx)?;
    Ok(ctx.evidence.get_or_init(|| read))
}

/// Every train instance's evidence; tool calls are checked against the tools
/// the champion owns, else against those the recorded request offered.
fn gather(ctx: &ProposeContext<'_>) -> Result<Vec<Evidence>> {
    let mut out = Vec::new();
    for instance in ctx.store.dataset_items(&ctx.target.id)? {
        let mut e = one(
            ctx.store.as_ref(),
            &instance,
            &ctx.evaluator.rewarder.spec_version,
            ctx.agent.reward.pass_threshold,
            &ctx.champion.tools,
        )?;
        e.by_champion = instance.version_id.as_ref() == Some(ctx.champion_id);
        out.push(e);
    }
    Ok(out)
}

fn one(
    store: &dyn CycleStore,
    instance: &Instance,
    spec_version: &str,
    pass_threshold: f64,
    tools: &[Tool],
) -> Result<Evidence> {
    let reward = match &instance.episode_id {
        Some(id) => store.reward(id, spec_version)?,
        None => None,
    };
    let value = reward.as_ref().map(|r| r.value).or(instance.reward);
    let passed = match &reward {
        Some(r) => r.passed,
        None => value.is_some_and(|v| v >= pass_threshold),
    };
    let mut notes = Vec::new();
    if let Some(r) = &reward {
        for c in &r.components {
            if let Some(reason) = &c.reason {
                notes.push(format!("{}: {reason}", c.name));
            }
        }
        notes.extend(r.failures.iter().map(|f| format!("not scored: {f}")));
    }
    let mut feedback = Vec::new();
    if let Some(episode) = instance
        .episode_id
        .as_ref()
        .map(|id| store.episode(id))
        .transpose()?
        .flatten()
    {
        for s in &episode.signals {
            let value = match &s.value {
                SignalValue::Boolean(b) => b.to_string(),
                SignalValue::Float(n) => n.to_string(),
                SignalValue::Text(t) => format!("{t:?}"),
                SignalValue::Demonstration(m) => format!("the answer should have been {m}"),
            };
            let comment = s.comment.as_deref().map(|c| format!(" — {c}")).unwrap_or_default();
            feedback.push(format!("{} = {value}{comment}", s.name));
        }
    }
    let request: Option<ChatCompletionRequest> = instance
        .request
        .as_ref()
        .and_then(|r| serde_json::from_value(r.clone()).ok());
    let offered = request.map(|mut r| {
        if !tools.is_empty() {
            r.tools = Some(tools.to_vec());
        }
        r
    });
    let (mut tools_called, mut tool_problems) = (Vec::new(), Vec::new());
    for message in &instance.output {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let name = call["function"]["name"].as_str().unwrap_or_default().to_owned();
            let arguments = call["function"]["arguments"].as_str().unwrap_or_default().to_owned();
            if let Some(problem) = offered.as_ref().and_then(|r| tool_call_error(r, &name, &arguments)) {
                tool_problems.push(ToolProblem {
                    tool: name.clone(),
                    arguments,
                    problem,
                });
            }
            if !tools_called.contains(&name) {
                tools_called.push(name);
            }
        }
    }
    let messages = instance
        .request
        .as_ref()
        .and_then(|r| r["messages"].as_array())
        .into_iter()
        .flatten()
        .filter(|m| !matches!(m["role"].as_str(), Some("system" | "developer")))
        .chain(instance.output.iter());
    let conversation = messages.map(render_message).collect::<Vec<_>>().join("\n");
    Ok(Evidence {
        instance: instance.id.clone(),
        episode: instance.episode_id.as_ref().map(|e: &EpisodeId| e.to_string()),
        conversation,
        reward: value,
        passed,
        by_champion: false,
        notes,
        feedback,
        tools_called,
        tool_problems,
    })
}

/// `role: text`, tool calls as `assistant → name(arguments)`.
fn render_message(m: &Value) -> String {
    let role = m["role"].as_str().unwrap_or("?");
    let text = match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    };
    let mut line = if text.is_empty() {
        String::new()
    } else {
        format!("{role}: {}", crate::ask::clip(&text, 1_500))
    };
    for call in m["tool_calls"].as_array().into_iter().flatten() {
        if !line.is_empty() {
            line.push('\n');
        }
        line.push_str(&format!(
            "{role} → {}({})",
            call["function"]["name"].as_str().unwrap_or("?"),
            call["function"]["arguments"].as_str().unwrap_or("")
        ));
    }
    line
}

impl Evidence {
    /// The episode as the reflector reads it.
    pub fn render(&self, n: usize) -> String {
        let mut text = format!(
            "<episode n=\"{n}\" id=\"{}\" outcome=\"{}\" reward=\"{}\">\n{}\n",
            self.episode.as_deref().unwrap_or(&self.instance),
            if self.passed { "passed" } else { "failed" },
            self.reward.map_or("none".into(), |r| format!("{r:.3}")),
            self.conversation
        );
        for note in &self.notes {
            text.push_str(&format!("critic {note}\n"));
        }
        for f in &self.feedback {
            text.push_str(&format!("user feedback {f}\n"));
        }
        for p in &self.tool_problems {
            text.push_str(&format!(
                "invalid tool call {}({}): {}\n",
                p.tool, p.arguments, p.problem
            ));
        }
        text.push_str("</episode>\n");
        text
    }
}

/// Up to `size` episodes for reflection `round` of a cycle: failures first
/// (each round takes the next ones, wrapping), the champion's own before
/// those of earlier versions, then passes for contrast — in an order fixed
/// by `seed`, so a resumed cycle shows the same.
pub fn minibatch<'a>(evidence: &'a [Evidence], size: usize, round: usize, seed: &str) -> Vec<&'a Evidence> {
    let key = |e: &Evidence| Sha256::digest(format!("{seed}\n{}", e.instance).as_bytes());
    let mut failed: Vec<&Evidence> = evidence.iter().filter(|e| !e.passed).collect();
    let mut passed: Vec<&Evidence> = evidence.iter().filter(|e| e.passed).collect();
    failed.sort_by_key(|e| (!e.by_champion, key(e)));
    passed.sort_by_key(|e| (!e.by_champion, key(e)));
    // Three quarters failures (at least one), the rest passes.
    let want_failed = failed.len().min(size.saturating_mul(3).div_ceil(4).max(1));
    let mut batch: Vec<&Evidence> = Vec::new();
    if !failed.is_empty() {
        let start = (round * want_failed) % failed.len();
        batch.extend(failed.iter().cycle().skip(start).take(want_failed));
    }
    let room = size.saturating_sub(batch.len());
    if !passed.is_empty() {
        let start = (round * room) % passed.len();
        batch.extend(passed.iter().cycle().skip(start).take(room.min(passed.len())));
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: &str, passed: bool) -> Evidence {
        Evidence {
            instance: id.into(),
            episode: Some(id.into()),
            conversation: format!("user: {id}"),
            reward: Some(if passed { 1.0 } else { 0.0 }),
            passed,
            by_champion: true,
            notes: Vec::new(),
            feedback: Vec::new(),
            tools_called: Vec::new(),
            tool_problems: Vec::new(),
        }
    }

    #[test]
    fn a_minibatch_leads_with_failures_moves_on_each_round_and_is_stable() {
        let all: Vec<Evidence> = (0..6)
            .map(|i| e(&format!("f{i}"), false))
            .chain((0..6).map(|i| e(&format!("p{i}"), true)))
            .collect();
        let ids = |b: Vec<&Evidence>| b.iter().map(|e| e.instance.clone()).collect::<Vec<_>>();
        let first = ids(minibatch(&all, 4, 0, "c1"));
        assert_eq!(first.len(), 4);
        assert!(first[..3].iter().all(|i| i.starts_with('f')), "{first:?}");
        assert!(first[3].starts_with('p'), "{first:?}");
        assert_eq!(first, ids(minibatch(&all, 4, 0, "c1")), "same seed, same batch");
        let second = ids(minibatch(&all, 4, 1, "c1"));
        let failed_first: std::collections::BTreeSet<_> = first[..3].iter().collect();
        assert!(
            second[..3].iter().all(|i| !failed_first.contains(i)),
            "the next round shows other failures: {first:?} {second:?}"
        );
        // A failure of an earlier version comes after the champion's own.
        let mut mixed = all.clone();
        for e in mixed.iter_mut().filter(|e| e.instance != "f5") {
            e.by_champion = e.passed;
        }
        let batch = ids(minibatch(&mixed, 4, 0, "c1"));
        assert_eq!(batch[0], "f5", "{batch:?}");
        let only_passes: Vec<Evidence> = (0..3).map(|i| e(&format!("p{i}"), true)).collect();
        assert_eq!(minibatch(&only_passes, 8, 0, "c").len(), 3);
    }
}
