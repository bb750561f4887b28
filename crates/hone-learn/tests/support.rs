//! A gateway on loopback over a temporary data directory, in front of the
//! fake upstream with this suite's models: arithmetic models of different
//! skill, a judge, reflectors, a tool-caller.

use hone_store::{LearnStore, SqliteStore, Store};
use hone_test_support::{FakeUpstream, Reply, TestConfig};
use hone_types::{EpisodeDetail, EpisodeId};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What this suite's models remember: answers queued for the `judge`
/// model (served before its default answer) and the prompts the judge and
/// the reflectors were shown.
#[derive(Default)]
pub struct Upstream {
    pub judge_answers: Mutex<VecDeque<String>>,
    pub judge_prompts: Mutex<Vec<String>>,
    /// What the reflection models were shown, in order.
    pub reflector_prompts: Mutex<Vec<String>>,
    /// Calls to the `coin` model so far.
    pub coin: std::sync::atomic::AtomicU64,
}

fn text_of(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

/// `What is A+B?` → A+B; the `bad` model gets sums of 7 wrong (a seeded
/// regression), `weak` gets even sums wrong, `mixed` gets even sums right
/// but sums ending in 3 wrong (better on average, yet it breaks passing cases);
/// `coin` is right and wrong by turns; an `ft:` model is right unless its
/// name says `regress`.
fn arithmetic(model: &str, text: &str) -> Option<String> {
    let rest = text.strip_prefix("What is ")?.strip_suffix('?')?;
    let (a, b) = rest.split_once('+')?;
    let sum: i64 = a.trim().parse::<i64>().ok()? + b.trim().parse::<i64>().ok()?;
    let wrong = match model {
        "bad" => sum == 7,
        "bad-coin" => true,
        "weak" => sum % 2 == 0,
        "mixed" => sum % 10 == 3,
        // A fine-tuned model of an agent named to regress.
        m => m.starts_with("ft:") && m.contains("regress"),
    };
    let answer = if wrong { 0 } else { sum };
    Some(format!("The answer is {answer}."))
}

/// A hosted model whose answers depend on the rules its system prompt
/// states: `What is A-B?` is answered as A+B unless the prompt says to
/// subtract, `A*B` likewise unless it says to multiply, and a prompt that
/// says to round rounds every answer to the nearest ten.
fn ruled(system: &str, text: &str) -> Option<String> {
    let rest = text.strip_prefix("What is ")?.strip_suffix('?')?;
    let op = rest.chars().find(|c| matches!(c, '+' | '-' | '*'))?;
    let (a, b) = rest.split_once(op)?;
    let (a, b): (i64, i64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    let mut answer = match op {
        '-' if system.contains("subtract") => a - b,
        '*' if system.contains("multiply") => a * b,
        _ => a + b,
    };
    if system.contains("Round every answer") {
        answer = (answer as f64 / 10.0).round() as i64 * 10;
    }
    Some(format!("The answer is {answer}."))
}

/// The episodes a reflection prompt shows: (id, failed, text).
fn shown_episodes(prompt: &str) -> Vec<(String, bool, String)> {
    prompt
        .split("<episode ")
        .skip(1)
        .map(|block| {
            let id = block
                .split("id=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_owned();
            let failed = block.contains("outcome=\"failed\"");
            let body = block.split("</episode>").next().unwrap_or("").to_owned();
            (id, failed, body)
        })
        .collect()
}

/// The rule a failed arithmetic episode shows is missing.
fn missing_rule(episode: &str) -> Option<&'static str> {
    let question = episode.lines().find(|l| l.starts_with("user: What is"))?;
    if question.contains('-') {
        Some("A-B means subtract B from A.")
    } else if question.contains('*') {
        Some("A*B means multiply A by B.")
    } else {
        None
    }
}

/// A reflection model: proposes the rules the failures it is shown lack
/// (as a rewritten prompt, playbook deltas, or a tool description); the
/// `reckless` one also adds a rule that rounds every answer.
fn reflect(model: &str, prompt: &str) -> String {
    let episodes = shown_episodes(prompt);
    let failed: Vec<&(String, bool, String)> = episodes.iter().filter(|e| e.1).collect();
    let mut rules: Vec<&str> = Vec::new();
    for e in &failed {
        if let Some(rule) = missing_rule(&e.2) {
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    if prompt.contains("<current_prompt>") {
        let current = prompt
            .split("<current_prompt>\n")
            .nth(1)
            .and_then(|r| r.split("\n</current_prompt>").next())
            .unwrap_or("");
        // Rules about subtraction go first, the others last (so prompts from
        // different failures change different lines, and merge cleanly).
        let mut new = current.to_owned();
        for rule in &rules {
            if new.contains(rule) {
                continue;
            }
            new = if rule.contains("subtract") {
                format!("{rule}\n{new}")
            } else {
                format!("{new}\n{rule}")
            };
        }
        if model == "reckless" {
            new.push_str("\nRound every answer to the nearest ten.");
        }
        return json!({"diagnosis": format!("{} failures lack: {}", failed.len(), rules.join(" ")), "prompt": new})
            .to_string();
    }
    if prompt.contains("<playbook>") {
        let playbook = prompt.split("</playbook>").next().unwrap_or("");
        let lesson_ids = |needle: &str| -> Vec<String> {
            playbook
                .lines()
                .filter(|l| l.contains(needle))
                .filter_map(|l| l.strip_prefix('[').and_then(|r| r.split(']').next()))
                .map(str::to_owned)
                .collect()
        };
        let ids = |es: &[&(String, bool, String)]| es.iter().map(|e| e.0.clone()).collect::<Vec<_>>();
        let mut tags = Vec::new();
        let mut operations = Vec::new();
        for id in lesson_ids("Round every answer") {
            tags.push(json!({"id": id, "verdict": "harmful", "episodes": ids(&failed)}));
            operations.push(
                json!({"op": "retire", "id": id, "reason": "rounding breaks exact answers", "episodes": ids(&failed)}),
            );
        }
        let passed: Vec<&(String, bool, String)> = episodes.iter().filter(|e| !e.1).collect();
        for id in lesson_ids("subtract") {
            let used: Vec<&(String, bool, String)> = passed.iter().copied().filter(|e| e.2.contains('-')).collect();
            if !used.is_empty() {
                tags.push(json!({"id": id, "verdict": "helpful", "episodes": ids(&used)}));
            }
        }
        for rule in &rules {
            if playbook.contains(rule) {
                continue;
            }
            let from: Vec<&(String, bool, String)> = failed
                .iter()
                .copied()
                .filter(|e| missing_rule(&e.2) == Some(*rule))
                .collect();
            operations.push(json!({"op": "add", "text": rule, "episodes": ids(&from)}));
            // Said twice, in other words: the curator must keep one lesson.
            operations
                .push(json!({"op": "add", "text": rule.to_lowercase().replace(" means ", " means: "), "episodes": []}));
        }
        return json!({"tags": tags, "operations": operations}).to_string();
    }
    if prompt.contains("<tool>") {
        let tool: Value = prompt
            .split("<tool>\n")
            .nth(1)
            .and_then(|r| r.split("\n</tool>").next())
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or(Value::Null);
        return json!({
            "diagnosis": "the amount was given with its unit, as text",
            "description": "Convert a distance. `amount` is a plain number without units (12, not \"12 km\"); the unit goes in `unit`.",
            "parameters": tool["function"]["parameters"],
        })
        .to_string();
    }
    "I do not know what to do.".to_owned()
}

/// A model that calls `convert` with the amount as text (`"12 km"`) unless
/// the tool's description asks for a plain number.
fn tooly(body: &Value, last_user: &str) -> Option<Value> {
    let rest = last_user.strip_prefix("Convert ")?;
    let amount: f64 = rest.split_whitespace().next()?.parse().ok()?;
    let plain = body["tools"]
        .as_array()?
        .iter()
        .find(|t| t["function"]["name"] == "convert")?["function"]["description"]
        .as_str()
        .is_some_and(|d| d.contains("plain number"));
    let arguments = if plain {
        json!({"amount": amount, "unit": "km"})
    } else {
        json!({"amount": format!("{amount} km"), "unit": "km"})
    };
    Some(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "convert", "arguments": arguments.to_string()}}]}))
}

