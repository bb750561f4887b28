//! The `story` agent used by the learning tests of the real binary: an
//! upstream that adds numbers (`weak` gets even sums wrong, `good` and
//! `pricey` never do) and a config whose `model` optimiser can find the
//! better model, proven against gold answers given as feedback.

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// `What is A+B?`: `weak` gets even sums wrong, the others are right.
/// `Use the tool: A+B` first calls `add`, then answers from its result.
pub async fn chat(Json(body): Json<Value>) -> Json<Value> {
    let model = body["model"].as_str().unwrap_or("").to_owned();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let text = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let numbers: Vec<i64> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let sum: i64 = numbers.iter().sum();
    let message = if text.starts_with("Use the tool") && last["role"] == "user" {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_add", "type": "function",
            "function": {"name": "add", "arguments": json!({"a": numbers[0], "b": numbers[1]}).to_string()}}]})
    } else {
        let answer = if model == "weak" && sum % 2 == 0 { 0 } else { sum };
        json!({"role": "assistant", "content": format!("The answer is {answer}.")})
    };
    let finish = if message["tool_calls"].is_null() {
        "stop"
    } else {
        "tool_calls"
    };
    Json(json!({
        "id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    }))
}

/// Starts the upstream on loopback; returns its base URL.
pub async fn upstream() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, Router::new().route("/v1/chat/completions", post(chat))).await });
    url
}

/// The config: `gateway` goes first (a `[gateway]` table or nothing) and
/// `deployment` into `[agents.story.deployment]` (a policy, or nothing for
/// manual approval).
pub fn config(upstream: &str, gateway: &str, deployment: &str) -> String {
    format!(
        r#"{gateway}
[providers.up]
type = "openai"
base_url = "{upstream}/v1"
max_retries = 0
[providers.up.prices."weak"]
input_per_mtok = 0.5
output_per_mtok = 1.0
[providers.up.prices."good"]
input_per_mtok = 1.0
output_per_mtok = 2.0
[providers.up.prices."pricey"]
input_per_mtok = 5.0
output_per_mtok = 10.0

[agents.story]
description = "Adds two numbers."
[agents.story.versions.v1]
provider = "up"
model = "weak"
[agents.story.deployment]
champion = "v1"
{deployment}
[agents.story.reward]
reference_signal = "gold"
[agents.story.reward.critics.answer]
type = "numeric"
[agents.story.learn]
optimisers = ["model"]
dataset_size = 48
[agents.story.learn.model]
models = [{{ provider = "up", model = "good" }}, {{ provider = "up", model = "pricey" }}]
"#
    )
}

/// Records `n` episodes `s-0` … through `hone` (`What is A+B?`), each with
/// its gold answer as feedback.
pub async fn record(hone: &super::Hone, n: i64) {
    let http = reqwest::Client::new();
    for i in 0..n {
        let (a, b) = (10 + i, i % 5 + 1);
        let episode = format!("s-{i}");
        let r = http
            .post(hone.url("/v1/chat/completions"))
            .header("x-hone-episode", &episode)
            .json(&json!({"model": "story", "messages": [{"role": "user", "content": format!("What is {a}+{b}?")}]}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        let r = http
            .post(hone.url("/v1/feedback"))
            .json(&json!({"episode_id": episode, "name": "gold", "value": a + b}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
}
