//! Full-weight supervised training of a small model, with the hand-written
//! backward of [`crate::policy`] extended to every weight.
//!
//! This is how hone makes its own base policies (the demo's): a randomly
//! initialised model has nothing for a LoRA adapter to steer, so every
//! weight — embeddings included — must move. The forward is the trainer's
//! packed one ([`crate::policy::base_forward`]: the prompt every sequence
//! of a batch shares runs once, no padding), and
//! [`crate::policy::weight_backward`] adds each projection's `dW = dyᵀ·x`,
//! the norms', the embedding's and the LM head's gradients to the input
//! gradients the LoRA backward already computes. candle's autograd did this
//! before, 2.9× slower on the demo's base: about a third of its time went to
//! zeroing and accumulating a gradient buffer per graph node. A checkpoint
//! written here loads in the engine, in `transformers` and in vLLM like any
//! Hugging Face checkpoint.
//!
//! It keeps a gradient and two AdamW moments for every weight, so it is for
//! small models; adapters on real checkpoints are trained by [`crate::trainer`].

use crate::optim::{AdamW, OptimConfig};
use crate::parallel::{cut, on_threads};
use crate::policy::{self, Grads, Packed, Sequence};
use crate::{Result, TrainError};
use candle_core::{DType, Device, Tensor};
use hone_engine::config::ModelConfig;
use hone_engine::model::Model;
use hone_engine::names;
use hone_engine::weights::Weights;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The files of a checkpoint directory other than its weights, copied as
/// they are when the trained weights are saved.
const COMPANIONS: [&str; 6] = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
];

/// Every weight of a model, trainable, with its optimiser.
pub struct FullTrainer {
    source: PathBuf,
    config: ModelConfig,
    device: Device,
    /// `(Hugging Face name, weight)`, in a fixed order (the moments' order).
    weights: Vec<(String, Tensor)>,
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
        // A tied checkpoint's stored copy of the LM head is the embedding
        // (the engine checks it), not a weight of its own.
        let tied = config.tie_word_embeddings;
        let mut weights: Vec<(String, Tensor)> = Weights::load(dir, DType::F32, device)?
            .into_tensors()
            .into_iter()
            .filter(|(name, _)| !(names::is_rotary_table(name) || tied && name == names::LM_HEAD))
            .collect();
        weights.sort_by(|a, b| a.0.cmp(&b.0));
        let params: Vec<&Tensor> = weights.iter().map(|(_, t)| t).collect();
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
        let tensors: HashMap<String, Tensor> = self.weights.iter().cloned().collect();
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
        self.weights.iter().map(|(_, t)| t.elem_count()).sum()
    }

    /// Mean negative log-likelihood per scored token, without training.
    pub fn loss(&self, sequences: &[&Sequence]) -> Result<f64> {
        let model = self.model()?;
        let packed = Packed::new(&model, sequences)?;
        let logprobs = policy::logprobs(&model, None, &packed)?;
        let total: f64 = logprobs.iter().map(|&lp| -f64::from(lp)).sum();
        Ok(total / logprobs.len().max(1) as f64)
    }

    /// The mean loss of `batch`, its gradient for every weight (in
    /// [`FullTrainer::names`] order) and the scored tokens.
    ///
    /// The batch is cut into [`FullTrainer::set_parts`] parts, each
    /// differentiated on a thread of its own: each part's summed negative
    /// log-likelihood divided by the whole batch's scored tokens, so the
    /// parts' gradients add up to the batch mean's — and one part is
    /// exactly the whole batch at once.
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
        let scale = 1.0 / tokens as f64;
        let zeros = || -> Result<Grads> {
            let zeros = self.weights.iter().map(|(_, t)| t.zeros_like());
            Ok(Grads(zeros.collect::<candle_core::Result<_>>()?))
        };
        if part.iter().all(|s| s.scored_count() == 0) {
            return Ok((0.0, zeros()?));
        }
        let packed = Packed::new(model, part)?;
        let (logprobs, saved) = policy::base_forward(model, &packed)?;
        let share: f64 = logprobs.iter().map(|&lp| -f64::from(lp) * scale).sum();
        let dlogprobs = vec![-scale as f32; logprobs.len()];
        let mut by_name: HashMap<String, Tensor> = policy::weight_backward(model, &packed, saved, &dlogprobs)?
            .into_iter()
            .collect();
        let grads = self
            .weights
            .iter()
            .map(|(name, _)| {
                by_name
                    .remove(name)
                    .ok_or_else(|| TrainError::Config(format!("no gradient for weight `{name}`")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((share, Grads(grads)))
    }

    /// The weights' names, in the order of [`FullTrainer::gradients`].
    pub fn names(&self) -> Vec<&str> {
        self.weights.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The current value of weight `name`.
    pub fn weight(&self, name: &str) -> Option<&Tensor> {
        self.weights.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// Replaces weight `name` (same shape), e.g. to probe the loss.
    pub fn set_weight(&mut self, name: &str, value: &Tensor) -> Result<()> {
        let (_, weight) = self
            .weights
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| TrainError::Config(format!("no weight `{name}`")))?;
        if value.dims() != weight.dims() {
            return Err(TrainError::Config(format!(
                "weight `{name}` is {:?}, not {:?}",
                weight.dims(),
                value.dims()
            )));
        }
        *weight = value.to_dtype(DType::F32)?;
        Ok(())
    }

    /// One AdamW step on the mean loss of `batch` at learning rate `lr`.
    pub fn step(&mut self, batch: &[&Sequence], lr: f64) -> Result<FullStep> {
        let (loss, mut grads, tokens) = self.gradients(batch)?;
        let grad_norm = crate::optim::clip_grad_norm(&mut grads, self.optim.config.max_grad_norm)?;
        let params: Vec<&Tensor> = self.weights.iter().map(|(_, t)| t).collect();
        let updated = self.optim.step(&params, &grads, lr)?;
        for ((_, weight), new) in self.weights.iter_mut().zip(updated) {
            *weight = new;
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
        let tensors: HashMap<String, Tensor> = self.weights.iter().cloned().collect();
        crate::checkpoint::save_safetensors(&tensors, &out.join("model.safetensors"))
    }
}
