//! Full-weight supervised training of a small model, differentiated by
//! candle's autograd through the engine's own forward.
//!
//! This is how hone makes its own base policies (the demo's): a randomly
//! initialised model has nothing for a LoRA adapter to steer, so every
//! weight — embeddings included — must move. The engine's forward is built
//! from differentiable candle primitives (no fused kernels; an empty KV cache
//! keeps the tensors themselves), so the same code that serves the model
//! trains it, and a checkpoint written here loads in the engine, in
//! `transformers` and in vLLM like any Hugging Face checkpoint.
//!
//! It keeps a gradient and two AdamW moments for every weight, so it is for
//! small models; adapters on real checkpoints are trained by [`crate::trainer`]
//! with the LoRA-only backward of [`crate::policy`].

use crate::optim::{AdamW, OptimConfig};
use crate::parallel::{cut, on_threads};
use crate::policy::{Grads, Sequence};
use crate::{Result, TrainError};
use candle_core::{DType, Device, Tensor, Var, D};
use hone_engine::config::ModelConfig;
use hone_engine::model::{KvCache, Model};
use hone_engine::weights::Weights;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The files of a checkpoint directory other than its weights, copied as
/// they are when the trained weights are saved.
const COMPANIONS: [&str; 4] = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
];

/// Every weight of a model as a trainable variable, with its optimiser.
pub struct FullTrainer {
    source: PathBuf,
    config: ModelConfig,
    device: Device,
    /// `(Hugging Face name, weight)`, in a fixed order (the moments' order).
    weights: Vec<(String, Var)>,
    optim: AdamW,
    /// Parts a batch's gradient is computed in, each on a thread of its
    /// own (see [`FullTrainer::gradients`]).
    parts: usize,
}

impl std::fmt::Debug for FullTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FullTrainer")
            .field("source", &self.source)
            .field("weights", &self.weights.len())
            .finish_non_exhaustive()
    }
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FullStep {
    /// Mean negative log-likelihood per scored token, before the update.
    pub loss: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    pub tokens: usize,
}

impl FullTrainer {
    /// Loads the checkpoint in `dir` in f32 with every weight trainable.
    pub fn load(dir: &Path, device: &Device, optim: OptimConfig) -> Result<Self> {
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        let mut named: Vec<(String, Tensor)> = hone_engine::weights::Weights::load(dir, DType::F32, device)?
            .into_tensors()
            .into_iter()
            .filter(|(name, _)| !name.contains("rotary_emb"))
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let weights = named
            .into_iter()
            .map(|(name, t)| Ok((name, Var::from_tensor(&t)?)))
            .collect::<Result<Vec<_>>>()?;
        let params: Vec<&Tensor> = weights.iter().map(|(_, v)| v.as_tensor()).collect();
        let optim = AdamW::new(optim, &params)?;
        Ok(Self {
            source: dir.to_owned(),
            config,
            device: device.clone(),
            weights,
            optim,
            parts: 1,
        })
    }

    /// The model over the current weights (sharing their storage).
    pub fn model(&self) -> Result<Model> {
        let tensors: HashMap<String, Tensor> = self
            .weights
            .iter()
            .map(|(name, var)| (name.clone(), var.as_tensor().clone()))
            .collect();
        let weights = Weights::from_tensors(tensors, &self.source);
        Ok(Model::from_weights(
            self.config.clone(),
            weights,
            DType::F32,
            &self.device,
        )?)
    }

    /// Computes each batch's gradient in `parts` parts on as many threads
    /// (1: the whole batch at once, the default).
    pub fn set_parts(&mut self, parts: usize) {
        self.parts = parts.max(1);
    }

    /// Parameters trained (elements).
    pub fn parameters(&self) -> usize {
        self.weights.iter().map(|(_, v)| v.as_tensor().elem_count()).sum()
    }

