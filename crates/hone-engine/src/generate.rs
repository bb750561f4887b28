//! Sampling token sequences: temperature, top-k, top-p, a seed, max tokens
//! and stop tokens, with the log-probability of every sampled token under
//! the model's full (untempered) distribution — the number RL importance
//! ratios are computed against — and optionally its top alternatives.
//!
//! A prompt is prefilled once; its `n` samples fork the prompt's KV cache
//! and then advance together, one batched [`Model::decode`] per step. The
//! engine's scheduler ([`crate::engine`]) drives [`Sequence`]s of many
//! requests through the same [`step`].

use crate::lora::Adapter;
use crate::memory::KnnLm;
use crate::model::{KvCache, Model};
use crate::Result;
use candle_core::Tensor;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// How to pick each next token.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// 0 means greedy.
    pub temperature: f64,
    pub top_p: f64,
    /// 0 means no limit.
    pub top_k: usize,
    /// Sample `i` of a request draws from a generator seeded with `seed + i`.
    pub seed: u64,
    pub max_tokens: usize,
    pub stop_tokens: Vec<u32>,
    /// How many of the most likely alternatives to report per token (≤ 20).
    pub top_logprobs: usize,
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
            top_logprobs: 0,
        }
    }
}

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop token (included in the tokens) or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl Finish {
    /// The OpenAI `finish_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// What was generated for one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// `log p(token)` under the model's distribution (temperature 1, no
    /// truncation), one per token.
    pub logprobs: Vec<f32>,
    /// Per token, the `top_logprobs` most likely `(token, logprob)` pairs.
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
    pub finish: Finish,
    /// Prompt tokens whose keys and values were reused from the engine's
    /// prefix cache rather than computed.
    pub cached_prompt_tokens: usize,
}

/// One sample being generated: its cache, what it has produced, its random
/// generator and its adapter.
#[derive(Debug)]
pub struct Sequence {
    pub cache: KvCache,
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
    pub finish: Option<Finish>,
    pub adapter: Option<Arc<Adapter>>,
    /// kNN-LM memory the next-token distribution is interpolated with.
    pub memory: Option<Arc<KnnLm>>,
    sampling: Arc<Sampling>,
    rng: rand::rngs::StdRng,
    cached_prompt_tokens: usize,
}

impl Sequence {
    /// Records a token picked from `logprobs` and decides whether it ends the sequence.
    fn push(&mut self, logprobs: &[f32]) {
        let token = pick(logprobs, &self.sampling, &mut self.rng);
        self.tokens.push(token);
        self.logprobs.push(logprobs[token as usize]);
        if self.sampling.top_logprobs > 0 {
            self.top_logprobs
                .push(top_k(logprobs, self.sampling.top_logprobs.min(20)));
        }
        if self.sampling.stop_tokens.contains(&token) {
            self.finish = Some(Finish::Stop);
        } else if self.tokens.len() >= self.sampling.max_tokens {
            self.finish = Some(Finish::Length);
        }
    }

    /// Ends the sequence early (a stop string matched, the client left).
    pub fn stop(&mut self, finish: Finish) {
        self.finish = Some(finish);
    }

    pub fn into_generation(self) -> Generation {
        Generation {
            tokens: self.tokens,
            logprobs: self.logprobs,
            top_logprobs: self.top_logprobs,
            finish: self.finish.unwrap_or(Finish::Length),
            cached_prompt_tokens: self.cached_prompt_tokens,
        }
    }
}

/// The model's log-probabilities `lm` of one row interpolated with
/// `memory`'s neighbours of the row's final hidden state.
fn remembered(memory: &KnnLm, lm: &[f32], hidden: &Tensor) -> Result<Vec<f32>> {
    if memory.lambda <= 0.0 {
        return Ok(lm.to_vec());
    }
    let query: Vec<f32> = hidden.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?;
    Ok(memory.interpolate(lm, &query))
}

