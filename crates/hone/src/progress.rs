//! Progress output on stderr for long work (training, evaluation, builds).

/// `███░░░░` of `width` cells, `done` of `total` filled.
pub fn bar(done: usize, total: usize, width: usize) -> String {
    let filled = (done * width).checked_div(total).unwrap_or(width).min(width);
    "█".repeat(filled) + &"░".repeat(width - filled)
}
