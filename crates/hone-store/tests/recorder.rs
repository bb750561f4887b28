//! The recorder: acknowledged calls are stored; while the database is locked
//! they go to the spool and reach the store once it is free again.

use crate::common::call;
use hone_store::{Durability, Recorder, RecorderOptions, SqliteStore, Store};
use hone_types::EpisodeId;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn options(dir: &std::path::Path) -> RecorderOptions {
    RecorderOptions {
        spool_dir: dir.join("spool"),
        max_batch: 64,
        spool_retry: Duration::from_millis(100),
        full_sync: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_group_committed_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hone.db");
    let store = Arc::new(SqliteStore::open(&path, false).unwrap());
    let recorder = Arc::new(Recorder::start(store.clone(), options(dir.path())).unwrap());
    let episode = EpisodeId::new_v7();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let recorder = recorder.clone();
        let call = call(&episode, i);
        tasks.push(tokio::spawn(async move { recorder.record(call).await }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(Durability::Stored));
    }
    let stats = recorder.stats();
    assert_eq!(stats.rows_written.load(Ordering::Relaxed), 200);
    assert!(stats.batches.load(Ordering::Relaxed) < 200, "no batching happened");
    assert_eq!(stats.queue_depth.load(Ordering::Relaxed), 0);
    recorder.shutdown().await;
    drop(store);
    let reopened = SqliteStore::open(&path, false).unwrap();
    assert_eq!(reopened.call_count().unwrap(), 200);
    assert_eq!(reopened.episode(&episode).unwrap().unwrap().summary.call_count, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_spools_and_replays_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hone.db");
    let store = Arc::new(SqliteStore::open(&path, false).unwrap());
    let recorder = Recorder::start(store.clone(), options(dir.path())).unwrap();
    let episode = EpisodeId::new_v7();
    assert_eq!(recorder.record(call(&episode, 1)).await, Ok(Durability::Stored));

    // Another connection takes the write lock and keeps it.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    for i in 2..12 {
        assert_eq!(recorder.record(call(&episode, i)).await, Ok(Durability::Spooled));
    }
    assert_eq!(recorder.stats().rows_spooled.load(Ordering::Relaxed), 10);
    assert!(recorder.stats().spool_bytes.load(Ordering::Relaxed) > 0);
    assert_eq!(store.call_count().unwrap(), 1);

    // The lock goes away; the next retry replays the spool.
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    for _ in 0..100 {
        if store.call_count().unwrap() == 11 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(store.call_count().unwrap(), 11);
    assert_eq!(recorder.stats().spool_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(recorder.record(call(&episode, 12)).await, Ok(Durability::Stored));
    recorder.shutdown().await;
    assert_eq!(store.call_count().unwrap(), 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_left_by_a_crash_is_replayed_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hone.db");
    let episode = EpisodeId::new_v7();
    {
        let store = Arc::new(SqliteStore::open(&path, false).unwrap());
        // It never retries, so only the next start can replay the spool.
        let recorder = Recorder::start(
            store.clone(),
            RecorderOptions {
                spool_retry: Duration::from_secs(3600),
                ..options(dir.path())
            },
        )
        .unwrap();
        let blocker = rusqlite::Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
        for i in 0..5 {
            assert_eq!(recorder.record(call(&episode, i)).await, Ok(Durability::Spooled));
        }
        // Simulate the crash: no shutdown; the recorder is leaked with its thread.
        std::mem::forget(recorder);
        blocker.execute_batch("ROLLBACK").unwrap();
    }
    let store = Arc::new(SqliteStore::open(&path, false).unwrap());
    let recorder = Recorder::start(store.clone(), options(dir.path())).unwrap();
    recorder.shutdown().await;
    assert_eq!(store.call_count().unwrap(), 5);
}
