//! Every critic on episodes recorded through the gateway.

use crate::support::{weather_tools, World};
use hone_config::{CriticKind, CriticSpec};
use hone_learn::scoring::critics::{from_spec, CriticInput};
use serde_json::json;

fn critic(kind: CriticKind) -> Box<dyn hone_learn::scoring::critics::Critic> {
    from_spec(&CriticSpec {
        name: "c".into(),
        weight: 1.0,
        kind,
    })
    .unwrap()
}

#[tokio::test]
async fn every_critic_scores_recorded_episodes() {
    let w = World::start().await;
    // A valid tool call, then the answer after the tool result: two calls, one episode.
    let first = w
        .call(
            "helper",
            "weather-ok",
            json!([{"role": "user", "content": "weather in Paris?"}]),
            Some(weather_tools()),
        )
        .await;
    w.call(
        "helper",
        "weather-ok",
        json!([{"role": "user", "content": "weather in Paris?"}, first,
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]),
        Some(weather_tools()),
    )
    .await;
    w.call(
        "helper",
        "weather-bad",
        json!([{"role": "user", "content": "broken tool please"}]),
        Some(weather_tools()),
    )
    .await;
    w.ask("helper", "json-1", "give me json").await;
    w.ask("calc", "sum-1", "What is 2+2?").await;

    let ok = w.episode("weather-ok").await;
    let bad = w.episode("weather-bad").await;
    let json_ep = w.episode("json-1").await;
    let sum = w.episode("sum-1").await;
    let input = |e| CriticInput {
        episode: e,
        reference: None,
    };

    let tools = critic(CriticKind::ToolCalls);
    let s = tools.score(input(&ok)).unwrap();
    assert_eq!(s.score, 1.0);
    assert_eq!(
        s.per_call,
        vec![(ok.calls[0].id, 1.0)],
        "only the call with a tool call is scored"
    );
    let s = tools.score(input(&bad)).unwrap();
    assert_eq!(s.score, 0.0);
    assert!(s.reason.unwrap().contains("unknown tool `get_wether`"));

    let schema = critic(CriticKind::JsonSchema {
        schema: json!({"type": "object", "required": ["name"], "properties": {"stars": {"type": "integer"}}}),
    });
    assert_eq!(schema.score(input(&json_ep)).unwrap().score, 1.0);
    let strict = critic(CriticKind::JsonSchema {
        schema: json!({"type": "object", "required": ["missing"]}),
    });
    assert_eq!(strict.score(input(&json_ep)).unwrap().score, 0.0);
    assert_eq!(schema.score(input(&sum)).unwrap().score, 0.0, "prose is not JSON");

    let regex = critic(CriticKind::Regex {
        pattern: r"^The answer is \d+\.$".into(),
    });
    assert_eq!(regex.score(input(&sum)).unwrap().score, 1.0);
    assert_eq!(regex.score(input(&json_ep)).unwrap().score, 0.0);

    let exact = critic(CriticKind::Exact { case_sensitive: false });
    let good = json!({"role": "assistant", "content": "the answer is  4."});
    assert_eq!(
        exact
            .score(CriticInput {
                episode: &sum,
                reference: Some(&good)
            })
            .unwrap()
            .score,
        1.0
    );
    let other = json!("The answer is 5.");
    assert_eq!(
        exact
            .score(CriticInput {
                episode: &sum,
                reference: Some(&other)
            })
            .unwrap()
            .score,
        0.0
    );
    assert!(
        exact.score(input(&sum)).is_err(),
        "no reference is a failure, not a score"
    );

    let numeric = critic(CriticKind::Numeric { tolerance: 1e-9 });
    assert_eq!(
        numeric
            .score(CriticInput {
                episode: &sum,
                reference: Some(&json!(4))
            })
            .unwrap()
            .score,
        1.0
    );
    assert_eq!(
        numeric
            .score(CriticInput {
                episode: &sum,
                reference: Some(&json!("4.5"))
            })
            .unwrap()
            .score,
        0.0
    );

    // A program gets the episode on stdin: by printed number, by exit code, and a time-out.
    let script = w.dir.path().join("score.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nif grep -q 'The answer is 4' ; then echo 0.75; else exit 3; fi\n",
    )
    .unwrap();
    let run = |argv: Vec<String>, ms| critic(CriticKind::Command { argv, timeout_ms: ms });
    let sh = |s: &std::path::Path| vec!["sh".to_owned(), s.display().to_string()];
    assert_eq!(run(sh(&script), 5000).score(input(&sum)).unwrap().score, 0.75);
    let s = run(sh(&script), 5000).score(input(&json_ep)).unwrap();
    assert_eq!((s.score, s.reason.as_deref()), (0.0, Some("exit code 3")));
    let slow = run(vec!["sleep".into(), "5".into()], 200)
        .score(input(&sum))
        .unwrap_err();
    assert!(slow.0.contains("timed out"), "{slow}");
    let missing = run(vec!["/no/such/program".into()], 200)
        .score(input(&sum))
        .unwrap_err();
    assert!(missing.0.contains("cannot start"), "{missing}");
}
