//! The training loop: micro-batches in a seeded order, gradient
//! accumulation, replay of earlier successes, the optional EWC pull towards
//! the starting adapter, clipping, AdamW, metrics per step, checkpoints,
//! and the final PEFT export.

use crate::checkpoint::{self, TrainerState};
use crate::data::{DpoExample, GrpoGroup, SftExample};
use crate::lora::{LoraParams, LoraSpec};
use crate::loss::dpo::{dpo_loss, DpoPair};
use crate::loss::grpo::{grpo_loss, Baseline, GrpoOptions, GrpoSequence};
use crate::loss::sft::sft_loss;
use crate::loss::{mean_kl, LossOutput};
use crate::optim::{clip_grad_norm, AdamW, OptimConfig};
use crate::parallel::{cut, on_threads};
use crate::policy::{self, Dropout, Grads, Packed, Sequence};
use crate::schedule::{end_grpo_step, grpo_batch, total_steps, Order};
use crate::{Result, TrainError};
use candle_core::{Device, Tensor};
use hone_engine::Model;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The training inputs, already tokenised.
#[derive(Debug, Clone)]
pub enum Data {
    Grpo(Vec<GrpoGroup>),
    Dpo(Vec<DpoExample>),
    Sft(Vec<SftExample>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::Grpo(d) => d.len(),
            Data::Dpo(d) => d.len(),
            Data::Sft(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn name(&self) -> &'static str {
        match self {
            Data::Grpo(_) => "grpo",
            Data::Dpo(_) => "dpo",
            Data::Sft(_) => "sft",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub lora: LoraSpec,
    pub optim: OptimConfig,
    /// Groups, pairs or examples per micro-batch.
    pub batch_size: usize,
    /// Micro-batches per optimiser step.
    pub accumulation: usize,
    /// Optimiser steps; `None`: `epochs` passes over the data.
    pub steps: Option<usize>,
    pub epochs: usize,
    pub seed: u64,
    /// Save a checkpoint every this many steps (0: only at the end).
    pub save_every: usize,
    pub grpo: GrpoOptions,
    pub dpo_beta: f64,
    /// Replay examples (earlier successes) per micro-batch.
    pub replay_per_batch: usize,
    /// Weight of the replay NLL.
    pub replay_weight: f64,
    /// EWC strength (0: off); needs replay data for the Fisher.
    pub ewc_lambda: f64,
    /// Where each agent's running reward baseline starts (baseline mode);
    /// an agent not listed starts at its first reward.
    #[serde(default)]
    pub baselines: BTreeMap<String, f64>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            lora: LoraSpec::default(),
            optim: OptimConfig::default(),
            batch_size: 4,
            accumulation: 1,
            steps: None,
            epochs: 1,
            seed: 0,
            save_every: 0,
            grpo: GrpoOptions::default(),
            dpo_beta: 0.1,
            replay_per_batch: 0,
            replay_weight: 1.0,
            ewc_lambda: 0.0,
            baselines: BTreeMap::new(),
        }
    }
}

/// What one optimiser step did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    pub step: usize,
    pub total_steps: usize,
    pub loss: f64,
    /// Mean reward of the step's samples (GRPO).
    pub reward: Option<f64>,
    /// Mean k3 KL(π‖base) over the scored tokens of the step's batch.
    pub kl: f64,
    pub grad_norm: f64,
    pub lr: f64,
    pub tokens: usize,
    pub tokens_per_second: f64,
    pub seconds: f64,
    /// Algorithm-specific figures (clip fraction, DPO accuracy, replay NLL, EWC).
    pub extra: BTreeMap<String, f64>,
}

/// Diagonal Fisher and anchor for EWC.
#[derive(Debug)]
struct Ewc {
    lambda: f64,
    fisher: Vec<Tensor>,
    anchor: Vec<Tensor>,
}

#[derive(Debug)]
pub struct Trainer {
    model: Model,
    base: PathBuf,
    config: TrainConfig,
    data: Arc<Data>,
    replay: Vec<SftExample>,
    pub lora: LoraParams,
    optimizer: AdamW,
    step: usize,
    total_steps: usize,
    baseline: Baseline,
    reference: HashMap<(usize, usize), Vec<f32>>,
    /// Off-policy GRPO samples' logprobs under the starting policy, scored
    /// before the first step (kept in checkpoints: a resumed run has moved).
    proximal: HashMap<(usize, usize), Vec<f32>>,
    ewc: Option<Ewc>,
    order: Order,
    /// Parts a batch is cut into, each on a thread of its own (see
    /// [`Trainer::forward_backward`]).
    parts: usize,
}

