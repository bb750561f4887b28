//! Text ↔ token ids (`tokenizer.json`, through the `tokenizers` crate) and
//! the chat template (`chat_template.jinja`, `chat_template.json` or
//! `tokenizer_config.json`, the order transformers reads them in), rendered with minijinja the
//! way `transformers`' `apply_chat_template` renders it with Jinja2
//! (`trim_blocks`, `lstrip_blocks`, `raise_exception`, a Python-style
//! `tojson`, Python string and dict methods).

use crate::{EngineError, Result};
use minijinja::{Environment, ErrorKind, Value};
use std::path::Path;

/// A JSON file of the checkpoint (`tokenizer_config.json`, `chat_template.json`).
fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| EngineError::Template(format!("{}: {e}", path.display())))
}

/// The `chat_template` a JSON file holds: a string, or a list of named
/// templates of which `default` is taken.
fn template_in(json: &serde_json::Value, path: &Path) -> Result<String> {
    match json.get("chat_template") {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(|t| t.as_str())
            .map(str::to_owned)
            .ok_or_else(|| EngineError::Template(format!("{}: no `default` chat template", path.display()))),
        _ => Err(EngineError::Template(format!("{}: no `chat_template`", path.display()))),
    }
}

/// A byte range `(start, end)` of the encoded text.
pub type Span = (usize, usize);

/// A tokenizer with its chat template and special tokens.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    pub template: ChatTemplate,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.inner.get_vocab_size(true))
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` and the chat template from a model directory.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| EngineError::Tokenizer(format!("{}: {e}", path.display())))?;
        let template = ChatTemplate::load_dir(dir)?;
        Ok(Self { inner, template })
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Token ids with the byte range of `text` each one came from.
    pub fn encode_with_offsets(&self, text: &str) -> Result<(Vec<u32>, Vec<Span>)> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))?;
        Ok((encoding.get_ids().to_vec(), encoding.get_offsets().to_vec()))
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| EngineError::Tokenizer(e.to_string()))
    }

    /// The bytes a token stands for: byte-level BPE tokens (Qwen2, Llama 3,
    /// GPT-2) map back through the byte↔character table; added tokens are
    /// their text. Single tokens need not be valid UTF-8 on their own.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let Some(token) = self.inner.id_to_token(id) else {
            return Vec::new();
        };
        let is_added = self.inner.get_added_tokens_decoder().contains_key(&id);
        if is_added {
            return token.into_bytes();
        }
        let table = crate::init::byte_to_char();
        let bytes: Option<Vec<u8>> = token
            .chars()
            .map(|c| table.iter().position(|t| *t == c).map(|b| b as u8))
            .collect();
        bytes.unwrap_or_else(|| self.decode(&[id]).unwrap_or_default().into_bytes())
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// The Jinja chat template and the special tokens it may refer to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    pub source: String,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

impl ChatTemplate {
    /// The files a checkpoint keeps its chat template in, in the order
    /// transformers prefers them: its own file (transformers 5), a JSON file
    /// holding `chat_template`, then `tokenizer_config.json`.
    pub const FILES: [&str; 3] = ["chat_template.jinja", "chat_template.json", "tokenizer_config.json"];

    /// Reads the chat template of a checkpoint directory (from the first of
    /// [`Self::FILES`] that holds one) and the special tokens of its
    /// `tokenizer_config.json`.
    pub fn load_dir(dir: &Path) -> Result<Self> {
        let config_path = dir.join("tokenizer_config.json");
        let config = read_json(&config_path)?;
        let jinja = dir.join(Self::FILES[0]);
        let json_file = dir.join(Self::FILES[1]);
        let source = if jinja.exists() {
            std::fs::read_to_string(&jinja).map_err(|e| EngineError::io(&jinja, e))?
        } else if json_file.exists() {
            template_in(&read_json(&json_file)?, &json_file)?
        } else {
            template_in(&config, &config_path).map_err(|_| {
                EngineError::Template(format!(
                    "{}: no chat template (looked for {}, {} and `chat_template` in {})",
                    dir.display(),
                    Self::FILES[0],
                    Self::FILES[1],
                    Self::FILES[2]
                ))
            })?
        };
        let token = |key: &str| match config.get(key) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Object(o)) => o.get("content").and_then(|c| c.as_str()).map(str::to_owned),
            _ => None,
        };
        Ok(Self {
            source,
            bos_token: token("bos_token"),
            eos_token: token("eos_token"),
        })
    }

    /// Renders OpenAI-style `messages` (and `tools`, if any) into the prompt
    /// text, ending with the assistant's turn opener when `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| EngineError::Template(e.to_string()))?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_template("chat", &self.source)
            .map_err(|e| EngineError::Template(e.to_string()))?;
        let template = env
            .get_template("chat")
            .map_err(|e| EngineError::Template(e.to_string()))?;
        template
            .render(minijinja::context! {
                messages => Value::from(minijinja::value::Serde(messages)),
                tools => tools.map(|t| Value::from(minijinja::value::Serde(t))),
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token.clone().unwrap_or_default(),
                eos_token => self.eos_token.clone().unwrap_or_default(),
            })
            .map_err(|e| EngineError::Template(format!("{e:#}")))
    }
}

