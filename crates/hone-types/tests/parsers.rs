//! Property tests for the parsers at hone's edge.

use hone_types::openai::{ChatCompletionChunk, ChatCompletionRequest};
use hone_types::stream::StreamAccumulator;
use proptest::prelude::*;
use serde_json::{json, Value};

fn message() -> impl Strategy<Value = Value> {
    prop_oneof![
        ("\\PC{0,40}").prop_map(|t| json!({"role": "user", "content": t})),
        ("\\PC{0,40}").prop_map(|t| json!({"role": "system", "content": t})),
        ("\\PC{0,20}", "\\PC{0,20}").prop_map(|(a, b)| json!({"role": "user", "content": [{"type": "text", "text": a}, {"type": "image_url", "image_url": {"url": b}}]})),
        ("[a-z_]{1,12}", "\\PC{0,30}").prop_map(|(name, args)| json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}]})),
        ("\\PC{0,30}").prop_map(|t| json!({"role": "tool", "tool_call_id": "c1", "content": t})),
    ]
}

fn request() -> impl Strategy<Value = Value> {
    (
        "[a-z][a-z0-9-]{0,15}",
        prop::collection::vec(message(), 1..6),
        prop::option::of(0.0f64..=2.0),
        prop::option::of(1u32..=16),
        prop::option::of(any::<bool>()),
        prop::option::of("\\PC{0,10}"),
    )
        .prop_map(|(model, messages, temperature, n, stream, unknown)| {
            let mut r = json!({"model": model, "messages": messages});
            if let Some(t) = temperature {
                r["temperature"] = json!(t);
            }
            if let Some(n) = n {
                r["n"] = json!(n);
            }
            if let Some(s) = stream {
                r["stream"] = json!(s);
            }
            if let Some(u) = unknown {
                r["x_vendor_option"] = json!(u);
            }
            r
        })
}

fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(512) })]

    /// Any bytes at all: an error or a request, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = ChatCompletionRequest::from_json(&bytes);
    }

    /// JSON-shaped noise around a valid request: still no panic, and any
    /// error names a reason.
    #[test]
    fn mutated_requests_fail_cleanly(base in request(), key in "[a-z_]{1,12}", value in prop_oneof![Just(json!(null)), Just(json!(-1)), Just(json!("x")), Just(json!([])), Just(json!({}))]) {
        let mut r = base;
        r[key] = value;
        if let Err(e) = ChatCompletionRequest::from_json(r.to_string().as_bytes()) {
            prop_assert!(!e.message.is_empty());
        }
    }

    /// Valid requests parse, and re-serialising keeps every field (unknown
    /// ones too); `null` and absent are the same in this API.
    #[test]
    fn valid_requests_round_trip(r in request()) {
        let parsed = ChatCompletionRequest::from_json(r.to_string().as_bytes()).unwrap();
        let back: Value = serde_json::to_value(&parsed).unwrap();
        prop_assert_eq!(without_nulls(back), without_nulls(r));
    }

    /// Tool-call names and arguments split into any pieces, across any number
    /// of calls, reassemble exactly.
    #[test]
    fn tool_call_deltas_reassemble(
        calls in prop::collection::vec(("[a-z_]{1,12}", "\\PC{0,60}"), 1..4),
        cuts in prop::collection::vec(1usize..8, 1..20),
    ) {
        let mut accumulator = StreamAccumulator::new();
        for (index, (name, arguments)) in calls.iter().enumerate() {
            let first = json!({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, "id": format!("call_{index}"), "type": "function", "function": {"name": name, "arguments": ""}}]}}]});
            accumulator.push(&serde_json::from_value::<ChatCompletionChunk>(first).unwrap());
            let chars: Vec<char> = arguments.chars().collect();
            let mut at = 0;
            let mut cut = cuts.iter().cycle();
            while at < chars.len() {
                let end = (at + cut.next().unwrap()).min(chars.len());
                let piece: String = chars[at..end].iter().collect();
                let chunk = json!({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}}]});
                accumulator.push(&serde_json::from_value::<ChatCompletionChunk>(chunk).unwrap());
                at = end;
            }
        }
        let response = accumulator.response();
        let got = response.choices[0].message.tool_calls();
        prop_assert_eq!(got.len(), calls.len());
        for (i, (name, arguments)) in calls.iter().enumerate() {
            prop_assert_eq!(&got[i].id, &format!("call_{i}"));
            prop_assert_eq!(&got[i].function.name, name);
            prop_assert_eq!(&got[i].function.arguments, arguments);
        }
    }
}
