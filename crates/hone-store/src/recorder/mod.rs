//! The durable recorder: journal first, store second.
//!
//! [`Recorder::record`] hands the call to the *appender* thread, which writes
//! it to the [journal](crate::journal) — grouping every call that arrived
//! meanwhile into one `write(2)` — and acknowledges it; from then on the call
//! survives `kill -9`, so the gateway may deliver the response. The event
//! loop never touches the disk: a stalled filesystem stalls only the
//! appender, callers wait at most `ack_timeout` (and at most `queue` of them
//! wait at all: back-pressure), and [`Recorder::journal_state`] says so, so
//! `/health` can tell the truth and the gateway can refuse a call before it
//! pays an upstream for a response it could not record.
//!
//! The *writer* thread copies acknowledged calls into the store in large
//! transactions and deletes journal segments once every call in them is
//! committed. Reads that must see a call just recorded first wait on
//! [`Recorder::flush`]. While the store cannot be written the journal simply
//! grows; the writer retries every `store_retry`, and at start-up copies
//! whatever an earlier run left. Inserts are idempotent, so copying a call
//! twice is harmless.

mod appender;
mod writer;

use crate::journal::{self, Journal};
use crate::Store;
use hone_types::CallRecord;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch, Semaphore};

/// The largest call recorded, as journaled JSON: far below what either
/// backend takes in one value (1 GB), so that no single call can be
/// journaled and then refused by the store. The gateway keeps requests and
/// answers well under it (`gateway.max_body_bytes`, the answer limit).
pub const MAX_RECORD_BYTES: usize = 256 << 20;

/// An append still unfinished after this long means the disk is stalled.
const STALLED_AFTER: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecorderError {
    #[error("the recorder has shut down")]
    Closed,
    #[error("the call could not be written to the journal ({0})")]
    Failed(String),
    #[error("the journal did not accept the call in time (is the disk stalled?)")]
    Stalled,
    #[error("timed out waiting for the store to catch up with the journal (is the database available?)")]
    FlushTimeout,
    #[error("the call is {bytes} bytes as recorded, over the limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
}

/// Whether the journal can take calls now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalState {
    Writable,
    /// The last append (or probe) failed; the appender probes every second.
    Failing {
        error: String,
    },
    /// An append has been in progress for this long.
    Stalled {
        for_ms: u64,
    },
}

impl JournalState {
    pub fn is_writable(&self) -> bool {
        matches!(self, Self::Writable)
    }
}

impl std::fmt::Display for JournalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Writable => write!(f, "the journal is writable"),
            Self::Failing { error } => write!(f, "the journal cannot be written ({error})"),
            Self::Stalled { for_ms } => write!(f, "a journal write has been stuck for {for_ms} ms"),
        }
    }
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
    /// Calls whose append was not confirmed within `ack_timeout` (their
    /// requests failed; the append may still complete later).
    pub ack_timeouts: AtomicU64,
    /// Failed journal appends (each cut back to the last whole line).
    pub append_failures: AtomicU64,
    /// Calls the database refused for what they hold, kept aside under
    /// `journal/refused/` instead of the store.
    pub rows_refused: AtomicU64,
    /// Journal lines left by an earlier run that could not be read (their
    /// files are kept as `*.jsonl.corrupt`).
    pub corrupt_lines: AtomicU64,
    /// Torn fragments skipped when reading the journal back (appends that
    /// were never acknowledged).
    pub torn_fragments: AtomicU64,
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

impl RecorderOptions {
    /// Calls that may wait for the appender at once; more callers wait for a slot.
    const QUEUE: usize = 4096;
    /// How long a caller waits for its call to be journaled before giving up.
    const ACK_TIMEOUT: Duration = Duration::from_secs(5);
}

/// A call on its way to the journal.
struct Entry {
    line: Vec<u8>,
    call: CallRecord,
    ack: oneshot::Sender<Result<(), RecorderError>>,
    /// Held until the call is journaled: the back-pressure slot.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

/// A journaled call waiting for the writer.
struct Queued {
    seq: u64,
    segment: u64,
    /// `State::bytes` after this call was appended.
    bytes_end: u64,
    call: CallRecord,
}

/// What the appender and the writer share (never held across disk I/O).
struct State {
    /// The segment the appender writes to.
    segment: u64,
    /// Sequence number of the last call journaled.
    last_seq: u64,
    /// Bytes appended so far, counting what an earlier run left.
    bytes: u64,
    queue: Vec<Queued>,
    writer_waiting: bool,
    urgent: bool,
    /// Set once the appender has stopped: the writer finishes and exits.
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
    /// When the append in progress started (ms since `epoch`, 0 when none).
    append_started_ms: AtomicU64,
    /// Since when the store cannot be written (ms since `epoch`, 0 while it can).
    unavailable_since_ms: AtomicU64,
    epoch: Instant,
    failing: AtomicBool,
    last_error: Mutex<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        // Never 0, which means "no append in progress".
        self.epoch.elapsed().as_millis() as u64 + 1
    }
}

