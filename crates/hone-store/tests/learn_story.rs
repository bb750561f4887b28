//! The learner's first trait on every backend: rewards, the streaming scan
//! the dataset builders use, immutable dataset snapshots (refused by the
//! database itself), and evaluation runs that resume.

use crate::backends::Backend;
use crate::common::call;
use hone_store::{EpisodeFilter, StoreError};
use hone_types::{EpisodeId, EvalRunInfo, Instance, InstanceResult, RewardRecord};
use serde_json::json;

crate::backend_tests!(learn_story, snapshots_are_immutable_and_numbered_one_at_a_time);

fn reward(episode: &EpisodeId, value: f64) -> RewardRecord {
    crate::common::reward(episode, value, 0, 10)
}

fn instance(id: &str) -> Instance {
    serde_json::from_value(json!({"id": id, "agent": "assistant", "input": {"q": id}})).unwrap()
}

pub(crate) fn result(instance: &str, attempt: u32, passed: bool) -> InstanceResult {
    InstanceResult {
        instance_id: instance.into(),
        attempt,
        episode_id: EpisodeId::evaluation("run-1", attempt as usize, instance).unwrap(),
        score: Some(if passed { 1.0 } else { 0.0 }),
        passed,
        error: None,
        cost_usd: 0.0,
        latency_ms: 1.0,
        flags: Default::default(),
        calls: 1,
        tool_calls: 0,
        answer_chars: 1,
        failures: vec![],
    }
}

pub(crate) fn learn_story(backend: &Backend) {
    let store = &*backend.store;
    // Three traffic episodes (one with two calls) and one evaluation episode.
    let (a, b, c) = (EpisodeId::new_v7(), EpisodeId::new_v7(), EpisodeId::new_v7());
    let eval = EpisodeId::evaluation("run-0", 0, "x").unwrap();
    let mut failing = call(&b, 2000);
    failing.outcome = hone_types::CallOutcome::UpstreamError;
    store
        .write_calls(&[
            call(&a, 1000),
            call(&a, 1100),
            failing,
            call(&c, 3000),
            call(&eval, 1500),
        ])
        .unwrap();

    // Rewards: replaced per (episode, spec), summarised per agent.
    store.put_rewards(&[reward(&a, 0.0), reward(&b, 1.0)]).unwrap();
    store.put_rewards(&[reward(&a, 0.75)]).unwrap();
    assert_eq!(store.reward(&a, "spec").unwrap().unwrap().value, 0.75);
    assert!(store.reward(&a, "other").unwrap().is_none());
    let (n, mean) = store.reward_summary("assistant", "spec").unwrap();
    assert_eq!((n, mean), (2, Some(0.875)));

    // The scan: traffic only, oldest first, with the facts a builder needs.
    let filter = EpisodeFilter {
        agent: "assistant".into(),
        spec_version: Some("spec".into()),
        ..EpisodeFilter::default()
    };
    let mut seen = Vec::new();
    store
        .scan_episodes(&filter, &mut |f| {
            seen.push(f);
            Ok(())
        })
        .unwrap();
    let ids: Vec<_> = seen.iter().map(|f| f.id.clone()).collect();
    assert_eq!(ids, vec![a.clone(), b.clone(), c.clone()]);
    assert_eq!(
        (seen[0].calls, seen[0].started_at, seen[0].reward),
        (2, 1000, Some((0.75, true)))
    );
    assert!((seen[0].cost_usd - 0.002).abs() < 1e-12);
    assert!(seen[0].any_flag && !seen[0].any_error);
    assert!(seen[1].any_error);
    assert_eq!(seen[2].reward, None);
    let since = EpisodeFilter {
        since: Some(1500),
        until: Some(3000),
        ..filter.clone()
    };
    let last = store.last_episodes(&since, 5, &|_| true).unwrap();
    assert_eq!(last.iter().map(|f| &f.id).collect::<Vec<_>>(), vec![&b]);
    // A visitor's error stops the scan and comes back.
    let stopped = store.scan_episodes(&filter, &mut |_| Err(StoreError::Corrupt("stop".into())));
    assert!(matches!(stopped, Err(StoreError::Corrupt(m)) if m == "stop"));

    // Evaluation runs: created once (a second start resumes), results
    // replaced per attempt, listed in order.
    let run = crate::common::eval_run();
    assert_eq!(store.start_eval_run(&run).unwrap(), run);
    let again = EvalRunInfo {
        created_at: 99,
        ..run.clone()
    };
    assert_eq!(store.start_eval_run(&again).unwrap().created_at, 50);
    store.put_eval_result("run-1", &result("q2", 0, false)).unwrap();
    store.put_eval_result("run-1", &result("q1", 1, true)).unwrap();
    store.put_eval_result("run-1", &result("q1", 0, false)).unwrap();
    store.put_eval_result("run-1", &result("q1", 0, true)).unwrap();
    let results = store.eval_results("run-1").unwrap();
    let keys: Vec<_> = results
        .iter()
        .map(|r| (r.instance_id.as_str(), r.attempt, r.passed))
        .collect();
    assert_eq!(keys, vec![("q1", 0, true), ("q1", 1, true), ("q2", 0, false)]);
    store.finish_eval_run("run-1", 60).unwrap();
    assert_eq!(store.eval_run("run-1").unwrap().unwrap().finished_at, Some(60));
    assert_eq!(store.eval_runs(Some("assistant"), 10).unwrap().len(), 1);
    assert!(store.eval_runs(Some("other"), 10).unwrap().is_empty());
}

