//! The machine's limits, measured in the same run as the figures compared
//! against them: memory bandwidth (STREAM-style copy and triad loops over
//! arrays far larger than the caches, one slice per core) and matmul peak
//! (the f32 product of two 2048 × 2048 matrices on the device, by each
//! library this build's engine and trainer can multiply with,
//! `hone_engine::gemm`, the one in use first).
//!
//! Decoding a token reads every weight once, so decode is bound by
//! bandwidth (`bandwidth / weight bytes` tokens per second per row, until
//! the rows' arithmetic reaches the matmul peak); prefill and training
//! multiply whole matrices, so they are bound by the matmul peak
//! (`peak / (2 × parameters)` tokens per second forward).

use anyhow::Result;
use candle_core::{Device, Tensor};
use hone_engine::gemm::{self, CpuProduct};
use std::time::Instant;

/// Floats per array of the bandwidth loops: 64 MiB each, far beyond any
/// cache of this class of machine.
const STREAM_FLOATS: usize = 16 << 20;

/// What the machine can do at most.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Memory bandwidth in GB/s: the better of copy and triad, on every
    /// core (`None` off the CPU: the loops run on the host).
    pub bandwidth_gbs: Option<f64>,
    /// f32 matmul throughput on the device, GFLOP/s, by the product in use.
    pub matmul_gflops: f64,
    /// The peak of every product the build can multiply on, the one in
    /// use first ([`product_peaks`]).
    pub peaks: Vec<Peak>,
}

/// One product's f32 matmul peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peak {
    /// The CPU product; `None` for a GPU's own (candle's CUDA matmul, on cuBLAS).
    pub product: Option<CpuProduct>,
    pub gflops: f64,
}

impl Peak {
    pub fn name(&self) -> String {
        self.product.map_or_else(|| "cuBLAS".to_owned(), |p| p.to_string())
    }
}

