//! Sampling one sequence: temperature, top-k, top-p, a seed, max tokens and
//! stop tokens, with the log-probability of every sampled token under the
//! model's full (untempered) distribution — the number RL importance ratios
//! are computed against. Batching and streaming build on this.

use crate::lora::Adapter;
use crate::model::{KvCache, Model};
use crate::Result;
use candle_core::Tensor;
use rand::{Rng, SeedableRng};

/// How to pick each next token.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// 0 means greedy.
    pub temperature: f64,
    pub top_p: f64,
    /// 0 means no limit.
    pub top_k: usize,
    pub seed: u64,
    pub max_tokens: usize,
    pub stop_tokens: Vec<u32>,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
            max_tokens: 256,
            stop_tokens: Vec::new(),
        }
    }
}

/// What was generated.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// `log p(token)` under the model's distribution (temperature 1, no
    /// truncation), one per token.
    pub logprobs: Vec<f32>,
    /// Whether a stop token ended it (it is included in `tokens`).
    pub stopped: bool,
}

/// Generates a continuation of `prompt`.
pub fn generate(model: &Model, prompt: &[u32], adapter: Option<&Adapter>, sampling: &Sampling) -> Result<Generation> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(sampling.seed);
    let mut cache = KvCache::new();
    let mut input = Tensor::new(prompt, model.device())?.unsqueeze(0)?;
    let mut out = Generation {
        tokens: Vec::new(),
        logprobs: Vec::new(),
        stopped: false,
    };
    while out.tokens.len() < sampling.max_tokens {
        let logits = model.forward_last(&input, &mut cache, adapter)?.squeeze(0)?;
        let logprobs = crate::model::log_softmax_row(&logits)?;
        let token = pick(&logprobs, sampling, &mut rng);
        out.tokens.push(token);
        out.logprobs.push(logprobs[token as usize]);
        if sampling.stop_tokens.contains(&token) {
            out.stopped = true;
            break;
        }
        input = Tensor::new(&[token], model.device())?.unsqueeze(0)?;
    }
    Ok(out)
}

/// Picks a token from log-probabilities under the sampling settings.
fn pick(logprobs: &[f32], sampling: &Sampling, rng: &mut rand::rngs::StdRng) -> u32 {
    let argmax = || {
        logprobs
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32)
    };
    if sampling.temperature <= 0.0 {
        return argmax();
    }
    // Candidates by decreasing probability, tempered.
    let mut order: Vec<usize> = (0..logprobs.len()).collect();
    order.sort_by(|a, b| logprobs[*b].total_cmp(&logprobs[*a]));
    if sampling.top_k > 0 {
        order.truncate(sampling.top_k);
    }
    let top = logprobs[order[0]] as f64;
    let weights: Vec<f64> = order
        .iter()
        .map(|i| ((logprobs[*i] as f64 - top) / sampling.temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut kept = 0;
    let mut mass = 0.0;
    for w in &weights {
        kept += 1;
        mass += w / total;
        if mass >= sampling.top_p {
            break;
        }
    }
    let kept_total: f64 = weights[..kept].iter().sum();
    let mut target = rng.random::<f64>() * kept_total;
    for (i, w) in weights[..kept].iter().enumerate() {
        target -= w;
        if target <= 0.0 {
            return order[i] as u32;
        }
    }
    order[kept - 1] as u32
}
