//! Backward into a LoRA adapter: each projection passes `dx = dy·W` plus
//! its LoRA term on, and keeps the pair's gradients — never `dW`.

use super::{backprop, Grads, Packed, Parameters, Projection, Saved};
use crate::lora::LoraParams;
use crate::Result;
use candle_core::Tensor;
use hone_engine::Model;

/// Gradients of the LoRA tensors given `∂L/∂logprob` of every scored token.
pub fn backward(model: &Model, lora: &LoraParams, packed: &Packed, saved: Saved, dlogprobs: &[f32]) -> Result<Grads> {
    let mut adapter = AdapterGrads {
        lora,
        grads: Grads::zeros(lora)?,
    };
    backprop(model, packed, saved, dlogprobs, &mut adapter)?;
    Ok(adapter.grads)
}

/// An adapter's tensors: each projection's LoRA pair.
struct AdapterGrads<'a> {
    lora: &'a LoraParams,
    grads: Grads,
}

impl Parameters for AdapterGrads<'_> {
    /// `dx = dy·W (+ s·(dy·B)·A through the dropout)`, the LoRA pair's
    /// gradients added into `grads`.
    fn linear(&mut self, at: &Projection<'_>, dy: &Tensor) -> Result<Tensor> {
        let (lora, n, module) = (self.lora, at.n, at.module);
        let dx = dy.matmul(&at.layer.linear(module).weight)?;
        let (Some(pair), Some(position), Some(saved)) =
            (lora.get(n, module), lora.position(n, module), at.saved.lora(module))
        else {
            return Ok(dx);
        };
        let s = lora.scale;
        let input = match &saved.mask {
            Some(m) => (at.x * m)?,
            None => at.x.clone(),
        };
        let dyb = dy.matmul(&pair.b)?;
        let da = (dyb.t()?.matmul(&input)? * s)?;
        let db = (dy.t()?.matmul(&saved.xa)? * s)?;
        let grads = &mut self.grads.0;
        grads[2 * position] = (&grads[2 * position] + da)?;
        grads[2 * position + 1] = (&grads[2 * position + 1] + db)?;
        let dlora = (dyb.matmul(&pair.a)? * s)?;
        let dlora = match &saved.mask {
            Some(m) => (dlora * m)?,
            None => dlora,
        };
        Ok((dx + dlora)?)
    }
}
