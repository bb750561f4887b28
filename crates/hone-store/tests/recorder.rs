//! The recorder: acknowledged calls are journaled at once and reach the store
//! in batches; while the database is locked they wait in the journal and are
//! copied in once it is free; a journal left by a crash is copied at start.

use crate::common::call;
use hone_store::{Recorder, RecorderError, RecorderOptions, SqliteStore, Store};
use hone_types::EpisodeId;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn options(dir: &Path) -> RecorderOptions {
    RecorderOptions {
        journal_dir: dir.join("journal"),
        max_batch: 64,
        store_retry: Duration::from_millis(100),
        full_sync: false,
    }
}

fn journal_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

const FLUSH: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_batched_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hone.db");
    let store = Arc::new(SqliteStore::open_with(&path, false, SqliteStore::RECORDING).unwrap());
    let recorder = Arc::new(Recorder::start(store.clone(), options(dir.path())).unwrap());
    let episode = EpisodeId::new_v7();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let recorder = recorder.clone();
        let call = call(&episode, i);
        tasks.push(tokio::spawn(async move { recorder.record(call).await }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(()));
    }
    recorder.flush(FLUSH).await.unwrap();
    assert_eq!(
        store.call_count().unwrap(),
        200,
        "flush returned before the calls were committed"
    );
    let stats = recorder.stats();
    assert_eq!(stats.rows_journaled.load(Ordering::Relaxed), 200);
    assert_eq!(stats.rows_written.load(Ordering::Relaxed), 200);
    assert!(stats.batches.load(Ordering::Relaxed) < 200, "no batching happened");
    assert_eq!(stats.queue_depth(), 0);
    assert_eq!(stats.spool_bytes(), 0);
    recorder.shutdown().await;
    assert!(
        journal_files(dir.path()).is_empty(),
        "a clean shutdown leaves no journal"
    );
    assert_eq!(recorder.record(call(&episode, 999)).await, Err(RecorderError::Closed));
    drop(store);
    let reopened = SqliteStore::open_with(&path, false, SqliteStore::RECORDING).unwrap();
    assert_eq!(reopened.call_count().unwrap(), 200);
    assert_eq!(reopened.episode(&episode).unwrap().unwrap().summary.call_count, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_keeps_calls_in_the_journal_until_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hone.db");
    let store = Arc::new(SqliteStore::open_with(&path, false, SqliteStore::RECORDING).unwrap());
    let recorder = Recorder::start(store.clone(), options(dir.path())).unwrap();
    let episode = EpisodeId::new_v7();
    recorder.record(call(&episode, 1)).await.unwrap();
    recorder.flush(FLUSH).await.unwrap();
    assert_eq!(store.call_count().unwrap(), 1);

    // Another connection takes the write lock and keeps it.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    for i in 2..12 {
        assert_eq!(
            recorder.record(call(&episode, i)).await,
            Ok(()),
            "calls are acknowledged from the journal"
        );
    }
    assert_eq!(
        recorder.flush(Duration::from_millis(1500)).await,
        Err(RecorderError::FlushTimeout)
    );
    let stats = recorder.stats();
    assert_eq!(stats.store_unavailable.load(Ordering::Relaxed), 1);
    assert!(stats.store_failures.load(Ordering::Relaxed) >= 1);
    assert_eq!(stats.queue_depth(), 10);
    assert!(stats.spool_bytes() > 0);
    assert_eq!(store.call_count().unwrap(), 1);

    // The lock goes away; the next retry copies the journal into the store.
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    recorder.flush(FLUSH).await.unwrap();
    assert_eq!(store.call_count().unwrap(), 11);
    assert_eq!(stats.store_unavailable.load(Ordering::Relaxed), 0);
    assert_eq!(stats.spool_bytes(), 0);
    assert_eq!(stats.queue_depth(), 0);
    recorder.record(call(&episode, 12)).await.unwrap();
    recorder.shutdown().await;
    assert_eq!(store.call_count().unwrap(), 12);
    assert_eq!(store.episode(&episode).unwrap().unwrap().summary.call_count, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_left_by_a_crash_is_copied_at_start_and_a_torn_line_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hone.db");
    let episode = EpisodeId::new_v7();
    {
        let store = Arc::new(SqliteStore::open_with(&path, false, SqliteStore::RECORDING).unwrap());
        // It never retries, so only the next start can copy the journal.
        let recorder = Recorder::start(
            store.clone(),
            RecorderOptions {
                store_retry: Duration::from_secs(3600),
                ..options(dir.path())
            },
        )
        .unwrap();
        let blocker = rusqlite::Connection::open(&path).unwrap();
        blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
        for i in 0..5 {
            recorder.record(call(&episode, i)).await.unwrap();
        }
        // Wait until the writer has given up on the store.
        while recorder.stats().store_unavailable.load(Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Simulate the crash: no shutdown; the recorder is leaked with its thread.
        std::mem::forget(recorder);
        blocker.execute_batch("ROLLBACK").unwrap();
    }
    // The crash also tore an append in half: that call was never acknowledged.
    let files = journal_files(dir.path());
    assert_eq!(files.len(), 1);
    let torn = serde_json::to_string(&call(&episode, 99)).unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(&files[0]).unwrap();
    file.write_all(&torn.as_bytes()[..torn.len() / 2]).unwrap();
    drop(file);

    let store = Arc::new(SqliteStore::open_with(&path, false, SqliteStore::RECORDING).unwrap());
    let recorder = Recorder::start(store.clone(), options(dir.path())).unwrap();
    recorder.flush(FLUSH).await.unwrap();
    assert_eq!(store.call_count().unwrap(), 5);
    assert_eq!(recorder.stats().rows_replayed.load(Ordering::Relaxed), 5);
    recorder.shutdown().await;
    assert!(journal_files(dir.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_journal_line_is_kept_aside_and_does_not_block_recording() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hone.db");
    let episode = EpisodeId::new_v7();
    let journal = dir.path().join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    let line = |i| serde_json::to_string(&call(&episode, i)).unwrap();
    let left = journal.join("000000000001.jsonl");
    std::fs::write(&left, format!("{}\nnot json at all\n{}\n", line(1), line(2))).unwrap();

    let store = Arc::new(SqliteStore::open_with(&path, false, SqliteStore::RECORDING).unwrap());
    let recorder = Recorder::start(store.clone(), options(dir.path())).unwrap();
    recorder.record(call(&episode, 3)).await.unwrap();
    recorder.flush(FLUSH).await.unwrap();
    assert_eq!(
        store.call_count().unwrap(),
        3,
        "the readable lines and new calls are stored"
    );
    assert_eq!(recorder.stats().corrupt_lines.load(Ordering::Relaxed), 1);
    assert_eq!(recorder.stats().store_unavailable.load(Ordering::Relaxed), 0);
    recorder.shutdown().await;
    assert!(!left.exists());
    let kept = journal.join("000000000001.jsonl.corrupt");
    assert!(
        std::fs::read_to_string(kept).unwrap().contains("not json at all"),
        "the damaged file is kept for a human to look at"
    );
}
