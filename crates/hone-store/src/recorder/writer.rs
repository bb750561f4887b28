//! The writer thread: copies journaled calls into the store in large
//! transactions (lingering a few milliseconds after waking so that a busy
//! gateway commits many calls at a time), deletes journal segments whose
//! calls are all committed, and while the store is unavailable retries by
//! copying the journal itself. A call the database refuses for what it
//! holds ([`StoreError::Refused`]) is set aside under `journal/refused/`,
//! loudly and counted, and everything after it is stored: one bad call
//! never holds up the rest.

use super::{Queued, Shared};
use crate::journal;
use crate::{Store, StoreError};
use hone_types::CallRecord;
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the writer waits after waking to gather more calls.
const LINGER: Duration = Duration::from_millis(50);
/// Calls per transaction when copying the journal into the store.
const REPLAY_BATCH: usize = 512;

pub(super) struct Writer {
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    dir: PathBuf,
    retry: Duration,
    /// Segments below this one are known to be deleted.
    oldest: Cell<u64>,
}

impl Writer {
    pub(super) fn new(store: Arc<dyn Store>, shared: Arc<Shared>, dir: PathBuf, retry: Duration) -> Self {
        Self {
            store,
            shared,
            dir,
            retry,
            oldest: Cell::new(0),
        }
    }

    pub(super) fn run(self) {
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
                    let next = self.shared.lock().segment + 1;
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
            let written = self.store_calls(&calls)?;
            stats.rows_written.fetch_add(written as u64, Ordering::Relaxed);
            stats.batches.fetch_add(1, Ordering::Relaxed);
            // Calls are queued in journal order: older segments are done.
            self.remove_segments_before(last.2);
            self.committed(last.0, last.1);
        }
        Ok(())
    }

    /// Copies every journal segment into the store. Returns whether the store
    /// took them all.
    fn catch_up(&self) -> bool {
        let (upto, bytes, current) = {
            let mut state = self.shared.lock();
            state.queue.clear();
            (state.last_seq, state.bytes, state.segment)
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
                if segment < current {
                    let torn = read.torn as u64;
                    self.shared.stats.torn_fragments.fetch_add(torn, Ordering::Relaxed);
                }
                for chunk in read.calls.chunks(REPLAY_BATCH) {
                    replayed += self.store_calls(chunk)? as u64;
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
                // Waiters on `committed` see the recorder as it now is.
                self.remove_segments_before(current);
                self.set_available(true);
                self.committed(upto, bytes);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "the store is still unavailable; calls wait in the journal");
                self.set_available(false);
                false
            }
        }
    }

    /// Writes `calls` in one transaction; if the database refuses one of
    /// them, writes them one by one and sets aside each call it refuses.
    fn store_calls(&self, calls: &[CallRecord]) -> Result<usize, StoreError> {
        match self.store.write_calls(calls) {
            Err(StoreError::Refused(_)) => {}
            other => return other,
        }
        let mut written = 0;
        for call in calls {
            match self.store.write_calls(std::slice::from_ref(call)) {
                Ok(n) => written += n,
                Err(StoreError::Refused(why)) => self.set_aside(call, &why)?,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// Keeps a call the database refused out of the store, in a file of its
    /// own. If even that cannot be written (a full disk), the call stays in
    /// the journal and is tried again later, like an unavailable store.
    fn set_aside(&self, call: &CallRecord, why: &str) -> Result<(), StoreError> {
        let kept = journal::set_aside(&self.dir, call).map_err(|e| {
            StoreError::Unavailable(format!(
                "the database refuses call {} ({why}) and it cannot be set aside: {e}",
                call.id
            ))
        })?;
        self.shared.stats.rows_refused.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            call = %call.id,
            agent = %call.agent,
            episode = %call.episode_id,
            file = %kept.display(),
            reason = why,
            "the database refused a call; it is kept aside and every later call is stored"
        );
        Ok(())
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
        let since = &self.shared.unavailable_since_ms;
        if available {
            since.store(0, Ordering::Relaxed);
        } else {
            let _ = since.compare_exchange(0, self.shared.now_ms(), Ordering::Relaxed, Ordering::Relaxed);
        }
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
