//! The recorder's journal: calls appended as JSON lines to numbered segment
//! files (`journal/000000000001.jsonl`, …) before they are acknowledged.
//!
//! An append is one `write(2)` into the page cache, so an acknowledged call
//! survives `kill -9` of the process (and, with `full_sync`, power loss). The
//! writer thread copies the journal into the store and deletes segments once
//! every call in them is committed; whatever is left at start-up (or after the
//! database was unavailable) is read back and inserted again, which is safe
//! because inserts are idempotent.

use hone_types::CallRecord;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A segment is closed and a new one started once it holds this many bytes.
const SEGMENT_BYTES: u64 = 8 << 20;

pub(crate) struct Journal {
    dir: PathBuf,
    full_sync: bool,
    file: File,
    segment: u64,
    segment_bytes: u64,
}

impl Journal {
    /// Opens the journal in `dir`, starting a new segment after any left by an
    /// earlier run (those are only ever read, never appended to).
    pub(crate) fn open(dir: PathBuf, full_sync: bool) -> std::io::Result<Self> {
        fs::create_dir_all(&dir)?;
        let segment = segments(&dir)?.last().map(|(n, _)| n + 1).unwrap_or(1);
        let file = create_segment(&dir, segment)?;
        Ok(Self {
            dir,
            full_sync,
            file,
            segment,
            segment_bytes: 0,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The segment the next append goes to.
    pub(crate) fn segment(&self) -> u64 {
        self.segment
    }

    /// Appends one serialised call (a JSON line ending in `\n`) and returns
    /// the segment it went to. On return the line is in the kernel (and on
    /// the disk with `full_sync`).
    pub(crate) fn append(&mut self, line: &[u8]) -> std::io::Result<u64> {
        if self.segment_bytes >= SEGMENT_BYTES {
            self.file = create_segment(&self.dir, self.segment + 1)?;
            self.segment += 1;
            self.segment_bytes = 0;
        }
        self.file.write_all(line)?;
        if self.full_sync {
            self.file.sync_data()?;
        }
        self.segment_bytes += line.len() as u64;
        Ok(self.segment)
    }
}

fn create_segment(dir: &Path, segment: u64) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(segment_path(dir, segment))?;
    // Make the new file's directory entry durable too, where that is asked for.
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(file)
}

fn segment_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("{segment:012}.jsonl"))
}

/// The segments in `dir`, oldest first.
pub(crate) fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut found: Vec<(u64, PathBuf)> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|p| Some((p.file_stem()?.to_str()?.parse().ok()?, p)))
        .collect();
    found.sort();
    Ok(found)
}

/// Bytes of journal on disk.
pub(crate) fn bytes(dir: &Path) -> u64 {
    segments(dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|(_, p)| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Deletes every segment numbered below `segment`.
pub(crate) fn remove_before(dir: &Path, segment: u64) -> std::io::Result<()> {
    for (n, path) in segments(dir)? {
        if n < segment {
            fs::remove_file(path)?;
        }
    }
    Ok(())
}

/// One segment's calls, and the numbers of lines that could not be read.
pub(crate) struct Segment {
    pub calls: Vec<CallRecord>,
    pub bad_lines: Vec<usize>,
}

/// Reads one segment. A last line without its newline (a crash, or an append
/// still in progress, so never acknowledged yet) is skipped; any other bad
/// line is reported so the caller can keep the file for a human to look at.
pub(crate) fn read_segment(path: &Path) -> std::io::Result<Segment> {
    let bytes = fs::read(path)?;
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |end| end + 1);
    if complete < bytes.len() {
        tracing::debug!(file = %path.display(), "skipping a torn last line in the journal (it was never acknowledged)");
    }
    let mut segment = Segment {
        calls: Vec::new(),
        bad_lines: Vec::new(),
    };
    for (i, line) in bytes[..complete].split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice(line) {
            Ok(call) => segment.calls.push(call),
            Err(_) => segment.bad_lines.push(i + 1),
        }
    }
    Ok(segment)
}

/// Moves a damaged segment aside (`NAME.jsonl.corrupt`): it is not read
/// again, and not deleted.
pub(crate) fn quarantine(path: &Path) -> std::io::Result<PathBuf> {
    let mut target = path.as_os_str().to_owned();
    target.push(".corrupt");
    let target = PathBuf::from(target);
    fs::rename(path, &target)?;
    Ok(target)
}
