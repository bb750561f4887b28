//! The CPU thread count, fixed once per process.
//!
//! candle asks for its thread count on every CPU matmul, and unless
//! `RAYON_NUM_THREADS` is set it answers by parsing `/proc/cpuinfo` for the
//! physical cores, each time: a profile of the demo's base-policy build spent
//! ~8% of its time there, and greedy decoding of the demo model ~40% (the
//! matmuls of a small model are short). [`fix_thread_count`] asks candle once
//! and writes the answer to `RAYON_NUM_THREADS`, which candle reads first; the
//! count is the same, so results are too (measured in docs/ARCHITECTURE.md,
//! "Performance"). rayon's global pool reads the same variable, so it too
//! gets candle's count (physical cores) instead of the logical ones.

/// The variable candle (and rayon) read for their thread count.
pub const VARIABLE: &str = "RAYON_NUM_THREADS";

/// Sets `RAYON_NUM_THREADS` to candle's own default unless it is already
/// set, and returns the count in use. Call it first thing in `main`, before
/// any thread starts: the environment is not safe to change once other
/// threads may read it.
pub fn fix_thread_count() -> usize {
    if let Some(n) = std::env::var(VARIABLE)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    let n = candle_core::utils::get_num_threads();
    std::env::set_var(VARIABLE, n.to_string());
    n
}
