//! The disk spool: while the database cannot be written, the recorder appends
//! calls here as JSON lines, and replays the files in order when it returns.
//! A spooled call counts as recorded: it is on disk before it is acknowledged.

use crate::{Store, StoreError};
use hone_types::CallRecord;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// Calls replayed per transaction.
const REPLAY_BATCH: usize = 512;

pub(crate) struct Spool {
    dir: PathBuf,
    full_sync: bool,
    current: Option<(PathBuf, File)>,
    sequence: u64,
}

impl Spool {
    pub(crate) fn new(dir: PathBuf, full_sync: bool) -> std::io::Result<Self> {
        fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            full_sync,
            current: None,
            sequence: 0,
        })
    }

    /// Spool files waiting for replay, oldest first.
    pub(crate) fn files(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut files: Vec<PathBuf> = fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        Ok(files)
    }

    /// Bytes waiting on disk.
    pub(crate) fn bytes(&self) -> u64 {
        self.files()
            .unwrap_or_default()
            .iter()
            .filter_map(|p| fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Appends calls; they are on disk (and fsynced with `full_sync`) on return.
    pub(crate) fn append(&mut self, calls: &[CallRecord]) -> std::io::Result<()> {
        let mut buffer = Vec::with_capacity(calls.len() * 2048);
        for call in calls {
            serde_json::to_writer(&mut buffer, call)?;
            buffer.push(b'\n');
        }
        if self.current.is_none() {
            self.sequence += 1;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default();
            let path = self.dir.join(format!("spool-{now:015}-{:06}.jsonl", self.sequence));
            let file = OpenOptions::new().create(true).append(true).open(&path)?;
            self.current = Some((path, file));
        }
        if let Some((_, file)) = self.current.as_mut() {
            file.write_all(&buffer)?;
            if self.full_sync {
                file.sync_data()?;
            }
        }
        Ok(())
    }

    /// Moves every spooled call into the store, deleting each file once its
    /// calls are committed. Returns how many calls were replayed. Stops at the
    /// first store error, leaving the rest for the next try.
    pub(crate) fn replay(&mut self, store: &dyn Store) -> Result<u64, StoreError> {
        self.current = None;
        let mut replayed = 0;
        for path in self
            .files()
            .map_err(|e| StoreError::Unavailable(format!("spool: {e}")))?
        {
            let calls = read_spool_file(&path)?;
            for chunk in calls.chunks(REPLAY_BATCH) {
                store.write_calls(chunk)?;
            }
            replayed += calls.len() as u64;
            fs::remove_file(&path)
                .map_err(|e| StoreError::Unavailable(format!("spool: cannot remove {}: {e}", path.display())))?;
        }
        Ok(replayed)
    }
}

/// Reads one spool file. A torn last line (a crash in the middle of an append,
/// so never acknowledged) is skipped with a warning; any other bad line is an
/// error so that nothing is silently dropped.
fn read_spool_file(path: &Path) -> Result<Vec<CallRecord>, StoreError> {
    let file =
        File::open(path).map_err(|e| StoreError::Unavailable(format!("spool: cannot open {}: {e}", path.display())))?;
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| StoreError::Unavailable(format!("spool: cannot read {}: {e}", path.display())))?;
    let mut calls = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(call) => calls.push(call),
            Err(e) if i + 1 == lines.len() => {
                tracing::warn!(file = %path.display(), line = i + 1, error = %e, "skipping a torn last line in the spool (it was never acknowledged)");
            }
            Err(e) => {
                return Err(StoreError::Corrupt(format!(
                    "spool file {} line {}: {e}",
                    path.display(),
                    i + 1
                )));
            }
        }
    }
    Ok(calls)
}
