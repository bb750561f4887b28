//! The learning cycle's trait on every backend: one open cycle per agent,
//! steps and deployments that move only from what the mover saw (raced
//! from two connections: exactly one wins), candidates, alerts, the
//! append-only history, the monitors' windows, and the learner's lead.

use crate::backends::Backend;
use crate::common::{call, version_id};
use hone_store::{CandidateUpdate, Step};
use hone_types::{
    Alert, AlertAction, Candidate, CandidateStatus, CycleDetail, CycleState, Deployment, EpisodeId, Firing,
    HistoryEvent, Route, VersionRecord, VersionSpec,
};
use serde_json::json;

crate::backend_tests!(
    cycle_story,
    racing_movers_apply_each_decision_once,
    one_learner_leads_an_agent
);

fn deployment(champion: &hone_types::VersionId, canary: Option<&hone_types::VersionId>) -> Deployment {
    Deployment {
        agent: "assistant".into(),
        champion: champion.clone(),
        canary: canary.cloned(),
        canary_share: 0.1,
        canary_since: None,
        previous: vec![],
        revision: 0,
        source: "learner".into(),
        updated_at: 0,
    }
}

fn candidate_version() -> VersionRecord {
    let spec = VersionSpec {
        agent: "assistant".into(),
        routes: vec![Route {
            provider: "up".into(),
            model: "m2".into(),
            adapter: None,
            memory: None,
            adapter_sha256: None,
        }],
        ..Default::default()
    };
    VersionRecord {
        id: spec.id(),
        agent: "assistant".into(),
        label: None,
        spec,
        parent: Some(version_id()),
        created_by: "learner".into(),
        created_at: 5,
    }
}

fn answered(episode: &EpisodeId, at: i64, answer: &str) -> hone_types::CallRecord {
    let mut c = call(episode, at);
    c.response = Some(
        serde_json::from_value(json!({
            "id": "r", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]
        }))
        .unwrap(),
    );
    c
}

