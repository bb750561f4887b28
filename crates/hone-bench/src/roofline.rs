//! The machine's limits, measured in the same run as the figures compared
//! against them (once before each of its runs; the medians count):
//! memory bandwidth (on the CPU, STREAM-style copy, triad and
//! read loops over arrays far larger than the caches, one slice per core; on
//! a GPU, candle's own copy and sum of 1 GiB in device memory, which move
//! less than the memory can: a lower bound there) and matmul peak
//! (candle's product in the measured dtype: the best of a large square one
//! and the model's own projections at the measured row counts, so that no
//! shape the model multiplies runs faster than its "peak").
//!
//! Decoding a token reads every weight once, so decode is bound by
//! bandwidth (`bandwidth / weight bytes` tokens per second per row, until
//! the rows' arithmetic reaches the matmul peak); prefill and training
//! multiply whole matrices, so they are bound by the matmul peak
//! (`peak / (2 × parameters)` tokens per second forward).

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use hone_engine::ModelConfig;
use std::time::Instant;

/// Floats per array of the bandwidth loops: 64 MiB each, far beyond any
/// cache of this class of machine.
const STREAM_FLOATS: usize = 16 << 20;

/// Bytes of the device-memory buffer of the GPU bandwidth measurement:
/// far beyond the L2 of any GPU.
const DEVICE_BYTES: usize = 1 << 30;

/// What the machine can do at most.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Memory bandwidth in GB/s: on the CPU the best of copy, triad and
    /// read on every core, on a GPU the best of a copy and a read in device
    /// memory (`None` where unknown).
    pub bandwidth_gbs: Option<f64>,
    /// Matmul throughput on the device, GFLOP/s (see [`Limits::measure`]).
    pub matmul_gflops: f64,
}

/// One matrix product `[m, k] · [k, n]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Product {
    pub m: usize,
    pub k: usize,
    pub n: usize,
}

impl Product {
    /// The square product that sets a device's peak: 2048³ on the CPU,
    /// 8192³ on a GPU (where a 2048³ product is over too soon for its
    /// launch and synchronisation not to count).
    pub fn square(device: &Device) -> Self {
        let n = if device.is_cpu() { 2048 } else { 8192 };
        Self { m: n, k: n, n }
    }

    /// A model's projections `x·Wᵀ` for each of `rows` input rows: onto the
    /// MLP's width and back, and the attention's square one.
    pub fn projections(config: &ModelConfig, rows: &[usize]) -> Vec<Self> {
        let (hidden, mlp) = (config.hidden_size, config.intermediate_size);
        rows.iter()
            .flat_map(|&m| [(hidden, mlp), (mlp, hidden), (hidden, hidden)].map(|(k, n)| Self { m, k, n }))
            .collect()
    }

    fn flops(self) -> f64 {
        2.0 * (self.m * self.k * self.n) as f64
    }
}

impl Limits {
    /// Measures both on `device`: the matmul peak in `dtype` as the best of
    /// [`Product::square`] and `products`.
    pub fn measure(device: &Device, dtype: DType, products: &[Product]) -> Result<Self> {
        Ok(Self {
            bandwidth_gbs: Some(bandwidth_gbs(device)?),
            matmul_gflops: peak_of(device, products, |product| matmul_gflops(device, dtype, product))?,
        })
    }

    /// The median of each limit over measurements taken one before each
    /// run of a benchmark: a shared machine's bandwidth and peak drift
    /// within minutes, and one measurement, itself the best of a few
    /// passes, may catch a moment the runs never see.
    pub fn median(measured: &[Limits]) -> Self {
        let median = |values: Vec<f64>| hone_learn::stats::median(&values).unwrap_or(f64::NAN);
        let bandwidths: Vec<f64> = measured.iter().filter_map(|l| l.bandwidth_gbs).collect();
        Self {
            bandwidth_gbs: (!bandwidths.is_empty()).then(|| median(bandwidths)),
            matmul_gflops: median(measured.iter().map(|l| l.matmul_gflops).collect()),
        }
    }

