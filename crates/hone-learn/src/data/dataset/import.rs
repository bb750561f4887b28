//! Reading instances from JSONL: hone's own format (`hone dataset export
//! --format hone`), OpenAI chat fine-tuning lines (`{"messages": […]}`: the
//! last assistant message becomes the reference, what precedes it the
//! request), or `{"input": …, "reference": …}` for agent endpoints. A bad
//! line is an error naming the file, the line and the problem.

use hone_types::Instance;
use serde_json::{json, Value};

pub fn read_instances(file: &str, text: &str, agent: &str) -> Result<Vec<Instance>, String> {
    let mut out = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let at = format!("{file}:{}", n + 1);
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| format!("{at}: not JSON: {e}"))?;
        let Value::Object(o) = &value else {
            return Err(format!("{at}: expected a JSON object"));
        };
        let default_id = format!("import-{}", n + 1);
        let instance = if o.contains_key("messages") && !o.contains_key("input") {
            let messages = o["messages"]
                .as_array()
                .ok_or(format!("{at}: messages: expected a list"))?;
            let last_assistant = messages
                .iter()
                .rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                .ok_or(format!("{at}: messages: no assistant message to use as the reference"))?;
            let prompt = &messages[..last_assistant];
            let task = prompt
                .iter()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .and_then(|m| m.get("content").and_then(Value::as_str))
                .ok_or(format!(
                    "{at}: messages: no user message before the last assistant message"
                ))?;
            let mut request = json!({"messages": prompt});
            if let Some(t) = o.get("tools") {
                request["tools"] = t.clone();
            }
            Instance {
                id: default_id,
                agent: agent.to_owned(),
                episode_id: None,
                version_id: None,
                input: json!(task),
                request: Some(request),
                reference: Some(messages[last_assistant].clone()),
                output: Vec::new(),
                reward: None,
                cost_usd: None,
            }
        } else if o.contains_key("input") {
            let mut with_defaults = o.clone();
            with_defaults.entry("id").or_insert_with(|| json!(default_id));
            with_defaults.entry("agent").or_insert_with(|| json!(agent));
            serde_json::from_value::<Instance>(Value::Object(with_defaults)).map_err(|e| format!("{at}: {e}"))?
        } else {
            return Err(format!(
                "{at}: expected `messages` (OpenAI chat fine-tuning) or `input` (a hone instance)"
            ));
        };
        if instance.agent != agent {
            return Err(format!("{at}: agent `{}` is not `{agent}`", instance.agent));
        }
        if !ids.insert(instance.id.clone()) {
            return Err(format!("{at}: id `{}` appears twice", instance.id));
        }
        out.push(instance);
    }
    if out.is_empty() {
        return Err(format!("{file}: no instances"));
    }
    Ok(out)
}
