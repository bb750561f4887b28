//! The `story` agent used by the learning tests of the real binary: an
//! upstream that adds numbers (`weak` gets even sums wrong, `good` and
//! `pricey` never do) and a config whose `model` optimiser can find the
//! better model, proven against gold answers given as feedback.

use hone_test_support::{FakeUpstream, Reply, TestConfig};
use serde_json::{json, Value};

/// `What is A+B?`: `weak` gets even sums wrong, the others are right.
/// `Use the tool: A+B` first calls `add`, then answers from its result.
fn answer(body: &Value) -> Reply {
    let model = body["model"].as_str().unwrap_or("");
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
    if text.starts_with("Use the tool") && last["role"] == "user" {
        return Reply::Message(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_add", "type": "function",
            "function": {"name": "add", "arguments": json!({"a": numbers[0], "b": numbers[1]}).to_string()}}]}),
        );
    }
    let answer = if model == "weak" && sum % 2 == 0 { 0 } else { sum };
    Reply::text(format!("The answer is {answer}."))
}

/// The story's upstream on loopback.
pub async fn upstream() -> FakeUpstream {
    FakeUpstream::with_brain(|body, _| Some(answer(body))).await
}

/// The config: `gateway` goes first (a `[gateway]` table or nothing) and
/// `deployment` into `[agents.story.deployment]` (a policy, or nothing for
/// manual approval).
pub fn config(upstream: &FakeUpstream, gateway: &str, deployment: &str) -> String {
    TestConfig::new()
        .toml(gateway)
        .openai("up", &upstream.base_url())
        .price("up", "weak", 0.5, 1.0)
        .price("up", "good", 1.0, 2.0)
        .price("up", "pricey", 5.0, 10.0)
        .agent("story", "up", "weak")
        .toml(&format!(
            r#"[agents.story]
description = "Adds two numbers."
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
        ))
        .build()
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
