//! AdamW (decoupled weight decay, PyTorch's update order), global
//! gradient-norm clipping and the learning-rate schedule (linear warm-up,
//! then cosine decay to zero or constant).

use crate::policy::Grads;
use crate::Result;
use candle_core::Tensor;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    Cosine,
    Constant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimConfig {
    pub lr: f64,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Clip the global gradient norm to this (0: no clipping).
    pub max_grad_norm: f64,
    pub warmup_steps: usize,
    pub schedule: Schedule,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: 1e-4,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            max_grad_norm: 1.0,
            warmup_steps: 0,
            schedule: Schedule::Cosine,
        }
    }
}

impl OptimConfig {
    /// The learning rate of optimiser step `step` (0-based) of `total`:
    /// `lr·(step+1)/warmup` during warm-up, then cosine from `lr` to 0 over
    /// the remaining steps, or constant.
    pub fn lr_at(&self, step: usize, total: usize) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        match self.schedule {
            Schedule::Constant => self.lr,
            Schedule::Cosine => {
                let span = total.saturating_sub(self.warmup_steps).max(1) as f64;
                let progress = ((step - self.warmup_steps) as f64 / span).min(1.0);
                self.lr * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
            }
        }
    }
}

/// First and second moments per parameter, and the step count.
#[derive(Debug, Clone)]
pub struct AdamW {
    pub config: OptimConfig,
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
    pub steps: usize,
}

impl AdamW {
    pub fn new(config: OptimConfig, params: &[&Tensor]) -> Result<Self> {
        let zeros = |t: &&Tensor| t.zeros_like();
        Ok(Self {
            m: params.iter().map(zeros).collect::<candle_core::Result<_>>()?,
            v: params.iter().map(zeros).collect::<candle_core::Result<_>>()?,
            config,
            steps: 0,
        })
    }

    /// One update with learning rate `lr`; returns the new parameters.
    pub fn step(&mut self, params: &[&Tensor], grads: &Grads, lr: f64) -> Result<Vec<Tensor>> {
        let c = &self.config;
        self.steps += 1;
        let t = self.steps as i32;
        let correction1 = 1.0 - c.beta1.powi(t);
        let correction2 = 1.0 - c.beta2.powi(t);
        let mut updated = Vec::with_capacity(params.len());
        for (i, (p, g)) in params.iter().zip(&grads.0).enumerate() {
            // Detached, a guard: a gradient made by candle's autograd can
            // carry the graph that computed it (a product with a variable
            // does; no trainer here makes one since the full-weight trainer
            // went to the written backward), and the moments would then
            // hold every step's graph alive.
            let (p, g) = (p.detach(), g.detach());
            self.m[i] = ((&self.m[i] * c.beta1)? + (&g * (1.0 - c.beta1))?)?;
            self.v[i] = ((&self.v[i] * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?;
            let decayed = (p * (1.0 - lr * c.weight_decay))?;
            let denom = ((&self.v[i] / correction2)?.sqrt()? + c.eps)?;
            let update = ((&self.m[i] / correction1)? / denom)?;
            updated.push((decayed - (update * lr)?)?);
        }
        Ok(updated)
    }
}

/// Scales `grads` so their global norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`); returns the norm before clipping.
pub fn clip_grad_norm(grads: &mut Grads, max_norm: f64) -> Result<f64> {
    let norm = grads.norm()?;
    if max_norm > 0.0 && norm > max_norm {
        grads.scale(max_norm / (norm + 1e-6))?;
    }
    Ok(norm)
}
