//! What a hosted fine-tuning job is given: the train half's instances that
//! may leave the machine (`[agents.NAME.learn.upload]`), in the host's
//! format, with personal data redacted, split into training and validation
//! files. The choice of examples and pairs is the local trainers' own
//! (`dataset::export`); only the wire format is the host's.

use super::super::rollouts::Rollout;
use crate::data::dataset::{export_rows, ExportFormat};
use hone_config::{FineTuneMethod, UploadSpec};
use hone_types::harness;
use hone_types::openai::ChatCompletionRequest;
use hone_types::{EpisodeDetail, Instance, VersionSpec};
use regex::Regex;
use serde_json::{json, Value};

/// Whether `episode` may be uploaded under `upload`.
pub fn may_upload(upload: &UploadSpec, episode: Option<&EpisodeDetail>) -> bool {
    let Some(episode) = episode else {
        // An imported instance has no episode to check against.
        return upload.require_signals.is_empty() && upload.exclude_flags.is_empty();
    };
    let flagged = episode
        .calls
        .iter()
        .any(|c| upload.exclude_flags.iter().any(|f| c.flags.named(f)));
    let signalled =
        upload.require_signals.is_empty() || episode.signals.iter().any(|s| upload.require_signals.contains(&s.name));
    !flagged && signalled
}

/// The item as the champion's model saw it: the champion's system prompt,
/// playbook and owned tools applied to the recorded request
/// (`harness::apply`, the gateway's own rule), so the model is tuned on
/// what it will be served.
pub fn as_served(item: &Instance, champion: &VersionSpec) -> Instance {
    let mut item = item.clone();
    let parsed = item
        .request
        .as_ref()
        .and_then(|r| serde_json::from_value::<ChatCompletionRequest>(r.clone()).ok());
    if let (Some(request), Some(route)) = (parsed, champion.routes.first()) {
        let served = harness::apply(&request, champion, route, &[]);
        if let Some(Value::Object(object)) = item.request.as_mut() {
            object.insert("messages".into(), json!(served.messages));
            if let Some(tools) = served.tools {
                object.insert("tools".into(), json!(tools));
            }
        }
    }
    item
}

/// The instances as the host's JSONL rows for `method`: OpenAI's chat
/// format (messages with tool calls, and the tools) for supervised jobs;
/// `input` / `preferred_output` / `non_preferred_output` for preference
/// jobs; prompts with their references for reinforcement jobs (those
/// without a reference left out when the grader reads it).
pub fn rows(items: &[Instance], method: FineTuneMethod, needs_reference: bool) -> std::io::Result<Vec<Value>> {
    Ok(match method {
        FineTuneMethod::Reinforcement => items.iter().filter_map(|i| prompt_row(i, needs_reference)).collect(),
        FineTuneMethod::Supervised => export_rows(items, ExportFormat::Chat)?,
        FineTuneMethod::Preference => export_rows(items, ExportFormat::Dpo)?
            .into_iter()
            .map(|pair| {
                let as_list = |v: &Value| match v {
                    Value::Array(_) => v.clone(),
                    other => json!([other]),
                };
                json!({
                    "input": {"messages": pair["prompt"]},
                    "preferred_output": as_list(&pair["chosen"]),
                    "non_preferred_output": as_list(&pair["rejected"]),
                })
            })
            .collect(),
    })
}

/// The item as a reinforcement prompt: the request's messages and its
/// reference (`reference_answer`, as the critics read it); none without a
/// request, or without a reference when the grader reads one.
fn prompt_row(item: &Instance, needs_reference: bool) -> Option<Value> {
    let messages = item.request.as_ref()?.get("messages")?.clone();
    let reference = item.reference.as_ref().and_then(crate::episode::reference_text);
    if needs_reference && reference.is_none() {
        return None;
    }
    let mut row = json!({"messages": messages, "reference_answer": reference.unwrap_or_default()});
    if let Some(tools) = item.request.as_ref().and_then(|r| r.get("tools")) {
        row["tools"] = tools.clone();
    }
    Some(row)
}

/// A group of rollouts' best-rewarded episode over its worst, as a
/// preference row, at the first call where their answers part from the same
/// request (served as the champion serves it); none when the rewards tie or
/// the episodes part elsewhere.
pub fn rollout_pair(group: &[Rollout], champion: &VersionSpec) -> Option<Value> {
    let value = |r: &&Rollout| r.reward.value;
    let best = group.iter().max_by(|a, b| value(a).total_cmp(&value(b)))?;
    let worst = group.iter().min_by(|a, b| value(a).total_cmp(&value(b)))?;
    if value(&best) <= value(&worst) {
        return None;
    }
    let route = champion.routes.first()?;
    for (chosen, rejected) in best.episode.calls.iter().zip(&worst.episode.calls) {
        if chosen.request.messages != rejected.request.messages {
            return None;
        }
        let answer = |c: &hone_types::CallRecord| Some(c.response.as_ref()?.choices.first()?.message.clone());
        let (preferred, non_preferred) = (answer(chosen)?, answer(rejected)?);
        if preferred != non_preferred {
            let served = harness::apply(&chosen.request, champion, route, &[]);
            let mut input = json!({"messages": served.messages});
            if let Some(tools) = served.tools {
                input["tools"] = json!(tools);
            }
            return Some(json!({
                "input": input,
                "preferred_output": [preferred],
                "non_preferred_output": [non_preferred],
            }));
        }
    }
    None
}