impl ChatTemplate {
    /// Renders a conversation the way the model is served it: OpenAI
    /// messages, as clients send them and the store records them, with
    /// every tool call's `arguments` turned from JSON text into the object
    /// it encodes ([`arguments_as_objects`]), then [`Self::render`]. Every
    /// place that shows a model a conversation — the gateway, training
    /// data, the demo's base policy — renders through here, so a model
    /// trained on a conversation is served the same text.
    pub fn render_openai(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let messages: Vec<serde_json::Value> = messages
            .iter()
            .cloned()
            .map(|mut m| {
                arguments_as_objects(&mut m);
                m
            })
            .collect();
        self.render(&serde_json::Value::Array(messages), tools, add_generation_prompt)
    }
}

/// Each tool call's `arguments` in `message` as the JSON value its text
/// encodes (text that is not JSON stays text). OpenAI sends arguments as
/// text; Hugging Face templates (Qwen2.5, Llama 3.1) expect the object and
/// `tojson` it, which would quote text a second time, and a template that
/// prints text as it is (hone's own) would show a model `{"a":1}` where it
/// is served `{"a": 1}`: one rendering for both is what keeps training and
/// serving on the same tokens.
pub fn arguments_as_objects(message: &mut serde_json::Value) {
    let Some(calls) = message.get_mut("tool_calls").and_then(serde_json::Value::as_array_mut) else {
        return;
    };
    for call in calls {
        let Some(arguments) = call.pointer_mut("/function/arguments") else {
            continue;
        };
        if let Some(parsed) = arguments
            .as_str()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        {
            *arguments = parsed;
        }
    }
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`, which is
/// what `transformers` registers as `tojson` (minijinja's own is compact and
/// HTML-escapes).
fn tojson(value: Value, kwargs: minijinja::value::Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json =
        serde_json::to_value(&value).map_err(|e| minijinja::Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let mut out = String::new();
    write_python_json(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn write_python_json(value: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(width * depth));
        }
    };
    let separator = if indent.is_some() { "," } else { ", " };
    match value {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                newline(out, depth + 1);
                write_python_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(separator);
                }
                newline(out, depth + 1);
                out.push_str(&J::String(key.clone()).to_string());
                out.push_str(": ");
                write_python_json(item, indent, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        J::Number(n) if n.is_f64() => {
            // Python writes 1.0 where serde_json would too; keep serde's form.
            out.push_str(&n.to_string());
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conversation(arguments: serde_json::Value) -> Vec<serde_json::Value> {
        vec![
            json!({"role": "user", "content": "What is 19 - 11?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "calc", "arguments": arguments}}
            ]}),
            json!({"role": "tool", "content": "8", "tool_call_id": "call_0"}),
        ]
    }

    #[test]
    fn a_tool_call_renders_the_same_whether_its_arguments_came_as_text_or_as_an_object() {
        let template = ChatTemplate {
            source: include_str!("chat_template.jinja").to_owned(),
            bos_token: None,
            eos_token: None,
        };
        // A client's (and the store's) text, compact as serde writes it,
        // and a demonstration's object render alike: Python's json.dumps.
        let as_text = template
            .render_openai(&conversation(json!("{\"expression\":\"19 - 11\"}")), None, true)
            .unwrap();
        let as_object = template
            .render_openai(&conversation(json!({"expression": "19 - 11"})), None, true)
            .unwrap();
        assert_eq!(as_text, as_object);
        assert!(
            as_text.contains(r#"{"name": "calc", "arguments": {"expression": "19 - 11"}}"#),
            "{as_text}"
        );
        // `render` itself shows text as it is, as transformers would.
        let raw = template
            .render(&json!(conversation(json!("{\"expression\":\"19 - 11\"}"))), None, true)
            .unwrap();
        assert!(raw.contains(r#"{"expression":"19 - 11"}"#), "{raw}");
        // Arguments that are not JSON stay text.
        let mut message = conversation(json!("not json")).remove(1);
        arguments_as_objects(&mut message);
        assert_eq!(message["tool_calls"][0]["function"]["arguments"], json!("not json"));
    }
}
