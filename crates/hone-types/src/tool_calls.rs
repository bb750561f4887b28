//! Tool calls in the Hermes/Qwen format, which Qwen2.5 and most open-weight
//! chat templates teach: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`
//! blocks in the generated text. [`parse`] turns them into OpenAI-style
//! calls; a block that cannot be read stays in the text and is reported as
//! malformed — never dropped, so the reward can penalise it.

/// A parsed call; `arguments` is JSON text, as OpenAI's wire format has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedToolCall {
    pub name: String,
    pub arguments: String,
}

/// Generated text split into prose and tool calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedOutput {
    /// The text outside well-formed calls (trimmed), including any malformed block.
    pub content: String,
    pub tool_calls: Vec<ParsedToolCall>,
    /// Why each malformed block could not be read.
    pub malformed: Vec<String>,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Extracts the tool calls of `text`.
pub fn parse(text: &str) -> ParsedOutput {
    let mut out = ParsedOutput::default();
    let mut content = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        content.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let Some(end) = after.find(CLOSE) else {
            out.malformed.push("a <tool_call> block is not closed".into());
            content.push_str(&rest[start..]);
            rest = "";
            break;
        };
        match parse_call(after[..end].trim()) {
            Ok(call) => out.tool_calls.push(call),
            Err(why) => {
                out.malformed.push(why);
                content.push_str(&rest[start..start + OPEN.len() + end + CLOSE.len()]);
            }
        }
        rest = &after[end + CLOSE.len()..];
    }
    content.push_str(rest);
    out.content = content.trim().to_string();
    out
}

fn parse_call(body: &str) -> Result<ParsedToolCall, String> {
    let value: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("a <tool_call> block is not JSON: {e}"))?;
    let name = value
        .get("name")
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
        .ok_or("a <tool_call> block has no \"name\" string")?;
    let arguments = match value.get("arguments") {
        None | Some(serde_json::Value::Null) => "{}".to_string(),
        // Some models write the arguments already encoded as a JSON string.
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Ok(ParsedToolCall {
        name: name.to_string(),
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_calls_become_tool_calls_and_prose_stays() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>{\"name\": \"time\"}</tool_call>";
        let out = parse(text);
        assert_eq!(out.content, "Let me check.");
        assert!(out.malformed.is_empty());
        assert_eq!(
            out.tool_calls,
            vec![
                ParsedToolCall {
                    name: "weather".into(),
                    arguments: r#"{"city":"Oslo"}"#.into()
                },
                ParsedToolCall {
                    name: "time".into(),
                    arguments: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn malformed_calls_stay_in_the_text_and_are_flagged() {
        let bad_json = "<tool_call>{\"name\": \"weather\", \"arguments\": {</tool_call>";
        let out = parse(bad_json);
        assert!(out.tool_calls.is_empty());
        assert_eq!(out.content, bad_json);
        assert_eq!(out.malformed.len(), 1);

        let unclosed = "ok <tool_call>{\"name\": \"x\"}";
        let out = parse(unclosed);
        assert_eq!(out.content, unclosed);
        assert!(out.malformed[0].contains("not closed"));

        let no_name = "<tool_call>{\"arguments\": {}}</tool_call> and <tool_call>{\"name\":\"y\"}</tool_call>";
        let out = parse(no_name);
        assert_eq!(out.tool_calls.len(), 1, "the good call is still parsed");
        assert_eq!(out.content, "<tool_call>{\"arguments\": {}}</tool_call> and");
        assert!(out.malformed[0].contains("name"));
    }

    #[test]
    fn plain_text_is_untouched() {
        let out = parse("  just an answer \n");
        assert_eq!(out.content, "just an answer");
        assert!(out.tool_calls.is_empty() && out.malformed.is_empty());
    }
}
