//! Bad input: every case gets a clear OpenAI-style error with the right
//! status, the upstream is not called, and nothing is written.

use crate::support::{chat, client, config, FakeUpstream, Hone};
use serde_json::{json, Value};

async fn expect_error(response: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "for code {code}");
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    assert!(body["error"]["type"].is_string());
    body
}

fn count(hone: &Hone, table: &str) -> i64 {
    hone.wait_caught_up();
    let conn = rusqlite::Connection::open(hone.db_path()).unwrap();
    conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn malformed_requests_are_refused_clearly_and_change_nothing() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&format!("[gateway]\nmax_body_bytes = 4096\n{}", config(&upstream)));
    let post = |body: Vec<u8>| {
        client()
            .post(hone.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let e = expect_error(
        post(b"{\"model\": \"assistant\", ".to_vec()).await.unwrap(),
        400,
        "invalid_request",
    )
    .await;
    assert!(e["error"]["message"].as_str().unwrap().contains("not valid JSON"));
    let e = expect_error(
        post(br#"{"model":"assistant","messages":[{"role":"user","content":"x"}],"temperature":"warm"}"#.to_vec())
            .await
            .unwrap(),
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(e["error"]["param"], "temperature");
    let e = expect_error(
        post(br#"{"model":"assistant","messages":"hi"}"#.to_vec())
            .await
            .unwrap(),
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(e["error"]["param"], "messages");
    let e = expect_error(
        post(br#"{"model":"assistant","messages":[{"role":"user","content":"x"}],"n":0}"#.to_vec())
            .await
            .unwrap(),
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(e["error"]["param"], "n");
    expect_error(
        post(br#"{"model":"assistant","messages":[]}"#.to_vec()).await.unwrap(),
        400,
        "invalid_request",
    )
    .await;
    expect_error(post(b"[1,2,3]".to_vec()).await.unwrap(), 400, "invalid_request").await;
    let e = expect_error(
        post(b"{\"model\":\"assistant\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}".to_vec())
            .await
            .unwrap(),
        400,
        "invalid_request",
    )
    .await;
    assert!(e["error"]["message"].as_str().unwrap().contains("UTF-8"));
    let e = expect_error(
        post(serde_json::to_vec(&chat("nobody", "x")).unwrap()).await.unwrap(),
        404,
        "model_not_found",
    )
    .await;
    assert!(e["error"]["message"].as_str().unwrap().contains("`assistant`"));
    let big = serde_json::to_vec(&chat("assistant", &"x".repeat(5000))).unwrap();
    let e = expect_error(post(big).await.unwrap(), 413, "body_too_large").await;
    assert!(e["error"]["message"].as_str().unwrap().contains("4096"));
    // The same oversized body without a Content-Length (chunked) is refused too.
    let chunks = futures::stream::iter((0..10).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1000])));
    let r = client()
        .post(hone.url("/v1/chat/completions"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    expect_error(r, 413, "body_too_large").await;

    let with_header = |name: &str, value: &str| {
        client()
            .post(hone.url("/v1/chat/completions"))
            .header(name, value)
            .json(&chat("assistant", "x"))
            .send()
    };
    expect_error(
        with_header("X-Hone-Episode", "has spaces in it").await.unwrap(),
        400,
        "invalid_episode_id",
    )
    .await;
    expect_error(
        with_header("X-Hone-Version", "ffffffffffffffff").await.unwrap(),
        404,
        "version_not_found",
    )
    .await;

    // Unknown ids and bad feedback.
    expect_error(
        client()
            .get(hone.url("/v1/episodes/no-such-episode"))
            .send()
            .await
            .unwrap(),
        404,
        "episode_not_found",
    )
    .await;
    expect_error(
        client().get(hone.url("/v1/episodes?limit=1000")).send().await.unwrap(),
        400,
        "invalid_limit",
    )
    .await;
    expect_error(
        client()
            .get(hone.url("/v1/episodes?since=last-week"))
            .send()
            .await
            .unwrap(),
        400,
        "invalid_time",
    )
    .await;
    let feedback = |body: Value| client().post(hone.url("/v1/feedback")).json(&body).send();
    expect_error(
        feedback(json!({"episode_id": "ghost", "name": "resolved", "value": true}))
            .await
            .unwrap(),
        404,
        "episode_not_found",
    )
    .await;
    expect_error(
        feedback(json!({"call_id": uuid::Uuid::now_v7(), "name": "rating", "value": 1}))
            .await
            .unwrap(),
        404,
        "call_not_found",
    )
    .await;
    expect_error(
        feedback(json!({"call_id": "not-a-uuid", "name": "rating", "value": 1}))
            .await
            .unwrap(),
        400,
        "invalid_call_id",
    )
    .await;
    expect_error(
        feedback(json!({"name": "resolved", "value": true})).await.unwrap(),
        400,
        "target_required",
    )
    .await;
    expect_error(
        feedback(json!({"episode_id": "x", "name": "resolved", "value": true, "colour": 1}))
            .await
            .unwrap(),
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        client().get(hone.url("/v1/nothing-here")).send().await.unwrap(),
        404,
        "unknown_route",
    )
    .await;
    expect_error(
        client().delete(hone.url("/v1/chat/completions")).send().await.unwrap(),
        405,
        "method_not_allowed",
    )
    .await;

    // Now a real episode: feedback of the wrong type or level is refused and writes nothing.
    let r = client()
        .post(hone.url("/v1/chat/completions"))
        .json(&chat("assistant", "ok"))
        .send()
        .await
        .unwrap();
    let episode = r.headers()["x-hone-episode"].to_str().unwrap().to_owned();
    let call = r.headers()["x-hone-call"].to_str().unwrap().to_owned();
    let e = expect_error(
        feedback(json!({"episode_id": episode, "name": "resolved", "value": "yes"}))
            .await
            .unwrap(),
        400,
        "invalid_value",
    )
    .await;
    assert!(e["error"]["message"].as_str().unwrap().contains("a boolean"));
    expect_error(
        feedback(json!({"episode_id": episode, "name": "rating", "value": 0.5}))
            .await
            .unwrap(),
        400,
        "call_id_required",
    )
    .await;
    expect_error(
        feedback(json!({"call_id": call, "name": "resolved", "value": true}))
            .await
            .unwrap(),
        400,
        "episode_id_required",
    )
    .await;
    expect_error(
        feedback(json!({"episode_id": episode, "name": "x", "value": [1, 2]}))
            .await
            .unwrap(),
        400,
        "invalid_value",
    )
    .await;
    expect_error(
        feedback(json!({"episode_id": episode, "name": "x", "value": true, "source": "oracle"}))
            .await
            .unwrap(),
        400,
        "invalid_request",
    )
    .await;

    assert_eq!(
        upstream.bodies("/v1/chat/completions").len(),
        1,
        "only the valid call reached the upstream"
    );
    assert_eq!(count(&hone, "calls"), 1);
    assert_eq!(count(&hone, "signals"), 0);
}

#[tokio::test]
async fn keys_are_required_scoped_and_separate_from_the_admin_token() {
    let upstream = FakeUpstream::start().await;
    let key_hash = hone_key_hash("hone-test-key");
    let gateway = format!(
        "[gateway]\nadmin_token_env = \"HONE_TEST_ADMIN\"\napi_keys = [{{ name = \"claude-only\", sha256 = \"{key_hash}\", agents = [\"claude\"] }}]\n"
    );
    let dir = tempfile::tempdir().unwrap().keep();
    let hone = Hone::start_in(
        &dir,
        &format!("{gateway}{}", config(&upstream)),
        &[("HONE_TEST_ADMIN", "admin-secret")],
    );
    let call = |key: Option<&str>, model: &str| {
        let request = client().post(hone.url("/v1/chat/completions")).json(&chat(model, "hi"));
        match key {
            Some(key) => request.bearer_auth(key).send(),
            None => request.send(),
        }
    };
    expect_error(call(None, "claude").await.unwrap(), 401, "missing_api_key").await;
    expect_error(call(Some("wrong"), "claude").await.unwrap(), 401, "invalid_api_key").await;
    expect_error(
        call(Some("hone-test-key"), "assistant").await.unwrap(),
        404,
        "model_not_found",
    )
    .await;
    let ok = call(Some("hone-test-key"), "claude").await.unwrap();
    assert_eq!(ok.status(), 200);
    let episode = ok.headers()["x-hone-episode"].to_str().unwrap().to_owned();
    // The key reads its own agent's episodes; admin endpoints need the admin token.
    let r = client()
        .get(hone.url(&format!("/v1/episodes/{episode}")))
        .bearer_auth("hone-test-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let list: Value = client()
        .get(hone.url("/v1/episodes"))
        .bearer_auth("hone-test-key")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(list["data"].as_array().unwrap().iter().all(|e| e["agent"] == "claude"));
    expect_error(
        client()
            .get(hone.url("/v1/episodes?agent=assistant"))
            .bearer_auth("hone-test-key")
            .send()
            .await
            .unwrap(),
        403,
        "agent_not_allowed",
    )
    .await;
    expect_error(
        client()
            .get(hone.url("/admin/versions"))
            .bearer_auth("hone-test-key")
            .send()
            .await
            .unwrap(),
        401,
        "invalid_admin_token",
    )
    .await;
    let r = client()
        .get(hone.url("/admin/deployments"))
        .bearer_auth("admin-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let models: Value = client()
        .get(hone.url("/v1/models"))
        .bearer_auth("hone-test-key")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    assert!(!hone.log().contains("hone-test-key") && !hone.log().contains("admin-secret"));
}

fn hone_key_hash(key: &str) -> String {
    let output = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut child = output;
    child.stdin.take().unwrap().write_all(key.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// An Anthropic-style error: `{"type":"error","error":{"type","message"}}`.
async fn expect_anthropic_error(response: reqwest::Response, status: u16, kind: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "for {kind}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    body
}

#[tokio::test]
async fn the_other_doors_refuse_bad_input_in_their_own_format_and_change_nothing() {
    let upstream = FakeUpstream::start().await;
    let all = hone_key_hash("key-all");
    let claude_only = hone_key_hash("key-claude");
    let gateway = format!(
        "[gateway]\nmax_body_bytes = 4096\napi_keys = [{{ name = \"all\", sha256 = \"{all}\", agents = [\"*\"] }}, {{ name = \"claude-only\", sha256 = \"{claude_only}\", agents = [\"claude\"] }}]\n"
    );
    let hone = Hone::start(&format!("{gateway}{}", config(&upstream)));
    let post = |path: &str, key: &str, body: Vec<u8>| {
        client()
            .post(hone.url(path))
            .header("content-type", "application/json")
            .header("x-api-key", key)
            .body(body)
            .send()
    };

    // The Responses API answers in OpenAI's format.
    let e = expect_error(
        post("/v1/responses", "key-all", b"{\"model\":".to_vec()).await.unwrap(),
        400,
        "invalid_json",
    )
    .await;
    assert!(e["error"]["message"].as_str().unwrap().contains("not valid JSON"));
    let e = expect_error(
        post(
            "/v1/responses",
            "key-all",
            br#"{"model":"assistant","input":"x","tools":[{"type":"file_search"}]}"#.to_vec(),
        )
        .await
        .unwrap(),
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(e["error"]["param"], "tools[0].type");
    let e = expect_error(
        post(
            "/v1/responses",
            "key-all",
            br#"{"model":"assistant","input":[{"role":"wizard","content":"x"}]}"#.to_vec(),
        )
        .await
        .unwrap(),
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(e["error"]["param"], "input[0]");
    expect_error(
        post(
            "/v1/responses",
            "key-all",
            br#"{"model":"nobody","input":"x"}"#.to_vec(),
        )
        .await
        .unwrap(),
        404,
        "model_not_found",
    )
    .await;
    expect_error(
        post("/v1/responses", "key-all", vec![b' '; 5000]).await.unwrap(),
        413,
        "body_too_large",
    )
    .await;
    expect_error(
        post(
            "/v1/responses",
            "key-claude",
            br#"{"model":"assistant","input":"x"}"#.to_vec(),
        )
        .await
        .unwrap(),
        404,
        "model_not_found",
    )
    .await;

    // A response of one agent is invisible through another agent's key,
    // read back or chained to.
    let made: Value = post(
        "/v1/responses",
        "key-all",
        br#"{"model":"assistant","input":"secret plans"}"#.to_vec(),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = made["id"].as_str().unwrap();
    let read = |key: &'static str, id: String| {
        client()
            .get(hone.url(&format!("/v1/responses/{id}")))
            .bearer_auth(key)
            .send()
    };
    assert_eq!(read("key-all", id.to_owned()).await.unwrap().status(), 200);
    expect_error(
        read("key-claude", id.to_owned()).await.unwrap(),
        404,
        "response_not_found",
    )
    .await;
    expect_error(
        read("key-all", "resp_nonsense".into()).await.unwrap(),
        404,
        "response_not_found",
    )
    .await;
    let chained = format!(r#"{{"model":"claude","input":"more","previous_response_id":"{id}"}}"#);
    expect_error(
        post("/v1/responses", "key-claude", chained.into_bytes()).await.unwrap(),
        404,
        "previous_response_not_found",
    )
    .await;

    // The Messages API answers in Anthropic's format.
    expect_anthropic_error(
        post("/v1/messages", "key-all", b"not json".to_vec()).await.unwrap(),
        400,
        "invalid_request_error",
    )
    .await;
    let e = expect_anthropic_error(
        post(
            "/v1/messages",
            "key-all",
            br#"{"model":"assistant","messages":[{"role":"user","content":"x"}]}"#.to_vec(),
        )
        .await
        .unwrap(),
        400,
        "invalid_request_error",
    )
    .await;
    assert!(e["error"]["message"].as_str().unwrap().contains("max_tokens"), "{e}");
    expect_anthropic_error(
        post(
            "/v1/messages",
            "key-all",
            br#"{"model":"assistant","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document"}]}]}"#
                .to_vec(),
        )
        .await
        .unwrap(),
        400,
        "invalid_request_error",
    )
    .await;
    expect_anthropic_error(
        post(
            "/v1/messages",
            "key-all",
            br#"{"model":"nobody","max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#.to_vec(),
        )
        .await
        .unwrap(),
        404,
        "not_found_error",
    )
    .await;
    expect_anthropic_error(
        post(
            "/v1/messages",
            "wrong-key",
            br#"{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#.to_vec(),
        )
        .await
        .unwrap(),
        401,
        "authentication_error",
    )
    .await;
    expect_anthropic_error(
        post(
            "/v1/messages",
            "key-claude",
            br#"{"model":"assistant","max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#.to_vec(),
        )
        .await
        .unwrap(),
        404,
        "not_found_error",
    )
    .await;

    // Embeddings.
    let e = expect_error(
        post(
            "/v1/embeddings",
            "key-all",
            br#"{"model":"assistant/e","input":[1.5]}"#.to_vec(),
        )
        .await
        .unwrap(),
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(e["error"]["param"], "input");
    expect_error(
        post(
            "/v1/embeddings",
            "key-all",
            br#"{"model":"assistant","input":"x"}"#.to_vec(),
        )
        .await
        .unwrap(),
        400,
        "no_embeddings_route",
    )
    .await;
    expect_error(
        post(
            "/v1/embeddings",
            "key-all",
            br#"{"model":"claude/e","input":"x"}"#.to_vec(),
        )
        .await
        .unwrap(),
        400,
        "embeddings_unsupported",
    )
    .await;
    expect_error(
        post(
            "/v1/embeddings",
            "key-claude",
            br#"{"model":"assistant/e","input":"x"}"#.to_vec(),
        )
        .await
        .unwrap(),
        404,
        "model_not_found",
    )
    .await;

    assert_eq!(
        upstream.bodies("/v1/chat/completions").len(),
        1,
        "only the valid call went upstream"
    );
    assert!(upstream.bodies("/v1/messages").is_empty());
    assert!(upstream.bodies("/v1/embeddings").is_empty());
    assert_eq!(count(&hone, "calls"), 1);
}
