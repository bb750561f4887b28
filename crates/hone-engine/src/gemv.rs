//! `x·Wᵀ` for a few rows of `x` on the CPU in f32: the product of every
//! decode step. With a handful of rows the product is bound by reading `W`
//! from memory, not by arithmetic, and a general matrix product (candle's
//! GEMM) spends its time packing and blocking for a reuse that is not
//! there. Here each weight row is read once, straight from the checkpoint's
//! `[out, in]` layout, and multiplied with every row of `x` while it is in
//! the cache; the output rows are shared out among rayon's threads (the
//! pool candle's own CPU kernels use, sized by `threads`), and each dot
//! product runs in the widest SIMD the CPU offers, chosen at run time by
//! pulp (the crate candle's GEMM dispatches with).

use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

/// Rows of `x` multiplied together against one weight row: accumulators
/// that fit the registers of the narrowest SIMD pulp dispatches to.
const ROWS_AT_ONCE: usize = 4;

/// Weight rows a task takes at least: enough to amortise its hand-off.
const MIN_WEIGHT_ROWS_PER_TASK: usize = 16;

/// Tasks per thread: a few, so a thread that finishes early takes another.
const TASKS_PER_THREAD: usize = 4;

/// Weights below which candle's own product is used: a small model's
/// projections are over before the hand-off to threads would pay (the
/// demo's 128-wide model decoded 2–4× slower through this kernel).
pub const MIN_WEIGHTS: usize = 1 << 18;

/// `y = x·Wᵀ` with `x` `[rows, width]` and `w` `[out, width]`, both
/// row-major; `y` comes back transposed, `[out, rows]` (each weight row's
/// results together), for the caller to lay out.
pub fn few_rows_transposed(x: &[f32], rows: usize, w: &[f32], width: usize) -> Vec<f32> {
    let out = w.len().checked_div(width).unwrap_or(0);
    let mut y = vec![0f32; out * rows];
    if rows == 0 || width == 0 {
        return y;
    }
    let arch = Arch::new();
    let per_task = out
        .div_ceil(rayon::current_num_threads() * TASKS_PER_THREAD)
        .max(MIN_WEIGHT_ROWS_PER_TASK);
    y.par_chunks_mut(rows * per_task).enumerate().for_each(|(task, y)| {
        let first = task * per_task;
        let weights = &w[first * width..(first + y.len() / rows) * width];
        arch.dispatch(Block {
            x,
            rows,
            weights,
            width,
            y,
        });
    });
    y
}

/// One task's share: `y[o, r] = weights[o] · x[r]`.
struct Block<'a> {
    x: &'a [f32],
    rows: usize,
    weights: &'a [f32],
    width: usize,
    y: &'a mut [f32],
}

impl WithSimd for Block<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        let Block {
            x,
            rows,
            weights,
            width,
            y,
        } = self;
        if rows == 1 {
            // One row (batch 1): bound by reading the weights; the tightest
            // loop keeps the most loads in flight.
            for (weight, y) in weights.chunks_exact(width).zip(y.iter_mut()) {
                *y = dot(simd, weight, x);
            }
            return;
        }
        // Two weight rows at a time: with four rows of `x`, eight
        // accumulators share each load of `x`, and the loads per
        // multiply-add fall from 1.25 to 0.75 (`x` of a wide layer lives
        // in L2, so its loads, not the arithmetic, set the pace at batch 8).
        let paired = weights.len() / (2 * width) * 2;
        let (weights, last) = weights.split_at(paired * width);
        let (y, y_last) = y.split_at_mut(paired * rows);
        for (two, y) in weights.chunks_exact(2 * width).zip(y.chunks_exact_mut(2 * rows)) {
            let (w0, w1) = two.split_at(width);
            let (y0, y1) = y.split_at_mut(rows);
            groups(simd, [w0, w1], x, rows, [y0, y1]);
        }
        if !last.is_empty() {
            groups(simd, [last], x, rows, [y_last]);
        }
    }
}

