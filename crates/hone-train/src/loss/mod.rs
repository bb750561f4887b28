//! The objectives, each a function of the log-probabilities of the scored
//! tokens: it returns the loss and `∂L/∂logprob` per token, which
//! [`crate::policy::backward`] turns into LoRA gradients. Plain `f64`
//! arithmetic on host vectors — tiny next to the model — so each formula
//! reads like its paper.

pub mod dpo;
pub mod grpo;
pub mod sft;

/// A loss value and its gradient with respect to each sequence's scored
/// log-probabilities (same order and lengths as the inputs).
#[derive(Debug, Clone, PartialEq)]
pub struct LossOutput {
    pub loss: f64,
    pub grads: Vec<Vec<f32>>,
}

/// The k3 estimator of KL(π‖ref) per token, `e^{ref−ℓ} − (ref − ℓ) − 1`
/// (always ≥ 0), and its derivative in `ℓ`, `1 − e^{ref−ℓ}`.
pub fn kl_k3(logprob: f64, reference: f64) -> (f64, f64) {
    let d = reference - logprob;
    (d.exp() - d - 1.0, 1.0 - d.exp())
}

/// Mean k3 KL over every token of every sequence (0 with no tokens).
pub fn mean_kl(logprobs: &[&[f32]], reference: &[&[f32]]) -> f64 {
    let mut total = 0.0;
    let mut count = 0usize;
    for (l, r) in logprobs.iter().zip(reference) {
        for (l, r) in l.iter().zip(r.iter()) {
            total += kl_k3(*l as f64, *r as f64).0;
            count += 1;
        }
    }
    if count == 0 {
        0.0
    } else {
        total / count as f64
    }
}
