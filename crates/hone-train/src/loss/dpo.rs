//! Direct Preference Optimisation (sigmoid loss): with sequence
//! log-probabilities summed over the completion,
//! `z = β·((π_c − ref_c) − (π_r − ref_r))`, `L = −log σ(z)`, averaged over
//! pairs. The reference is the base model with LoRA switched off.

use super::LossOutput;

/// One preference pair's per-token log-probabilities.
#[derive(Debug, Clone, Copy)]
pub struct DpoPair<'a> {
    pub chosen: &'a [f32],
    pub rejected: &'a [f32],
    pub ref_chosen: &'a [f32],
    pub ref_rejected: &'a [f32],
}

/// What DPO practitioners watch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DpoStats {
    /// Share of pairs whose implicit reward prefers the chosen answer.
    pub accuracy: f64,
    /// Mean `z / β`.
    pub margin: f64,
}

/// The loss; gradients come back as `[chosen₀, rejected₀, chosen₁, …]`.
pub fn dpo_loss(pairs: &[DpoPair], beta: f64) -> (LossOutput, DpoStats) {
    let sum = |v: &[f32]| v.iter().map(|x| *x as f64).sum::<f64>();
    let n = pairs.len().max(1) as f64;
    let mut loss = 0.0;
    let mut grads = Vec::with_capacity(2 * pairs.len());
    let mut stats = DpoStats::default();
    for p in pairs {
        let margin = (sum(p.chosen) - sum(p.ref_chosen)) - (sum(p.rejected) - sum(p.ref_rejected));
        let z = beta * margin;
        // −log σ(z) = softplus(−z), computed stably.
        loss += if z > 0.0 {
            (-z).exp().ln_1p()
        } else {
            -z + z.exp().ln_1p()
        } / n;
        let g = -beta * sigmoid(-z) / n;
        grads.push(vec![g as f32; p.chosen.len()]);
        grads.push(vec![-g as f32; p.rejected.len()]);
        stats.accuracy += f64::from(u8::from(margin > 0.0)) / n;
        stats.margin += margin / n;
    }
    (LossOutput { loss, grads }, stats)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
