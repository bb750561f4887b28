//! The durable recorder: group commit of calls into the store.
//!
//! Handlers hand a call to [`Recorder::record`] and wait; one writer thread
//! takes everything queued, writes it in a single transaction, and then
//! acknowledges each waiter. A response is sent to the client only after its
//! call is acknowledged, so a delivered response is on disk even after
//! `kill -9`. If the database cannot be written, batches go to the disk spool
//! (and are acknowledged from there); the spool is replayed into the store as
//! soon as a retry succeeds, and at the next start.

use crate::spool::Spool;
use crate::Store;
use hone_types::CallRecord;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Where an acknowledged call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Committed to the store.
    Stored,
    /// On disk in the spool, waiting for the store to return.
    Spooled,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecorderError {
    #[error("the recorder has shut down")]
    Closed,
    #[error("the call could not be recorded: the database and the spool both failed ({0})")]
    Failed(String),
}

/// Live counters, read by `/metrics`.
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Calls handed over and not yet written or spooled.
    pub queue_depth: AtomicI64,
    pub rows_written: AtomicU64,
    pub rows_spooled: AtomicU64,
    pub rows_replayed: AtomicU64,
    pub spool_bytes: AtomicU64,
    pub batches: AtomicU64,
    pub store_failures: AtomicU64,
    /// Calls that could be neither stored nor spooled (their requests failed).
    pub lost_and_refused: AtomicU64,
}

enum Job {
    Call(
        Box<CallRecord>,
        Option<oneshot::Sender<Result<Durability, RecorderError>>>,
    ),
    Shutdown(oneshot::Sender<()>),
}

