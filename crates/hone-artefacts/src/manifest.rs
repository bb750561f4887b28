//! The manifest of a published artefact: every file with its size and
//! SHA-256, and one digest over them all. It is written last, so an
//! artefact is published exactly when its manifest exists, and it is how a
//! fetch knows the bytes it got are the bytes that were published.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's file name, beside the artefact's files.
pub const MANIFEST: &str = "hone-manifest.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the artefact's directory, `/`-separated.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Sorted by path.
    pub files: Vec<FileEntry>,
    /// SHA-256 over each file's `path`, size and digest, in order: the
    /// artefact's content hash.
    pub sha256: String,
}

impl Manifest {
    pub fn new(mut files: Vec<FileEntry>) -> Self {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut digest = Sha256::new();
        for f in &files {
            digest.update(format!("{}\0{}\0{}\n", f.path, f.bytes, f.sha256).as_bytes());
        }
        Manifest {
            sha256: hex::encode(digest.finalize()),
            files,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }

    /// The first 12 hex digits of the content hash, for messages.
    pub fn short(&self) -> &str {
        self.sha256.get(..12).unwrap_or(&self.sha256)
    }
}

/// A byte count as people read it.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KB", "MB", "GB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
