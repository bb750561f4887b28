//! The machine's limits, measured in the same run as the figures compared
//! against them: memory bandwidth (STREAM-style copy, triad and read loops
//! over arrays far larger than the caches, one slice per core) and matmul peak
//! (candle's f32 product of two 2048 × 2048 matrices on the device).
//!
//! Decoding a token reads every weight once, so decode is bound by
//! bandwidth (`bandwidth / weight bytes` tokens per second per row, until
//! the rows' arithmetic reaches the matmul peak); prefill and training
//! multiply whole matrices, so they are bound by the matmul peak
//! (`peak / (2 × parameters)` tokens per second forward).

use anyhow::Result;
use candle_core::{Device, Tensor};
use std::time::Instant;

/// Floats per array of the bandwidth loops: 64 MiB each, far beyond any
/// cache of this class of machine.
const STREAM_FLOATS: usize = 16 << 20;

/// What the machine can do at most.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Memory bandwidth in GB/s: the best of copy, triad and read, on every
    /// core (`None` off the CPU: the loops run on the host).
    pub bandwidth_gbs: Option<f64>,
    /// f32 matmul throughput on the device, GFLOP/s.
    pub matmul_gflops: f64,
}

impl Limits {
    /// Measures both on `device`.
    pub fn measure(device: &Device) -> Result<Self> {
        Ok(Self {
            bandwidth_gbs: device.is_cpu().then(bandwidth_gbs),
            matmul_gflops: matmul_gflops(device)?,
        })
    }

    /// Decode tokens/s at most for `rows` rows of a model whose weights
    /// take `weight_bytes` and that multiplies by `parameters` weights per
    /// token: the weights are read once a step, the arithmetic is two
    /// flops a weight a row.
    pub fn decode(&self, rows: usize, weight_bytes: f64, parameters: f64) -> Option<f64> {
        let reading = self.bandwidth_gbs? * 1e9 / weight_bytes * rows as f64;
        Some(reading.min(self.prefill(parameters)))
    }

    /// Prefill tokens/s at most: two flops a weight a token at the matmul
    /// peak (attention's share left out, small at short prompts).
    pub fn prefill(&self, parameters: f64) -> f64 {
        self.matmul_gflops * 1e9 / (2.0 * parameters)
    }
}

/// GB/s of the best of a copy (`a = b`), a triad (`a = b + s·c`) and a
/// read (the sum of `b`, what decode does to its weights), each the best of
/// five passes, split over every core; bytes counted as STREAM counts them
/// (each array read or written once). The read is the pattern of decode,
/// which only reads its weights.
pub fn bandwidth_gbs() -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut a = vec![0f32; STREAM_FLOATS];
    let b = vec![1f32; STREAM_FLOATS];
    let c = vec![2f32; STREAM_FLOATS];
    let chunk = STREAM_FLOATS.div_ceil(cores);
    let mut best = 0f64;
    for (pattern, arrays) in [(Pattern::Copy, 2.0), (Pattern::Triad, 3.0), (Pattern::Read, 1.0)] {
        for _ in 0..5 {
            let started = Instant::now();
            std::thread::scope(|scope| {
                for ((a, b), c) in a.chunks_mut(chunk).zip(b.chunks(chunk)).zip(c.chunks(chunk)) {
                    // Keep each result: a loop whose result is never read may be dropped.
                    scope.spawn(move || std::hint::black_box(pattern.run(a, b, c)));
                }
            });
            let seconds = started.elapsed().as_secs_f64();
            best = best.max(arrays * (STREAM_FLOATS * 4) as f64 / seconds / 1e9);
        }
        // Keep the stores, for the same reason.
        std::hint::black_box(&a);
    }
    best
}

/// A memory access pattern of [`bandwidth_gbs`].
#[derive(Clone, Copy)]
enum Pattern {
    Copy,
    Triad,
    Read,
}

/// Independent partial sums of the read loop: enough that the adds'
/// latency never binds (the compiler keeps them in vector registers).
const READ_LANES: usize = 32;

impl Pattern {
    /// Runs the pattern over one core's slices; the read returns its sum
    /// (the writes return 0: their stores are kept through `a`).
    fn run(self, a: &mut [f32], b: &[f32], c: &[f32]) -> f32 {
        match self {
            Pattern::Copy => {
                a.copy_from_slice(b);
                0.0
            }
            Pattern::Triad => {
                for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                    *a = b + 3.0 * c;
                }
                0.0
            }
            Pattern::Read => {
                let mut lanes = [0f32; READ_LANES];
                let mut rows = b.chunks_exact(READ_LANES);
                for row in &mut rows {
                    for (lane, x) in lanes.iter_mut().zip(row) {
                        *lane += x;
                    }
                }
                lanes.iter().sum::<f32>() + rows.remainder().iter().sum::<f32>()
            }
        }
    }
}

/// candle's f32 matmul throughput on a 2048³ product (median of 5, after
/// two warm-ups).
pub fn matmul_gflops(device: &Device) -> Result<f64> {
    let n = 2048;
    let a = Tensor::randn(0f32, 1.0, (n, n), device)?;
    let b = Tensor::randn(0f32, 1.0, (n, n), device)?;
    for _ in 0..2 {
        a.matmul(&b)?.sum_all()?.to_scalar::<f32>()?;
    }
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        a.matmul(&b)?.sum_all()?.to_scalar::<f32>()?;
        times.push(started.elapsed().as_secs_f64());
    }
    let median = hone_learn::stats::median(&times).unwrap_or(f64::NAN);
    Ok(2.0 * (n as f64).powi(3) / median / 1e9)
}

/// A share of a limit as a percentage cell ("61%"), "–" when unknown.
pub fn percent(value: f64, limit: Option<f64>) -> String {
    match limit {
        Some(limit) if limit > 0.0 => format!("{:.0}%", 100.0 * value / limit),
        _ => "–".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_is_bound_by_reading_the_weights_until_the_arithmetic_catches_up() {
        let limits = Limits {
            bandwidth_gbs: Some(10.0),
            matmul_gflops: 100.0,
        };
        // 2 GB of weights, 0.5 G parameters: 5 tokens/s a row by bandwidth,
        // 100 tokens/s by arithmetic.
        assert_eq!(limits.decode(1, 2e9, 0.5e9), Some(5.0));
        assert_eq!(limits.decode(8, 2e9, 0.5e9), Some(40.0));
        assert_eq!(limits.decode(64, 2e9, 0.5e9), Some(100.0));
        assert_eq!(limits.prefill(0.5e9), 100.0);
        let gpu = Limits {
            bandwidth_gbs: None,
            ..limits
        };
        assert_eq!(gpu.decode(1, 2e9, 0.5e9), None);
        assert_eq!(percent(3.0, Some(5.0)), "60%");
        assert_eq!(percent(3.0, None), "–");
    }

    #[test]
    fn the_bandwidth_loops_measure_a_plausible_rate() {
        // Any machine that runs the tests moves between 0.5 GB/s and a few TB/s.
        let gbs = bandwidth_gbs();
        assert!(gbs > 0.5 && gbs < 5_000.0, "{gbs} GB/s");
    }
}
