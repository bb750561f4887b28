//! OpenTelemetry: the OpenTelemetry Python SDK's OTLP/HTTP exporter sends
//! GenAI spans to `POST /v1/traces` and they become episodes (trace =
//! episode, so feedback by trace id works); an OTLP JSON export reads the
//! same; malformed payloads get OTLP's error body and write nothing.

use crate::support::{client, config, run_python, FakeUpstream, Hone};
use serde_json::{json, Value};

async fn episode(hone: &Hone, id: &str) -> (u16, Value) {
    let response = client()
        .get(hone.url(&format!("/v1/episodes/{id}")))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genai_spans_from_the_python_sdk_become_episodes() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let traces = run_python(
        "otel_traces.py",
        "opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http",
        vec![("HONE_URL", hone.url(""))],
    )
    .await;
    hone.wait_caught_up();

    // The agent turn: two model calls (the tool and agent spans are not calls).
    let (status, turn) = episode(&hone, traces["semconv"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{turn}");
    let calls = turn["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{turn}");
    let first = &calls[0];
    assert_eq!(first["door"]["api"], "traces");
    assert_eq!(
        (first["provider"].as_str(), first["model"].as_str()),
        (Some("openai"), Some("gpt-4o-mini"))
    );
    assert_eq!(
        first["request"]["messages"][0]["content"],
        "You answer weather questions."
    );
    assert_eq!(first["request"]["temperature"], 0.3);
    assert_eq!(
        first["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        r#"{"city":"Paris"}"#
    );
    assert_eq!(first["usage"]["prompt_tokens"], 40);
    let second = &calls[1];
    let roles: Vec<&str> = second["request"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(
        second["response"]["choices"][0]["message"]["content"],
        "It is sunny and 21C in Paris."
    );
    assert_eq!(second["outcome"], "ok");

    // OpenLLMetry's form reads the same way.
    let (_, single) = episode(&hone, traces["openllmetry"].as_str().unwrap()).await;
    assert_eq!(single["calls"][0]["request"]["messages"][0]["content"], "Say hi");
    assert_eq!(single["calls"][0]["response"]["choices"][0]["message"]["content"], "hi");

    // An unknown agent's span was refused, not recorded.
    let (status, _) = episode(&hone, traces["unknown"].as_str().unwrap()).await;
    assert_eq!(status, 404);

    // Feedback by trace id reaches the episode.
    let feedback = client()
        .post(hone.url("/v1/feedback"))
        .json(&json!({"episode_id": traces["semconv"], "name": "resolved", "value": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(feedback.status(), 200);
    hone.wait_caught_up();
    let (_, turn) = episode(&hone, traces["semconv"].as_str().unwrap()).await;
    assert_eq!(turn["signals"][0]["name"], "resolved", "{turn}");
}

fn json_export(trace: &str, span: &str, agent: &str) -> Value {
    json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": agent}}]},
        "scopeSpans": [{"scope": {"name": "agent"}, "spans": [{
            "traceId": trace, "spanId": span, "name": "chat", "kind": 3,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000500000000",
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
                {"key": "gen_ai.input.messages", "value": {"stringValue": "[{\"role\":\"user\",\"parts\":[{\"type\":\"text\",\"content\":\"ping\"}]}]"}},
                {"key": "gen_ai.output.messages", "value": {"stringValue": "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"pong\"}],\"finish_reason\":\"stop\"}]"}},
                {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "3"}}
            ],
            "status": {}
        }]}]
    }]})
}

#[tokio::test]
async fn an_otlp_json_export_is_read_once_and_bad_payloads_change_nothing() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let post = |content_type: &'static str, body: Vec<u8>| {
        client()
            .post(hone.url("/v1/traces"))
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let trace = "5b8efff798038103d269b633813fc60c";
    let export = serde_json::to_vec(&json_export(trace, "eee19b7ec3c1b174", "assistant")).unwrap();
    for _ in 0..2 {
        let response = post("application/json", export.clone()).await.unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert!(body.get("partialSuccess").is_none_or(Value::is_null), "{body}");
    }
    hone.wait_caught_up();
    let (_, e) = episode(&hone, trace).await;
    assert_eq!(
        e["calls"].as_array().unwrap().len(),
        1,
        "sent twice, recorded once: {e}"
    );
    assert_eq!(e["calls"][0]["response"]["choices"][0]["message"]["content"], "pong");
    assert_eq!(e["calls"][0]["latency_ms"], 500.0);

    // Refused spans are named in an OTLP partial success.
    let other = serde_json::to_vec(&json_export(
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
        "stranger",
    ))
    .unwrap();
    let body: Value = post("application/json", other).await.unwrap().json().await.unwrap();
    assert_eq!(body["partialSuccess"]["rejectedSpans"], 1, "{body}");
    assert!(body["partialSuccess"]["errorMessage"]
        .as_str()
        .unwrap()
        .contains("`stranger` is not an agent of this gateway for this key"));

    // Malformed payloads: 400 with a google.rpc.Status body in the request's encoding.
    let response = post("application/json", b"{\"resourceSpans\": 5}".to_vec())
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["code"], 3);
    assert!(status["message"].as_str().unwrap().contains("OTLP JSON"), "{status}");
    let response = post("application/x-protobuf", vec![0xff, 0xff, 0xff]).await.unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(response.headers()["content-type"], "application/x-protobuf");
    let response = post("text/plain", b"hello".to_vec()).await.unwrap();
    assert_eq!(response.status(), 415);

    hone.wait_caught_up();
    let conn = rusqlite::Connection::open(hone.db_path()).unwrap();
    let calls: i64 = conn.query_row("SELECT COUNT(*) FROM calls", [], |r| r.get(0)).unwrap();
    assert_eq!(calls, 1, "only the one good span was recorded");
}

