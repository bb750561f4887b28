//! Behaviour flags, computed when a call is recorded (docs/ARCHITECTURE.md, "Concepts"):
//! invalid tool call, clarifying question, refusal, empty, truncated. They
//! judge the first choice, the one an agent acts on.

use crate::openai::{ChatCompletionRequest, ChatCompletionResponse};
use crate::BehaviourFlags;

/// Openings that mark an answer as a refusal when the upstream does not say
/// so itself (lower case, compared after trimming).
const REFUSAL_OPENINGS: &[&str] = &[
    "i'm sorry, but i can't",
    "i'm sorry, but i cannot",
    "i am sorry, but i cannot",
    "sorry, i can't",
    "sorry, but i can't",
    "i can't help with",
    "i cannot help with",
    "i can't assist with",
    "i cannot assist with",
    "i'm unable to help with",
    "i am unable to help with",
    "i won't be able to help",
    "i can't comply",
    "i cannot comply",
];

pub fn flags(request: &ChatCompletionRequest, response: &ChatCompletionResponse) -> BehaviourFlags {
    let Some(choice) = response.choices.first() else {
        return BehaviourFlags {
            empty: true,
            ..Default::default()
        };
    };
    let message = &choice.message;
    let text = message.text();
    let trimmed = text.trim();
    let tool_calls = message.tool_calls();
    let refusal = message.refusal.as_deref().is_some_and(|r| !r.trim().is_empty())
        || choice.finish_reason.as_deref() == Some("content_filter")
        || is_refusal_text(trimmed);
    BehaviourFlags {
        invalid_tool_call: tool_calls
            .iter()
            .any(|call| tool_call_error(request, &call.function.name, &call.function.arguments).is_some())
            || has_malformed_tool_call(request, choice, trimmed),
        clarifying_question: tool_calls.is_empty() && is_clarifying_question(trimmed),
        refusal,
        empty: trimmed.is_empty() && tool_calls.is_empty() && !refusal,
        truncated: choice.finish_reason.as_deref() == Some("length"),
    }
}

/// A tool call the model tried but got wrong: the local engine lists the
/// `<tool_call>` blocks it could not read, and any provider that leaves such
/// a block in the text (no tool parser upstream) shows it there.
fn has_malformed_tool_call(request: &ChatCompletionRequest, choice: &crate::openai::Choice, text: &str) -> bool {
    let listed = choice
        .extra
        .get(crate::call::MALFORMED_TOOL_CALLS)
        .and_then(|v| v.as_array())
        .is_some_and(|a| !a.is_empty());
    let tools_offered = request.tools.as_ref().is_some_and(|t| !t.is_empty());
    listed || (tools_offered && text.contains("<tool_call>"))
}

fn is_refusal_text(text: &str) -> bool {
    let head: String = text
        .chars()
        .take(48)
        .collect::<String>()
        .to_lowercase()
        .replace('’', "'");
    REFUSAL_OPENINGS.iter().any(|opening| head.starts_with(opening))
}

/// Whether a final answer (no tool call) is a clarifying question: it ends
/// with a question mark, closing quotes and emphasis aside.
pub fn is_clarifying_question(text: &str) -> bool {
    text.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '*' | '_' | '`' | '”' | '»'))
        .ends_with(['?', '？'])
}

/// Why a tool call is invalid, or `None` if it names a declared tool and its
/// arguments parse and match that tool's JSON schema.
pub fn tool_call_error(request: &ChatCompletionRequest, name: &str, arguments: &str) -> Option<String> {
    let Some(tool) = request.tool(name) else {
        return Some(format!("unknown tool `{name}`"));
    };
    let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
    let value: serde_json::Value = match serde_json::from_str(arguments) {
        Ok(v) => v,
        Err(e) => return Some(format!("arguments of `{name}` are not JSON: {e}")),
    };
    let schema = tool.function.parameters.as_ref()?;
    match jsonschema::validator_for(schema) {
        Ok(validator) => validator
            .iter_errors(&value)
            .next()
            .map(|e| format!("arguments of `{name}` do not match its schema: {e}")),
        // A schema we cannot compile cannot be held against the model.
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request() -> ChatCompletionRequest {
        serde_json::from_value(json!({"model":"a","messages":[{"role":"user","content":"x"}],
            "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}))
        .unwrap()
    }

    fn answer(message: serde_json::Value, finish: &str) -> ChatCompletionResponse {
        serde_json::from_value(json!({"id":"c","choices":[{"index":0,"message":message,"finish_reason":finish}]}))
            .unwrap()
    }

    fn tool_answer(name: &str, args: &str) -> ChatCompletionResponse {
        answer(
            json!({"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":name,"arguments":args}}]}),
            "tool_calls",
        )
    }

    #[test]
    fn tool_calls_are_checked_against_name_json_and_schema() {
        let r = request();
        assert!(!flags(&r, &tool_answer("get_weather", r#"{"city":"Paris"}"#)).invalid_tool_call);
        assert!(flags(&r, &tool_answer("get_wether", r#"{"city":"Paris"}"#)).invalid_tool_call);
        assert!(flags(&r, &tool_answer("get_weather", r#"{"city":"Par"#)).invalid_tool_call);
        assert!(flags(&r, &tool_answer("get_weather", r#"{"city":3}"#)).invalid_tool_call);
        assert!(flags(&r, &tool_answer("get_weather", r#"{}"#)).invalid_tool_call);
    }

    #[test]
    fn a_malformed_hermes_call_left_in_the_text_is_an_invalid_tool_call() {
        let r = request();
        let text = r#"<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>"#;
        let plain = answer(json!({"role":"assistant","content":text}), "stop");
        assert!(flags(&r, &plain).invalid_tool_call);
        let listed: ChatCompletionResponse = serde_json::from_value(json!({"id":"c","choices":[{"index":0,
            "message":{"role":"assistant","content":"x"},"finish_reason":"stop",
            "malformed_tool_calls":["a <tool_call> block is not JSON"]}]}))
        .unwrap();
        assert!(flags(&r, &listed).invalid_tool_call);
        let ok = answer(json!({"role":"assistant","content":"It is sunny."}), "stop");
        assert!(!flags(&r, &ok).invalid_tool_call);
    }

    #[test]
    fn text_answers_are_classified() {
        let r = request();
        let f = flags(
            &r,
            &answer(json!({"role":"assistant","content":"Which city do you mean?"}), "stop"),
        );
        assert!(f.clarifying_question && !f.empty && !f.refusal);
        let f = flags(
            &r,
            &answer(
                json!({"role":"assistant","content":"I’m sorry, but I can’t help with that."}),
                "stop",
            ),
        );
        assert!(f.refusal && !f.clarifying_question);
        let f = flags(&r, &answer(json!({"role":"assistant","content":"  "}), "stop"));
        assert!(f.empty);
        let f = flags(
            &r,
            &answer(json!({"role":"assistant","content":"It is sunny and"}), "length"),
        );
        assert!(f.truncated && !f.empty);
        let f = flags(&r, &answer(json!({"role":"assistant","content":"Sunny."}), "stop"));
        assert_eq!(f, BehaviourFlags::default());
    }
}
