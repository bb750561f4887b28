//! The appender thread: the only code that writes the journal. It takes every
//! call waiting in its channel, writes them with one append, registers them
//! for the writer and acknowledges them. After a failed append it probes the
//! journal every second so that the gateway learns when it may take calls
//! again without having to risk one.

use super::{Entry, Queued, RecorderError, Shared};
use crate::journal::Journal;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// Most calls written by one append.
const MAX_GROUP: usize = 512;
/// How often a failing journal is probed.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// Fault injection for tests of a stalled disk: while the file this names
/// exists, every append waits (as a `write(2)` on a frozen filesystem would).
const STALL_ENV: &str = "HONE_FAULT_JOURNAL_STALL";

pub(super) struct Appender {
    journal: Journal,
    shared: Arc<Shared>,
    receiver: Receiver<Entry>,
    stall_while: Option<PathBuf>,
}

impl Appender {
    pub(super) fn new(journal: Journal, shared: Arc<Shared>, receiver: Receiver<Entry>) -> Self {
        Self {
            journal,
            shared,
            receiver,
            stall_while: std::env::var_os(STALL_ENV).map(PathBuf::from),
        }
    }

    pub(super) fn run(mut self) {
        loop {
            let first = if self.shared.failing.load(Ordering::Relaxed) {
                match self.receiver.recv_timeout(PROBE_EVERY) {
                    Ok(entry) => entry,
                    Err(RecvTimeoutError::Timeout) => {
                        self.probe();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match self.receiver.recv() {
                    Ok(entry) => entry,
                    Err(_) => return,
                }
            };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match self.receiver.try_recv() {
                    Ok(entry) => group.push(entry),
                    Err(_) => break,
                }
            }
            self.append(group);
        }
    }

    fn append(&mut self, group: Vec<Entry>) {
        let lines: Vec<u8> = group.iter().flat_map(|e| e.line.iter().copied()).collect();
        let result = self.write(&lines);
        let stats = &self.shared.stats;
        match result {
            Ok(segment) => {
                let mut state = self.shared.lock();
                state.segment = segment;
                let mut acks = Vec::with_capacity(group.len());
                for entry in group {
                    state.last_seq += 1;
                    state.bytes += entry.line.len() as u64;
                    let (seq, bytes_end) = (state.last_seq, state.bytes);
                    state.queue.push(Queued {
                        seq,
                        segment,
                        bytes_end,
                        call: entry.call,
                    });
                    acks.push(entry.ack);
                }
                let wake = state.writer_waiting || state.queue.len() >= self.shared.max_batch;
                drop(state);
                stats.rows_journaled.fetch_add(acks.len() as u64, Ordering::Relaxed);
                stats.bytes_journaled.fetch_add(lines.len() as u64, Ordering::Relaxed);
                if wake {
                    self.shared.wake.notify_one();
                }
                for ack in acks {
                    let _ = ack.send(Ok(()));
                }
            }
            Err(error) => {
                let message = error.to_string();
                stats.lost_and_refused.fetch_add(group.len() as u64, Ordering::Relaxed);
                tracing::error!(error = %message, calls = group.len(), "cannot journal calls; their requests fail");
                for entry in group {
                    let _ = entry.ack.send(Err(RecorderError::Failed(message.clone())));
                }
            }
        }
    }

    /// Appends with the stall clock running; records whether it worked.
    fn write(&mut self, lines: &[u8]) -> std::io::Result<u64> {
        self.shared
            .append_started_ms
            .store(self.shared.now_ms(), Ordering::Relaxed);
        if let Some(stall) = &self.stall_while {
            while stall.exists() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let result = self.journal.append(lines);
        self.shared.append_started_ms.store(0, Ordering::Relaxed);
        match &result {
            Ok(_) => {
                if self.shared.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the journal takes calls again");
                }
            }
            Err(error) => {
                self.shared.stats.append_failures.fetch_add(1, Ordering::Relaxed);
                *self
                    .shared
                    .last_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = error.to_string();
                self.shared.failing.store(true, Ordering::Relaxed);
            }
        }
        result
    }

    /// Tries an append that carries no call (a blank line, which readers
    /// skip) to learn whether the journal can be written again.
    fn probe(&mut self) {
        if let Ok(segment) = self.write(b"\n") {
            self.shared.lock().segment = segment;
        }
    }
}
