//! The durable recorder: journal first, store second.
//!
//! [`Recorder::record`] appends the call to the [journal](crate::journal) —
//! one `write(2)`, no thread hop — and returns; from then on the call survives
//! `kill -9`, so the gateway may deliver the response. A writer thread copies
//! queued calls into the store in large transactions (it lingers a few
//! milliseconds after waking so that a busy gateway commits many calls at a
//! time) and deletes journal segments whose calls are all committed.
//!
//! Reads that must see a call just recorded (feedback naming it, an episode
//! read back) first wait on [`Recorder::flush`], a barrier that asks the
//! writer to commit now.
//!
//! While the store cannot be written the journal simply grows: the writer
//! drops its in-memory queue (everything in it is on disk) and, every
//! `store_retry`, tries to copy the journal into the store; it does the same
//! at start-up for whatever an earlier run left behind. Inserts are
//! idempotent, so copying a call twice is harmless.

use crate::journal::{self, Journal};
use crate::Store;
use hone_types::CallRecord;
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long the writer waits after waking to gather more calls.
const LINGER: Duration = Duration::from_millis(50);
/// Calls per transaction when copying the journal into the store.
const REPLAY_BATCH: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecorderError {
    #[error("the recorder has shut down")]
    Closed,
    #[error("the call could not be written to the journal ({0})")]
    Failed(String),
    #[error("timed out waiting for the store to catch up with the journal (is the database available?)")]
    FlushTimeout,
}

/// Live counters, read by `/metrics` and `/health`.
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Calls appended to the journal (acknowledged) by this process.
    pub rows_journaled: AtomicU64,
    /// Of those, how many are known to be in the store.
    pub rows_committed: AtomicU64,
    /// Rows inserted into the store (journal copies and replays).
    pub rows_written: AtomicU64,
    /// Rows inserted by copying journal files (start-up, after an outage).
    pub rows_replayed: AtomicU64,
    /// Bytes appended to the journal, counting what an earlier run left.
    pub bytes_journaled: AtomicU64,
    /// Of those, how many are known to be in the store.
    pub bytes_committed: AtomicU64,
    pub batches: AtomicU64,
    pub store_failures: AtomicU64,
    /// 1 while the store cannot be written (calls wait in the journal).
    pub store_unavailable: AtomicU64,
    /// Calls that could not be journaled (their requests failed).
    pub lost_and_refused: AtomicU64,
    /// Journal lines left by an earlier run that could not be read (their
    /// files are kept as `*.jsonl.corrupt`).
    pub corrupt_lines: AtomicU64,
}

impl RecorderStats {
    /// Acknowledged calls not yet in the store.
    pub fn queue_depth(&self) -> u64 {
        let journaled = self.rows_journaled.load(Ordering::Relaxed);
        journaled.saturating_sub(self.rows_committed.load(Ordering::Relaxed))
    }

    /// Bytes of acknowledged calls in the journal and not yet in the store
    /// (the "spool").
    pub fn spool_bytes(&self) -> u64 {
        let journaled = self.bytes_journaled.load(Ordering::Relaxed);
        journaled.saturating_sub(self.bytes_committed.load(Ordering::Relaxed))
    }
}

/// Tuning for the recorder.
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    pub journal_dir: PathBuf,
    /// Most calls per store transaction.
    pub max_batch: usize,
    /// How often to retry an unavailable store.
    pub store_retry: Duration,
    /// fsync every journal append (durable against power loss, not only crashes).
    pub full_sync: bool,
}

struct Queued {
    seq: u64,
    segment: u64,
    /// `State::bytes` after this call was appended.
    bytes_end: u64,
    call: CallRecord,
}

