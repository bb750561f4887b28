//! Near-duplicate detection of inputs: text normalised (case, punctuation,
//! whitespace), then a 64-bit SimHash over word 3-grams. Two inputs are
//! near-duplicates when their normalised texts are equal or their SimHashes
//! differ in at most [`MAX_DISTANCE`] bits.

use sha2::{Digest, Sha256};

/// Bits two SimHashes may differ in and still count as the same input.
pub const MAX_DISTANCE: u32 = 3;

pub fn normalise(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn hash64(bytes: &[u8]) -> u64 {
    let digest = Sha256::digest(bytes);
    let mut word = [0u8; 8];
    word.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(word)
}

/// SimHash of a text and the hash of its normalised form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    pub exact: u64,
    pub simhash: u64,
}

pub fn fingerprint(text: &str) -> Fingerprint {
    let words = normalise(text);
    let exact = hash64(words.join(" ").as_bytes());
    let grams: Vec<String> = if words.len() < 3 {
        vec![words.join(" ")]
    } else {
        words.windows(3).map(|w| w.join(" ")).collect()
    };
    let mut counts = [0i32; 64];
    for g in &grams {
        let h = hash64(g.as_bytes());
        for (bit, count) in counts.iter_mut().enumerate() {
            *count += if h >> bit & 1 == 1 { 1 } else { -1 };
        }
    }
    let simhash = counts
        .iter()
        .enumerate()
        .fold(0u64, |acc, (bit, c)| if *c > 0 { acc | 1 << bit } else { acc });
    Fingerprint { exact, simhash }
}

/// Fingerprints kept so far; `insert` refuses a near-duplicate of any of them.
#[derive(Debug, Default)]
pub struct Deduper {
    kept: Vec<Fingerprint>,
}

impl Deduper {
    /// True (and remembered) when `f` is not a near-duplicate of anything kept.
    pub fn insert(&mut self, f: Fingerprint) -> bool {
        let duplicate = self
            .kept
            .iter()
            .any(|k| k.exact == f.exact || (k.simhash ^ f.simhash).count_ones() <= MAX_DISTANCE);
        if !duplicate {
            self.kept.push(f);
        }
        !duplicate
    }
}
