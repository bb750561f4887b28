//! Backward into every weight of the model, for full-weight training
//! ([`crate::full`]): each projection's `dW = dyᵀ·x` and bias, the norms',
//! the embedding's and the LM head's gradients.

use super::{backprop, Packed, Parameters, Projection, Saved};
use crate::Result;
use candle_core::Tensor;
use hone_engine::Model;

/// Gradients of every weight of the model given `∂L/∂logprob` of every
/// scored token, by Hugging Face name (`hone_engine::names`): each
/// projection's `dW = dyᵀ·x` (and bias), the norms' weights, the
/// embedding and the LM head (added into the embedding when tied).
pub fn weight_backward(
    model: &Model,
    packed: &Packed,
    saved: Saved,
    dlogprobs: &[f32],
) -> Result<Vec<(String, Tensor)>> {
    let mut weights = WeightGrads {
        grads: Vec::new(),
        head: None,
    };
    backprop(model, packed, saved, dlogprobs, &mut weights)?;
    Ok(weights.grads)
}

/// Every weight of the model.
struct WeightGrads {
    grads: Vec<(String, Tensor)>,
    /// The LM head's gradient, until the embedding's (tied: they add up).
    head: Option<Tensor>,
}

impl Parameters for WeightGrads {
    fn linear(&mut self, at: &Projection<'_>, dy: &Tensor) -> Result<Tensor> {
        let linear = at.layer.linear(at.module);
        let name = hone_engine::names::projection(at.n, at.module);
        self.grads.push((format!("{name}.weight"), dy.t()?.matmul(at.x)?));
        if linear.bias.is_some() {
            self.grads.push((format!("{name}.bias"), dy.sum(0)?));
        }
        Ok(dy.matmul(&linear.weight)?)
    }

    fn norm(&mut self, name: &dyn Fn() -> String, x: &Tensor, r: &Tensor, dy: &Tensor) -> Result<()> {
        self.grads.push((name(), (dy * x.broadcast_mul(r)?)?.sum(0)?));
        Ok(())
    }

    fn head(&mut self, dlogits: &Tensor, hidden: &Tensor) -> Result<()> {
        self.head = Some(dlogits.t()?.matmul(hidden)?);
        Ok(())
    }

    fn embedding(&mut self, model: &Model, packed: &Packed, dx: &Tensor) -> Result<()> {
        let embed = model.embedding();
        let mut grad = embed.zeros_like()?.index_add(&packed.tokens, dx, 0)?;
        let head = self.head.take();
        if model.config.tie_word_embeddings {
            if let Some(head) = head {
                grad = (grad + head)?;
            }
        } else {
            let head = match head {
                Some(head) => head,
                None => model.lm_head().zeros_like()?,
            };
            self.grads.push((hone_engine::names::LM_HEAD.to_owned(), head));
        }
        self.grads.push((hone_engine::names::EMBEDDING.to_owned(), grad));
        Ok(())
    }
}
