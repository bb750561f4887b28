//! Backward into a LoRA adapter: each projection passes `dx = dy·W` plus
//! its LoRA term on, and keeps the pair's gradients — never `dW`.

use super::{backprop, Grads, LayerSaved, LoraSaved, Packed, Parameters, Saved};
use crate::lora::LoraParams;
use crate::Result;
use candle_core::Tensor;
use hone_engine::lora::Module;
use hone_engine::model::Layer;
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
    fn linear(
        &mut self,
        n: usize,
        layer: &Layer,
        module: Module,
        x: &Tensor,
        saved: &LayerSaved,
        dy: &Tensor,
    ) -> Result<Tensor> {
        linear_backward(layer, module, self.lora, n, x, saved.lora(module), dy, &mut self.grads)
    }
}

/// `dx = dy·W (+ s·(dy·B)·A through the dropout)`, and the LoRA gradients
/// added into `grads`.
#[allow(clippy::too_many_arguments)]
fn linear_backward(
    layer: &Layer,
    module: Module,
    lora: &LoraParams,
    n: usize,
    x: &Tensor,
    saved: Option<&LoraSaved>,
    dy: &Tensor,
    grads: &mut Grads,
) -> Result<Tensor> {
    let dx = dy.matmul(&layer.linear(module).weight)?;
    let (Some(pair), Some(position), Some(saved)) = (lora.get(n, module), lora.position(n, module), saved) else {
        return Ok(dx);
    };
    let s = lora.scale;
    let input = match &saved.mask {
        Some(m) => (x * m)?,
        None => x.clone(),
    };
    let dyb = dy.matmul(&pair.b)?;
    let da = (dyb.t()?.matmul(&input)? * s)?;
    let db = (dy.t()?.matmul(&saved.xa)? * s)?;
    grads.0[2 * position] = (&grads.0[2 * position] + da)?;
    grads.0[2 * position + 1] = (&grads.0[2 * position + 1] + db)?;
    let dlora = (dyb.matmul(&pair.a)? * s)?;
    let dlora = match &saved.mask {
        Some(m) => (dlora * m)?,
        None => dlora,
    };
    Ok((dx + dlora)?)
}