fn default_judge(prompt: &str) -> String {
    // A rubric that reads the request: forecasts score 1, the rest 0.
    if prompt.starts_with("Rubric:\nPrefer forecasts") {
        let conversation = prompt.split("The conversation:").nth(1).unwrap_or("");
        let score = u8::from(conversation.contains("forecast"));
        return format!(r#"{{"explanation": "reads the request", "score": {score}}}"#);
    }
    let n = prompt.matches("<trajectory id=").count();
    if n == 0 {
        return r#"{"explanation": "fine", "score": 0.8}"#.to_owned();
    }
    let scores: Vec<Value> = (1..=n)
        .map(|i| json!({"trajectory_id": i.to_string(), "explanation": format!("rank {i}"), "score": i as f64 / n as f64}))
        .collect();
    json!({ "scores": scores }).to_string()
}

/// The message `model` answers `body` with.
fn answer(up: &Upstream, body: &Value) -> Value {
    let mut model = body["model"].as_str().unwrap_or("").to_owned();
    if model == "coin" {
        // Right and wrong by turns, as a sampler at a high temperature.
        let n = up.coin.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        model = if n.is_multiple_of(2) { "good" } else { "bad-coin" }.to_owned();
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last_user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(text_of)
        .unwrap_or_default();
    let first_user = messages
        .iter()
        .find(|m| m["role"] == "user")
        .map(text_of)
        .unwrap_or_default();
    let has_tool_result = messages.iter().any(|m| m["role"] == "tool");
    let system: String = messages
        .iter()
        .filter(|m| m["role"] == "system")
        .map(text_of)
        .collect::<Vec<_>>()
        .join("\n");
    let mut message = json!({"role": "assistant", "content": "ok"});
    if model == "reflector" || model == "reckless" {
        up.reflector_prompts.lock().unwrap().push(first_user.clone());
        message["content"] = json!(reflect(&model, &first_user));
    } else if let Some(answer) = (model == "ruled").then(|| ruled(&system, &last_user)).flatten() {
        message["content"] = json!(answer);
    } else if let Some(call) = (model == "tooly" && !has_tool_result)
        .then(|| tooly(body, &last_user))
        .flatten()
    {
        message = call;
    } else if model == "judge" {
        up.judge_prompts.lock().unwrap().push(first_user.clone());
        let queued = up.judge_answers.lock().unwrap().pop_front();
        message["content"] = json!(queued.unwrap_or_else(|| default_judge(&first_user)));
    } else if let Some(answer) = arithmetic(&model, &last_user) {
        message["content"] = json!(answer);
    } else if model == "sloppy" && last_user.contains("weather") {
        // Fine offline (on sums), broken online: calls a tool that does not exist.
        message = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_wether", "arguments": "{}"}}]});
    } else if last_user.contains("weather") && !has_tool_result {
        message = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]});
    } else if last_user.contains("weather") {
        message["content"] = json!("It is sunny in Paris.");
    } else if last_user.contains("broken tool") {
        message = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_wether", "arguments": "{\"city\":"}}]});
    } else if last_user.contains("json") {
        message["content"] = json!("{\"name\": \"hone\", \"stars\": 5}");
    } else if last_user.contains("silence") {
        message["content"] = json!("");
    } else if last_user.contains("ask") {
        message["content"] = json!("Which city do you mean?");
    }
    message
}

