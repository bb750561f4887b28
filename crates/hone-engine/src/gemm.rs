//! `a·b` for two matrices: the product every prefill projection and every
//! training step multiplies with. In a build with the `blas` feature, f32
//! products on the CPU run on the system's OpenBLAS (through ndarray's
//! safe `general_mat_mul`, which hands contiguous and transposed operands
//! to `cblas_sgemm` as they lie, without copying); everything else — other
//! dtypes, other devices, batched operands, small products, a process that
//! multiplies on one thread per op — is candle's own product.
//!
//! Why a second GEMM: on AVX2 machines candle's CPU GEMM (the `gemm` crate)
//! reaches about half of what OpenBLAS does on the shapes of a 0.5B
//! model's prefill and of LoRA training (docs/benchmarks.md, "The CPU
//! product"); torch multiplies with a tuned BLAS too. It is a feature, not
//! the default, because it links a system library (Debian and Ubuntu:
//! `libopenblas-dev`) and hone builds with nothing but a Rust toolchain.

use candle_core::{Result, Tensor};
use std::sync::atomic::{AtomicBool, Ordering};

/// `a·b` for `a` `[m, k]` and `b` `[k, n]` (either may be a transposed
/// view); any other operands as candle's `matmul` takes them.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "blas")]
    if a.elem_count() * b.dims().last().copied().unwrap_or(0) >= MIN_MULTIPLY_ADDS
        && cpu_product() == CpuProduct::OpenBlas
    {
        if let Some(product) = blas::matmul(a, b)? {
            return Ok(product);
        }
    }
    a.matmul(b)
}

/// Multiply-adds below which a product stays with candle: OpenBLAS hands
/// every product to its threads, and a small one is over before that pays
/// (a 2-layer test model prefilled 8 × 64 tokens 4× slower on OpenBLAS).
#[cfg(feature = "blas")]
const MIN_MULTIPLY_ADDS: usize = 1 << 22;

/// A library f32 products on the CPU can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuProduct {
    /// candle's own GEMM (the `gemm` crate), in every build.
    Candle,
    /// The system's OpenBLAS, in a build with the `blas` feature.
    OpenBlas,
}

impl CpuProduct {
    /// The products this build can multiply on, its default first.
    pub fn available() -> &'static [CpuProduct] {
        if cfg!(feature = "blas") {
            &[CpuProduct::OpenBlas, CpuProduct::Candle]
        } else {
            &[CpuProduct::Candle]
        }
    }
}

impl std::fmt::Display for CpuProduct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CpuProduct::Candle => "candle",
            CpuProduct::OpenBlas => "OpenBLAS",
        })
    }
}

/// Set while this process keeps its products on candle's GEMM in a build
/// that has OpenBLAS ([`choose`]).
static CANDLE_CHOSEN: AtomicBool = AtomicBool::new(false);