impl Trainer {
    /// A trainer for the base model in `base` (loaded in f32 on `device`).
    /// `adapter` continues an existing PEFT adapter instead of a fresh one.
    pub fn new(
        base: &Path,
        device: &Device,
        config: TrainConfig,
        data: Data,
        replay: Vec<SftExample>,
        adapter: Option<&Path>,
    ) -> Result<Self> {
        let model = Model::load(base, candle_core::DType::F32, device)?;
        Self::with_model(model, base, config, data, replay, adapter)
    }

    pub fn with_model(
        model: Model,
        base: &Path,
        config: TrainConfig,
        data: Data,
        replay: Vec<SftExample>,
        adapter: Option<&Path>,
    ) -> Result<Self> {
        if data.is_empty() {
            return Err(TrainError::Data("no training examples".into()));
        }
        if config.batch_size == 0 || config.accumulation == 0 {
            return Err(TrainError::Config("batch size and accumulation must be ≥ 1".into()));
        }
        if config.ewc_lambda > 0.0 && replay.is_empty() {
            return Err(TrainError::Config(
                "EWC needs replay data (--replay) to estimate the Fisher".into(),
            ));
        }
        let lora = match adapter {
            Some(dir) => LoraParams::load(&model, dir)?,
            None => LoraParams::init(&model, &config.lora, config.seed)?,
        };
        let total_steps = total_steps(&config, data.len());
        let order = Order::new(&config, data.len());
        let optimizer = AdamW::new(config.optim.clone(), &lora.tensors())?;
        let baseline = Baseline {
            values: config.baselines.clone(),
        };
        let mut trainer = Self {
            model,
            base: base.to_path_buf(),
            config,
            data: Arc::new(data),
            replay,
            lora,
            optimizer,
            step: 0,
            total_steps,
            baseline,
            reference: HashMap::new(),
            proximal: HashMap::new(),
            ewc: None,
            order,
            parts: hone_engine::threads::batch_parts(),
        };
        if trainer.config.ewc_lambda > 0.0 {
            trainer.ewc = Some(trainer.fisher()?);
        }
        trainer.proximal = trainer.proximal_logprobs()?;
        Ok(trainer)
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Cuts each batch into `parts` parts, each run forward and backward on
    /// a thread of its own (default: `hone_engine::threads::batch_parts`);
    /// the step's gradient is the same up to the order of float sums.
    pub fn set_parts(&mut self, parts: usize) {
        self.parts = parts.max(1);
    }

    pub fn step(&self) -> usize {
        self.step
    }

    pub fn total_steps(&self) -> usize {
        self.total_steps
    }

    /// Trains the following steps on new data (online use: fresh groups
    /// sampled from the current policy each step).
    pub fn replace_data(&mut self, data: Data) -> Result<()> {
        if data.is_empty() {
            return Err(TrainError::Data("no training examples".into()));
        }
        self.data = Arc::new(data);
        self.reference.clear();
        self.order = Order::new(&self.config, self.data.len());
        // Proximal logprobs are keyed by the data's (group, sample): the
        // new data's off-policy samples need their own, under the adapter
        // as it is now.
        self.proximal = self.proximal_logprobs()?;
        Ok(())
    }

    /// Continues from a checkpoint directory written by [`Trainer::save_checkpoint`].
    pub fn resume(&mut self, dir: &Path) -> Result<()> {
        let state = checkpoint::load_state(dir)?;
        if state.seed != self.config.seed {
            return Err(TrainError::Checkpoint(format!(
                "{} was trained with seed {}, this run uses {}",
                dir.display(),
                state.seed,
                self.config.seed
            )));
        }
        let lora = LoraParams::load(&self.model, dir)?;
        if lora.parameter_count() != self.lora.parameter_count() {
            return Err(TrainError::Checkpoint(format!(
                "{}: the adapter's shape differs from this run's",
                dir.display()
            )));
        }
        let (m, v) = checkpoint::load_moments(dir, lora.tensors().len(), self.model.device())?;
        self.lora = lora;
        self.optimizer.m = m;
        self.optimizer.v = v;
        self.optimizer.steps = state.step;
        self.step = state.step;
        self.baseline = state.baseline;
        self.proximal = state.proximal.into_iter().collect();
        Ok(())
    }

    /// Every off-policy GRPO sample's logprobs under the current (starting)
    /// adapter, in batches of `batch_size`.
    fn proximal_logprobs(&self) -> Result<HashMap<(usize, usize), Vec<f32>>> {
        let mut out = HashMap::new();
        let Data::Grpo(groups) = &*self.data else {
            return Ok(out);
        };
        let keys: Vec<(usize, usize)> = groups
            .iter()
            .enumerate()
            .flat_map(|(i, g)| g.samples.iter().enumerate().map(move |(j, s)| ((i, j), s)))
            .filter(|(_, s)| s.off_policy && s.behaviour.is_some())
            .map(|(k, _)| k)
            .collect();
        for chunk in keys.chunks(self.config.batch_size.max(1)) {
            let sequences: Vec<&Sequence> = chunk.iter().map(|(i, j)| &groups[*i].samples[*j].sequence).collect();
            let logprobs = self.logprobs_in_parts(Some(&self.lora), &sequences)?;
            out.extend(chunk.iter().copied().zip(logprobs));
        }
        Ok(out)
    }

    /// Writes `checkpoints/step-N` under `out`: adapter, moments, state.
    pub fn save_checkpoint(&self, out: &Path) -> Result<PathBuf> {
        let dir = checkpoint::checkpoint_dir(out, self.step);
        let tmp = dir.with_extension("partial");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
        }
        self.lora.save_peft(&tmp, &self.base)?;
        checkpoint::save_moments(&tmp, &self.optimizer.m, &self.optimizer.v)?;
        checkpoint::save_state(
            &tmp,
            &TrainerState {
                step: self.step,
                total_steps: self.total_steps,
                baseline: self.baseline.clone(),
                seed: self.config.seed,
                proximal: self.proximal.iter().map(|(k, v)| (*k, v.clone())).collect(),
            },
        )?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
        }
        std::fs::rename(&tmp, &dir).map_err(|e| TrainError::io(&dir, e))?;
        Ok(dir)
    }

    /// Runs the remaining steps, reporting each; checkpoints every
    /// `save_every` steps, writes `metrics.jsonl`, and exports the final
    /// adapter into `out`.
    pub fn run(&mut self, out: &Path, on_step: &mut dyn FnMut(&StepReport)) -> Result<()> {
        self.run_while(out, &mut |report| {
            on_step(report);
            true
        })
    }

    /// [`run`](Self::run), stopped (with [`TrainError::Stopped`], no
    /// adapter written) as soon as `on_step` says not to go on.
    pub fn run_while(&mut self, out: &Path, on_step: &mut dyn FnMut(&StepReport) -> bool) -> Result<()> {
        std::fs::create_dir_all(out).map_err(|e| TrainError::io(out, e))?;
        let metrics_path = out.join("metrics.jsonl");
        let mut metrics = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&metrics_path)
            .map_err(|e| TrainError::io(&metrics_path, e))?;
        while self.step < self.total_steps {
            let report = self.train_step()?;
            let line = serde_json::to_string(&report).map_err(|e| TrainError::Config(e.to_string()))?;
            writeln!(metrics, "{line}").map_err(|e| TrainError::io(&metrics_path, e))?;
            if !on_step(&report) {
                return Err(TrainError::Stopped(self.step));
            }
            if self.config.save_every > 0
                && self.step.is_multiple_of(self.config.save_every)
                && self.step < self.total_steps
            {
                self.save_checkpoint(out)?;
                checkpoint::prune(out, 2)?;
            }
        }
        self.save_checkpoint(out)?;
        checkpoint::prune(out, 2)?;
        self.lora.save_peft(out, &self.base)
    }

    /// One optimiser step over `accumulation` micro-batches.
    pub fn train_step(&mut self) -> Result<StepReport> {
        let started = Instant::now();
        let lr = self.config.optim.lr_at(self.step, self.total_steps);
        let mut grads = Grads::zeros(&self.lora)?;
        let mut report = StepReport {
            step: self.step + 1,
            total_steps: self.total_steps,
            lr,
            ..StepReport::default()
        };
        let mut rewards = Vec::new();
        let mut kl = Vec::new();
        let accumulation = self.config.accumulation;
        for micro in 0..accumulation {
            let items = self.next_items(micro);
            let mut dropout = Dropout::new(self.config.lora.dropout, self.dropout_seed(micro));
            let outcome = match *self.data {
                Data::Grpo(_) => self.grpo_micro(&items, &mut dropout, &mut rewards)?,
                Data::Dpo(_) => self.dpo_micro(&items, &mut dropout)?,
                Data::Sft(_) => self.sft_micro(&items, &mut dropout)?,
            };
            if let Some(outcome) = outcome {
                report.loss += outcome.loss / accumulation as f64;
                report.tokens += outcome.tokens;
                kl.push(outcome.kl);
                grads.add(&outcome.grads)?;
                for (k, v) in outcome.extra {
                    *report.extra.entry(k).or_default() += v / accumulation as f64;
                }
            }
            if self.config.replay_per_batch > 0 && !self.replay.is_empty() {
                let (nll, tokens, g) = self.replay_micro(micro, &mut dropout)?;
                report.tokens += tokens;
                *report.extra.entry("replay_nll".into()).or_default() += nll / accumulation as f64;
                grads.add(&g)?;
            }
        }
        grads.scale(1.0 / accumulation as f64)?;
        if let Some(ewc) = &self.ewc {
            let mut penalty = 0.0;
            for (i, p) in self.lora.tensors().into_iter().enumerate() {
                let diff = (p - &ewc.anchor[i])?;
                let weighted = (&ewc.fisher[i] * &diff)?;
                penalty += (&weighted * &diff)?.sum_all()?.to_scalar::<f32>()? as f64;
                grads.0[i] = (&grads.0[i] + (weighted * ewc.lambda)?)?;
            }
            report.extra.insert("ewc".into(), 0.5 * ewc.lambda * penalty);
        }
        report.grad_norm = clip_grad_norm(&mut grads, self.config.optim.max_grad_norm)?;
        let updated = self.optimizer.step(&self.lora.tensors(), &grads, lr)?;
        self.lora.set_tensors(updated)?;
        self.step += 1;
        report.reward = end_grpo_step(&mut self.baseline, &rewards, self.config.grpo.baseline_rate);
        report.kl = if kl.is_empty() {
            0.0
        } else {
            kl.iter().sum::<f64>() / kl.len() as f64
        };
        report.seconds = started.elapsed().as_secs_f64();
        report.tokens_per_second = report.tokens as f64 / report.seconds.max(1e-9);
        Ok(report)
    }

    /// The data indices of micro-batch `micro` of the current step.
    fn next_items(&mut self, micro: usize) -> Vec<usize> {
        self.order.items(self.step, micro)
    }

    fn dropout_seed(&self, micro: usize) -> u64 {
        self.config
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add((self.step * self.config.accumulation + micro) as u64)
    }

    /// LoRA-off logprobs of `sequences` (keyed by `keys`), cached: the base
    /// is frozen, so they never change.
    fn reference_logprobs(&mut self, keys: &[(usize, usize)], sequences: &[&Sequence]) -> Result<Vec<Vec<f32>>> {
        let missing: Vec<usize> = (0..keys.len())
            .filter(|i| !self.reference.contains_key(&keys[*i]))
            .collect();
        if !missing.is_empty() {
            let seqs: Vec<&Sequence> = missing.iter().map(|i| sequences[*i]).collect();
            let logprobs = self.logprobs_in_parts(None, &seqs)?;
            for (i, lps) in missing.iter().zip(logprobs) {
                self.reference.insert(keys[*i], lps);
            }
        }
        Ok(keys
            .iter()
            .map(|k| self.reference.get(k).cloned().unwrap_or_default())
            .collect())
    }

    /// Each sequence's scored-token logprobs, with the adapter (`Some`) or
    /// the base alone, without gradients: the sequences cut into
    /// [`Trainer::set_parts`] parts, each packed and run on a thread of its
    /// own as [`Trainer::forward_backward`] cuts a batch.
    fn logprobs_in_parts(&self, lora: Option<&LoraParams>, sequences: &[&Sequence]) -> Result<Vec<Vec<f32>>> {
        let model = &self.model;
        let per_part = on_threads(cut(sequences, self.parts).map(|chunk| {
            move || -> Result<Vec<Vec<f32>>> {
                let packed = Packed::new(model, chunk)?;
                let flat = policy::logprobs(model, lora, &packed)?;
                Ok(packed.ranges.iter().map(|r| flat[r.clone()].to_vec()).collect())
            }
        }))?;
        Ok(per_part.into_iter().flatten().collect())
    }

    /// Forward, loss, backward for one batch. The batch is cut into
    /// [`Trainer::set_parts`] parts, each packed, run forward and backward
    /// on a thread of its own (the loss sees every sequence at once); the
    /// parts' gradients add up to the batch's.
    fn forward_backward(
        &self,
        sequences: &[&Sequence],
        dropout: &mut Dropout,
        loss: impl FnOnce(&[&[f32]]) -> (LossOutput, BTreeMap<String, f64>),
    ) -> Result<(Vec<Vec<f32>>, Micro)> {
        let chunks: Vec<&[&Sequence]> = cut(sequences, self.parts).collect();
        // The first part draws its dropout masks from the step's generator,
        // the others from generators seeded by it.
        let mut forked: Vec<Dropout> = (1..chunks.len()).map(|_| dropout.fork()).collect();
        let dropouts = std::iter::once(dropout).chain(forked.iter_mut());
        let (model, lora) = (&self.model, &self.lora);
        let forwards = on_threads(chunks.iter().zip(dropouts).map(|(chunk, dropout)| {
            move || -> Result<_> {
                let packed = Packed::new(model, chunk)?;
                let (flat, saved) = policy::forward(model, lora, &packed, Some(dropout))?;
                Ok((packed, flat, saved))
            }
        }))?;
        let per_seq: Vec<Vec<f32>> = forwards
            .iter()
            .flat_map(|(packed, flat, _)| packed.ranges.iter().map(|r| flat[r.clone()].to_vec()))
            .collect();
        let refs: Vec<&[f32]> = per_seq.iter().map(Vec::as_slice).collect();
        let (output, extra) = loss(&refs);
        let mut first = 0;
        let backwards: Vec<_> = forwards
            .into_iter()
            .map(|(packed, _, saved)| {
                let dl: Vec<f32> = output.grads[first..first + packed.ranges.len()].concat();
                first += packed.ranges.len();
                move || -> Result<_> { Ok((policy::backward(model, lora, &packed, saved, &dl)?, packed.token_count)) }
            })
            .collect();
        let mut grads = Grads::zeros(lora)?;
        let mut tokens = 0;
        for (part, part_tokens) in on_threads(backwards)? {
            grads.add(&part)?;
            tokens += part_tokens;
        }
        Ok((
            per_seq,
            Micro {
                loss: output.loss,
                tokens,
                kl: 0.0,
                grads,
                extra,
            },
        ))
    }

    fn grpo_micro(
        &mut self,
        items: &[usize],
        dropout: &mut Dropout,
        rewards: &mut Vec<(Option<String>, f64)>,
    ) -> Result<Option<Micro>> {
        let data = self.data.clone();
        let Data::Grpo(groups) = &*data else {
            return Ok(None);
        };
        let batch = grpo_batch(groups, items, &self.baseline, &self.config.grpo);
        rewards.extend(batch.rewards);
        let (keys, advantages) = (batch.keys, batch.advantages);
        if keys.is_empty() {
            return Ok(None);
        }
        let sequences: Vec<&Sequence> = keys.iter().map(|(i, j)| &groups[*i].samples[*j].sequence).collect();
        let reference = self.reference_logprobs(&keys, &sequences)?;
        let options = self.config.grpo.clone();
        let (logprobs, mut micro) = self.forward_backward(&sequences, dropout, |lps| {
            let inputs: Vec<GrpoSequence> = keys
                .iter()
                .enumerate()
                .map(|(n, (i, j))| GrpoSequence {
                    advantage: advantages[n],
                    logprobs: lps[n],
                    behaviour: groups[*i].samples[*j].behaviour.as_deref(),
                    proximal: self.proximal.get(&(*i, *j)).map(Vec::as_slice),
                    reference: Some(&reference[n]),
                })
                .collect();
            let (output, stats) = grpo_loss(&inputs, &options);
            let mut extra = BTreeMap::from([
                ("clip_fraction".to_owned(), stats.clip_fraction),
                ("ratio".to_owned(), stats.mean_ratio),
            ]);
            if stats.mean_is_weight > 0.0 {
                extra.insert("is_weight".to_owned(), stats.mean_is_weight);
                extra.insert("is_truncated".to_owned(), stats.truncated_fraction);
            }
            (output, extra)
        })?;
        micro.kl = kl_of(&logprobs, &reference);
        Ok(Some(micro))
    }

    fn dpo_micro(&mut self, items: &[usize], dropout: &mut Dropout) -> Result<Option<Micro>> {
        let data = self.data.clone();
        let Data::Dpo(pairs) = &*data else {
            return Ok(None);
        };
        let mut keys = Vec::new();
        let mut sequences = Vec::new();
        for &i in items {
            keys.extend([(i, 0), (i, 1)]);
            sequences.extend([&pairs[i].chosen, &pairs[i].rejected]);
        }
        let reference = self.reference_logprobs(&keys, &sequences)?;
        let beta = self.config.dpo_beta;
        let (logprobs, mut micro) = self.forward_backward(&sequences, dropout, |lps| {
            let inputs: Vec<DpoPair> = (0..lps.len() / 2)
                .map(|p| DpoPair {
                    chosen: lps[2 * p],
                    rejected: lps[2 * p + 1],
                    ref_chosen: &reference[2 * p],
                    ref_rejected: &reference[2 * p + 1],
                })
                .collect();
            let (output, stats) = dpo_loss(&inputs, beta);
            let extra = BTreeMap::from([
                ("accuracy".to_owned(), stats.accuracy),
                ("margin".to_owned(), stats.margin),
            ]);
            (output, extra)
        })?;
        // Over the chosen completions only: DPO drives the rejected ones'
        // probability towards 0, where a k3 estimate from the old samples
        // grows without bound (exp(ℓ_ref − ℓ)) while saying nothing about
        // what the policy now generates.
        let chosen = |v: &[Vec<f32>]| v.iter().step_by(2).cloned().collect::<Vec<_>>();
        micro.kl = kl_of(&chosen(&logprobs), &chosen(&reference));
        Ok(Some(micro))
    }

    fn sft_micro(&mut self, items: &[usize], dropout: &mut Dropout) -> Result<Option<Micro>> {
        let data = self.data.clone();
        let Data::Sft(examples) = &*data else {
            return Ok(None);
        };
        let keys: Vec<(usize, usize)> = items.iter().map(|i| (*i, 0)).collect();
        let sequences: Vec<&Sequence> = items.iter().map(|i| &examples[*i].sequence).collect();
        let reference = self.reference_logprobs(&keys, &sequences)?;
        let (logprobs, mut micro) =
            self.forward_backward(&sequences, dropout, |lps| (sft_loss(lps), BTreeMap::new()))?;
        micro.kl = kl_of(&logprobs, &reference);
        Ok(Some(micro))
    }

    /// The replay term: weighted NLL on `replay_per_batch` earlier successes.
    fn replay_micro(&mut self, micro: usize, dropout: &mut Dropout) -> Result<(f64, usize, Grads)> {
        let n = self.replay.len();
        let per = self.config.replay_per_batch;
        let first = (self.step * self.config.accumulation + micro) * per;
        let sequences: Vec<Sequence> = (first..first + per)
            .map(|c| self.replay[c % n].sequence.clone())
            .collect();
        let refs: Vec<&Sequence> = sequences.iter().collect();
        let weight = self.config.replay_weight;
        let (_, micro) = self.forward_backward(&refs, dropout, |lps| {
            let mut out = sft_loss(lps);
            for g in &mut out.grads {
                g.iter_mut().for_each(|v| *v *= weight as f32);
            }
            (out, BTreeMap::new())
        })?;
        Ok((micro.loss, micro.tokens, micro.grads))
    }

    /// Empirical diagonal Fisher of the replay set's log-likelihood at the
    /// starting adapter: the mean squared gradient per example.
    fn fisher(&self) -> Result<Ewc> {
        let mut fisher = Grads::zeros(&self.lora)?;
        for example in &self.replay {
            let packed = Packed::new(&self.model, &[&example.sequence])?;
            let (_, saved) = policy::forward(&self.model, &self.lora, &packed, None)?;
            let dl = vec![1.0f32; packed.scored()];
            let g = policy::backward(&self.model, &self.lora, &packed, saved, &dl)?;
            for (f, g) in fisher.0.iter_mut().zip(&g.0) {
                *f = (&*f + g.sqr()?)?;
            }
        }
        fisher.scale(1.0 / self.replay.len() as f64)?;
        Ok(Ewc {
            lambda: self.config.ewc_lambda,
            fisher: fisher.0,
            anchor: self.lora.tensors().into_iter().cloned().collect(),
        })
    }
}

/// One micro-batch's contribution.
#[derive(Debug)]
struct Micro {
    loss: f64,
    tokens: usize,
    kl: f64,
    grads: Grads,
    extra: BTreeMap<String, f64>,
}

fn kl_of(logprobs: &[Vec<f32>], reference: &[Vec<f32>]) -> f64 {
    let l: Vec<&[f32]> = logprobs.iter().map(Vec::as_slice).collect();
    let r: Vec<&[f32]> = reference.iter().map(Vec::as_slice).collect();
    mean_kl(&l, &r)
}
