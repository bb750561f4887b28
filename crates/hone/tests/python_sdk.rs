//! Real client libraries drive the gateway: the official `openai` Python SDK
//! (chat completions: a plain call, a streaming call and a tool-calling round
//! trip), and through every other door the Responses API, the OpenAI Agents
//! SDK, the `anthropic` SDK and embeddings; the episodes are read back.
//! And the doors' fidelity as the SDKs see it: time to first token on every
//! door, token limits towards an OpenAI upstream, stop sequences, Retry-After.
//! `scripts/test` installs the SDKs; without them these tests fail and say so.

use crate::support::{client, config, run_python, FakeUpstream, Hone};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_round_trips() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let report = run_python("sdk_roundtrip.py", "openai", vec![("HONE_BASE_URL", hone.url("/v1"))]).await;

    for (key, calls) in [("plain", 1), ("stream", 1), ("tools", 2)] {
        let id = report[key].as_str().unwrap();
        let episode: Value = client()
            .get(hone.url(&format!("/v1/episodes/{id}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(episode["calls"].as_array().unwrap().len(), calls, "{key}");
        assert!(episode["calls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["outcome"] == "ok"));
    }
    let tools: Value = client()
        .get(hone.url(&format!("/v1/episodes/{}", report["tools"].as_str().unwrap())))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        tools["calls"][0]["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(tools["calls"][1]["request"]["messages"][2]["role"], "tool");
    assert_eq!(tools["signals"][0]["name"], "resolved");
}

async fn get(hone: &Hone, path: &str) -> Value {
    client().get(hone.url(path)).send().await.unwrap().json().await.unwrap()
}

async fn episode(hone: &Hone, id: &str) -> Value {
    get(hone, &format!("/v1/episodes/{id}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_door_round_trips_with_real_clients() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let report = run_python(
        "doors.py",
        "openai, agents, anthropic",
        vec![("HONE_URL", hone.url(""))],
    )
    .await;
    hone.wait_caught_up();

    // Responses: recorded as calls in chat-completions form, marked by door.
    let plain = episode(&hone, report["responses_plain"]["episode"].as_str().unwrap()).await;
    let call = &plain["calls"][0];
    assert_eq!(call["door"]["api"], "responses");
    assert_eq!(call["door"]["instructions"], "Answer briefly.");
    assert_eq!(call["request"]["messages"][0]["content"], "Answer briefly.");
    assert_eq!(
        call["response"]["choices"][0]["message"]["content"],
        "Echo: hello responses"
    );
    // The version's system prompt went upstream before the instructions.
    let sent = upstream.bodies("/v1/chat/completions");
    let first_sent = &sent[0]["messages"];
    assert_eq!(
        (first_sent[0]["content"].as_str(), first_sent[1]["content"].as_str()),
        (Some("You are terse."), Some("Answer briefly."))
    );

    // A chained tool round trip is one episode whose second call holds the history.
    let tools = episode(&hone, report["responses_tools"].as_str().unwrap()).await;
    let calls = tools["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    let history: Vec<&str> = calls[1]["request"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["user", "assistant", "tool"]);
    let first_id = calls[0]["id"].as_str().unwrap().replace('-', "");
    assert_eq!(calls[1]["door"]["previous_response_id"], format!("resp_{first_id}"));

    // The Agents SDK's responses are stored and readable.
    for id in report["agents_sdk"].as_array().unwrap() {
        let response = get(&hone, &format!("/v1/responses/{}", id.as_str().unwrap())).await;
        assert_eq!(response["status"], "completed", "{response}");
    }
    assert_eq!(
        report["agents_sdk"].as_array().unwrap().len(),
        2,
        "a tool call, then the answer"
    );
    // The SDK sends the first response's output items back as input: the
    // second call continues the first one's episode, with no header.
    let conn = rusqlite::Connection::open(hone.db_path()).unwrap();
    let episodes: Vec<String> = report["agents_sdk"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| {
            let hex = id.as_str().unwrap().strip_prefix("resp_").unwrap();
            let call = uuid::Uuid::parse_str(hex).unwrap().to_string();
            conn.query_row("SELECT episode_id FROM calls WHERE id = ?1", [call], |r| r.get(0))
                .unwrap()
        })
        .collect();
    assert_eq!(episodes[0], episodes[1], "one Agents SDK run is one episode");

    // Anthropic: recorded the same way.
    for (key, calls) in [("anthropic_plain", 1), ("anthropic_stream", 1), ("anthropic_tools", 2)] {
        let e = episode(&hone, report[key].as_str().unwrap()).await;
        let recorded = e["calls"].as_array().unwrap();
        assert_eq!(recorded.len(), calls, "{key}");
        assert!(
            recorded
                .iter()
                .all(|c| c["door"]["api"] == "messages" && c["outcome"] == "ok"),
            "{key}"
        );
    }
    let tools = episode(&hone, report["anthropic_tools"].as_str().unwrap()).await;
    let second = &tools["calls"][1]["request"]["messages"];
    assert_eq!(second[1]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(second[2]["role"], "tool");

    // Exactly the successful calls were recorded: 5 Responses, 2 from the
    // Agents SDK, 5 Anthropic; the bad inputs and embeddings wrote nothing.
    let metrics = hone.metrics().await;
    assert!(metrics.contains("hone_recorder_rows_journaled_total 12\n"), "{metrics}");
    assert!(metrics.contains("hone_embedding_requests_total 1\n"), "{metrics}");
    assert!(metrics.contains("hone_embedding_tokens_total 3\n"), "{metrics}");
    assert_eq!(upstream.bodies("/v1/embeddings")[0]["model"], "fake-embed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doors_fidelity_findings_hold_with_real_clients() {
    let upstream = FakeUpstream::start().await;
    // No retries, so the upstream's 429 reaches the client.
    let hone = Hone::start(&config(&upstream).replace("max_retries = 2", "max_retries = 0"));
    let report = run_python("fidelity.py", "openai, anthropic", vec![("HONE_URL", hone.url(""))]).await;
    hone.wait_caught_up();
    for id in ["sdk-ttft-chat", "sdk-ttft-responses", "sdk-ttft-messages"] {
        let e = episode(&hone, id).await;
        let ttft = e["calls"][0]["ttft_ms"].as_f64().unwrap_or_else(|| panic!("{id}: {e}"));
        assert!(ttft >= 200.0, "{id}: ttft_ms {ttft} is before the first token");
    }
    let sent = upstream.bodies("/v1/chat/completions");
    let capped = sent
        .iter()
        .find(|b| b.to_string().contains("sdk max tokens"))
        .expect("the Messages call reached the upstream");
    assert_eq!(capped["max_completion_tokens"], 64, "{capped}");
    assert!(capped.get("max_tokens").is_none(), "{capped}");
    assert_eq!(report["stop"]["reason"], "stop_sequence", "{report}");
    assert_eq!(report["stop"]["sequence"], "END", "{report}");
    assert!(
        report["retry_after"].as_str().is_some_and(|s| !s.is_empty()),
        "{report}"
    );
    // Counted upstream, for the request as the agent's version sends it.
    assert_eq!(report["counted"], 6, "Be brief. + count these four words: {report}");
    let counted = &upstream.bodies("/v1/messages/count_tokens")[0];
    assert!(counted.get("max_tokens").is_none(), "{counted}");
    assert_eq!(counted["model"], "claude-fake");
    assert!(
        report["uncounted"].to_string().contains("no token-counting endpoint"),
        "{report}"
    );
}