/// Prefills `prompt` once and starts `n` samples from it, each with its own
/// copy of the prompt's cache and its first token already sampled. `cache`
/// already holds the keys and values of the prompt's first `cache.len()`
/// tokens under `adapter` (a reused prefix; empty for a cold prefill, and
/// always shorter than the prompt).
pub fn start(
    model: &Model,
    prompt: &[u32],
    mut cache: KvCache,
    adapter: Option<Arc<Adapter>>,
    memory: Option<Arc<KnnLm>>,
    sampling: Arc<Sampling>,
    n: usize,
) -> Result<Vec<Sequence>> {
    if prompt.is_empty() {
        return Err(crate::EngineError::Model("the prompt is empty".into()));
    }
    let cached = cache.len();
    if cached >= prompt.len() {
        return Err(crate::EngineError::Model(format!(
            "a reused prefix of {cached} tokens leaves nothing of the {}-token prompt to compute",
            prompt.len()
        )));
    }
    let input = Tensor::new(&prompt[cached..], model.device())?.unsqueeze(0)?;
    let hidden = model.hidden(&input, &mut cache, adapter.as_deref())?.squeeze(0)?;
    let last = hidden.narrow(0, prompt.len() - cached - 1, 1)?;
    let logits = model.logits(&last.unsqueeze(0)?)?;
    let logprobs = crate::model::log_softmax_row(&logits)?;
    let logprobs = match &memory {
        None => logprobs,
        Some(memory) => remembered(memory, &logprobs, &last)?,
    };
    let mut sequences = Vec::with_capacity(n);
    for i in 0..n {
        let cache = if i + 1 == n {
            std::mem::take(&mut cache)
        } else {
            cache.fork()?
        };
        let mut sequence = Sequence {
            cache,
            tokens: Vec::new(),
            logprobs: Vec::new(),
            top_logprobs: Vec::new(),
            finish: None,
            adapter: adapter.clone(),
            memory: memory.clone(),
            rng: rand::rngs::StdRng::seed_from_u64(sampling.seed.wrapping_add(i as u64)),
            sampling: sampling.clone(),
            cached_prompt_tokens: cached,
        };
        if sampling.max_tokens == 0 {
            sequence.finish = Some(Finish::Length);
        } else {
            sequence.push(&logprobs);
        }
        sequences.push(sequence);
    }
    Ok(sequences)
}

/// Advances every unfinished sequence by one token with one batched decode.
/// Rows are grouped by adapter so each LoRA term runs once per group.
pub fn step(model: &Model, sequences: &mut [&mut Sequence]) -> Result<()> {
    let mut live: Vec<&mut Sequence> = sequences
        .iter_mut()
        .filter(|s| s.finish.is_none())
        .map(|s| &mut **s)
        .collect();
    if live.is_empty() {
        return Ok(());
    }
    live.sort_by_key(|s| s.adapter.as_ref().map_or(0, |a| Arc::as_ptr(a) as usize));
    // The runs borrow the adapters through clones of the sequences' `Arc`s,
    // so the caches can be borrowed mutably below.
    let holders: Vec<Option<Arc<Adapter>>> = live.iter().map(|s| s.adapter.clone()).collect();
    let mut runs: Vec<(usize, Option<&Adapter>)> = Vec::new();
    for adapter in holders.iter().map(Option::as_deref) {
        match runs.last_mut() {
            Some((rows, last)) if same_adapter(*last, adapter) => *rows += 1,
            _ => runs.push((1, adapter)),
        }
    }
    // Every live sequence has sampled at least its first token in `start`.
    let tokens: Vec<u32> = live.iter().map(|s| s.tokens.last().copied().unwrap_or(0)).collect();
    let hidden = {
        let mut caches: Vec<&mut KvCache> = live.iter_mut().map(|s| &mut s.cache).collect();
        model.decode_hidden(&tokens, &mut caches, &runs)?
    };
    // One projection for the whole batch whether or not rows have memory,
    // so a row's model distribution never depends on its neighbours'.
    let logits = model.logits(&hidden)?.squeeze(1)?;
    for (r, sequence) in live.into_iter().enumerate() {
        let row = crate::model::log_softmax_row(&logits.get(r)?)?;
        let row = match &sequence.memory {
            None => row,
            Some(memory) => remembered(memory, &row, &hidden.get(r)?)?,
        };
        sequence.push(&row);
    }
    Ok(())
}