/// `weight · x` with two accumulators (so a multiply-add need not wait for
/// the last).
#[inline(always)]
fn dot<S: Simd>(simd: S, weight: &[f32], x: &[f32]) -> f32 {
    let (weight_simd, weight_tail) = S::as_simd_f32s(weight);
    let (x_simd, x_tail) = S::as_simd_f32s(x);
    let (mut even, mut odd) = (simd.splat_f32s(0.0), simd.splat_f32s(0.0));
    let mut pairs = weight_simd.chunks_exact(2).zip(x_simd.chunks_exact(2));
    for (w, v) in pairs.by_ref() {
        even = simd.mul_add_e_f32s(w[0], v[0], even);
        odd = simd.mul_add_e_f32s(w[1], v[1], odd);
    }
    if weight_simd.len() % 2 == 1 {
        let last = weight_simd.len() - 1;
        even = simd.mul_add_e_f32s(weight_simd[last], x_simd[last], even);
    }
    let tail: f32 = weight_tail.iter().zip(x_tail).map(|(w, v)| w * v).sum();
    simd.reduce_sum_f32s(simd.add_f32s(even, odd)) + tail
}

/// `y[w][r] = weights[w] · x[r]` for every row of `x`, `ROWS_AT_ONCE` rows
/// at a time.
#[inline(always)]
fn groups<S: Simd, const W: usize>(simd: S, weights: [&[f32]; W], x: &[f32], rows: usize, mut y: [&mut [f32]; W]) {
    let width = weights[0].len();
    for first in (0..rows).step_by(ROWS_AT_ONCE) {
        let x = &x[first * width..];
        match (rows - first).min(ROWS_AT_ONCE) {
            1 => dots::<S, 1, W>(simd, weights, x, &mut y, first),
            2 => dots::<S, 2, W>(simd, weights, x, &mut y, first),
            3 => dots::<S, 3, W>(simd, weights, x, &mut y, first),
            _ => dots::<S, ROWS_AT_ONCE, W>(simd, weights, x, &mut y, first),
        }
    }
}

/// `y[w][first + r] = weights[w] · x[r]` for the first `R` rows of `x`
/// (each as long as a weight row): every vector loaded is multiplied into
/// all the products it takes part in, and the `W × R` accumulators stay in
/// registers for the whole row.
#[inline(always)]
fn dots<S: Simd, const R: usize, const W: usize>(
    simd: S,
    weights: [&[f32]; W],
    x: &[f32],
    y: &mut [&mut [f32]; W],
    first: usize,
) {
    let width = weights[0].len();
    let w: [(&[S::f32s], &[f32]); W] = std::array::from_fn(|w| S::as_simd_f32s(weights[w]));
    let v: [(&[S::f32s], &[f32]); R] = std::array::from_fn(|r| S::as_simd_f32s(&x[r * width..(r + 1) * width]));
    let n = w[0].0.len();
    let mut acc = [[simd.splat_f32s(0.0); R]; W];
    for i in 0..n {
        for (acc, w) in acc.iter_mut().zip(&w) {
            let weight = w.0[i];
            for (acc, v) in acc.iter_mut().zip(&v) {
                *acc = simd.mul_add_e_f32s(weight, v.0[i], *acc);
            }
        }
    }
    for ((acc, w), y) in acc.iter().zip(&w).zip(y.iter_mut()) {
        for ((acc, v), y) in acc.iter().zip(&v).zip(&mut y[first..]) {
            let tail: f32 = w.1.iter().zip(v.1).map(|(w, v)| w * v).sum();
            *y = simd.reduce_sum_f32s(*acc) + tail;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same product in f64, term by term: an independent reference.
    fn reference(x: &[f32], rows: usize, w: &[f32], width: usize) -> Vec<f64> {
        let out = w.len() / width;
        let mut y = vec![0f64; out * rows];
        for o in 0..out {
            for r in 0..rows {
                y[o * rows + r] = (0..width)
                    .map(|i| f64::from(x[r * width + i]) * f64::from(w[o * width + i]))
                    .sum();
            }
        }
        y
    }

    #[test]
    fn matches_the_product_in_f64_for_every_row_count_and_ragged_widths() {
        let value = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 2001) as f32 / 1000.0 - 1.0;
        for (rows, width, out) in [(1, 896, 37), (3, 17, 40), (8, 64, 130), (16, 33, 5), (5, 1, 3)] {
            let x: Vec<f32> = (0..rows * width).map(|i| value(i, 1)).collect();
            let w: Vec<f32> = (0..out * width).map(|i| value(i, 2)).collect();
            let got = few_rows_transposed(&x, rows, &w, width);
            let want = reference(&x, rows, &w, width);
            assert_eq!(got.len(), want.len());
            for (g, e) in got.iter().zip(&want) {
                assert!(
                    (f64::from(*g) - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "{rows}×{width}·{out}: {g} vs {e}"
                );
            }
        }
        assert!(few_rows_transposed(&[], 0, &[1.0, 2.0], 2).iter().all(|y| *y == 0.0));
    }
}
