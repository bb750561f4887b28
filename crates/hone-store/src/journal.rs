//! The recorder's journal: calls appended as JSON lines to numbered segment
//! files (`journal/000000000001.jsonl`, …) before they are acknowledged.
//!
//! An append is one `write(2)` into the page cache, so an acknowledged call
//! survives `kill -9` of the process (and, with `full_sync`, power loss). The
//! writer thread copies the journal into the store and deletes segments once
//! every call in them is committed; whatever is left at start-up (or after the
//! database was unavailable) is read back and inserted again, which is safe
//! because inserts are idempotent.
//!
//! A failed or short write (a full disk, a file-size limit) may leave part of
//! a line in the file. Before anything else is appended that fragment is cut
//! off again (`ftruncate` to the last good length); if even that fails, the
//! segment is abandoned and the next append starts a new one. Either way every
//! acknowledged line starts on a line boundary, and the reader resynchronises
//! past a fragment left by an older version or a crash mid-append.

use hone_types::CallRecord;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A segment is closed and a new one started once it holds this many bytes.
const SEGMENT_BYTES: u64 = 8 << 20;

/// How every serialised call begins (`id` is `CallRecord`'s first field): the
/// reader looks for it to find a record behind a torn fragment.
const RECORD_START: &[u8] = b"{\"id\":";

pub(crate) struct Journal {
    dir: PathBuf,
    full_sync: bool,
    file: File,
    segment: u64,
    /// Bytes of whole, acknowledged lines in the current segment.
    segment_bytes: u64,
    /// A failed append left bytes that could not be cut off: the next append
    /// goes to a new segment.
    abandoned: bool,
}

impl Journal {
    /// Opens the journal in `dir`, starting a new segment after any left by an
    /// earlier run (those are only ever read, never appended to).
    pub(crate) fn open(dir: PathBuf, full_sync: bool) -> std::io::Result<Self> {
        crate::files::create_private_dir(&dir)?;
        let segment = segments(&dir)?.last().map(|(n, _)| n + 1).unwrap_or(1);
        let file = create_segment(&dir, segment, full_sync)?;
        Ok(Self {
            dir,
            full_sync,
            file,
            segment,
            segment_bytes: 0,
            abandoned: false,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The segment the next append goes to.
    pub(crate) fn segment(&self) -> u64 {
        self.segment
    }

    /// Appends serialised calls (JSON lines, each ending in `\n`) with one
    /// write and returns the segment they went to. On `Ok` the lines are in
    /// the kernel (and on the disk with `full_sync`); on `Err` none of them
    /// is, and the file ends on a line boundary again.
    pub(crate) fn append(&mut self, lines: &[u8]) -> std::io::Result<u64> {
        if self.abandoned || self.segment_bytes >= SEGMENT_BYTES {
            self.file = create_segment(&self.dir, self.segment + 1, self.full_sync)?;
            self.segment += 1;
            self.segment_bytes = 0;
            self.abandoned = false;
        }
        let written = self
            .file
            .write_all(lines)
            .and_then(|()| if self.full_sync { self.file.sync_data() } else { Ok(()) });
        match written {
            Ok(()) => {
                self.segment_bytes += lines.len() as u64;
                Ok(self.segment)
            }
            Err(error) => {
                // Part of the lines may have reached the file: cut it off so
                // that the next acknowledged line does not extend a fragment.
                if let Err(truncate) = self.file.set_len(self.segment_bytes) {
                    tracing::error!(error = %truncate, segment = self.segment, "cannot cut a failed append off the journal; starting a new segment");
                    self.abandoned = true;
                }
                Err(error)
            }
        }
    }
}

/// A new segment file. Under `full_sync` its directory entry is made
/// durable too (else a power loss could lose the file with its synced
/// lines); without it nothing is promised beyond a crash of the process,
/// which the page cache survives, so no fsync stalls the appender (and the
/// calls waiting on it) every few megabytes.
fn create_segment(dir: &Path, segment: u64, full_sync: bool) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    crate::files::private(&mut options);
    let file = options.open(segment_path(dir, segment))?;
    if full_sync {
        File::open(dir)?.sync_all()?;
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

/// What a segment holds.
#[derive(Debug, Default)]
pub struct Segment {
    /// Every call that could be read, in journal order.
    pub calls: Vec<CallRecord>,
    /// Lines (1-based) that hold no readable call at all.
    pub bad_lines: Vec<usize>,
    /// Torn fragments skipped: a crashed or failed append that was never
    /// acknowledged, at the end of the file or in front of a whole record.
    pub torn: usize,
}

/// Reads one segment file; see [`parse_segment`].
pub fn read_segment(path: &Path) -> std::io::Result<Segment> {
    let bytes = fs::read(path)?;
    let segment = parse_segment(&bytes);
    if segment.torn > 0 {
        tracing::info!(file = %path.display(), fragments = segment.torn, "skipped torn fragments in the journal (appends that were never acknowledged)");
    }
    Ok(segment)
}

/// Parses a segment's bytes. A last line without its newline (a crash, or an
/// append still in progress, so never acknowledged) is skipped; a line that
/// holds a fragment followed by a whole record yields the record; any other
/// unreadable line is reported so the caller can keep the file for a human.
pub fn parse_segment(bytes: &[u8]) -> Segment {
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |end| end + 1);
    let mut segment = Segment {
        torn: usize::from(complete < bytes.len()),
        ..Segment::default()
    };
    for (i, line) in bytes[..complete].split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Ok(call) = serde_json::from_slice(line) {
            segment.calls.push(call);
            continue;
        }
        match resynchronise(line) {
            Some(call) => {
                segment.torn += 1;
                segment.calls.push(call);
            }
            None => segment.bad_lines.push(i + 1),
        }
    }
    segment
}

/// The whole record behind a torn fragment: the first place after the start
/// where a record begins and parses to the end of the line.
fn resynchronise(line: &[u8]) -> Option<CallRecord> {
    (1..line.len().saturating_sub(RECORD_START.len()))
        .filter(|&at| line[at..].starts_with(RECORD_START))
        .find_map(|at| serde_json::from_slice(&line[at..]).ok())
}

/// Where calls the store refused are kept (`journal/refused/`).
pub fn refused_dir(dir: &Path) -> PathBuf {
    dir.join("refused")
}

/// Keeps a call the store refused, as `refused/<call id>.json`, so that a
/// human can see it and nothing accepted is lost; writing it twice (after a
/// restart) leaves one file.
pub(crate) fn set_aside(dir: &Path, call: &CallRecord) -> std::io::Result<PathBuf> {
    let refused = refused_dir(dir);
    crate::files::create_private_dir(&refused)?;
    let path = refused.join(format!("{}.json", call.id));
    let mut file = crate::files::private(OpenOptions::new().write(true).create(true).truncate(true)).open(&path)?;
    serde_json::to_writer(&mut file, call)?;
    file.sync_all()?;
    Ok(path)
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