/// Rows a part of [`step_in_parts`] holds at least: a part of fewer costs
/// more in thread start-up than it saves.
pub const MIN_PART_ROWS: usize = 2;

/// [`step`] with the sequences cut into up to `parts` parts of at least
/// [`MIN_PART_ROWS`] unfinished rows, each decoded on a thread of its own
/// (the first on the calling thread). For a model whose ops each run on one
/// thread (`crate::threads::per_op_for_hidden_size`), the other cores then
/// decode the other rows. Every row's sampling is its own (its generator,
/// its logits), so the parts change only which rows share a matmul.
pub fn step_in_parts(model: &Model, sequences: &mut [&mut Sequence], parts: usize) -> Result<()> {
    let live = sequences.iter().filter(|s| s.finish.is_none()).count();
    let parts = parts.min(live / MIN_PART_ROWS).max(1);
    if parts == 1 {
        return step(model, sequences);
    }
    let mut chunks = sequences.chunks_mut(crate::threads::part_len(sequences.len(), parts));
    let first = chunks.next().unwrap_or_default();
    std::thread::scope(|scope| {
        let others: Vec<_> = chunks.map(|part| scope.spawn(move || step(model, part))).collect();
        let mut result = step(model, first);
        for other in others {
            let outcome = other
                .join()
                .unwrap_or_else(|_| Err(crate::EngineError::Model("a decode thread panicked".into())));
            result = result.and(outcome);
        }
        result
    })
}

fn same_adapter(a: Option<&Adapter>, b: Option<&Adapter>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => std::ptr::eq(a, b),
        _ => false,
    }
}

/// Generates `n` samples of a continuation of `prompt`, batched.
pub fn generate_n(
    model: &Model,
    prompt: &[u32],
    adapter: Option<Arc<Adapter>>,
    sampling: &Sampling,
    n: usize,
) -> Result<Vec<Generation>> {
    generate_with_memory(model, prompt, adapter, None, sampling, n)
}

/// [`generate_n`] with the next-token distribution interpolated with a
/// kNN-LM `memory`.
pub fn generate_with_memory(
    model: &Model,
    prompt: &[u32],
    adapter: Option<Arc<Adapter>>,
    memory: Option<Arc<KnnLm>>,
    sampling: &Sampling,
    n: usize,
) -> Result<Vec<Generation>> {
    let mut sequences = start(
        model,
        prompt,
        KvCache::new(),
        adapter,
        memory,
        Arc::new(sampling.clone()),
        n,
    )?;
    while sequences.iter().any(|s| s.finish.is_none()) {
        let mut refs: Vec<&mut Sequence> = sequences.iter_mut().collect();
        step(model, &mut refs)?;
    }
    Ok(sequences.into_iter().map(Sequence::into_generation).collect())
}

/// Generates one continuation of `prompt`.
pub fn generate(
    model: &Model,
    prompt: &[u32],
    adapter: Option<Arc<Adapter>>,
    sampling: &Sampling,
) -> Result<Generation> {
    let mut all = generate_n(model, prompt, adapter, sampling, 1)?;
    Ok(all.remove(0))
}

/// The `k` largest entries as `(index, value)`, largest first.
fn top_k(logprobs: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut order: Vec<usize> = (0..logprobs.len()).collect();
    let k = k.min(order.len());
    order.select_nth_unstable_by(k.saturating_sub(1), |a, b| logprobs[*b].total_cmp(&logprobs[*a]));
    order.truncate(k);
    order.sort_by(|a, b| logprobs[*b].total_cmp(&logprobs[*a]));
    order.into_iter().map(|i| (i as u32, logprobs[i])).collect()
}

/// Picks a token from log-probabilities under the sampling settings.
fn pick(logprobs: &[f32], sampling: &Sampling, rng: &mut rand::rngs::StdRng) -> u32 {
    if sampling.temperature <= 0.0 {
        return top_k(logprobs, 1).first().map_or(0, |(i, _)| *i);
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
