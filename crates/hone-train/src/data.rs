//! The JSONL inputs of `hone train` (schemas in `docs/training-data.md`),
//! read line by line into token sequences with the scored tokens marked.
//!
//! Every format takes either chat messages (rendered through the base
//! model's chat template; only assistant messages of the completion are
//! scored, tool results never) or token ids as the gateway recorded them:
//!
//! - SFT: `{"messages": [...]}` (OpenAI's chat fine-tuning format; an
//!   assistant message with `"weight": 0` is not trained), or
//!   `{"prompt": [...], "completion": [...] | "text"}`, or
//!   `{"prompt_tokens": [...], "completion_tokens": [...]}`;
//! - DPO: `{"prompt": [...], "chosen": [...] | "text", "rejected": ...}` or
//!   `{"prompt_tokens", "chosen_tokens", "rejected_tokens"}`;
//! - GRPO: `{"prompt": [...] | "prompt_tokens": [...], "completions":
//!   [{"reward": r, "text" | "messages" | "tokens", "mask"?, "logprobs"?,
//!   "prompt_tokens"?, "episode"?, "off_policy"?}]}`; a group with one completion trains in
//!   baseline mode (`"agent"` names whose running baseline it uses). A
//!   completion may carry its own `prompt_tokens` (a later call of a
//!   multi-step episode) and the `episode` it belongs to: the completions of
//!   one episode share one place in the group (see `loss::grpo`).
//!
//! A malformed line is an error naming the file, the line and the field.

use crate::policy::Sequence;
use crate::{Result, TrainError};
use hone_engine::Tokenizer;
use serde::Deserialize;
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct SftExample {
    pub line: usize,
    pub sequence: Sequence,
}

#[derive(Debug, Clone)]
pub struct DpoExample {
    pub line: usize,
    pub chosen: Sequence,
    pub rejected: Sequence,
}

#[derive(Debug, Clone)]
pub struct GrpoSample {
    pub sequence: Sequence,
    pub reward: f64,
    /// The sampler's logprob of each scored token.
    pub behaviour: Option<Vec<f32>>,
    /// The episode this completion is one call of, when a group holds
    /// multi-call episodes.
    pub episode: Option<String>,
    /// Sampled by another policy than the one training starts from (a
    /// production episode of an older version): corrected against the
    /// starting policy with truncated importance weights (`loss::grpo`).
    pub off_policy: bool,
}

#[derive(Debug, Clone)]
pub struct GrpoGroup {
    pub line: usize,
    pub agent: String,
    pub samples: Vec<GrpoSample>,
}

/// Reads `path` line by line (blank lines skipped), parsing each with `parse`;
/// errors name the file and the 1-based line.
pub fn read_jsonl<T>(path: &Path, mut parse: impl FnMut(usize, Value) -> Result<T, String>) -> Result<Vec<T>> {
    let file = std::fs::File::open(path).map_err(|e| TrainError::io(path, e))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let n = i + 1;
        let at = |message: String| TrainError::Data(format!("{}:{n}: {message}", path.display()));
        let line = line.map_err(|e| at(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line).map_err(|e| at(format!("not JSON: {e}")))?;
        if !value.is_object() {
            return Err(at("expected a JSON object".into()));
        }
        out.push(parse(n, value).map_err(at)?);
    }
    if out.is_empty() {
        return Err(TrainError::Data(format!("{}: no examples", path.display())));
    }
    Ok(out)
}

fn from_value<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })
}

/// Turns chat messages into a [`Sequence`] through the chat template.
#[derive(Debug, Clone, Copy)]
pub struct Renderer<'a> {
    pub tokenizer: Option<&'a Tokenizer>,
}

impl Renderer<'_> {
    /// `prompt` then `completion`; the completion's assistant messages
    /// (minus those with `"weight": 0`) are scored.
    pub fn conversation(
        &self,
        prompt: &[Value],
        completion: &[Value],
        tools: Option<&Value>,
    ) -> Result<Sequence, String> {
        let tokenizer = self
            .tokenizer
            .ok_or("chat messages need the base model's tokenizer and chat template")?;
        let template = &tokenizer.template;
        let all: Vec<Value> = prompt.iter().chain(completion).cloned().collect();
        for (i, m) in all.iter().enumerate() {
            if m.get("role").and_then(Value::as_str).is_none() {
                return Err(format!("message {i} has no `role`"));
            }
        }
        let render = |messages: &[Value], generation: bool| {
            template
                .render_openai(messages, tools, generation)
                .map_err(|e| e.to_string())
        };
        let full = render(&all, false)?;
        let mut spans = Vec::new();
        for i in prompt.len()..all.len() {
            let m = &all[i];
            let trained = m.get("role").and_then(Value::as_str) == Some("assistant")
                && m.get("weight").and_then(Value::as_f64) != Some(0.0);
            if !trained {
                continue;
            }
            let before = render(&all[..i], true)?;
            let through = render(&all[..=i], false)?;
            if !through.starts_with(&before) || !full.starts_with(&through) {
                return Err(
                    "the chat template does not render this conversation incrementally, so the \
                            assistant tokens cannot be located; pass token ids instead"
                        .into(),
                );
            }
            spans.push((before.len(), through.trim_end().len()));
        }
        if spans.is_empty() {
            return Err("no assistant message to train on".into());
        }
        let (tokens, offsets) = tokenizer.encode_with_offsets(&full).map_err(|e| e.to_string())?;
        let scored = offsets
            .iter()
            .map(|(start, _)| spans.iter().any(|(a, b)| (*a..*b).contains(start)))
            .collect();
        Ok(Sequence { tokens, scored })
    }
}