pub(crate) fn cycle_story(backend: &Backend) {
    let store = &*backend.store;
    // One open cycle per agent: a second start finds the first.
    let cycle = store.start_cycle("assistant", "manual", 100).unwrap();
    assert_eq!((cycle.id.as_str(), cycle.state), ("assistant-1", CycleState::Collect));
    assert_eq!(store.start_cycle("assistant", "schedule", 101).unwrap().id, cycle.id);
    assert_eq!(store.open_cycle("assistant").unwrap().unwrap().id, cycle.id);
    assert!(store.open_cycle("other").unwrap().is_none());

    // A step moves only from the state the mover saw.
    let detail = CycleDetail::default();
    let step = Step {
        from: CycleState::Collect,
        to: CycleState::Reward,
        detail: &detail,
        error: None,
    };
    let event = HistoryEvent::new("assistant", 110, "cycle", "collected").cycle(&cycle.id);
    assert!(store.advance_cycle(&cycle.id, &step, &[event], 110).unwrap());
    assert!(!store.advance_cycle(&cycle.id, &step, &[], 111).unwrap());
    let moved = store.cycle(&cycle.id).unwrap().unwrap();
    assert_eq!((moved.state, moved.updated_at), (CycleState::Reward, 110));
    let done = Step {
        from: CycleState::Reward,
        to: CycleState::Done,
        detail: &detail,
        error: None,
    };
    assert!(store.advance_cycle(&cycle.id, &done, &[], 120).unwrap());
    assert!(store.open_cycle("assistant").unwrap().is_none());
    assert_eq!(store.start_cycle("assistant", "manual", 130).unwrap().id, "assistant-2");
    let cycles = store.cycles(Some("assistant"), 10).unwrap();
    assert_eq!(
        cycles.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["assistant-2", "assistant-1"]
    );

    // Candidates: stored with their versions, once; updated in place.
    let version = candidate_version();
    let candidate = Candidate {
        cycle_id: "assistant-2".into(),
        agent: "assistant".into(),
        version_id: version.id.clone(),
        parent: version_id(),
        optimiser: "examples".into(),
        diff: "+ one example".into(),
        status: CandidateStatus::Proposed,
        reason: None,
        scores: None,
        training: None,
        spend: None,
        created_at: 131,
        updated_at: 131,
    };
    for _ in 0..2 {
        store
            .add_candidates(std::slice::from_ref(&version), std::slice::from_ref(&candidate), &[])
            .unwrap();
    }
    assert_eq!(store.version(&version.id).unwrap(), Some(version.clone()));
    let update = CandidateUpdate {
        cycle_id: "assistant-2".into(),
        version_id: version.id.clone(),
        status: CandidateStatus::Pruned,
        reason: Some("worse".into()),
        scores: None,
    };
    store
        .update_candidates(std::slice::from_ref(&update), &[], 140)
        .unwrap();
    let stored = store.candidates("assistant", None).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (stored[0].status, stored[0].reason.as_deref(), stored[0].updated_at),
        (CandidateStatus::Pruned, Some("worse"), 140)
    );
    assert!(store.candidates("assistant", Some("assistant-1")).unwrap().is_empty());

    // Deployments: compare-and-swap on the revision, with the alert.
    let first = deployment(&version_id(), None);
    assert!(store.change_deployment(&first, None, &[], &[], None, 150).unwrap());
    assert!(!store.change_deployment(&first, None, &[], &[], None, 151).unwrap());
    let alert = Alert {
        id: 0,
        agent: "assistant".into(),
        version_id: version.id.clone(),
        champion_id: version_id(),
        firing: Firing {
            metric: "reward".into(),
            canary_rate: 0.1,
            champion_rate: 0.5,
            canary_episodes: 30,
            champion_episodes: 40,
            p_value: 0.001,
            episodes: vec![],
        },
        action: AlertAction::RolledBack,
        at: 160,
    };
    let second = deployment(&version_id(), Some(&version.id));
    assert!(store
        .change_deployment(&second, Some(1), &[], &[], Some(&alert), 160)
        .unwrap());
    assert!(!store.change_deployment(&second, Some(1), &[], &[], None, 161).unwrap());
    let now = store.deployment("assistant").unwrap().unwrap();
    assert_eq!(
        (now.revision, now.canary.as_ref(), now.updated_at),
        (2, Some(&version.id), 160)
    );
    assert_eq!(store.deployments().unwrap().len(), 1);
    let alerts = store.alerts(Some("assistant"), 10).unwrap();
    assert_eq!(alerts.len(), 1);
    assert!(alerts[0].id > 0);
    assert_eq!(
        alerts[0],
        Alert {
            id: alerts[0].id,
            ..alert
        }
    );

    // History: every decision's events, oldest first; append-only.
    store
        .add_history(&[HistoryEvent::new("assistant", 170, "approve", "approved by hand")])
        .unwrap();
    let history = store.history("assistant", 100).unwrap();
    let summaries: Vec<_> = history.iter().map(|e| e.summary.as_str()).collect();
    assert_eq!(
        summaries,
        [
            "cycle assistant-1 started (manual)",
            "collected",
            "cycle assistant-2 started (manual)",
            "approved by hand"
        ]
    );
    assert!(history.windows(2).all(|w| w[0].id < w[1].id));
    assert_eq!(store.history("assistant", 1).unwrap()[0].summary, "approved by hand");
    for sql in ["UPDATE history SET kind = 'x'", "DELETE FROM history"] {
        let err = backend.raw(sql).expect_err(sql);
        assert!(err.contains("append-only"), "{}: {sql} → {err}", backend.name);
    }

    // The monitors' windows and the episodic memory's successes.
    let (a, b, eval) = (
        EpisodeId::new_v7(),
        EpisodeId::new_v7(),
        EpisodeId::evaluation("run", 0, "q").unwrap(),
    );
    store
        .write_calls(&[
            answered(&a, 1000, "four"),
            answered(&b, 2000, ""),
            answered(&eval, 2500, "x"),
        ])
        .unwrap();
    let rewards: Vec<_> = [(&a, 1.0), (&b, 0.0), (&eval, 1.0)]
        .into_iter()
        .map(|(e, v)| crate::common::reward(e, v, 0, 3000))
        .collect();
    store.put_rewards(&rewards).unwrap();
    let window = store.version_window("assistant", &version_id(), 0, "spec", 10).unwrap();
    assert_eq!(window.iter().map(|w| &w.id).collect::<Vec<_>>(), vec![&b, &a]);
    assert_eq!(
        (window[1].answer_chars, window[1].reward, window[1].clarifying_question),
        (4.0, Some(1.0), true)
    );
    assert!(!window[1].tool_use && !window[1].error);
    assert_eq!(window[0].answer_chars, 0.0);
    let rewards = store.version_rewards("assistant", &version_id(), "spec", 10).unwrap();
    assert_eq!(rewards, vec![(2000, Some(0.0)), (1000, Some(1.0))]);
    let successes = store.successes("assistant", "spec", 0.5, 10).unwrap();
    assert_eq!(successes.len(), 1);
    assert_eq!(
        (successes[0].task.as_str(), successes[0].answer.as_str()),
        ("hi", "four")
    );
    assert_eq!(store.episodes_since("assistant", 1500).unwrap(), 1);

    // A window holds the newest episodes only, each with all its calls
    // since the window's start.
    store.write_calls(&[answered(&a, 2200, "five")]).unwrap();
    let newest = store.version_window("assistant", &version_id(), 0, "spec", 1).unwrap();
    assert_eq!(
        newest.iter().map(|w| (&w.id, w.calls)).collect::<Vec<_>>(),
        vec![(&a, 2)]
    );
    let both = store.version_window("assistant", &version_id(), 0, "spec", 10).unwrap();
    assert_eq!(
        both.iter().map(|w| (&w.id, w.calls)).collect::<Vec<_>>(),
        vec![(&b, 1), (&a, 2)]
    );
    let since = store
        .version_window("assistant", &version_id(), 1500, "spec", 10)
        .unwrap();
    assert_eq!(
        since.iter().map(|w| (&w.id, w.calls)).collect::<Vec<_>>(),
        vec![(&a, 1), (&b, 1)]
    );
}

