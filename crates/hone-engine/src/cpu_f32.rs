//! The f32 elements of contiguous tensors in CPU memory, borrowed for the
//! hand-written kernels ([`crate::gemv`], [`crate::swiglu`]): candle's
//! storage is matched here, once.

use candle_core::{CpuStorage, Storage, Tensor};

/// `f` over the elements of `tensors` when each is f32, in CPU memory and
/// contiguous (`None` otherwise, for candle's own ops to compute).
pub fn with_slices<const N: usize, R>(tensors: [&Tensor; N], f: impl FnOnce([&[f32]; N]) -> R) -> Option<R> {
    let guards = tensors.map(|t| t.storage_and_layout());
    let mut slices = Vec::with_capacity(N);
    for (storage, layout) in &guards {
        let (Storage::Cpu(CpuStorage::F32(all)), Some((start, end))) = (&**storage, layout.contiguous_offsets()) else {
            return None;
        };
        slices.push(&all[start..end]);
    }
    let slices = <[&[f32]; N]>::try_from(slices).ok()?;
    Some(f(slices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn borrows_contiguous_f32_in_cpu_memory_only() {
        let t = Tensor::arange(0f32, 12.0, &Device::Cpu)
            .unwrap()
            .reshape((3, 4))
            .unwrap();
        let row = t.narrow(0, 1, 1).unwrap();
        let sums = with_slices([&t, &row], |[all, row]| (all.len(), row.to_vec()));
        assert_eq!(
            sums,
            Some((12, vec![4.0, 5.0, 6.0, 7.0])),
            "a contiguous view is its own elements"
        );
        assert_eq!(
            with_slices([&t.t().unwrap()], |[s]| s.len()),
            None,
            "a transposed view is not contiguous"
        );
        let half = t.to_dtype(DType::F16).unwrap();
        assert_eq!(
            with_slices([&t, &half], |[s, _]| s.len()),
            None,
            "every tensor must be f32"
        );
    }
}