    /// Summed negative log-likelihood of the scored tokens of `sequences`
    /// (a graph tensor when the weights are variables) and their count.
    ///
    /// The leading tokens every sequence shares (a system prompt and tool
    /// list, typically most of a demonstration) run through the model once;
    /// the sequences then continue from it together, as one batch whose
    /// rows are their own tokens padded at the end (causal attention never
    /// lets a real position see the padding after it), so their gradients
    /// add up through the shared positions. Only the scored positions are
    /// projected onto the vocabulary.
    fn nll(&self, model: &Model, sequences: &[&Sequence]) -> Result<(Tensor, usize)> {
        let shared = shared_prefix(sequences);
        let rows = sequences.len();
        let mut cache = KvCache::differentiable();
        if let (Some(first), true) = (sequences.first(), shared > 0) {
            let tokens = Tensor::new(&first.tokens[..shared], &self.device)?.unsqueeze(0)?;
            model.hidden(&tokens, &mut cache, None)?;
            cache = cache.repeat_rows(rows)?;
        }
        let longest = sequences.iter().map(|s| s.tokens.len() - shared).max().unwrap_or(0);
        // Position i's logits predict token i+1; `scored[i+1]` says whether
        // it counts. Slots are row-major over the padded own tokens.
        let mut own = Vec::with_capacity(rows * longest);
        let (mut slots, mut targets) = (Vec::new(), Vec::new());
        for (row, sequence) in sequences.iter().enumerate() {
            let tokens = &sequence.tokens[shared..];
            own.extend_from_slice(tokens);
            own.resize((row + 1) * longest, 0);
            for i in shared + 1..sequence.tokens.len() {
                if sequence.scored[i] {
                    slots.push((row * longest + i - 1 - shared) as u32);
                    targets.push(sequence.tokens[i]);
                }
            }
        }
        if targets.is_empty() {
            return Ok((Tensor::zeros((), DType::F32, &self.device)?, 0));
        }
        let tokens = Tensor::from_vec(own, (rows, longest), &self.device)?;
        let hidden = model.hidden(&tokens, &mut cache, None)?;
        let h = hidden.dim(D::Minus1)?;
        let picked = hidden
            .reshape((rows * longest, h))?
            .index_select(&Tensor::new(slots.as_slice(), &self.device)?, 0)?;
        let logits = model.logits(&picked.unsqueeze(0)?)?.squeeze(0)?;
        let max = logits.max_keepdim(D::Minus1)?.detach();
        let shifted = logits.broadcast_sub(&max)?;
        let log_z = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
        let log_probs = shifted.broadcast_sub(&log_z)?;
        let vocab = self.config.vocab_size;
        let mut one_hot = vec![0f32; targets.len() * vocab];
        for (row, &t) in targets.iter().enumerate() {
            one_hot[row * vocab + t as usize] = 1.0;
        }
        let one_hot = Tensor::from_vec(one_hot, (targets.len(), vocab), &self.device)?;
        let total = (log_probs * one_hot)?.sum_all()?.neg()?;
        Ok((total, targets.len()))
    }

    /// Mean negative log-likelihood per scored token, without training.
    pub fn loss(&self, sequences: &[&Sequence]) -> Result<f64> {
        let model = self.model()?;
        let (total, count) = self.nll(&model, sequences)?;
        Ok(f64::from(total.to_scalar::<f32>()?) / count.max(1) as f64)
    }

    /// The mean loss of `batch`, its gradient for every weight (in
    /// [`FullTrainer::names`] order) and the scored tokens.
    ///
    /// The batch is cut into [`FullTrainer::set_parts`] parts, each
    /// differentiated on a thread of its own (candle's graph of one batch
    /// is a long chain of small ops that one core runs about as fast as
    /// two): each part's summed negative log-likelihood divided by the
    /// whole batch's scored tokens, so the parts' gradients add up to the
    /// batch mean's — and one part is exactly the whole batch at once.
    pub fn gradients(&self, batch: &[&Sequence]) -> Result<(f64, Grads, usize)> {
        let tokens: usize = batch.iter().map(|s| s.scored_count()).sum();
        if tokens == 0 {
            return Err(TrainError::Data("a batch with no scored token".into()));
        }
        let model = self.model()?;
        let model = &model;
        let parts = on_threads(cut(batch, self.parts).map(|part| move || self.part_gradients(model, part, tokens)))?;
        let (mut loss, mut sum) = (0.0, None::<Grads>);
        for (part_loss, grads) in parts {
            loss += part_loss;
            match &mut sum {
                None => sum = Some(grads),
                Some(sum) => sum.add(&grads)?,
            }
        }
        let grads = sum.ok_or_else(|| TrainError::Data("an empty batch".into()))?;
        Ok((loss, grads, tokens))
    }