/// Handle to the writer thread; cheap to share behind an `Arc`.
pub struct Recorder {
    sender: mpsc::Sender<Job>,
    stats: Arc<RecorderStats>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

/// Tuning for the writer thread.
#[derive(Debug, Clone)]
pub struct RecorderOptions {
    pub spool_dir: PathBuf,
    pub max_batch: usize,
    pub spool_retry: Duration,
    pub full_sync: bool,
}

impl Recorder {
    /// Starts the writer thread. Calls left in the spool by an earlier run are
    /// replayed first (or as soon as the store accepts them).
    pub fn start(store: Arc<dyn Store>, options: RecorderOptions) -> std::io::Result<Self> {
        let spool = Spool::new(options.spool_dir.clone(), options.full_sync)?;
        let stats = Arc::new(RecorderStats::default());
        stats.spool_bytes.store(spool.bytes(), Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel();
        let writer = Writer {
            store,
            spool,
            stats: stats.clone(),
            max_batch: options.max_batch.max(1),
            retry: options.spool_retry,
        };
        let thread = std::thread::Builder::new()
            .name("hone-recorder".into())
            .spawn(move || writer.run(receiver))?;
        Ok(Self {
            sender,
            stats,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Records a call and waits until it is durable (stored or spooled).
    pub async fn record(&self, call: CallRecord) -> Result<Durability, RecorderError> {
        let (ack, done) = oneshot::channel();
        self.stats.queue_depth.fetch_add(1, Ordering::Relaxed);
        if self.sender.send(Job::Call(Box::new(call), Some(ack))).is_err() {
            self.stats.queue_depth.fetch_sub(1, Ordering::Relaxed);
            return Err(RecorderError::Closed);
        }
        done.await.unwrap_or(Err(RecorderError::Closed))
    }

    /// Records a call without waiting (nobody is there to tell, e.g. after a
    /// client disconnect). It is still written before shutdown completes.
    pub fn submit(&self, call: CallRecord) {
        self.stats.queue_depth.fetch_add(1, Ordering::Relaxed);
        if self.sender.send(Job::Call(Box::new(call), None)).is_err() {
            self.stats.queue_depth.fetch_sub(1, Ordering::Relaxed);
            tracing::error!("recorder already shut down; a call could not be recorded");
        }
    }

    pub fn stats(&self) -> &RecorderStats {
        &self.stats
    }

    /// Writes everything queued, replays the spool if the store is back, and
    /// stops the writer thread. Calls submitted afterwards are refused.
    pub async fn shutdown(&self) {
        let (ack, done) = oneshot::channel();
        if self.sender.send(Job::Shutdown(ack)).is_ok() {
            let _ = done.await;
        }
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
    spool: Spool,
    stats: Arc<RecorderStats>,
    max_batch: usize,
    retry: Duration,
}

type Batch = Vec<(
    Box<CallRecord>,
    Option<oneshot::Sender<Result<Durability, RecorderError>>>,
)>;

impl Writer {
    fn run(mut self, receiver: mpsc::Receiver<Job>) {
        let mut degraded = !self.try_replay();
        let mut last_retry = Instant::now();
        loop {
            let first = if degraded {
                let wait = self.retry.saturating_sub(last_retry.elapsed());
                match receiver.recv_timeout(wait) {
                    Ok(job) => Some(job),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match receiver.recv() {
                    Ok(job) => Some(job),
                    Err(_) => return,
                }
            };
            if degraded && last_retry.elapsed() >= self.retry {
                degraded = !self.try_replay();
                last_retry = Instant::now();
            }
            let mut batch: Batch = Vec::new();
            let mut shutdown = None;
            match first {
                None => continue,
                Some(Job::Shutdown(ack)) => shutdown = Some(ack),
                Some(Job::Call(call, ack)) => batch.push((call, ack)),
            }
            // Group commit: take whatever else is already waiting.
            while shutdown.is_some() || batch.len() < self.max_batch {
                match receiver.try_recv() {
                    Ok(Job::Call(call, ack)) => batch.push((call, ack)),
                    Ok(Job::Shutdown(ack)) => shutdown = Some(ack),
                    Err(_) => break,
                }
                if shutdown.is_none() && batch.len() >= self.max_batch {
                    break;
                }
            }
            for chunk in batch_chunks(batch, self.max_batch) {
                degraded = self.write(chunk, degraded);
            }
            if let Some(ack) = shutdown {
                if degraded {
                    self.try_replay();
                }
                let _ = ack.send(());
                return;
            }
        }
    }

    /// Writes one batch; returns whether the recorder is (now) degraded.
    fn write(&mut self, batch: Batch, degraded: bool) -> bool {
        let (calls, acks): (Vec<CallRecord>, Vec<_>) = batch.into_iter().map(|(c, a)| (*c, a)).unzip();
        let count = calls.len() as i64;
        let mut now_degraded = degraded;
        let result = if degraded {
            self.spool_calls(&calls)
        } else {
            match self.store.write_calls(&calls) {
                Ok(_) => {
                    self.stats.rows_written.fetch_add(count as u64, Ordering::Relaxed);
                    Ok(Durability::Stored)
                }
                Err(e) => {
                    self.stats.store_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, calls = count, "store write failed; spooling to disk until it recovers");
                    now_degraded = true;
                    self.spool_calls(&calls)
                }
            }
        };
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats.queue_depth.fetch_sub(count, Ordering::Relaxed);
        if result.is_err() {
            self.stats.lost_and_refused.fetch_add(count as u64, Ordering::Relaxed);
        }
        for ack in acks.into_iter().flatten() {
            let _ = ack.send(result.clone());
        }
        now_degraded
    }

    fn spool_calls(&mut self, calls: &[CallRecord]) -> Result<Durability, RecorderError> {
        match self.spool.append(calls) {
            Ok(()) => {
                self.stats.rows_spooled.fetch_add(calls.len() as u64, Ordering::Relaxed);
                self.stats.spool_bytes.store(self.spool.bytes(), Ordering::Relaxed);
                Ok(Durability::Spooled)
            }
            Err(e) => {
                tracing::error!(error = %e, calls = calls.len(), "cannot write the spool either; refusing these calls");
                Err(RecorderError::Failed(e.to_string()))
            }
        }
    }

    /// Replays the spool; returns true when it is empty afterwards.
    fn try_replay(&mut self) -> bool {
        if self.spool.files().map(|f| f.is_empty()).unwrap_or(false) {
            return true;
        }
        let result = self.spool.replay(self.store.as_ref());
        self.stats.spool_bytes.store(self.spool.bytes(), Ordering::Relaxed);
        match result {
            Ok(n) => {
                if n > 0 {
                    tracing::info!(calls = n, "replayed spooled calls into the store");
                }
                self.stats.rows_replayed.fetch_add(n, Ordering::Relaxed);
                self.stats.rows_written.fetch_add(n, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "store still unavailable; calls stay in the spool");
                false
            }
        }
    }
}

fn batch_chunks(mut batch: Batch, size: usize) -> Vec<Batch> {
    let mut out = Vec::new();
    while batch.len() > size {
        let rest = batch.split_off(size);
        out.push(std::mem::replace(&mut batch, rest));
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}