pub(crate) fn snapshots_are_immutable_and_numbered_one_at_a_time(backend: &Backend) {
    let store = &*backend.store;
    let items = vec![instance("q1"), instance("q2")];
    let first = store
        .create_dataset("qa", "assistant", "import", &json!({"from": "file"}), &items, 7)
        .unwrap();
    assert_eq!((first.id.as_str(), first.version, first.item_count), ("qa@1", 1, 2));
    assert_eq!(first.content_hash, hone_store::content_hash(&items).unwrap());
    assert_eq!(store.dataset_items("qa@1").unwrap(), items);
    assert_eq!(store.dataset("qa").unwrap().unwrap(), first);

    // A duplicate instance id is refused and writes nothing.
    let twice = vec![instance("q1"), instance("q1")];
    let refused = store.create_dataset("qa", "assistant", "import", &json!({}), &twice, 8);
    assert!(matches!(refused, Err(StoreError::Corrupt(m)) if m.contains("`q1` appears twice")));
    assert_eq!(store.datasets().unwrap().len(), 1);

    // Snapshots numbered one at a time, even from racing connections.
    let other = backend.reopen();
    std::thread::scope(|s| {
        for store in [backend.store.clone(), other.clone()] {
            s.spawn(move || {
                for _ in 0..5 {
                    store
                        .create_dataset("qa", "assistant", "import", &json!({}), &[instance("q9")], 9)
                        .unwrap();
                }
            });
        }
    });
    let versions: Vec<u32> = store.datasets().unwrap().iter().map(|d| d.version).collect();
    assert_eq!(versions, (1..=11).collect::<Vec<_>>());
    assert_eq!(store.dataset("qa").unwrap().unwrap().id, "qa@11");
    assert_eq!(store.dataset_items("qa@1").unwrap(), items);

    // The database itself refuses to change or remove a snapshot.
    for sql in [
        "UPDATE datasets SET item_count = 0",
        "DELETE FROM datasets",
        "UPDATE dataset_items SET item = '{}'",
        "DELETE FROM dataset_items",
    ] {
        let err = backend.raw(sql).expect_err(sql);
        assert!(err.contains("immutable"), "{}: {sql} → {err}", backend.name);
    }
    assert_eq!(store.dataset_items("qa@1").unwrap(), items);
}
