//! Exporting a snapshot as JSONL in the formats `hone train` reads
//! (docs/training-data.md): OpenAI chat fine-tuning (`chat`), DPO preference
//! pairs (`dpo`), GRPO groups (`grpo`), or hone's own instances (`hone`,
//! which `hone dataset import` reads back).

use hone_types::Instance;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Chat,
    Dpo,
    Grpo,
    Hone,
}

impl ExportFormat {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "chat" | "sft" | "openai" => Self::Chat,
            "dpo" => Self::Dpo,
            "grpo" => Self::Grpo,
            "hone" | "jsonl" => Self::Hone,
            _ => return None,
        })
    }
}

fn prompt(i: &Instance) -> Option<Vec<Value>> {
    match i.request.as_ref()?.get("messages")? {
        Value::Array(m) => Some(m.clone()),
        _ => None,
    }
}

fn tools(i: &Instance) -> Option<Value> {
    i.request.as_ref()?.get("tools").cloned()
}

/// The demonstration, as messages, when the reference is a message object.
fn demonstration(i: &Instance) -> Option<Vec<Value>> {
    match &i.reference {
        Some(Value::Object(o)) => {
            let mut m = o.clone();
            m.entry("role").or_insert_with(|| json!("assistant"));
            Some(vec![Value::Object(m)])
        }
        Some(Value::String(s)) => Some(vec![json!({"role": "assistant", "content": s})]),
        _ => None,
    }
}

/// Writes the instances; returns how many lines were written (instances
/// without what a format needs are skipped).
pub fn export(items: &[Instance], format: ExportFormat, out: &mut dyn Write) -> std::io::Result<u64> {
    let rows = rows(items, format)?;
    for row in &rows {
        serde_json::to_writer(&mut *out, row)?;
        out.write_all(b"\n")?;
    }
    Ok(rows.len() as u64)
}

/// The instances as rows of `format` (instances without what it needs are
/// skipped).
pub fn rows(items: &[Instance], format: ExportFormat) -> std::io::Result<Vec<Value>> {
    let mut rows = Vec::new();
    match format {
        ExportFormat::Hone => {
            for i in items {
                rows.push(serde_json::to_value(i).map_err(std::io::Error::other)?);
            }
        }
        ExportFormat::Chat => {
            for i in items {
                let (Some(mut messages), Some(answer)) = (
                    prompt(i),
                    demonstration(i).or_else(|| (!i.output.is_empty()).then(|| i.output.clone())),
                ) else {
                    continue;
                };
                messages.extend(answer);
                let mut row = json!({"messages": messages});
                if let Some(t) = tools(i) {
                    row["tools"] = t;
                }
                rows.push(row);
            }
        }
        ExportFormat::Dpo => {
            for group in by_prompt(items).values() {
                let Some(p) = prompt(group[0]) else { continue };
                let mut rewarded: Vec<&&Instance> = group
                    .iter()
                    .filter(|i| i.reward.is_some() && !i.output.is_empty())
                    .collect();
                rewarded.sort_by(|a, b| b.reward.unwrap_or(0.0).total_cmp(&a.reward.unwrap_or(0.0)));
                if let (Some(best), Some(worst)) = (rewarded.first(), rewarded.last()) {
                    if best.reward > worst.reward {
                        rows.push(json!({"prompt": p, "chosen": best.output, "rejected": worst.output}));
                        continue;
                    }
                }
                // A demonstration beats a failed answer to the same prompt.
                let demo = group.iter().find_map(|i| demonstration(i));
                let failed = group
                    .iter()
                    .find(|i| i.reward.is_some_and(|r| r <= 0.0) && !i.output.is_empty());
                if let (Some(chosen), Some(f)) = (demo, failed) {
                    if chosen != f.output {
                        rows.push(json!({"prompt": p, "chosen": chosen, "rejected": f.output}));
                    }
                }
            }
        }
        ExportFormat::Grpo => {
            for group in by_prompt(items).values() {
                let Some(p) = prompt(group[0]) else { continue };
                let completions: Vec<Value> = group
                    .iter()
                    .filter(|i| !i.output.is_empty())
                    .filter_map(|i| Some(json!({"messages": i.output, "reward": i.reward?})))
                    .collect();
                if completions.is_empty() {
                    continue;
                }
                rows.push(json!({"agent": group[0].agent, "prompt": p, "completions": completions}));
            }
        }
    }
    Ok(rows)
}

/// Instances grouped by their prompt messages, in first-seen order.
fn by_prompt(items: &[Instance]) -> BTreeMap<(usize, String), Vec<&Instance>> {
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut groups: BTreeMap<(usize, String), Vec<&Instance>> = BTreeMap::new();
    for i in items {
        let key = prompt(i).map(|p| Value::Array(p).to_string()).unwrap_or_default();
        let n = index.len();
        let order = *index.entry(key.clone()).or_insert(n);
        groups.entry((order, key)).or_default().push(i);
    }
    groups
}