fn racing_movers_apply_each_decision_once(backend: &Backend) {
    let other = backend.reopen();
    let stores = [backend.store.clone(), other];
    let cycle = stores[0].start_cycle("assistant", "manual", 1).unwrap();
    let detail = CycleDetail::default();
    // Ten rounds: two connections try the same step and the same
    // deployment change at once; each round exactly one of each wins.
    for round in 0..10u64 {
        let from = if round % 2 == 0 {
            CycleState::Collect
        } else {
            CycleState::Reward
        };
        let to = if round % 2 == 0 {
            CycleState::Reward
        } else {
            CycleState::Collect
        };
        let (steps, deploys) = std::thread::scope(|s| {
            let handles: Vec<_> = stores
                .iter()
                .map(|store| {
                    let (cycle_id, detail) = (&cycle.id, &detail);
                    s.spawn(move || {
                        let step = Step {
                            from,
                            to,
                            detail,
                            error: None,
                        };
                        let event = HistoryEvent::new("assistant", 2, "cycle", format!("round {round}"));
                        let stepped = store.advance_cycle(cycle_id, &step, &[event], 2).unwrap();
                        let expected = (round > 0).then_some(round);
                        let deployed = store
                            .change_deployment(&deployment(&version_id(), None), expected, &[], &[], None, 3)
                            .unwrap();
                        (stepped, deployed)
                    })
                })
                .collect();
            let results: Vec<(bool, bool)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            (
                results.iter().filter(|r| r.0).count(),
                results.iter().filter(|r| r.1).count(),
            )
        });
        assert_eq!((steps, deploys), (1, 1), "{} round {round}", backend.name);
    }
    assert_eq!(stores[1].deployment("assistant").unwrap().unwrap().revision, 10);
    let rounds = stores[1]
        .history("assistant", 100)
        .unwrap()
        .iter()
        .filter(|e| e.summary.starts_with("round "))
        .count();
    assert_eq!(rounds, 10, "one history event per applied step");
}

fn one_learner_leads_an_agent(backend: &Backend) {
    let other = backend.reopen();
    let lead = backend
        .store
        .lead("assistant")
        .unwrap()
        .expect("the first learner leads");
    assert!(
        other.lead("assistant").unwrap().is_none(),
        "{}: a second learner must stand by",
        backend.name
    );
    // Agents are led separately.
    let support = other.lead("support").unwrap();
    assert!(support.is_some());
    drop(lead);
    // Released when the holder goes (a dropped lead, or a dead process).
    let mut taken = None;
    for _ in 0..50 {
        taken = other.lead("assistant").unwrap();
        if taken.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(taken.is_some(), "{}: the lead was not released", backend.name);
    assert!(backend.store.lead("assistant").unwrap().is_none());
}