    /// The limits as a result file's line states them, with what each was
    /// measured on (`dtype` the peak's, `rows` the projections' row counts)
    /// and how many measurements their medians are of.
    pub fn describe(&self, device: &Device, dtype: DType, rows: &[usize], measurements: usize) -> String {
        let rows: Vec<String> = rows.iter().map(usize::to_string).collect();
        format!(
            "{}memory bandwidth {} GB/s ({}), {} matmul peak {:.1} GFLOP/s (candle, best of {}³ and the model's projections at {} rows)",
            if measurements > 1 {
                format!("medians of {measurements} measurements, one before each run: ")
            } else {
                String::new()
            },
            self.bandwidth_gbs.map_or("–".into(), |b| format!("{b:.1}")),
            if device.is_cpu() {
                "best of copy, triad and read, every core"
            } else {
                "candle's copy and sum of 1 GiB in device memory"
            },
            dtype.as_str(),
            self.matmul_gflops,
            Product::square(device).n,
            rows.join(" and ")
        )
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

/// The best `rate` of [`Product::square`] and `products`.
fn peak_of(device: &Device, products: &[Product], mut rate: impl FnMut(Product) -> Result<f64>) -> Result<f64> {
    let mut peak = 0f64;
    for product in std::iter::once(Product::square(device)).chain(products.iter().copied()) {
        peak = peak.max(rate(product)?);
    }
    Ok(peak)
}

/// Memory bandwidth of `device` in GB/s: [`host_bandwidth_gbs`] on the
/// CPU, [`device_bandwidth_gbs`] on a GPU.
pub fn bandwidth_gbs(device: &Device) -> Result<f64> {
    if device.is_cpu() {
        Ok(host_bandwidth_gbs())
    } else {
        device_bandwidth_gbs(device)
    }
}

/// GB/s of the best of a copy (`a = b`), a triad (`a = b + s·c`) and a
/// read (the sum of `b`, what decode does to its weights), each the best of
/// five passes, split over every core; bytes counted as STREAM counts them
/// (each array read or written once). The read is the pattern of decode,
/// which only reads its weights.
pub fn host_bandwidth_gbs() -> f64 {
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

/// GB/s of the best of a copy (bytes read and written counted) and a sum
/// (bytes read) of a 1 GiB buffer in `device`'s memory, each the best of
/// five after a warm-up: what candle's own kernels move (on an H200 about
/// a fifth of what a torch copy moves), so a lower bound of the memory's.
pub fn device_bandwidth_gbs(device: &Device) -> Result<f64> {
    let buffer = Tensor::ones(DEVICE_BYTES / 4, DType::F32, device)?;
    let copy = best_seconds(device, 5, || {
        buffer.copy()?;
        Ok(())
    })?;
    let read = best_seconds(device, 5, || {
        buffer.sum_all()?;
        Ok(())
    })?;
    Ok((2.0 * DEVICE_BYTES as f64 / copy).max(DEVICE_BYTES as f64 / read) / 1e9)
}

/// candle's throughput on `product` in `dtype` (the right operand used
/// transposed, as a projection uses its weight), GFLOP/s of the median of
/// five after two warm-ups.
pub fn matmul_gflops(device: &Device, dtype: DType, product: Product) -> Result<f64> {
    let a = Tensor::randn(0f32, 1.0, (product.m, product.k), device)?.to_dtype(dtype)?;
    let b = Tensor::randn(0f32, 1.0, (product.n, product.k), device)?.to_dtype(dtype)?;
    let mut times = Vec::new();
    for rep in 0..7 {
        let started = Instant::now();
        drop(a.matmul(&b.t()?)?);
        device.synchronize()?;
        if rep >= 2 {
            times.push(started.elapsed().as_secs_f64());
        }
    }
    let median = hone_learn::stats::median(&times).unwrap_or(f64::NAN);
    Ok(product.flops() / median / 1e9)
}

/// The shortest of `reps` timed calls of `work` on `device` (each waited
/// for), after one warm-up.
fn best_seconds(device: &Device, reps: usize, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    work()?;
    device.synchronize()?;
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let started = Instant::now();
        work()?;
        device.synchronize()?;
        best = best.min(started.elapsed().as_secs_f64());
    }
    Ok(best)
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
        let gbs = host_bandwidth_gbs();
        assert!(gbs > 0.5 && gbs < 5_000.0, "{gbs} GB/s");
    }

    #[test]
    fn the_limits_of_several_runs_are_their_medians() {
        let at = |bandwidth: Option<f64>, peak: f64| Limits {
            bandwidth_gbs: bandwidth,
            matmul_gflops: peak,
        };
        let measured = [at(Some(26.5), 110.0), at(Some(14.0), 118.0), at(Some(17.0), 90.0)];
        assert_eq!(Limits::median(&measured), at(Some(17.0), 110.0));
        assert_eq!(Limits::median(&[at(None, 50.0)]), at(None, 50.0));
        let line = Limits::median(&measured).describe(&Device::Cpu, DType::F32, &[64], 3);
        assert!(
            line.starts_with("medians of 3 measurements, one before each run: memory bandwidth 17.0 GB/s"),
            "{line}"
        );
    }

    #[test]
    fn the_peak_is_the_best_of_the_square_product_and_the_models_own() {
        let device = Device::Cpu;
        let small = Product { m: 64, k: 64, n: 64 };
        let wide = Product { m: 64, k: 64, n: 4096 };
        let mut asked = Vec::new();
        // Made-up rates: the square product is not always the fastest.
        let peak = peak_of(&device, &[small, wide], |p| {
            asked.push(p);
            Ok(if p == wide { 150.0 } else { 100.0 })
        })
        .unwrap();
        assert_eq!(peak, 150.0);
        assert_eq!(asked, [Product::square(&device), small, wide]);
        assert_eq!(
            peak_of(&device, &[small], |p| Ok(p.flops() / 1e6)).unwrap(),
            2.0 * 2048f64.powi(3) / 1e6
        );
        let measured = Limits::measure(&device, DType::F32, &[small]).unwrap();
        assert!(measured.matmul_gflops.is_finite() && measured.matmul_gflops > 0.0);
        let dir = crate::support::random_checkpoint("tiny").unwrap();
        let config = ModelConfig::from_file(&dir.path().join("config.json")).unwrap();
        let products = Product::projections(&config, &[8, 64]);
        assert_eq!(products.len(), 6);
        assert_eq!(
            products[0],
            Product {
                m: 8,
                k: config.hidden_size,
                n: config.intermediate_size
            }
        );
    }
}