impl Limits {
    /// Measures the bandwidth and every product's peak on `device`.
    pub fn measure(device: &Device) -> Result<Self> {
        let peaks = product_peaks(device)?;
        Ok(Self {
            bandwidth_gbs: device.is_cpu().then(bandwidth_gbs),
            matmul_gflops: peaks.first().map_or(f64::NAN, |p| p.gflops),
            peaks,
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

/// GB/s of the better of a copy (`a = b`) and a triad (`a = b + s·c`),
/// each the best of five passes, split over every core; bytes counted as
/// STREAM counts them (read and written once each).
pub fn bandwidth_gbs() -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut a = vec![0f32; STREAM_FLOATS];
    let b = vec![1f32; STREAM_FLOATS];
    let c = vec![2f32; STREAM_FLOATS];
    let chunk = STREAM_FLOATS.div_ceil(cores);
    let mut best = 0f64;
    for triad in [false, true] {
        for _ in 0..5 {
            let started = Instant::now();
            std::thread::scope(|scope| {
                for ((a, b), c) in a.chunks_mut(chunk).zip(b.chunks(chunk)).zip(c.chunks(chunk)) {
                    scope.spawn(move || {
                        if triad {
                            for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                                *a = b + 3.0 * c;
                            }
                        } else {
                            a.copy_from_slice(b);
                        }
                    });
                }
            });
            let seconds = started.elapsed().as_secs_f64();
            let arrays = if triad { 3.0 } else { 2.0 };
            best = best.max(arrays * (STREAM_FLOATS * 4) as f64 / seconds / 1e9);
        }
        // Keep the stores: a loop whose result is never read may be dropped.
        std::hint::black_box(&a);
    }
    best
}

/// f32 matmul throughput on a 2048³ product by the engine's and trainer's
/// product (median of 5, after two warm-ups).
pub fn matmul_gflops(device: &Device) -> Result<f64> {
    let n = 2048;
    let a = Tensor::randn(0f32, 1.0, (n, n), device)?;
    let b = Tensor::randn(0f32, 1.0, (n, n), device)?;
    for _ in 0..2 {
        hone_engine::gemm::matmul(&a, &b)?.sum_all()?.to_scalar::<f32>()?;
    }
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        hone_engine::gemm::matmul(&a, &b)?.sum_all()?.to_scalar::<f32>()?;
        times.push(started.elapsed().as_secs_f64());
    }
    let median = hone_learn::stats::median(&times).unwrap_or(f64::NAN);
    Ok(2.0 * (n as f64).powi(3) / median / 1e9)
}

/// The 2048³ peak of every product this build can multiply on
/// ([`CpuProduct::available`]), the one in use first; on a GPU the
/// device's own. Leaves the product in use as it found it.
pub fn product_peaks(device: &Device) -> Result<Vec<Peak>> {
    if !device.is_cpu() {
        return Ok(vec![Peak {
            product: None,
            gflops: matmul_gflops(device)?,
        }]);
    }
    let mut peaks: Vec<Peak> = Vec::new();
    for &product in std::iter::once(&gemm::cpu_product()).chain(CpuProduct::available()) {
        // What the process multiplies on once `product` is chosen: one
        // thread per op keeps candle's product whatever was chosen.
        let measured = on_product(Some(product), || {
            let actual = gemm::cpu_product();
            if peaks.iter().any(|p| p.product == Some(actual)) {
                return Ok(None);
            }
            Ok(Some(Peak {
                product: Some(actual),
                gflops: matmul_gflops(device)?,
            }))
        })?;
        peaks.extend(measured);
    }
    Ok(peaks)
}

/// Runs `f` with this process's CPU products on `product` (`None`: as
/// they are, the GPU's), then puts back the product chosen before.
pub fn on_product<R>(product: Option<CpuProduct>, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let Some(product) = product else {
        return f();
    };
    let before = gemm::choose(product).map_err(anyhow::Error::msg)?;
    let result = f();
    gemm::choose(before).map_err(anyhow::Error::msg)?;
    result
}

/// The peaks as a cell: "OpenBLAS 136.1, candle 98.2 GFLOP/s".
pub fn peaks_cell(peaks: &[Peak]) -> String {
    let each: Vec<String> = peaks.iter().map(|p| format!("{} {:.1}", p.name(), p.gflops)).collect();
    format!("{} GFLOP/s", each.join(", "))
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
            peaks: Vec::new(),
        };
        // 2 GB of weights, 0.5 G parameters: 5 tokens/s a row by bandwidth,
        // 100 tokens/s by arithmetic.
        assert_eq!(limits.decode(1, 2e9, 0.5e9), Some(5.0));
        assert_eq!(limits.decode(8, 2e9, 0.5e9), Some(40.0));
        assert_eq!(limits.decode(64, 2e9, 0.5e9), Some(100.0));
        assert_eq!(limits.prefill(0.5e9), 100.0);
        let gpu = Limits {
            bandwidth_gbs: None,
            ..limits.clone()
        };
        assert_eq!(gpu.decode(1, 2e9, 0.5e9), None);
        assert_eq!(percent(3.0, Some(5.0)), "60%");
        assert_eq!(percent(3.0, None), "–");
    }

    #[test]
    fn every_product_of_the_build_is_measured_and_the_one_in_use_is_kept() {
        let in_use = gemm::cpu_product();
        let peaks = product_peaks(&Device::Cpu).unwrap();
        assert_eq!(peaks[0].product, Some(in_use));
        let mut measured: Vec<_> = peaks.iter().filter_map(|p| p.product).collect();
        let mut available = CpuProduct::available().to_vec();
        measured.sort_by_key(|p| p.to_string());
        available.sort_by_key(|p| p.to_string());
        assert_eq!(measured, available);
        assert!(
            peaks.iter().all(|p| p.gflops > 0.01 && p.gflops.is_finite()),
            "{peaks:?}"
        );
        assert_eq!(gemm::cpu_product(), in_use);
        assert!(peaks_cell(&peaks).starts_with(&format!("{in_use} ")));
    }

    #[test]
    fn the_bandwidth_loops_measure_a_plausible_rate() {
        // Any machine that runs the tests moves between 0.5 GB/s and a few TB/s.
        let gbs = bandwidth_gbs();
        assert!(gbs > 0.5 && gbs < 5_000.0, "{gbs} GB/s");
    }
}