    /// `part`'s share of the mean loss of a batch with `tokens` scored
    /// tokens in all, and its gradient for every weight.
    fn part_gradients(&self, model: &Model, part: &[&Sequence], tokens: usize) -> Result<(f64, Grads)> {
        let (total, scored) = self.nll(model, part)?;
        let share = (total / tokens as f64)?;
        let value = f64::from(share.to_scalar::<f32>()?);
        let store = if scored > 0 { Some(share.backward()?) } else { None };
        let grads = self
            .weights
            .iter()
            .map(|(_, var)| match store.as_ref().and_then(|s| s.get(var.as_tensor())) {
                // A gradient can carry the graph that computed it (see
                // `AdamW::step`); only its value is wanted.
                Some(g) => Ok(g.detach()),
                None => Ok(var.as_tensor().zeros_like()?),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((value, Grads(grads)))
    }

    /// The weights' names, in the order of [`FullTrainer::gradients`].
    pub fn names(&self) -> Vec<&str> {
        self.weights.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The current value of weight `name`.
    pub fn weight(&self, name: &str) -> Option<&Tensor> {
        self.weights.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_tensor())
    }

    /// Replaces weight `name` (same shape), e.g. to probe the loss.
    pub fn set_weight(&self, name: &str, value: &Tensor) -> Result<()> {
        let (_, var) = self
            .weights
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| TrainError::Config(format!("no weight `{name}`")))?;
        Ok(var.set(value)?)
    }

    /// One AdamW step on the mean loss of `batch` at learning rate `lr`.
    pub fn step(&mut self, batch: &[&Sequence], lr: f64) -> Result<FullStep> {
        let (loss, mut grads, tokens) = self.gradients(batch)?;
        let grad_norm = crate::optim::clip_grad_norm(&mut grads, self.optim.config.max_grad_norm)?;
        let params: Vec<&Tensor> = self.weights.iter().map(|(_, v)| v.as_tensor()).collect();
        let updated = self.optim.step(&params, &grads, lr)?;
        for ((_, var), new) in self.weights.iter().zip(updated) {
            var.set(&new)?;
        }
        Ok(FullStep {
            loss,
            grad_norm,
            tokens,
        })
    }

    /// Writes the weights as `model.safetensors` into `out` with the source
    /// checkpoint's config and tokenizer files: a complete checkpoint.
    pub fn save(&self, out: &Path) -> Result<()> {
        std::fs::create_dir_all(out).map_err(|e| TrainError::io(out, e))?;
        for file in COMPANIONS {
            let from = self.source.join(file);
            if from.exists() && from != out.join(file) {
                std::fs::copy(&from, out.join(file)).map_err(|e| TrainError::io(&from, e))?;
            }
        }
        let tensors: HashMap<String, Tensor> = self
            .weights
            .iter()
            .map(|(name, var)| (name.clone(), var.as_tensor().clone()))
            .collect();
        crate::checkpoint::save_safetensors(&tensors, &out.join("model.safetensors"))
    }
}

/// How many leading tokens all `sequences` share and can run once: the
/// common prefix, stopping before the position whose logits predict the
/// first scored token (those logits must come from each sequence's own
/// continuation) and leaving every sequence at least one token of its own.
fn shared_prefix(sequences: &[&Sequence]) -> usize {
    let Some(first) = sequences.first() else {
        return 0;
    };
    sequences
        .iter()
        .map(|s| {
            let common = s.tokens.iter().zip(&first.tokens).take_while(|(a, b)| a == b).count();
            let first_scored = s
                .scored
                .iter()
                .skip(1)
                .position(|&x| x)
                .map_or(s.tokens.len(), |p| p + 1);
            common
                .min(first_scored.saturating_sub(1))
                .min(s.tokens.len().saturating_sub(1))
        })
        .min()
        .unwrap_or(0)
}
