//! The MLP's activation `silu(gate) · up` and its gradient, element-wise.
//!
//! With candle's ops the activation is two passes over `[rows,
//! intermediate]` tensors (the largest activations of a forward), and each
//! `silu` calls the C library's `expf` once an element: on a 2-core CPU the
//! activation of a 512-row prefill of the Qwen2.5-0.5B shape took ~8 ms a
//! layer, about 5% of the forward, and the trainer's gradient of it more.
//! Here, for contiguous f32 tensors on the CPU that record no gradient, each
//! is one pass with `e^x` from a polynomial the compiler vectorises in the
//! widest SIMD the CPU offers (pulp chooses it at run time), the elements
//! shared among rayon's threads. Everywhere else (a GPU, bf16, a forward
//! that candle's autograd differentiates) it is candle's ops, the same
//! formulas.

use crate::Result;
use candle_core::Tensor;
use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

/// Elements a rayon task takes: enough to amortise its hand-off.
const CHUNK: usize = 1 << 14;

/// `silu(gate) · up`, with `silu(x) = x / (1 + e^-x)`.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let fused = with_f32([gate, up], |[gate, up]| {
        let arch = Arch::new();
        let mut out = vec![0f32; gate.len()];
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(n, out)| {
            let at = n * CHUNK..n * CHUNK + out.len();
            arch.dispatch(Forward {
                gate: &gate[at.clone()],
                up: &up[at],
                out,
            });
        });
        out
    });
    match fused {
        Some(out) => Ok(Tensor::from_vec(out, gate.shape(), gate.device())?),
        None => Ok((gate.silu()? * up)?),
    }
}

/// The gradients `(d gate, d up)` of [`swiglu`] from the gradient `dact`
/// of its output: `d up = dact · silu(gate)` and `d gate = dact · up ·
/// σ(gate) · (1 + gate · (1 − σ(gate)))`, `σ` the logistic function.
pub fn swiglu_backward(gate: &Tensor, up: &Tensor, dact: &Tensor) -> Result<(Tensor, Tensor)> {
    let fused = with_f32([gate, up, dact], |[gate, up, dact]| {
        let arch = Arch::new();
        let mut dgate = vec![0f32; gate.len()];
        let mut dup = vec![0f32; gate.len()];
        dgate
            .par_chunks_mut(CHUNK)
            .zip(dup.par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(n, (dgate, dup))| {
                let at = n * CHUNK..n * CHUNK + dgate.len();
                arch.dispatch(Backward {
                    gate: &gate[at.clone()],
                    up: &up[at.clone()],
                    dact: &dact[at],
                    dgate,
                    dup,
                });
            });
        (dgate, dup)
    });
    if let Some((dgate, dup)) = fused {
        return Ok((
            Tensor::from_vec(dgate, gate.shape(), gate.device())?,
            Tensor::from_vec(dup, gate.shape(), gate.device())?,
        ));
    }
    let sig = (gate.neg()?.exp()? + 1.0)?.recip()?;
    let silu = (gate * &sig)?;
    let dsilu = (&sig * ((gate * (1.0 - &sig)?)? + 1.0)?)?;
    Ok(((dact * up)?.mul(&dsilu)?, (dact * silu)?))
}

/// `f` over the tensors' elements when all are contiguous f32 on the CPU,
/// of one shape, and record no gradient (`None` otherwise, for candle's
/// ops to compute).
fn with_f32<const N: usize, R>(tensors: [&Tensor; N], f: impl FnOnce([&[f32]; N]) -> R) -> Option<R> {
    let shape = tensors[0].shape();
    if tensors.iter().any(|t| t.track_op() || t.shape() != shape) {
        return None;
    }
    crate::cpu_f32::with_slices(tensors, f)
}

struct Forward<'a> {
    gate: &'a [f32],
    up: &'a [f32],
    out: &'a mut [f32],
}

impl WithSimd for Forward<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        for ((out, &g), &u) in self.out.iter_mut().zip(self.gate).zip(self.up) {
            *out = g / (1.0 + exp(-g)) * u;
        }
    }
}

struct Backward<'a> {
    gate: &'a [f32],
    up: &'a [f32],
    dact: &'a [f32],
    dgate: &'a mut [f32],
    dup: &'a mut [f32],
}

impl WithSimd for Backward<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let inputs = self.gate.iter().zip(self.up).zip(self.dact);
        for ((dgate, dup), ((&g, &u), &d)) in self.dgate.iter_mut().zip(self.dup.iter_mut()).zip(inputs) {
            let sig = 1.0 / (1.0 + exp(-g));
            *dup = d * (g * sig);
            *dgate = d * u * (sig * (g * (1.0 - sig) + 1.0));
        }
    }
}

