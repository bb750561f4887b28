//! Rewards: signals with defaults, penalties never skipped, per-call credit,
//! the spec version stored with each reward, recompute after a spec change,
//! and judge scores (relative groups) and failures in the record.

use crate::support::World;
use hone_learn::scoring::reward::{recompute, Rewarder};
use hone_store::LearnStore;
use hone_types::{ComponentKind, EpisodeId};
use serde_json::json;
use std::sync::Arc;

#[tokio::test]
async fn penalties_are_never_skipped_and_missing_feedback_takes_its_default() {
    let w = World::start().await;
    w.ask("helper", "fine", "hello").await;
    w.feedback("fine", "resolved", json!(true)).await;
    w.ask("helper", "unrated", "hello").await;
    w.ask("helper", "empty", "silence please").await;
    w.call(
        "helper",
        "asks",
        json!([{"role": "user", "content": "ask me"}]),
        Some(crate::support::weather_tools()),
    )
    .await;
    w.call(
        "helper",
        "broken",
        json!([{"role": "user", "content": "broken tool"}]),
        Some(crate::support::weather_tools()),
    )
    .await;

    let spec = w.config.agents["helper"].reward.clone();
    let rewarder = Rewarder::new("helper", &spec, None).unwrap();
    let score = |e: &hone_types::EpisodeDetail| rewarder.score(e, None, None, 0);
    let fine = score(&w.episode("fine").await);
    assert_eq!((fine.value, fine.passed), (1.0, true));
    let unrated = score(&w.episode("unrated").await);
    assert_eq!(unrated.value, 0.5, "missing `resolved` takes its default 0.5");
    assert!(unrated.components[0].defaulted);
    let empty = score(&w.episode("empty").await);
    assert_eq!(empty.value, 0.5 - 1.0, "an empty answer earns its penalty");
    let asks = score(&w.episode("asks").await);
    assert_eq!(asks.value, 0.5 - 0.5, "a clarifying question when tools were offered");
    let broken_episode = w.episode("broken").await;
    let broken = score(&broken_episode);
    assert_eq!(broken.value, 0.5 - 1.0, "an invalid tool call is scored, not dropped");
    assert!(!broken.passed);
    assert!(broken
        .components
        .iter()
        .any(|c| c.kind == ComponentKind::Penalty && c.name == "invalid_tool_call"));
    assert_eq!(broken.calls.len(), 1);
    assert!(broken.calls[0].assigned, "the penalty is the call's own credit");
    assert_eq!(broken.calls[0].value, -1.0);
    assert!(!unrated.calls[0].assigned);
    assert_eq!(
        unrated.calls[0].value, unrated.value,
        "no own score: the call gets the episode's reward"
    );

    // Stored under the spec version; a changed spec stores new rewards beside the old.
    let n = recompute(w.learn_store(), &rewarder, 1, &mut |_| {}).await.unwrap();
    assert_eq!((n.episodes, n.passed), (5, 2));
    let id = EpisodeId::parse("broken").unwrap();
    assert_eq!(
        w.store.reward(&id, &rewarder.spec_version).unwrap().unwrap().value,
        -0.5
    );
    let mut harsher = spec.clone();
    harsher.penalties.invalid_tool_call = -3.0;
    let harsher = Rewarder::new("helper", &harsher, None).unwrap();
    assert_ne!(harsher.spec_version, rewarder.spec_version);
    recompute(w.learn_store(), &harsher, 2, &mut |_| {}).await.unwrap();
    assert_eq!(w.store.reward(&id, &harsher.spec_version).unwrap().unwrap().value, -2.5);
    assert_eq!(
        w.store.reward(&id, &rewarder.spec_version).unwrap().unwrap().value,
        -0.5
    );
}

#[tokio::test]
async fn relative_judge_scores_groups_with_the_same_task_and_records_failures() {
    let w = World::start().await;
    for i in 0..2 {
        w.ask("ranked", &format!("same{i}"), "What is 3+3?").await;
    }
    w.ask("ranked", "alone", "What is 9+9?").await;
    w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
    let spec = w.config.agents["ranked"].reward.clone();
    let rewarder = Rewarder::new("ranked", &spec, Some(Arc::new(w.client()))).unwrap();
    let report = recompute(w.learn_store(), &rewarder, 1, &mut |_| {}).await.unwrap();
    assert_eq!(report.episodes, 3);
    let get = |id: &str| {
        w.store
            .reward(&EpisodeId::parse(id).unwrap(), &rewarder.spec_version)
            .unwrap()
            .unwrap()
    };
    let mut judged: Vec<f64> = ["same0", "same1"].iter().map(|id| get(id).value).collect();
    judged.sort_by(f64::total_cmp);
    assert_eq!(judged, vec![0.5, 1.0], "a group of two ranked against each other");
    assert!(get("alone").components.is_empty(), "a group of one is not judged");

    // Three unusable answers (retries = 2): a failure in the record, no judge score.
    w.upstream
        .judge_answers
        .lock()
        .unwrap()
        .extend(["nope".to_owned(), "{".to_owned(), "[]".to_owned()]);
    recompute(w.learn_store(), &rewarder, 2, &mut |_| {}).await.unwrap();
    let failed = get("same0");
    assert!(
        failed.failures[0].starts_with("judge: judge failed after 3 attempts"),
        "{:?}",
        failed.failures
    );
    assert!(!failed.components.iter().any(|c| c.kind == ComponentKind::Judge));
}