/// Runs this process's f32 CPU products on `product` from now on (a
/// benchmark measures each product of the build in turn) and returns the
/// one chosen before; a product the build lacks is refused.
pub fn choose(product: CpuProduct) -> std::result::Result<CpuProduct, String> {
    if !CpuProduct::available().contains(&product) {
        return Err(format!(
            "this build multiplies on {} only (OpenBLAS needs a build with `--features blas`)",
            CpuProduct::available()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let candle_before = CANDLE_CHOSEN.swap(product == CpuProduct::Candle, Ordering::Relaxed);
    Ok(if candle_before {
        CpuProduct::Candle
    } else {
        CpuProduct::available()[0]
    })
}

/// The library f32 products on the CPU run on in this process: OpenBLAS
/// in a build with `blas`, unless candle was chosen or ops multiply on one
/// thread each (a process fixed to one thread per op, for a small model,
/// keeps candle's product, which stays on its thread; OpenBLAS would start
/// its own on every core).
pub fn cpu_product() -> CpuProduct {
    if cfg!(feature = "blas") && !CANDLE_CHOSEN.load(Ordering::Relaxed) && crate::threads::per_op() != Some(1) {
        CpuProduct::OpenBlas
    } else {
        CpuProduct::Candle
    }
}

#[cfg(feature = "blas")]
mod blas {
    use candle_core::{CpuStorage, DType, Device, Result, Storage, Tensor};
    use ndarray::{linalg::general_mat_mul, Array2, ArrayView2, ShapeBuilder};

    /// The product on OpenBLAS, `None` when the operands are not two f32
    /// matrices on the CPU.
    pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
        let fits = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32 && t.rank() == 2;
        if !fits(a) || !fits(b) {
            return Ok(None);
        }
        let (m, k) = a.dims2()?;
        let (k2, n) = b.dims2()?;
        if k != k2 {
            // candle's own product words the shape error.
            return Ok(None);
        }
        let product = with_view(a, |a| {
            with_view(b, |b| {
                let mut c = Array2::<f32>::zeros((m, n));
                general_mat_mul(1.0, &a, &b, 0.0, &mut c);
                c
            })
        })
        .flatten();
        let Some(c) = product else {
            return Ok(None);
        };
        let (values, _) = c.into_raw_vec_and_offset();
        Ok(Some(Tensor::from_vec(values, (m, n), &Device::Cpu)?))
    }

    /// Calls `f` with `t`'s f32 storage seen as a matrix with `t`'s
    /// strides (`None` when it cannot be seen so).
    fn with_view<R>(t: &Tensor, f: impl FnOnce(ArrayView2<'_, f32>) -> R) -> Option<R> {
        let (storage, layout) = t.storage_and_layout();
        let Storage::Cpu(CpuStorage::F32(values)) = &*storage else {
            return None;
        };
        let (&[rows, cols], &[row_stride, col_stride]) = (layout.dims(), layout.stride()) else {
            return None;
        };
        let shape = (rows, cols).strides((row_stride, col_stride));
        let view = ArrayView2::from_shape(shape, values.get(layout.start_offset()..)?).ok()?;
        Some(f(view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// `a·b` in f64 by the definition, for operands given row-major.
    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let sum: f64 = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum();
                c[i * n + j] = sum as f32;
            }
        }
        c
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0)
            .collect()
    }

    fn assert_close(got: &Tensor, want: &[f32]) {
        let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "element {i}: {g} against {w}");
        }
    }

    #[test]
    fn the_product_matches_the_definition_for_plain_and_transposed_operands() {
        let device = Device::Cpu;
        // Shapes on both sides of the cut-off below which ndarray keeps
        // small products for itself, and an odd, prime-sized one.
        for (m, k, n) in [(3, 5, 2), (64, 96, 80), (37, 41, 43)] {
            let a = values(m * k, 1);
            let b = values(k * n, 2);
            let want = reference(&a, &b, m, k, n);
            let ta = Tensor::from_vec(a.clone(), (m, k), &device).unwrap();
            let tb = Tensor::from_vec(b.clone(), (k, n), &device).unwrap();
            assert_close(&matmul(&ta, &tb).unwrap(), &want);
            #[cfg(feature = "blas")]
            assert_close(
                &blas::matmul(&ta, &tb).unwrap().expect("two f32 matrices on the CPU"),
                &want,
            );
            // The operands stored transposed (as checkpoints store weights
            // and the trainer's gradients read activations) and used as views.
            let at = ta.t().unwrap().contiguous().unwrap();
            let bt = tb.t().unwrap().contiguous().unwrap();
            assert_close(&matmul(&at.t().unwrap(), &bt.t().unwrap()).unwrap(), &want);
            #[cfg(feature = "blas")]
            assert_close(
                &blas::matmul(&at.t().unwrap(), &bt.t().unwrap()).unwrap().unwrap(),
                &want,
            );
            // A view that starts past its storage's first element.
            let wide = Tensor::cat(&[&tb, &tb], 1).unwrap();
            let right = wide.narrow(1, n, n).unwrap();
            assert_close(&matmul(&ta, &right).unwrap(), &want);
            #[cfg(feature = "blas")]
            assert_close(&blas::matmul(&ta, &right).unwrap().unwrap(), &want);
        }
    }

    #[test]
    fn a_process_multiplies_on_the_product_it_chose_and_never_on_one_the_build_lacks() {
        let device = Device::Cpu;
        // Large enough for OpenBLAS when the build has it.
        let (m, k, n) = (128, 256, 160);
        let (a, b) = (values(m * k, 3), values(k * n, 4));
        let want = reference(&a, &b, m, k, n);
        let ta = Tensor::from_vec(a, (m, k), &device).unwrap();
        let tb = Tensor::from_vec(b, (k, n), &device).unwrap();
        for &product in CpuProduct::available() {
            choose(product).unwrap();
            if crate::threads::per_op() != Some(1) {
                assert_eq!(cpu_product(), product);
            }
            assert_close(&matmul(&ta, &tb).unwrap(), &want);
        }
        assert_eq!(
            CpuProduct::available().contains(&CpuProduct::OpenBlas),
            cfg!(feature = "blas")
        );
        assert_eq!(choose(CpuProduct::Candle), Ok(CpuProduct::Candle));
        if !cfg!(feature = "blas") {
            let refused = choose(CpuProduct::OpenBlas).unwrap_err();
            assert!(refused.contains("--features blas"), "{refused}");
            assert_eq!(cpu_product(), CpuProduct::Candle);
        }
    }

    #[test]
    fn operands_that_do_not_fit_are_refused_as_candle_refuses_them() {
        let device = Device::Cpu;
        let a = Tensor::zeros((4, 3), candle_core::DType::F32, &device).unwrap();
        let b = Tensor::zeros((5, 2), candle_core::DType::F32, &device).unwrap();
        let error = matmul(&a, &b).unwrap_err().to_string();
        assert!(error.contains("shape mismatch"), "{error}");
    }
}