/// `e^x` in f32 to about one unit in the last place, from operations the
/// compiler vectorises (no call, no branch): `x = n·ln 2 + r` with `n` an
/// integer and `|r| ≤ ln 2 / 2`, `e^r` from a degree-7 polynomial (the
/// minimax coefficients of the Cephes library's `expf`), and `2^n` written
/// into the exponent bits. `x` is clamped to where `e^x` and `2^n` are
/// normal floats, so `e^x` saturates at ~2·10³⁸ above and ~10⁻³⁸ below: a
/// `silu` of `±88` or beyond differs from the exact one by less than 10⁻³⁶.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Adding 1.5·2²³ rounds a float of magnitude below 2²² to an integer,
    // which then sits in the low bits of the sum's mantissa.
    const ROUND: f32 = 12_582_912.0;
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.3, 88.3);
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * LN2_HIGH - n * LN2_LOW;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    e_r * two_n
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The polynomial `e^x` against f64's over the range `silu` feeds it.
    #[test]
    fn exp_is_within_two_units_in_the_last_place() {
        let mut worst = 0f64;
        for i in 0..=1_000_000 {
            let x = -87.0 + 175.0 * i as f32 / 1e6;
            let exact = (x as f64).exp();
            let ulp = f64::from(f32::EPSILON) * exact;
            worst = worst.max((exp(x) as f64 - exact).abs() / ulp);
        }
        assert!(worst < 2.0, "{worst} units in the last place");
        assert!(exp(-1e4) >= 0.0 && exp(-1e4) < 1e-37);
        assert!(exp(1e4).is_finite() && exp(1e4) > 1e38);
    }

    fn inputs(len: usize) -> [Tensor; 3] {
        let value = |i: usize, k: f32| ((i as f32 * k).sin() * 12.0) - 1.0;
        [0.37, 0.11, 0.05].map(|k| {
            let v: Vec<f32> = (0..len).map(|i| value(i, k)).collect();
            Tensor::from_vec(v, len, &Device::Cpu).unwrap()
        })
    }

    fn values(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1().unwrap()
    }

    /// The fused activation and gradient against the formulas in f64, on
    /// sizes that leave a partial chunk and a partial SIMD register (the
    /// gradient's `1 − σ` loses a few bits in f32 where `σ` is near 1).
    #[test]
    fn the_fused_activation_and_gradient_match_the_formulas() {
        let len = 3 * CHUNK + 13;
        let [g, u, d] = inputs(len);
        let act = values(&swiglu(&g, &u).unwrap());
        let (dg, du) = swiglu_backward(&g, &u, &d).unwrap();
        let (dg, du) = (values(&dg), values(&du));
        let (gate, up, dact) = (values(&g), values(&u), values(&d));
        let close = |got: f32, want: f64, tolerance: f64| (got as f64 - want).abs() <= tolerance * want.abs().max(1.0);
        for i in 0..len {
            let (g, u, d) = (gate[i] as f64, up[i] as f64, dact[i] as f64);
            let sig = 1.0 / (1.0 + (-g).exp());
            assert!(
                close(act[i], g * sig * u, 1e-6),
                "act[{i}] {} vs {}",
                act[i],
                g * sig * u
            );
            assert!(close(du[i], d * g * sig, 1e-6), "d up[{i}]");
            let want = d * u * sig * (1.0 + g * (1.0 - sig));
            assert!(close(dg[i], want, 1e-5), "d gate[{i}] {} vs {want}", dg[i]);
        }
    }

    /// Where the fused path does not apply (here inputs that record a
    /// gradient, and strided views), candle's ops compute the same values.
    #[test]
    fn candles_ops_agree_where_the_fused_path_does_not_apply() {
        let len = CHUNK + 5;
        let [g, u, d] = inputs(len);
        let vars = [&g, &u, &d].map(|t| candle_core::Var::from_tensor(t).unwrap());
        let (gv, uv, dv) = (vars[0].as_tensor(), vars[1].as_tensor(), vars[2].as_tensor());
        let agree = |fused: &Tensor, plain: &Tensor| {
            for (a, b) in values(fused).iter().zip(values(plain)) {
                assert!((a - b).abs() <= 2e-6 * a.abs().max(1.0), "{a} vs {b}");
            }
        };
        agree(&swiglu(&g, &u).unwrap(), &swiglu(gv, uv).unwrap());
        let (fused_dg, fused_du) = swiglu_backward(&g, &u, &d).unwrap();
        let (plain_dg, plain_du) = swiglu_backward(gv, uv, dv).unwrap();
        agree(&fused_dg, &plain_dg);
        agree(&fused_du, &plain_du);
        let square = |t: &Tensor| t.narrow(0, 0, 64 * 64).unwrap().reshape((64, 64)).unwrap();
        let strided = swiglu(&square(&g).t().unwrap(), &square(&u).t().unwrap()).unwrap();
        agree(&swiglu(&square(&g), &square(&u)).unwrap(), &strided.t().unwrap());
    }
}
