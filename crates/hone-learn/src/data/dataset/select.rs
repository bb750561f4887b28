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
        self.allocate_weighted(size, &|_| 1.0)
    }

    /// As [`Strata::allocate`], a stratum's count multiplied by its weight.
    pub fn allocate_weighted(self, size: usize, weight: &dyn Fn(&str) -> f64) -> Vec<Allocation<T>> {
        let weighted: Vec<(String, f64)> = self
            .seen
            .iter()
            .map(|(s, n)| (s.clone(), *n as f64 * weight(s).max(0.0)))
            .collect();
        let total: f64 = weighted.iter().map(|(_, w)| w).sum();
        let mut shares: Vec<(String, usize, f64)> = weighted
            .into_iter()
            .map(|(s, n)| {
                let exact = if total <= 0.0 { 0.0 } else { size as f64 * n / total };
                (s, exact.floor() as usize, exact - exact.floor())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Hard-example mining: 10 failed of 40 episodes are a quarter of the
    /// traffic but, weighing double, 4 of a sample of 10.
    #[test]
    fn a_weighted_stratum_gets_its_weighted_share() {
        let mut strata: Strata<u32> = Strata::new(20);
        for i in 0..40u32 {
            let stratum = if i % 4 == 0 { "v/ok/failed" } else { "v/ok/passed" };
            strata.offer(stratum, sample_key(1, &i.to_string()), i);
        }
        let quotas: BTreeMap<String, usize> = strata
            .allocate_weighted(10, &|s| if s.ends_with("failed") { 2.0 } else { 1.0 })
            .into_iter()
            .map(|a| (a.stratum, a.quota))
            .collect();
        assert_eq!(quotas["v/ok/failed"], 4);
        assert_eq!(quotas["v/ok/passed"], 6);
    }
}