/// A collector on loopback: keeps the spans of every OTLP/HTTP protobuf export.
async fn collector() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_proto::tonic::trace::v1::Span>>>,
) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;
    let spans = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: bytes::Bytes| {
            let kept = kept.clone();
            async move {
                let export = ExportTraceServiceRequest::decode(body).unwrap();
                for resource in export.resource_spans {
                    for scope in resource.scope_spans {
                        kept.lock().unwrap().extend(scope.spans);
                    }
                }
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, spans)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hones_own_spans_go_out_over_otlp_when_configured() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    let (collector_url, spans) = collector().await;
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap().keep();
    let hone = Hone::start_in(
        &dir,
        &config(&upstream),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector_url.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let response = client()
        .post(hone.url("/v1/chat/completions"))
        .header("X-Hone-Episode", "traced-1")
        .json(&crate::support::chat("assistant", "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut found = None;
    for _ in 0..100 {
        if let Some(span) = spans
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.name == "chat assistant")
            .cloned()
        {
            found = Some(span);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let span = found.unwrap_or_else(|| {
        let names: Vec<String> = spans.lock().unwrap().iter().map(|s| s.name.clone()).collect();
        panic!(
            "no `chat assistant` span reached the collector (got {names:?}); log:\n{}",
            hone.log()
        )
    });
    let attribute = |key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.clone())
    };
    assert_eq!(
        attribute("gen_ai.operation.name"),
        Some(Any::StringValue("chat".into()))
    );
    assert_eq!(
        attribute("gen_ai.request.model"),
        Some(Any::StringValue("assistant".into()))
    );
    assert_eq!(
        attribute("gen_ai.response.model"),
        Some(Any::StringValue("fake-model".into()))
    );
    assert_eq!(attribute("gen_ai.usage.input_tokens"), Some(Any::IntValue(11)));
    assert_eq!(attribute("hone.episode_id"), Some(Any::StringValue("traced-1".into())));
    assert_eq!(
        attribute("hone.door"),
        Some(Any::StringValue("chat_completions".into()))
    );
    assert_eq!(attribute("hone.outcome"), Some(Any::StringValue("ok".into())));
    assert_eq!(
        attribute("gen_ai.provider.name"),
        Some(Any::StringValue("openai".into()))
    );
    assert_eq!(attribute("hone.provider"), Some(Any::StringValue("up".into())));
}
