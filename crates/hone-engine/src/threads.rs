//! The CPU thread count, fixed once per process.
//!
//! candle asks for its thread count on every CPU matmul, and unless
//! `RAYON_NUM_THREADS` is set it answers by parsing `/proc/cpuinfo` for the
//! physical cores, each time: a profile of the demo's base-policy build spent
//! ~8% of its time there, and greedy decoding of the demo model ~40% (the
//! matmuls of a small model are short). [`fix_thread_count`] asks candle once
//! and writes the answer to `RAYON_NUM_THREADS`, which candle reads first; the
//! count is the same, so results are too. rayon's global pool reads the same variable, so it too
//! gets candle's count (physical cores) instead of the logical ones.

/// The variable candle (and rayon) read for their thread count.
pub const VARIABLE: &str = "RAYON_NUM_THREADS";

/// Sets `RAYON_NUM_THREADS` to candle's own default unless it is already
/// set, and returns the count in use. Call it first thing in `main`, before
/// any thread starts: the environment is not safe to change once other
/// threads may read it.
pub fn fix_thread_count() -> usize {
    fix_thread_count_to(None)
}

/// [`fix_thread_count`], with `preferred` instead of candle's default when
/// the user set nothing: a process that knows its model is small asks for
/// one thread per op ([`per_op_for_hidden_size`]).
pub fn fix_thread_count_to(preferred: Option<usize>) -> usize {
    if let Some(n) = std::env::var(VARIABLE)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    let n = preferred
        .filter(|n| *n > 0)
        .unwrap_or_else(candle_core::utils::get_num_threads);
    std::env::set_var(VARIABLE, n.to_string());
    n
}

/// Models up to this hidden size run faster with one thread per op.
pub const SMALL_HIDDEN_SIZE: usize = 256;

/// The thread count per op that suits a model of `hidden_size`: one for a
/// small model (`None`, candle's default, otherwise). Its ops are so short
/// that handing each to a second core costs more than it saves: on the 2-core
/// machine the demo's base policy (hidden size 128) builds and `hone demo
/// --quick` runs faster on one thread per op, and the other core then does
/// work of its own: the engine beside the trainer, part of each training
/// batch ([`batch_parts`]; docs/ARCHITECTURE.md, "Performance").
pub fn per_op_for_hidden_size(hidden_size: usize) -> Option<usize> {
    (hidden_size <= SMALL_HIDDEN_SIZE).then_some(1)
}

/// Items a part holds when `items` are cut into at most `parts`
/// consecutive parts of nearly equal length (never 0, so no part is
/// empty): the one rule by which decode steps and training batches are
/// cut.
pub fn part_len(items: usize, parts: usize) -> usize {
    items.div_ceil(parts.max(1)).max(1)
}

/// The thread count per op this process fixed (`None` before it fixed one).
pub fn per_op() -> Option<usize> {
    std::env::var(VARIABLE).ok().and_then(|v| v.parse::<usize>().ok())
}

/// How many parts a training batch is cut into, each run on a thread of its
/// own: the machine's cores when every op runs on one thread (the count is
/// 1), else 1, candle's own threads already sharing each op among the cores.
pub fn batch_parts() -> usize {
    if per_op() == Some(1) {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        1
    }
}