/// A completion given as messages, one assistant text, or token ids.
fn completion_messages(value: &Value, field: &str) -> Result<Vec<Value>, String> {
    match value {
        Value::String(text) => Ok(vec![serde_json::json!({"role": "assistant", "content": text})]),
        Value::Array(messages) => Ok(messages.clone()),
        _ => Err(format!("`{field}` must be a string or a list of messages")),
    }
}

fn token_sequence(prompt: &[u32], completion: &[u32], mask: Option<&[u8]>) -> Result<Sequence, String> {
    if prompt.is_empty() {
        return Err("`prompt_tokens` is empty".into());
    }
    if completion.is_empty() {
        return Err("the completion has no tokens".into());
    }
    let mut sequence = Sequence::prompt_completion(prompt, completion);
    if let Some(mask) = mask {
        if mask.len() != completion.len() {
            return Err(format!(
                "`mask` has {} entries for {} completion tokens",
                mask.len(),
                completion.len()
            ));
        }
        for (i, m) in mask.iter().enumerate() {
            sequence.scored[prompt.len() + i] = *m != 0;
        }
    }
    if sequence.scored_count() == 0 {
        return Err("no scored tokens".into());
    }
    Ok(sequence)
}

#[derive(Deserialize)]
struct RawSft {
    messages: Option<Vec<Value>>,
    prompt: Option<Vec<Value>>,
    completion: Option<Value>,
    tools: Option<Value>,
    prompt_tokens: Option<Vec<u32>>,
    completion_tokens: Option<Vec<u32>>,
}

pub fn read_sft(path: &Path, renderer: Renderer) -> Result<Vec<SftExample>> {
    read_jsonl(path, |line, value| {
        let raw: RawSft = from_value(value)?;
        let sequence = match raw {
            RawSft {
                messages: Some(messages),
                ..
            } => renderer.conversation(&[], &messages, raw.tools.as_ref())?,
            RawSft {
                prompt: Some(prompt),
                completion: Some(completion),
                ..
            } => renderer.conversation(
                &prompt,
                &completion_messages(&completion, "completion")?,
                raw.tools.as_ref(),
            )?,
            RawSft {
                prompt_tokens: Some(p),
                completion_tokens: Some(c),
                ..
            } => token_sequence(&p, &c, None)?,
            _ => {
                return Err(
                    "expected `messages`, `prompt` + `completion`, or `prompt_tokens` + `completion_tokens`".into(),
                )
            }
        };
        Ok(SftExample { line, sequence })
    })
}

#[derive(Deserialize)]
struct RawPair {
    prompt: Option<Vec<Value>>,
    chosen: Option<Value>,
    rejected: Option<Value>,
    tools: Option<Value>,
    prompt_tokens: Option<Vec<u32>>,
    chosen_tokens: Option<Vec<u32>>,
    rejected_tokens: Option<Vec<u32>>,
}

pub fn read_dpo(path: &Path, renderer: Renderer) -> Result<Vec<DpoExample>> {
    read_jsonl(path, |line, value| {
        let raw: RawPair = from_value(value)?;
        let (chosen, rejected) = match raw {
            RawPair {
                prompt: Some(prompt),
                chosen: Some(chosen),
                rejected: Some(rejected),
                ..
            } => {
                let tools = raw.tools.as_ref();
                (
                    renderer.conversation(&prompt, &completion_messages(&chosen, "chosen")?, tools)?,
                    renderer.conversation(&prompt, &completion_messages(&rejected, "rejected")?, tools)?,
                )
            }
            RawPair {
                prompt_tokens: Some(p),
                chosen_tokens: Some(c),
                rejected_tokens: Some(r),
                ..
            } => (token_sequence(&p, &c, None)?, token_sequence(&p, &r, None)?),
            _ => {
                return Err(
                    "expected `prompt` + `chosen` + `rejected`, or `prompt_tokens` + `chosen_tokens` + \
                     `rejected_tokens`"
                        .into(),
                )
            }
        };
        Ok(DpoExample { line, chosen, rejected })
    })
}