/// Replaces what `upload.redact` names in every string of the rows.
pub struct Redactor {
    patterns: Vec<Regex>,
}

impl Redactor {
    pub const MARK: &'static str = "[REDACTED]";

    pub fn new(upload: &UploadSpec) -> Self {
        let patterns = upload
            .redact
            .iter()
            .filter_map(|name| {
                let pattern = match name.as_str() {
                    "email" => r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",
                    "phone" => r"\+?\d[\d\s().-]{7,}\d",
                    "card" => r"\b(?:\d[ -]?){13,19}\b",
                    "ip" => r"\b(?:\d{1,3}\.){3}\d{1,3}\b",
                    other => other,
                };
                // The config checked every pattern.
                Regex::new(pattern).ok()
            })
            .collect();
        Self { patterns }
    }

    /// The value with every match replaced; how many were.
    pub fn redact(&self, value: &mut Value) -> usize {
        match value {
            Value::String(s) => {
                let mut found = 0;
                for p in &self.patterns {
                    found += p.find_iter(s).count();
                    if found > 0 {
                        *s = p.replace_all(s, Self::MARK).into_owned();
                    }
                }
                found
            }
            Value::Array(items) => items.iter_mut().map(|v| self.redact(v)).sum(),
            Value::Object(map) => map.values_mut().map(|v| self.redact(v)).sum(),
            _ => 0,
        }
    }
}

/// The rows passed through the user's redaction program (`argv`): JSONL
/// on its stdin, as many rows back on its stdout. Anything else — it
/// cannot start, fails, or returns other than one JSON row for each — is
/// the reason nothing is uploaded.
pub fn through_hook(argv: &[String], rows: Vec<Value>) -> Result<Vec<Value>, String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let shown = argv.join(" ");
    let Some((program, args)) = argv.split_first() else {
        return Ok(rows);
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    let mut input = Vec::new();
    for row in &rows {
        input.extend(row.to_string().into_bytes());
        input.push(b'\n');
    }
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    // Written from a thread: a program that answers while it reads would
    // otherwise fill its stdout pipe while this fills its stdin.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().map_err(|e| format!("`{shown}`: {e}"))?;
    let _ = writer.join();
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let last = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!("`{shown}` failed ({}): {last}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let back: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("`{shown}`'s row {}: not JSON: {e}", i + 1)))
        .collect::<Result<_, _>>()?;
    if back.len() != rows.len() {
        return Err(format!("`{shown}` returned {} rows for {}", back.len(), rows.len()));
    }
    Ok(back)
}

/// The rows as JSONL, the last `share` of them (at least one when there are
/// two or more) as the validation file.
pub fn split(rows: &[Value], share: f64) -> (Vec<u8>, Vec<u8>) {
    let held = if share > 0.0 && rows.len() >= 2 {
        ((rows.len() as f64 * share).round() as usize).clamp(1, rows.len() - 1)
    } else {
        0
    };
    let jsonl = |rows: &[Value]| {
        let mut out = Vec::new();
        for r in rows {
            out.extend(r.to_string().into_bytes());
            out.push(b'\n');
        }
        out
    };
    let cut = rows.len() - held;
    (jsonl(&rows[..cut]), jsonl(&rows[cut..]))
}

/// Trained tokens a job on `training` is estimated at: four characters a
/// token (the host's tokenizer is not here), times the epochs.
pub fn estimated_tokens(training: &[u8], epochs: u64) -> u64 {
    (training.len() as u64).div_ceil(4) * epochs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_replaces_detectors_and_patterns_everywhere() {
        let upload = UploadSpec {
            redact: vec!["email".into(), "card".into(), r"(?i)order #\d+".into()],
            ..UploadSpec::default()
        };
        let mut row = json!({"messages": [
            {"role": "user", "content": "I'm ann@example.com, card 4111 1111 1111 1111, Order #991"},
            {"role": "assistant", "content": "Thanks"}
        ]});
        assert_eq!(Redactor::new(&upload).redact(&mut row), 3);
        assert_eq!(
            row["messages"][0]["content"],
            "I'm [REDACTED], card [REDACTED], [REDACTED]"
        );
        assert_eq!(row["messages"][1]["content"], "Thanks");
    }

    #[test]
    fn a_split_keeps_one_row_for_training_and_one_for_validation_at_least() {
        let rows: Vec<Value> = (0..10).map(|i| json!({"i": i})).collect();
        let (train, valid) = split(&rows, 0.2);
        assert_eq!(
            (
                train.iter().filter(|b| **b == b'\n').count(),
                valid.iter().filter(|b| **b == b'\n').count()
            ),
            (8, 2)
        );
        let (train, valid) = split(&rows[..2], 0.01);
        assert!(!train.is_empty() && !valid.is_empty());
        let (_, valid) = split(&rows, 0.0);
        assert!(valid.is_empty());
    }
}
