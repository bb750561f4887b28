//! Seeded generation that never changes under us: SplitMix64 for numbers,
//! FNV-1a (finalised by SplitMix's mixer) for the stable hash of a prompt.
//! Tasks and the train / held-out cut depend only on these, not on `rand`,
//! whose generators may change between releases.

use crate::{Split, Task};

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and fully specified.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijective avalanche of 64 bits.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash of bytes that is the same on every platform and every release.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;
    let fnv = bytes
        .iter()
        .fold(FNV_OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME));
    mix(fnv)
}

/// One seed from several parts (environment seed, index, difficulty, …).
pub fn derive_seed(parts: &[u64]) -> u64 {
    parts.iter().fold(0x6A09_E667_F3BC_C909, |acc, &part| {
        mix(acc ^ mix(part.wrapping_add(GOLDEN_GAMMA)))
    })
}

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; `n` = 0 gives 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `low..=high` (`high` < `low` gives `low`).
    pub fn range(&mut self, low: i64, high: i64) -> i64 {
        if high <= low {
            return low;
        }
        let width = high.abs_diff(low).saturating_add(1);
        low.wrapping_add(self.below(width) as i64)
    }

    /// A uniformly chosen item; `None` only for an empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len() as u64) as usize)
    }
}

/// Generates tasks from successive sub-seeds of `base` until one falls in
/// `split`; `make` returns `None` to reject a draw. Each attempt is
/// deterministic, so the result is too.
pub fn generate_in_split(base: u64, split: Split, mut make: impl FnMut(&mut SplitMix64) -> Option<Task>) -> Task {
    // Every built-in generator has hundreds of prompts or more in each split,
    // so this ends after five attempts on average for the held-out split.
    let mut attempt: u64 = 0;
    loop {
        let mut rng = SplitMix64::new(derive_seed(&[base, attempt]));
        if let Some(task) = make(&mut rng) {
            if task.split() == split {
                return task;
            }
        }
        attempt = attempt.wrapping_add(1);
    }
}

/// Task `index` of an environment named `name` with seed `env_seed`, at
/// `difficulty`, in `split`: the seed every built-in environment derives its
/// tasks from, then [`generate_in_split`].
pub fn task_in_split(
    env_seed: u64,
    name: &str,
    split: Split,
    difficulty: crate::Difficulty,
    index: u64,
    make: impl FnMut(&mut SplitMix64) -> Option<Task>,
) -> Task {
    let split_part = match split {
        Split::Train => 0,
        Split::HeldOut => 1,
    };
    let base = derive_seed(&[
        env_seed,
        stable_hash(name.as_bytes()),
        split_part,
        u64::from(difficulty.level()),
        index,
    ]);
    generate_in_split(base, split, make)
}
