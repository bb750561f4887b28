//! Supervised fine-tuning: the mean negative log-likelihood of the scored
//! (assistant) tokens over the whole batch, `L = −Σℓ / N`.

use super::LossOutput;

pub fn sft_loss(logprobs: &[&[f32]]) -> LossOutput {
    let count: usize = logprobs.iter().map(|l| l.len()).sum();
    let weight = 1.0 / count.max(1) as f64;
    let loss = -logprobs.iter().flat_map(|l| l.iter()).map(|v| *v as f64).sum::<f64>() * weight;
    let grads = logprobs.iter().map(|l| vec![-weight as f32; l.len()]).collect();
    LossOutput { loss, grads }
}