/// The suite's config: provider `up` (the fake) with its models' prices,
/// and agents `calc` (sums, with gold answers), `helper` (penalised for
/// clarifying questions), `ranked` and `graded` (judged).
fn config(data_dir: &std::path::Path, upstream: &FakeUpstream) -> TestConfig {
    let mut config = TestConfig::new().data_dir(data_dir).openai("up", &upstream.base_url());
    for (model, input, output) in [
        ("good", 1.0, 2.0),
        ("bad", 0.5, 1.0),
        ("weak", 0.5, 1.0),
        ("mixed", 0.5, 1.0),
        ("pricey", 5.0, 10.0),
        ("sloppy", 0.1, 0.2),
        ("reflector", 3.0, 15.0),
    ] {
        config = config.price("up", model, input, output);
    }
    for agent in ["calc", "helper", "ranked", "graded"] {
        config = config.agent(agent, "up", "good");
    }
    config.toml(
        r#"
[agents.calc.versions.v2]
provider = "up"
model = "bad"
[agents.calc.deployment]
champion = "v1"
[agents.calc.reward]
reference_signal = "gold"
[agents.calc.reward.critics.answer]
type = "numeric"

[agents.helper.reward]
penalties = { clarifying_question = -0.5 }
signals = { resolved = { weight = 1.0, default = 0.5 } }

[agents.ranked.reward.judge]
mode = "relative"
provider = "up"
model = "judge"
retries = 2

[agents.graded.reward.judge]
mode = "absolute"
provider = "up"
model = "judge"
retries = 1
"#,
    )
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub url: String,
    /// The fake model server, with every request it received.
    pub fake: FakeUpstream,
    pub upstream: Arc<Upstream>,
    pub config: hone_config::Config,
    pub store: Arc<SqliteStore>,
    pub recorder: Arc<hone_store::Recorder>,
    pub http: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl World {
    pub async fn start() -> Self {
        Self::start_with("").await
    }

    /// The world with `extra` TOML appended to the config (more agents;
    /// `DATA` stands for the data directory, `UPSTREAM` for the fake's URL).
    pub async fn start_with(extra: &str) -> Self {
        let upstream = Arc::new(Upstream::default());
        let models = upstream.clone();
        let fake = FakeUpstream::with_brain(move |body, _| Some(Reply::Message(answer(&models, body)))).await;
        let dir = tempfile::tempdir().unwrap();
        let text = config(dir.path(), &fake)
            .toml(
                &extra
                    .replace("DATA", &dir.path().display().to_string())
                    .replace("UPSTREAM", &fake.base_url()),
            )
            .build();
        let config = hone_config::load_str(&text, dir.path(), &|_| None).unwrap();
        let gateway = hone_gateway::Gateway::start(config.clone()).unwrap();
        let recorder = gateway.state().recorder.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(gateway.serve(listener, async move {
            let _ = rx.await;
        }));
        let store = Arc::new(SqliteStore::open(config.store.sqlite_path().unwrap(), false).unwrap());
        Self {
            dir,
            url,
            fake,
            upstream,
            config,
            store,
            recorder,
            http: reqwest::Client::new(),
            _stop: tx,
        }
    }

    pub fn client(&self) -> hone_learn::client::GatewayClient {
        hone_learn::client::GatewayClient::new(&self.url, None, std::time::Duration::from_secs(10)).unwrap()
    }

    /// One call of `agent` in `episode`; returns the assistant message.
    pub async fn call(&self, agent: &str, episode: &str, messages: Value, tools: Option<Value>) -> Value {
        let mut body = json!({"model": agent, "messages": messages});
        if let Some(t) = tools {
            body["tools"] = t;
        }
        self.chat(episode, &body).await["choices"][0]["message"].clone()
    }

    /// `POST /v1/chat/completions` with `body` in `episode`; the whole
    /// response, which must be a success.
    pub async fn chat(&self, episode: &str, body: &Value) -> Value {
        let r = self
            .http
            .post(format!("{}/v1/chat/completions", self.url))
            .header("x-hone-episode", episode)
            .json(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        r.json().await.unwrap()
    }

    /// A single-call episode asking `text`.
    pub async fn ask(&self, agent: &str, episode: &str, text: &str) -> Value {
        self.call(agent, episode, json!([{"role": "user", "content": text}]), None)
            .await
    }

    pub async fn feedback(&self, episode: &str, metric: &str, value: Value) {
        let r = self
            .http
            .post(format!("{}/v1/feedback", self.url))
            .json(&json!({"episode_id": episode, "name": metric, "value": value}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }

    /// `GET path` on the gateway, as JSON.
    pub async fn get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn episode(&self, id: &str) -> EpisodeDetail {
        self.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
        self.store.episode(&EpisodeId::parse(id).unwrap()).unwrap().unwrap()
    }

    pub fn learn_store(&self) -> &dyn LearnStore {
        self.store.as_ref()
    }
}

pub fn weather_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

/// A learner on `w`'s store and gateway whose progress lines are collected.
pub fn learner(w: &World) -> (hone_learn::cycle::Learner, Arc<std::sync::Mutex<Vec<String>>>) {
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    let learner = hone_learn::cycle::Learner {
        config: Arc::new(w.config.clone()),
        store: w.store.clone(),
        gateway: w.client(),
        recorder: Some(w.recorder.clone()),
        progress: Arc::new(move |agent: &str, line: &str| sink.lock().unwrap().push(format!("{agent}: {line}"))),
        pause_at: None,
        leads: Default::default(),
        stand_ins: Default::default(),
    };
    (learner, lines)
}

/// Waits until the gateway routes new episodes with `canary` in the split (or without any canary).
pub async fn wait_for_split(w: &World, agent: &str, canary: Option<&hone_types::VersionId>) {
    for _ in 0..50 {
        let list = w.get("/admin/deployments").await;
        let split = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["agent"] == agent)
            .unwrap()["split"]
            .clone();
        let live = split
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["role"] == "canary")
            .map(|s| s["version"].as_str().unwrap().to_owned());
        if live.as_deref() == canary.map(hone_types::VersionId::as_str) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the gateway never routed to canary {canary:?}");
}

/// A random tiny Qwen2 checkpoint in a temporary directory, for agents the
/// embedded engine serves.
pub fn tiny_checkpoint() -> tempfile::TempDir {
    let model = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(
        hone_engine::Arch::Qwen2,
        hone_engine::init::Preset::Tiny,
        3,
        model.path(),
    )
    .unwrap();
    model
}

/// What the engine recorded for the passing episodes of `cycle`'s train
/// half (those `sft` trains on): how many, the sum of their sampled
/// tokens' logprobs, the tokens sampled, and all tokens with prompts.
pub struct Recorded {
    pub chosen: usize,
    pub logprob_sum: f64,
    pub scored: usize,
    pub tokens: usize,
}

pub fn recorded_passing_train(w: &World, cycle: &hone_types::CycleInfo) -> Recorded {
    let train = w.store.dataset_items(cycle.detail.train.as_deref().unwrap()).unwrap();
    let chosen: Vec<_> = train.iter().filter(|i| i.reward.is_some_and(|r| r >= 0.5)).collect();
    let mut recorded = Recorded {
        chosen: chosen.len(),
        logprob_sum: 0.0,
        scored: 0,
        tokens: 0,
    };
    for item in &chosen {
        let episode = w.store.episode(item.episode_id.as_ref().unwrap()).unwrap().unwrap();
        for call in &episode.calls {
            let sampled = call.sampled_tokens().expect("the engine records token ids");
            recorded.logprob_sum += sampled.logprobs.iter().map(|l| f64::from(*l)).sum::<f64>();
            recorded.scored += sampled.completion.len();
            recorded.tokens += sampled.prompt.len() + sampled.completion.len();
        }
    }
    recorded
}