/// Handle to the journal and the recorder's threads; share it behind an `Arc`.
pub struct Recorder {
    shared: Arc<Shared>,
    sender: Mutex<Option<mpsc::Sender<Entry>>>,
    slots: Arc<Semaphore>,
    appender: Mutex<Option<JoinHandle<()>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
}

impl Recorder {
    /// Opens the journal and starts the appender and the writer, which first
    /// copies anything an earlier run left in the journal into the store.
    pub fn start(store: Arc<dyn Store>, options: RecorderOptions) -> std::io::Result<Self> {
        let journal = Journal::open(options.journal_dir.clone(), options.full_sync)?;
        let stats = RecorderStats::default();
        let left_over = journal::bytes(journal.dir());
        stats.bytes_journaled.store(left_over, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                segment: journal.segment(),
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
            append_started_ms: AtomicU64::new(0),
            unavailable_since_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            failing: AtomicBool::new(false),
            last_error: Mutex::new(String::new()),
        });
        let (sender, receiver) = mpsc::channel();
        let appender = appender::Appender::new(journal, shared.clone(), receiver);
        let appender = std::thread::Builder::new()
            .name("hone-journal".into())
            .spawn(move || appender.run())?;
        let writer = writer::Writer::new(store, shared.clone(), options.journal_dir, options.store_retry);
        let writer = std::thread::Builder::new()
            .name("hone-recorder".into())
            .spawn(move || writer.run())?;
        Ok(Self {
            shared,
            sender: Mutex::new(Some(sender)),
            slots: Arc::new(Semaphore::new(RecorderOptions::QUEUE)),
            appender: Mutex::new(Some(appender)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Journals a call. When this returns `Ok` the call survives a crash of
    /// the process; it reaches the store shortly after. Waits at most a few
    /// seconds: a stalled disk fails the call with [`RecorderError::Stalled`].
    pub async fn record(&self, call: CallRecord) -> Result<(), RecorderError> {
        let stats = &self.shared.stats;
        let mut line = serde_json::to_vec(&call).map_err(|e| {
            stats.lost_and_refused.fetch_add(1, Ordering::Relaxed);
            RecorderError::Failed(e.to_string())
        })?;
        line.push(b'\n');
        if line.len() > MAX_RECORD_BYTES {
            stats.lost_and_refused.fetch_add(1, Ordering::Relaxed);
            return Err(RecorderError::TooLarge {
                bytes: line.len(),
                limit: MAX_RECORD_BYTES,
            });
        }
        let deadline = tokio::time::Instant::now() + RecorderOptions::ACK_TIMEOUT;
        let stalled = || {
            stats.ack_timeouts.fetch_add(1, Ordering::Relaxed);
            tracing::error!("the journal did not take a call in time; its request fails");
            RecorderError::Stalled
        };
        let slot = tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| stalled())?
            .map_err(|_| RecorderError::Closed)?;
        let (ack, acked) = oneshot::channel();
        let entry = Entry {
            line,
            call,
            ack,
            _slot: slot,
        };
        {
            let sender = self.sender.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let sender = sender.as_ref().ok_or(RecorderError::Closed)?;
            sender.send(entry).map_err(|_| RecorderError::Closed)?;
        }
        match tokio::time::timeout_at(deadline, acked).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(RecorderError::Closed),
            Err(_) => Err(stalled()),
        }
    }

    /// Whether a call handed to [`Recorder::record`] now would be journaled.
    pub fn journal_state(&self) -> JournalState {
        let started = self.shared.append_started_ms.load(Ordering::Relaxed);
        if started != 0 {
            let for_ms = self.shared.now_ms().saturating_sub(started);
            if for_ms >= STALLED_AFTER.as_millis() as u64 {
                return JournalState::Stalled { for_ms };
            }
        }
        if self.shared.failing.load(Ordering::Relaxed) {
            let error = self
                .shared
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            return JournalState::Failing { error };
        }
        JournalState::Writable
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

    /// How long the store has been refusing writes (calls wait in the
    /// journal meanwhile); `None` while it takes them.
    pub fn store_behind_for(&self) -> Option<Duration> {
        let since = self.shared.unavailable_since_ms.load(Ordering::Relaxed);
        (since != 0).then(|| Duration::from_millis(self.shared.now_ms().saturating_sub(since)))
    }

    /// Whether every call journaled so far (also by earlier runs) is in the store.
    pub fn is_caught_up(&self) -> bool {
        let last = self.shared.lock().last_seq;
        self.shared.committed.borrow().is_some_and(|c| c >= last)
    }

    pub fn stats(&self) -> &RecorderStats {
        &self.shared.stats
    }

    /// Refuses new calls, journals those already handed over, copies
    /// everything journaled into the store (when it is available; otherwise
    /// the journal keeps it for the next start), and stops both threads.
    pub async fn shutdown(&self) {
        drop(take(&self.sender));
        self.slots.close();
        if let Some(appender) = take(&self.appender) {
            let _ = tokio::task::spawn_blocking(move || appender.join()).await;
        }
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(writer) = take(&self.writer) {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
    }
}