struct State {
    journal: Journal,
    /// Sequence number of the last call journaled.
    last_seq: u64,
    /// Bytes appended so far, counting what an earlier run left.
    bytes: u64,
    queue: Vec<Queued>,
    writer_waiting: bool,
    urgent: bool,
    closing: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// The last sequence number known to be in the store; `None` until
    /// what an earlier run left in the journal has been copied.
    committed: watch::Sender<Option<u64>>,
    stats: RecorderStats,
    max_batch: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Handle to the journal and the writer thread; share it behind an `Arc`.
pub struct Recorder {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

impl Recorder {
    /// Opens the journal and starts the writer thread, which first copies
    /// anything an earlier run left in the journal into the store.
    pub fn start(store: Arc<dyn Store>, options: RecorderOptions) -> std::io::Result<Self> {
        let journal = Journal::open(options.journal_dir.clone(), options.full_sync)?;
        let stats = RecorderStats::default();
        let left_over = journal::bytes(journal.dir());
        stats.bytes_journaled.store(left_over, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                journal,
                last_seq: 0,
                bytes: left_over,
                queue: Vec::new(),
                writer_waiting: false,
                urgent: false,
                closing: false,
            }),
            wake: Condvar::new(),
            committed: watch::channel(None).0,
            stats,
            max_batch: options.max_batch.max(1),
        });
        let writer = Writer {
            store,
            shared: shared.clone(),
            dir: options.journal_dir,
            retry: options.store_retry,
            oldest: Cell::new(0),
        };
        let thread = std::thread::Builder::new()
            .name("hone-recorder".into())
            .spawn(move || writer.run())?;
        Ok(Self {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Journals a call. When this returns `Ok` the call survives a crash of
    /// the process; it reaches the store shortly after.
    pub fn record(&self, call: CallRecord) -> Result<(), RecorderError> {
        let stats = &self.shared.stats;
        let refuse = |message: String| {
            stats.lost_and_refused.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %message, "cannot journal a call; its request fails");
            RecorderError::Failed(message)
        };
        let mut line = serde_json::to_vec(&call).map_err(|e| refuse(e.to_string()))?;
        line.push(b'\n');
        let mut state = self.shared.lock();
        if state.closing {
            return Err(RecorderError::Closed);
        }
        let segment = state.journal.append(&line).map_err(|e| refuse(e.to_string()))?;
        state.last_seq += 1;
        state.bytes += line.len() as u64;
        let (seq, bytes_end) = (state.last_seq, state.bytes);
        state.queue.push(Queued {
            seq,
            segment,
            bytes_end,
            call,
        });
        let wake = state.writer_waiting || state.queue.len() == self.shared.max_batch;
        drop(state);
        stats.rows_journaled.fetch_add(1, Ordering::Relaxed);
        stats.bytes_journaled.fetch_add(line.len() as u64, Ordering::Relaxed);
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    /// Waits until every call journaled before this point is in the store.
    pub async fn flush(&self, timeout: Duration) -> Result<(), RecorderError> {
        let target = {
            let mut state = self.shared.lock();
            if !state.queue.is_empty() {
                state.urgent = true;
                self.shared.wake.notify_one();
            }
            state.last_seq
        };
        let mut committed = self.shared.committed.subscribe();
        let waited = tokio::time::timeout(timeout, committed.wait_for(|c| c.is_some_and(|c| c >= target)))
            .await
            .map(|r| r.map(|_| ()));
        match waited {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(RecorderError::Closed),
            Err(_) => Err(RecorderError::FlushTimeout),
        }
    }

    /// Whether every call journaled so far (also by earlier runs) is in the store.
    pub fn is_caught_up(&self) -> bool {
        let last = self.shared.lock().last_seq;
        self.shared.committed.borrow().is_some_and(|c| c >= last)
    }

    pub fn stats(&self) -> &RecorderStats {
        &self.shared.stats
    }

    /// Refuses new calls, copies everything journaled into the store (when it
    /// is available; otherwise the journal keeps it for the next start), and
    /// stops the writer thread.
    pub async fn shutdown(&self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

struct Writer {
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    dir: PathBuf,
    retry: Duration,
    /// Segments below this one are known to be deleted.
    oldest: Cell<u64>,
}

impl Writer {
    fn run(self) {
        let mut available = self.catch_up();
        let mut last_try = Instant::now();
        loop {
            let closing = if available {
                let (batch, closing) = self.next_batch();
                if let Err(e) = self.write(batch) {
                    self.shared.stats.store_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, "store write failed; calls wait in the journal until it recovers");
                    self.set_available(false);
                    available = false;
                    last_try = Instant::now();
                }
                closing
            } else {
                // Whatever is queued meanwhile is in the journal already;
                // catching up copies it from there.
                let closing = self.wait_until(last_try + self.retry);
                available = self.catch_up();
                last_try = Instant::now();
                closing
            };
            if closing {
                if !available {
                    available = self.catch_up();
                }
                if available {
                    // Everything journaled is committed: the journal can go.
                    let next = self.shared.lock().journal.segment() + 1;
                    self.remove_segments_before(next);
                    self.shared.committed.send_replace(Some(u64::MAX));
                }
                return;
            }
        }
    }

    /// Waits for calls (or shutdown), lingers briefly to gather more, and
    /// takes the queue. Returns whether the recorder is closing.
    fn next_batch(&self) -> (Vec<Queued>, bool) {
        let mut state = self.shared.lock();
        while state.queue.is_empty() && !state.closing {
            state.writer_waiting = true;
            state = self
                .shared
                .wake
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state.writer_waiting = false;
        }
        if !state.urgent && !state.closing && state.queue.len() < self.shared.max_batch {
            state = self
                .shared
                .wake
                .wait_timeout(state, LINGER)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        state.urgent = false;
        (std::mem::take(&mut state.queue), state.closing)
    }

    /// Sleeps until `deadline` or shutdown; returns whether closing.
    fn wait_until(&self, deadline: Instant) -> bool {
        let mut state = self.shared.lock();
        loop {
            let now = Instant::now();
            if state.closing || now >= deadline {
                return state.closing;
            }
            state = self
                .shared
                .wake
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Commits a batch in transactions of at most `max_batch` calls.
    fn write(&self, batch: Vec<Queued>) -> Result<(), crate::StoreError> {
        let stats = &self.shared.stats;
        let mut calls = Vec::with_capacity(batch.len().min(self.shared.max_batch));
        let mut iter = batch.into_iter().peekable();
        while iter.peek().is_some() {
            calls.clear();
            let mut last = (0, 0, 0);
            for queued in iter.by_ref().take(self.shared.max_batch) {
                last = (queued.seq, queued.bytes_end, queued.segment);
                calls.push(queued.call);
            }
            let written = self.store.write_calls(&calls)?;
            stats.rows_written.fetch_add(written as u64, Ordering::Relaxed);
            stats.batches.fetch_add(1, Ordering::Relaxed);
            self.committed(last.0, last.1);
            // Calls are queued in journal order: older segments are done.
            self.remove_segments_before(last.2);
        }
        Ok(())
    }

    /// Copies every journal segment into the store. Returns whether the store
    /// took them all.
    fn catch_up(&self) -> bool {
        let (upto, bytes, current) = {
            let mut state = self.shared.lock();
            state.queue.clear();
            (state.last_seq, state.bytes, state.journal.segment())
        };
        let result = (|| {
            let mut replayed = 0;
            for (segment, path) in
                journal::segments(&self.dir).map_err(|e| crate::StoreError::Unavailable(e.to_string()))?
            {
                if segment > current {
                    break;
                }
                let read = journal::read_segment(&path)
                    .map_err(|e| crate::StoreError::Unavailable(format!("journal {}: {e}", path.display())))?;
                for chunk in read.calls.chunks(REPLAY_BATCH) {
                    replayed += self.store.write_calls(chunk)? as u64;
                }
                if !read.bad_lines.is_empty() && segment < current {
                    self.quarantine(&path, &read.bad_lines);
                }
            }
            Ok::<_, crate::StoreError>(replayed)
        })();
        match result {
            Ok(replayed) => {
                if replayed > 0 {
                    tracing::info!(calls = replayed, "copied calls from the journal into the store");
                }
                let stats = &self.shared.stats;
                stats.rows_replayed.fetch_add(replayed, Ordering::Relaxed);
                stats.rows_written.fetch_add(replayed, Ordering::Relaxed);
                self.committed(upto, bytes);
                self.remove_segments_before(current);
                self.set_available(true);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "the store is still unavailable; calls wait in the journal");
                self.set_available(false);
                false
            }
        }
    }

    /// Keeps a segment with unreadable lines out of the way, loudly, so that
    /// it neither blocks the journal nor disappears.
    fn quarantine(&self, path: &std::path::Path, bad_lines: &[usize]) {
        let stats = &self.shared.stats;
        stats.corrupt_lines.fetch_add(bad_lines.len() as u64, Ordering::Relaxed);
        match journal::quarantine(path) {
            Ok(kept) => {
                tracing::error!(file = %kept.display(), lines = ?bad_lines, "journal lines that cannot be read were not stored; the file is kept for inspection")
            }
            Err(e) => {
                tracing::error!(file = %path.display(), lines = ?bad_lines, error = %e, "journal lines that cannot be read were not stored, and the file cannot be moved aside")
            }
        }
    }

    fn committed(&self, seq: u64, bytes: u64) {
        self.shared.stats.rows_committed.fetch_max(seq, Ordering::Relaxed);
        self.shared.stats.bytes_committed.fetch_max(bytes, Ordering::Relaxed);
        self.shared.committed.send_if_modified(|c| {
            let advanced = c.is_none_or(|c| seq > c);
            if advanced {
                *c = Some(seq);
            }
            advanced
        });
    }

    fn set_available(&self, available: bool) {
        let flag = u64::from(!available);
        self.shared.stats.store_unavailable.store(flag, Ordering::Relaxed);
    }

    fn remove_segments_before(&self, segment: u64) {
        if segment <= self.oldest.get() {
            return;
        }
        self.oldest.set(segment);
        if let Err(e) = journal::remove_before(&self.dir, segment) {
            tracing::warn!(error = %e, "cannot delete a committed journal segment; it will be copied again at the next start");
        }
    }
}
