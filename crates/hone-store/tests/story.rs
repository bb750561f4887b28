//! One scripted story over the `Store` trait: versions, calls, episodes,
//! signals, paging — on every backend.

use crate::backends::Backend;
use crate::common::{call, version_id};
use hone_store::StoreError;
use hone_types::{EpisodeId, EpisodeQuery, Route, Signal, SignalSource, SignalValue, VersionRecord, VersionSpec};

crate::backend_tests!(story, two_agents_choosing_one_episode_id_get_an_episode_each);

pub(crate) fn story(backend: &Backend) {
    let store = &*backend.store;
    // Versions: stored once, resolvable by id, listed per agent.
    let spec = VersionSpec {
        agent: "assistant".into(),
        routes: vec![Route {
            provider: "up".into(),
            model: "m".into(),
            adapter: None,
            memory: None,
            adapter_sha256: None,
        }],
        ..Default::default()
    };
    let record = VersionRecord {
        id: spec.id(),
        agent: "assistant".into(),
        label: Some("v1".into()),
        spec: spec.clone(),
        parent: None,
        created_by: "config".into(),
        created_at: 1,
    };
    store.upsert_versions(std::slice::from_ref(&record)).unwrap();
    store.upsert_versions(std::slice::from_ref(&record)).unwrap();
    assert_eq!(store.version(&spec.id()).unwrap(), Some(record.clone()));
    assert_eq!(store.versions(Some("assistant")).unwrap().len(), 1);
    assert!(store.versions(Some("other")).unwrap().is_empty());

    // Calls: two episodes, three calls; a repeated write is a no-op.
    let e1 = EpisodeId::parse("ticket-1").unwrap();
    let e2 = EpisodeId::new_v7();
    let c1 = call(&e1, 1000);
    let c2 = call(&e1, 2000);
    let c3 = call(&e2, 3000);
    assert_eq!(store.write_calls(&[c1.clone(), c2.clone()]).unwrap(), 2);
    assert_eq!(store.write_calls(&[c2.clone(), c3.clone()]).unwrap(), 1);
    assert_eq!(store.call_count().unwrap(), 3);
    assert_eq!(store.call(c2.id).unwrap(), Some(c2.clone()));
    assert_eq!(store.episode_agent(&e1).unwrap().as_deref(), Some("assistant"));

    let detail = store.episode(&e1).unwrap().unwrap();
    assert_eq!(detail.summary.call_count, 2);
    assert_eq!((detail.summary.started_at, detail.summary.last_call_at), (1000, 2000));
    assert_eq!(detail.calls, vec![c1.clone(), c2.clone()]);
    assert_eq!(detail.calls[0].version_id, version_id());

    // Signals: on an episode, on a call; unknown targets write nothing.
    let signal = |call_id, episode: &EpisodeId, value| Signal {
        id: uuid::Uuid::now_v7(),
        episode_id: episode.clone(),
        call_id,
        name: "resolved".into(),
        value,
        source: SignalSource::User,
        comment: Some("thanks".into()),
        created_at: 5000,
    };
    store
        .insert_signal(&signal(None, &e1, SignalValue::Boolean(true)))
        .unwrap();
    store
        .insert_signal(&signal(Some(c1.id), &e1, SignalValue::Float(0.5)))
        .unwrap();
    let missing = EpisodeId::parse("nope").unwrap();
    assert!(matches!(
        store.insert_signal(&signal(None, &missing, SignalValue::Boolean(true))),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.insert_signal(&signal(Some(c3.id), &e1, SignalValue::Boolean(true))),
        Err(StoreError::NotFound(_))
    ));
    let detail = store.episode(&e1).unwrap().unwrap();
    assert_eq!(detail.signals.len(), 2);
    assert_eq!(detail.signals[1].value, SignalValue::Float(0.5));
    assert_eq!(detail.signals[1].call_id, Some(c1.id));

    // Listing: newest first, paged by cursor, filtered by agent and time.
    let page = store
        .episodes(&EpisodeQuery {
            limit: 1,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(page.episodes[0].summary.id, e2);
    let cursor = page.next_cursor.unwrap().parse().unwrap();
    let page = store
        .episodes(&EpisodeQuery {
            limit: 1,
            cursor: Some(cursor),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(page.episodes[0].summary.id, e1);
    assert!(page.next_cursor.is_none());
    let by_time = store
        .episodes(&EpisodeQuery {
            limit: 10,
            since: Some(2500),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_time.episodes.len(), 1);
    let other = store
        .episodes(&EpisodeQuery {
            limit: 10,
            agents: Some(vec!["other".into()]),
            ..Default::default()
        })
        .unwrap();
    assert!(other.episodes.is_empty());

    // Another connection (another process) sees it all; opening again
    // applies no migration twice.
    let reopened = backend.reopen();
    assert_eq!(reopened.call_count().unwrap(), 3);
    assert_eq!(reopened.episode(&e1).unwrap().unwrap().signals.len(), 2);
}

/// Clients choose episode ids, so two agents may choose the same one: each
/// gets an episode of its own, in one batch or across many, also when two
/// writers (two gateways) store them at once; each agent finds its own by
/// the id its client chose.
pub(crate) fn two_agents_choosing_one_episode_id_get_an_episode_each(backend: &Backend) {
    let store = &*backend.store;
    let shared = EpisodeId::parse("ticket-9").unwrap();
    let of = |agent: &str, at: i64| {
        let mut c = call(&shared, at);
        c.agent = agent.into();
        c
    };
    // One batch, the id new: the first agent in it keeps the bare id.
    let (a1, b1) = (of("alpha", 1000), of("beta", 1001));
    assert_eq!(store.write_calls(&[a1.clone(), b1.clone()]).unwrap(), 2);
    // Later batches, and a replay of the first, go where the first went.
    let (a2, b2) = (of("alpha", 2000), of("beta", 2001));
    store.write_calls(std::slice::from_ref(&b2)).unwrap();
    store.write_calls(&[a2.clone(), a1.clone(), b1.clone()]).unwrap();
    let alpha = store.find_episode("alpha", &shared).unwrap().unwrap();
    let beta = store.find_episode("beta", &shared).unwrap().unwrap();
    assert_eq!(alpha, shared);
    assert_eq!(beta.as_str(), "ticket-9@beta");
    let calls = |id: &EpisodeId| -> Vec<hone_types::CallId> {
        store.episode(id).unwrap().unwrap().calls.iter().map(|c| c.id).collect()
    };
    assert_eq!(calls(&alpha), vec![a1.id, a2.id]);
    assert_eq!(calls(&beta), vec![b1.id, b2.id]);
    assert_eq!(
        store.agent_episode("beta", &shared).unwrap().unwrap().summary.agent,
        "beta"
    );
    assert!(store.find_episode("gamma", &shared).unwrap().is_none());
    // A call read back names the episode it is in.
    assert_eq!(store.call(b1.id).unwrap().unwrap().episode_id, beta);

    // Two writers at once, each with its own agent's first call of a new id.
    let racing = EpisodeId::parse("race-1").unwrap();
    let writers: Vec<_> = ["alpha", "beta"]
        .into_iter()
        .map(|agent| {
            let store = backend.reopen();
            let mut c = call(&racing, 5000);
            c.agent = agent.into();
            std::thread::spawn(move || {
                store.write_calls(std::slice::from_ref(&c)).unwrap();
                c.id
            })
        })
        .collect();
    let ids: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    for (agent, id) in ["alpha", "beta"].into_iter().zip(ids) {
        let episode = store.agent_episode(agent, &racing).unwrap().unwrap();
        assert_eq!(episode.summary.agent, agent);
        assert_eq!(
            episode.calls.iter().map(|c| c.id).collect::<Vec<_>>(),
            vec![id],
            "{agent}"
        );
    }
}

/// Called from inside an async task (the learner does), a store keeps
/// answering past tokio's cooperative budget of that task; on a runtime of
/// one worker, a PostgreSQL store (whose connections that same runtime
/// drives) hands the worker's other tasks off while it waits, so they keep
/// running.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_store_called_from_async_code_keeps_answering() {
    for backend in [Some(Backend::sqlite()), Backend::postgres()].into_iter().flatten() {
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
        };
        tokio::task::yield_now().await;
        let before = ticks.load(std::sync::atomic::Ordering::Relaxed);
        for _ in 0..1000 {
            assert_eq!(backend.store.call_count().unwrap(), 0);
        }
        let during = ticks.load(std::sync::atomic::Ordering::Relaxed) - before;
        ticker.abort();
        if backend.name == "postgres" {
            assert!(during > 0, "the runtime's other tasks ran while the store was called");
        }
    }
}

/// A PostgreSQL store is driven by the runtime it is opened in; opened
/// outside any, it says so rather than starting one of its own.
#[test]
fn a_postgres_store_opened_outside_a_runtime_says_it_needs_one() {
    let dir = tempfile::tempdir().unwrap();
    let Some(database) = hone_test_support::test_database(&dir.path().join("pg")).unwrap() else {
        eprintln!("SKIPPED: PostgreSQL is not installed here");
        return;
    };
    let error = hone_store::PostgresStore::connect(&database.url, 2).unwrap_err();
    assert!(error.to_string().contains("inside a tokio runtime"), "{error}");
}