#[derive(Deserialize)]
struct RawGroup {
    agent: Option<String>,
    prompt: Option<Vec<Value>>,
    prompt_tokens: Option<Vec<u32>>,
    tools: Option<Value>,
    completions: Vec<RawCompletion>,
}

#[derive(Deserialize)]
struct RawCompletion {
    reward: f64,
    text: Option<String>,
    messages: Option<Vec<Value>>,
    tokens: Option<Vec<u32>>,
    mask: Option<Vec<u8>>,
    logprobs: Option<Vec<Option<f32>>>,
    prompt_tokens: Option<Vec<u32>>,
    episode: Option<String>,
    #[serde(default)]
    off_policy: bool,
}

pub fn read_grpo(path: &Path, renderer: Renderer) -> Result<Vec<GrpoGroup>> {
    read_jsonl(path, |line, value| grpo_group(line, value, renderer))
}

/// One group row of the GRPO format (what [`read_grpo`] reads from a line),
/// `line` naming it.
pub fn grpo_group(line: usize, value: Value, renderer: Renderer) -> Result<GrpoGroup, String> {
    let raw: RawGroup = from_value(value)?;
    if raw.completions.is_empty() {
        return Err("`completions` is empty".into());
    }
    let mut samples = Vec::with_capacity(raw.completions.len());
    for (i, c) in raw.completions.into_iter().enumerate() {
        let at = |m: String| format!("completions[{i}]: {m}");
        if !c.reward.is_finite() {
            return Err(at("`reward` must be a finite number".into()));
        }
        let prompt_tokens = c.prompt_tokens.as_ref().or(raw.prompt_tokens.as_ref());
        let sequence = match (&raw.prompt, prompt_tokens, &c.tokens) {
            (_, Some(p), Some(tokens)) => token_sequence(p, tokens, c.mask.as_deref()).map_err(at)?,
            (Some(p), _, None) => {
                let completion = match (c.text, c.messages) {
                    (Some(text), None) => completion_messages(&Value::String(text), "text"),
                    (None, Some(messages)) => Ok(messages),
                    _ => Err("give exactly one of `text` and `messages`".into()),
                }
                .map_err(at)?;
                renderer.conversation(p, &completion, raw.tools.as_ref()).map_err(at)?
            }
            _ => {
                return Err(at(
                    "token ids (`tokens`) need `prompt_tokens`; `text`/`messages` need `prompt`".into(),
                ))
            }
        };
        let behaviour = match c.logprobs {
            None => None,
            Some(lps) => Some(behaviour_logprobs(&sequence, c.tokens.as_ref().map(Vec::len), &lps).map_err(at)?),
        };
        samples.push(GrpoSample {
            sequence,
            reward: c.reward,
            behaviour,
            episode: c.episode,
            off_policy: c.off_policy,
        });
    }
    Ok(GrpoGroup {
        line,
        agent: raw.agent.unwrap_or_else(|| "default".into()),
        samples,
    })
}

/// The behaviour logprobs of the scored tokens. With token ids there is one
/// entry per completion token (entries under a zero mask are ignored and
/// may be null); with rendered text, one per scored token.
fn behaviour_logprobs(
    sequence: &Sequence,
    completion_tokens: Option<usize>,
    lps: &[Option<f32>],
) -> Result<Vec<f32>, String> {
    let scored: Vec<usize> = (1..sequence.tokens.len()).filter(|t| sequence.scored[*t]).collect();
    let picked: Vec<Option<f32>> = if let Some(completion) = completion_tokens {
        if lps.len() != completion {
            return Err(format!(
                "`logprobs` has {} entries for {completion} completion tokens",
                lps.len()
            ));
        }
        let prompt = sequence.tokens.len() - completion;
        scored.iter().map(|t| lps[t - prompt]).collect()
    } else {
        if lps.len() != scored.len() {
            return Err(format!(
                "`logprobs` has {} entries for {} scored tokens",
                lps.len(),
                scored.len()
            ));
        }
        lps.to_vec()
    };
    picked
        .into_iter()
        .map(|v| match v {
            Some(v) if v.is_finite() && v <= 0.0 => Ok(v),
            Some(v) => Err(format!("logprob {v} is not a finite number ≤ 0")),
            None => Err("a scored token's logprob is null".into()),
        })
        .collect()
}
