//! Asking a model of hone's own (a judge, a reflector) for a JSON answer
//! through the gateway: the answer is parsed by the caller's rule, and one
//! that does not parse is sent back with the problem and asked again, up to
//! the retries allowed. A [`Meter`] (what model calls of hone's own may spend), when given, is
//! asked before every call and charged after it.

pub mod meter;

pub use meter::{Meter, Tally};

use crate::client::ChatClient;
use hone_types::openai::ChatCompletionResponse;
use serde_json::json;

/// Who is asked: `model` is the service agent (`hone-judge`,
/// `hone-reflector`), `version` the label of its version to use.
pub struct Asked<'a> {
    pub client: &'a dyn ChatClient,
    pub model: &'a str,
    pub version: &'a str,
    /// The episode the calls are recorded under.
    pub episode: String,
    pub system: &'a str,
    pub retries: u32,
}

/// No usable answer came: the last problem, and the episode to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskFailure {
    pub attempts: u32,
    pub last_error: String,
    pub episode: String,
    /// The meter refused a call: the budget is spent.
    pub budget_spent: bool,
}

impl Asked<'_> {
    pub async fn json<T>(
        &self,
        prompt: &str,
        meter: Option<&Meter>,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, AskFailure> {
        let mut messages = vec![
            json!({"role": "system", "content": self.system}),
            json!({"role": "user", "content": prompt}),
        ];
        let attempts = self.retries + 1;
        let mut last_error = String::new();
        for attempt in 0..attempts {
            if let Some(Err(spent)) = meter.map(Meter::allow) {
                return Err(AskFailure {
                    attempts: attempt,
                    last_error: spent,
                    episode: self.episode.clone(),
                    budget_spent: true,
                });
            }
            let request = json!({"model": self.model, "messages": messages, "temperature": 0.0});
            let answer = match self.client.chat(&request, &self.episode, Some(self.version)).await {
                Ok(r) => {
                    if let Some(meter) = meter {
                        meter.charge(r.usage.as_ref());
                    }
                    answer_text(&r)
                }
                Err(e) => {
                    last_error = e.to_string();
                    continue;
                }
            };
            match parse(&answer) {
                Ok(v) => return Ok(v),
                Err(problem) => {
                    tracing::debug!(attempt, %problem, model = self.model, "output did not parse; asking again");
                    last_error = format!("unusable output ({problem}): {}", clip(&answer, 200));
                    messages.push(json!({"role": "assistant", "content": answer}));
                    messages.push(json!({"role": "user", "content": format!(
                        "That answer cannot be used: {problem}. Reply again with the JSON object only."
                    )}));
                }
            }
        }
        Err(AskFailure {
            attempts,
            last_error,
            episode: self.episode.clone(),
            budget_spent: false,
        })
    }
}

fn answer_text(r: &ChatCompletionResponse) -> String {
    r.choices.first().map(|c| c.message.text()).unwrap_or_default()
}

/// At most `max` characters of `text`, with `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// The outermost JSON object in `text` (code fences and chatter around it
/// tolerated); an error that names the problem otherwise.
pub fn json_object(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let start = text.find('{').ok_or("no JSON object in the answer")?;
    let end = text.rfind('}').ok_or("the JSON object is not closed")?;
    if end < start {
        return Err("the JSON object is not closed".into());
    }
    match serde_json::from_str::<serde_json::Value>(&text[start..=end]) {
        Ok(serde_json::Value::Object(o)) => Ok(o),
        Ok(_) => Err("the answer is not a JSON object".into()),
        Err(e) => Err(format!("the JSON does not parse: {e}")),
    }
}
