//! Deterministic, streaming sampling: every episode gets a key from a stable
//! hash of (seed, episode id); each stratum keeps only its smallest keys
//! (bottom-k), so memory is bounded by the sample, not by the store, and the
//! same seed always picks the same episodes.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BinaryHeap};

pub fn sample_key(seed: u64, id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(id.as_bytes());
    let digest = h.finalize();
    let mut word = [0u8; 8];
    word.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(word)
}

/// One stratum's share of a sample.
#[derive(Debug)]
pub struct Allocation<T> {
    pub stratum: String,
    pub quota: usize,
    /// (key, item), smallest key first.
    pub candidates: Vec<(u64, T)>,
}

/// Per-stratum bottom-k reservoirs plus the count of everything seen.
#[derive(Debug)]
pub struct Strata<T: Ord> {
    capacity: usize,
    heaps: BTreeMap<String, BinaryHeap<(u64, T)>>,
    seen: BTreeMap<String, u64>,
}

impl<T: Ord> Strata<T> {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            heaps: BTreeMap::new(),
            seen: BTreeMap::new(),
        }
    }

    pub fn offer(&mut self, stratum: &str, key: u64, item: T) {
        *self.seen.entry(stratum.to_owned()).or_default() += 1;
        let heap = self.heaps.entry(stratum.to_owned()).or_default();
        if heap.len() < self.capacity {
            heap.push((key, item));
        } else if heap.peek().is_some_and(|(top, _)| key < *top) {
            heap.pop();
            heap.push((key, item));
        }
    }

    pub fn seen(&self) -> &BTreeMap<String, u64> {
        &self.seen
    }

    /// Each stratum's candidates in key order, with the number the stratum
    /// should contribute to a sample of `size` (proportional to how many it
    /// saw, largest remainders first).
    pub fn allocate(self, size: usize) -> Vec<Allocation<T>> {
        let total: u64 = self.seen.values().sum();
        let mut shares: Vec<(String, usize, f64)> = self
            .seen
            .iter()
            .map(|(s, n)| {
                let exact = if total == 0 {
                    0.0
                } else {
                    size as f64 * *n as f64 / total as f64
                };
                (s.clone(), exact.floor() as usize, exact - exact.floor())
            })
            .collect();
        let assigned: usize = shares.iter().map(|s| s.1).sum();
        let mut order: Vec<usize> = (0..shares.len()).collect();
        order.sort_by(|a, b| shares[*b].2.total_cmp(&shares[*a].2).then(a.cmp(b)));
        for i in order.into_iter().take(size.saturating_sub(assigned)) {
            shares[i].1 += 1;
        }
        let mut heaps = self.heaps;
        shares
            .into_iter()
            .map(|(s, n, _)| {
                let mut candidates = heaps.remove(&s).map(BinaryHeap::into_vec).unwrap_or_default();
                candidates.sort();
                Allocation {
                    stratum: s,
                    quota: n,
                    candidates,
                }
            })
            .collect()
    }
}
