//! The training forward and a hand-written backward, for LoRA adapters and
//! for every weight of a small model.
//!
//! candle's autograd computes the gradient of every matmul operand, so a
//! frozen base weight still costs a full weight-gradient GEMM, and its fused
//! kernels record no gradient at all. Here the backward is written out: each
//! projection returns `dx = dy·W` plus the LoRA gradients
//! `dB = s·dyᵀ·(x·Aᵀ)` and `dA = s·(dy·B)ᵀ·x` — never `dW` — through RMSNorm,
//! RoPE, causal GQA attention and SwiGLU. The cost is one forward plus one
//! input-gradient pass (≈ 2× the forward), what PyTorch spends on a LoRA
//! model whose base weights do not require gradients. The same pass with
//! [`weight_backward`] keeps `dW = dyᵀ·x` of every projection and the
//! gradients of the norms, the embedding and the LM head instead: the
//! full-weight trainer ([`crate::full`]) that makes hone's own base models.
//!
//! Sequences are packed: projections, norms and the MLP run on all tokens of
//! the batch at once (no padding), and the prompt every sequence of a batch
//! shares (an agent's system prompt and tool list: ~280 of the demo's ~330
//! tokens a call) is packed once. Attention gathers the rows into padded
//! blocks — the shared prefix over itself, then every sequence's own tokens
//! over the prefix and themselves — so it is a few batched matmuls; the
//! gradients of a shared key or value add up over the sequences that
//! attend to it. Only the positions whose next token is scored reach the
//! LM head.
//!
//! Every loss hone trains with (GRPO, DPO, SFT, KL, replay NLL) is a function
//! of the log-probabilities of the scored tokens, so the interface is:
//! [`forward`] (or [`base_forward`]) returns them, the loss turns them into
//! `∂L/∂logprob`, and [`backward`] turns that into the LoRA gradients
//! (`adapter.rs`), [`weight_backward`] into every weight's (`weights.rs`).

use crate::lora::{LoraPair, LoraParams};
use crate::{Result, TrainError};
use candle_core::{DType, Device, Tensor, D};
use hone_engine::lora::Module;
use hone_engine::model::{project, softmax_last, Layer, Linear};
use hone_engine::swiglu::{swiglu, swiglu_backward};
use hone_engine::Model;
use rand::{Rng, SeedableRng};
use std::ops::Range;

mod adapter;
mod weights;

pub use adapter::backward;
pub use weights::weight_backward;

/// A token sequence and which of its tokens are scored (predicted from the
/// ones before them and counted in the loss). `scored[0]` is never used.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequence {
    pub tokens: Vec<u32>,
    pub scored: Vec<bool>,
}

impl Sequence {
    /// `prompt` unscored, `completion` scored.
    pub fn prompt_completion(prompt: &[u32], completion: &[u32]) -> Self {
        let mut tokens = prompt.to_vec();
        tokens.extend_from_slice(completion);
        let mut scored = vec![false; prompt.len()];
        scored.extend(std::iter::repeat_n(true, completion.len()));
        Self { tokens, scored }
    }

    pub fn scored_count(&self) -> usize {
        self.scored.iter().skip(1).filter(|s| **s).count()
    }
}

/// A batch of sequences laid out for [`forward`]: tokens packed end to end,
/// the prompt every sequence shares (the system prompt and tool list of an
/// agent's calls) stored once, and the index maps to and from the padded
/// attention layout of each [`Block`].
#[derive(Debug)]
pub struct Packed {
    tokens: Tensor,
    rows: usize,
    cos: Tensor,
    sin: Tensor,
    /// The shared prefix (if any), then every sequence's own tokens.
    blocks: Vec<Block>,
    /// For each packed row, its query slot in the blocks' padded layouts
    /// laid end to end (each row is a query of exactly one block).
    query_slot: Tensor,
    /// Every block's key slots end to end (a shared row appears once per
    /// sequence that attends to it; `rows`: padding).
    key_index: Tensor,
    /// The packed rows whose next token is scored, and those tokens.
    target_rows: Tensor,
    target_tokens: Tensor,
    /// Per sequence, its range in the scored-token list.
    pub ranges: Vec<Range<usize>>,
    /// All tokens in the batch, the shared ones counted per sequence.
    pub token_count: usize,
    /// Tokens at the start of every sequence, run once.
    pub shared: usize,
}

/// One batched attention: `batch` rows of `queries` padded query slots over
/// `keys` padded key slots, gathered from the packed rows.
#[derive(Debug)]
struct Block {
    batch: usize,
    queries: usize,
    keys: usize,
    /// `[batch·queries]`: the packed row in each query slot (or `rows`).
    query_index: Tensor,
    /// `[batch·keys]`: the packed row in each key slot (or `rows`).
    key_index: Tensor,
    /// `[batch, 1, 1, queries, keys]`: causal and key padding.
    mask: Tensor,
}

/// A block's shape and, for sequence `b`, the packed row in query slot `i`
/// and key slot `j` (`None`: padding) and whether `i` sees `j`.
struct BlockLayout<'a> {
    batch: usize,
    queries: usize,
    keys: usize,
    query_row: &'a dyn Fn(usize, usize) -> Option<usize>,
    key_row: &'a dyn Fn(usize, usize) -> Option<usize>,
    visible: &'a dyn Fn(usize, usize, usize) -> bool,
}

impl BlockLayout<'_> {
    fn build(&self, rows: usize, device: &Device) -> Result<Block> {
        let (b, tq, tk) = (self.batch, self.queries, self.keys);
        let slot = |row: Option<usize>| row.unwrap_or(rows) as u32;
        let query_index: Vec<u32> = (0..b * tq).map(|s| slot((self.query_row)(s / tq, s % tq))).collect();
        let key_index: Vec<u32> = (0..b * tk).map(|s| slot((self.key_row)(s / tk, s % tk))).collect();
        let mut mask = vec![f32::NEG_INFINITY; b * tq * tk];
        for n in 0..b {
            for i in 0..tq {
                for j in 0..tk {
                    if (self.visible)(n, i, j) {
                        mask[(n * tq + i) * tk + j] = 0.0;
                    }
                }
            }
        }
        Ok(Block {
            batch: b,
            queries: tq,
            keys: tk,
            query_index: Tensor::new(query_index.as_slice(), device)?,
            key_index: Tensor::new(key_index.as_slice(), device)?,
            mask: Tensor::from_vec(mask, (b, 1, 1, tq, tk), device)?,
        })
    }
}

impl Packed {
    /// Packs `sequences`, running the prompt they all share once: its keys
    /// and values are attended by every sequence, and the gradients that
    /// reach them from each add up.
    pub fn new(model: &Model, sequences: &[&Sequence]) -> Result<Self> {
        Self::build(model, sequences, true)
    }

    /// Packs every sequence whole, nothing shared: the reference the shared
    /// layout is checked against.
    pub fn unshared(model: &Model, sequences: &[&Sequence]) -> Result<Self> {
        Self::build(model, sequences, false)
    }

    fn build(model: &Model, sequences: &[&Sequence], share: bool) -> Result<Self> {
        let device = model.device();
        let context = model.rope().0.dim(0)?;
        let batch = sequences.len();
        let longest = sequences.iter().map(|s| s.tokens.len()).max().unwrap_or(0);
        if batch == 0 || longest == 0 || sequences.iter().any(|s| s.tokens.is_empty()) {
            return Err(TrainError::Data("an empty batch or sequence".into()));
        }
        if longest > context {
            return Err(TrainError::Data(format!(
                "a sequence of {longest} tokens exceeds the model's context of {context}"
            )));
        }
        let vocab = model.config.vocab_size as u32;
        for s in sequences {
            if s.scored.len() != s.tokens.len() {
                return Err(TrainError::Data("scored mask and tokens differ in length".into()));
            }
            if let Some(bad) = s.tokens.iter().find(|t| **t >= vocab) {
                return Err(TrainError::Data(format!(
                    "token id {bad} is outside the model's vocabulary of {vocab}"
                )));
            }
        }
        // Shared only when two or more sequences have it, and every
        // sequence keeps a token of its own.
        let shared = if share && batch > 1 {
            shared_prefix(sequences)
        } else {
            0
        };
        let own: Vec<usize> = sequences.iter().map(|s| s.tokens.len() - shared).collect();
        let mut starts = Vec::with_capacity(batch);
        let mut tokens: Vec<u32> = sequences[0].tokens[..shared].to_vec();
        let mut positions: Vec<u32> = (0..shared as u32).collect();
        for s in sequences {
            starts.push(tokens.len());
            tokens.extend_from_slice(&s.tokens[shared..]);
            positions.extend(shared as u32..s.tokens.len() as u32);
        }
        let rows = tokens.len();
        let row_of = |b: usize, t: usize| if t < shared { t } else { starts[b] + t - shared };
        let mut target_rows = Vec::new();
        let mut target_tokens = Vec::new();
        let mut ranges = Vec::with_capacity(batch);
        for (b, s) in sequences.iter().enumerate() {
            let start = target_rows.len();
            for t in 0..s.tokens.len() - 1 {
                if s.scored[t + 1] {
                    target_rows.push(row_of(b, t) as u32);
                    target_tokens.push(s.tokens[t + 1]);
                }
            }
            ranges.push(start..target_rows.len());
        }

        let mut blocks = Vec::new();
        if shared > 0 {
            blocks.push(
                BlockLayout {
                    batch: 1,
                    queries: shared,
                    keys: shared,
                    query_row: &|_, i| Some(i),
                    key_row: &|_, j| Some(j),
                    visible: &|_, i, j| j <= i,
                }
                .build(rows, device)?,
            );
        }
        // Each sequence's own tokens: keys are the shared prefix, then its
        // own; a padded query slot sees its sequence's keys (no empty row).
        let longest_own = own.iter().copied().max().unwrap_or(0);
        blocks.push(
            BlockLayout {
                batch,
                queries: longest_own,
                keys: shared + longest_own,
                query_row: &|b, i| (i < own[b]).then(|| starts[b] + i),
                key_row: &|b, j| {
                    if j < shared {
                        Some(j)
                    } else {
                        (j - shared < own[b]).then(|| starts[b] + j - shared)
                    }
                },
                visible: &|b, i, j| j < shared || j - shared <= i.min(own[b] - 1),
            }
            .build(rows, device)?,
        );
        // Rows are the prefix (the first block's `shared` query slots), then
        // each sequence's own tokens (row `i` of sequence `b` in slot
        // `shared + b·longest_own + i` of the second block).
        let query_slot: Vec<u32> = (0..shared)
            .chain(
                own.iter()
                    .enumerate()
                    .flat_map(|(b, &n)| (0..n).map(move |i| shared + b * longest_own + i)),
            )
            .map(|slot| slot as u32)
            .collect();
        let key_index = Tensor::cat(&blocks.iter().map(|b| &b.key_index).collect::<Vec<_>>(), 0)?;

        let (cos, sin) = model.rope();
        let index = Tensor::new(positions.as_slice(), device)?;
        let d = model.config.head_dim;
        let scored = target_rows.len();
        Ok(Self {
            tokens: Tensor::new(tokens.as_slice(), device)?,
            rows,
            cos: cos.index_select(&index, 0)?.reshape((rows, 1, d))?,
            sin: sin.index_select(&index, 0)?.reshape((rows, 1, d))?,
            blocks,
            query_slot: Tensor::new(query_slot.as_slice(), device)?,
            key_index,
            target_rows: Tensor::new(target_rows.as_slice(), device)?,
            target_tokens: Tensor::from_vec(target_tokens, (scored, 1), device)?,
            ranges,
            token_count: sequences.iter().map(|s| s.tokens.len()).sum(),
            shared,
        })
    }

    /// Number of scored tokens.
    pub fn scored(&self) -> usize {
        self.ranges.last().map_or(0, |r| r.end)
    }

    /// Rows actually run: the shared prefix once, then every sequence's own.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// `x` (packed rows) with a zero row appended, for gathering padded slots.
    fn with_zero_row(&self, x: &Tensor) -> Result<Tensor> {
        let zero = Tensor::zeros((1, x.dim(1)?), x.dtype(), x.device())?;
        Ok(Tensor::cat(&[x, &zero], 0)?)
    }

    /// Padded query-slot rows of every block, end to end, back to packed rows.
    fn rows_of_query_slots(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.index_select(&self.query_slot, 0)?)
    }

    /// Padded key-slot rows of every block, end to end, summed into packed
    /// rows (a shared row gets every sequence's share; padding is dropped).
    fn rows_of_key_slots(&self, x: &Tensor) -> Result<Tensor> {
        let sums =
            Tensor::zeros((self.rows + 1, x.dim(1)?), x.dtype(), x.device())?.index_add(&self.key_index, x, 0)?;
        Ok(sums.narrow(0, 0, self.rows)?)
    }
}

/// The longest prefix every sequence shares, leaving each at least one
/// token of its own.
fn shared_prefix(sequences: &[&Sequence]) -> usize {
    let first = &sequences[0].tokens;
    let limit = sequences.iter().map(|s| s.tokens.len() - 1).min().unwrap_or(0);
    (0..limit)
        .take_while(|&i| sequences.iter().all(|s| s.tokens[i] == first[i]))
        .count()
}

/// Gradients of every LoRA tensor, in [`LoraParams::tensors`] order.
#[derive(Debug, Clone)]
pub struct Grads(pub Vec<Tensor>);

impl Grads {
    pub fn zeros(lora: &LoraParams) -> Result<Self> {
        Ok(Self(
            lora.tensors()
                .into_iter()
                .map(|t| t.zeros_like())
                .collect::<candle_core::Result<_>>()?,
        ))
    }

    pub fn add(&mut self, other: &Grads) -> Result<()> {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a = (&*a + b)?;
        }
        Ok(())
    }

    pub fn scale(&mut self, factor: f64) -> Result<()> {
        for g in &mut self.0 {
            *g = (&*g * factor)?;
        }
        Ok(())
    }

    /// The global L2 norm.
    pub fn norm(&self) -> Result<f64> {
        let mut total = 0.0f64;
        for g in &self.0 {
            total += g.sqr()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        }
        Ok(total.sqrt())
    }
}

/// What the LoRA term of one projection keeps for the backward.
#[derive(Debug)]
struct LoraSaved {
    /// Dropout mask already divided by the keep probability.
    mask: Option<Tensor>,
    /// `dropout(x)·Aᵀ`.
    xa: Tensor,
}

#[derive(Debug)]
struct LayerSaved {
    x_in: Tensor,
    r1: Tensor,
    h1: Tensor,
    /// Per block: padded `q`, `k`, `v` and the attention probabilities.
    attention: Vec<AttentionSaved>,
    attn: Tensor,
    x_mid: Tensor,
    r2: Tensor,
    h2: Tensor,
    gate: Tensor,
    up: Tensor,
    act: Tensor,
    lora: Vec<(Module, LoraSaved)>,
}

#[derive(Debug)]
struct AttentionSaved {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    probs: Tensor,
}

impl LayerSaved {
    fn lora(&self, module: Module) -> Option<&LoraSaved> {
        self.lora.iter().find(|(m, _)| *m == module).map(|(_, s)| s)
    }
}

/// The activations a [`backward`] or [`weight_backward`] needs.
#[derive(Debug)]
pub struct Saved {
    layers: Vec<LayerSaved>,
    x_last: Tensor,
    r_final: Tensor,
    hidden: Tensor,
    logits: Tensor,
    lse: Tensor,
}

/// LoRA dropout during training: the probability and a seeded generator.
#[derive(Debug)]
pub struct Dropout {
    pub p: f64,
    pub rng: rand::rngs::StdRng,
}

impl Dropout {
    pub fn new(p: f64, seed: u64) -> Self {
        Self {
            p,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
        }
    }

    /// A generator of its own for another part of the batch, seeded from
    /// this one.
    pub fn fork(&mut self) -> Self {
        Self::new(self.p, self.rng.random())
    }

    fn mask(&mut self, shape: (usize, usize), device: &Device) -> Result<Tensor> {
        let keep = 1.0 - self.p;
        let scale = (1.0 / keep) as f32;
        let values: Vec<f32> = (0..shape.0 * shape.1)
            .map(|_| if self.rng.random::<f64>() < keep { scale } else { 0.0 })
            .collect();
        Ok(Tensor::from_vec(values, shape, device)?)
    }
}

/// Log-probabilities of the scored tokens (flat, sequence by sequence), with
/// the adapter (`Some`) or the base model alone (`None`); nothing is kept.
pub fn logprobs(model: &Model, lora: Option<&LoraParams>, packed: &Packed) -> Result<Vec<f32>> {
    Ok(run(model, lora, packed, None, false)?.0)
}

/// The training forward: log-probabilities of the scored tokens and the
/// activations for [`backward`].
pub fn forward(
    model: &Model,
    lora: &LoraParams,
    packed: &Packed,
    dropout: Option<&mut Dropout>,
) -> Result<(Vec<f32>, Saved)> {
    let (logprobs, saved) = run(model, Some(lora), packed, dropout, true)?;
    let saved = saved.ok_or_else(|| TrainError::Config("forward kept no activations".into()))?;
    Ok((logprobs, saved))
}

fn run(
    model: &Model,
    lora: Option<&LoraParams>,
    packed: &Packed,
    mut dropout: Option<&mut Dropout>,
    keep: bool,
) -> Result<(Vec<f32>, Option<Saved>)> {
    if model.dtype() != DType::F32 {
        return Err(TrainError::Config("training needs the model in f32".into()));
    }
    let c = &model.config;
    let eps = c.rms_norm_eps;
    let mut x = model.embedding().index_select(&packed.tokens, 0)?;
    let mut layers = Vec::new();
    for (n, layer) in model.layers().iter().enumerate() {
        let mut lora_saved = Vec::new();
        let mut project = |module: Module, input: &Tensor| -> Result<Tensor> {
            let pair = lora.and_then(|l| l.get(n, module));
            let scale = lora.map_or(0.0, |l| l.scale);
            let (y, saved) = linear_forward(layer.linear(module), pair, scale, input, dropout.as_deref_mut())?;
            if let Some(saved) = saved.filter(|_| keep) {
                lora_saved.push((module, saved));
            }
            Ok(y)
        };
        let (h1, r1) = rms_forward(&x, &layer.input_norm, eps)?;
        let q = rope(&project(Module::QProj, &h1)?, packed, c.num_attention_heads, false)?;
        let k = rope(&project(Module::KProj, &h1)?, packed, c.num_key_value_heads, false)?;
        let v = project(Module::VProj, &h1)?;
        let (attn, attention) = attention(model, packed, &q, &k, &v)?;
        let x_mid = (&x + project(Module::OProj, &attn)?)?;
        let (h2, r2) = rms_forward(&x_mid, &layer.post_norm, eps)?;
        let gate = project(Module::GateProj, &h2)?;
        let up = project(Module::UpProj, &h2)?;
        let act = swiglu(&gate, &up)?;
        let x_out = (&x_mid + project(Module::DownProj, &act)?)?;
        if keep {
            layers.push(LayerSaved {
                x_in: x,
                r1,
                h1,
                attention,
                attn,
                x_mid,
                r2,
                h2,
                gate,
                up,
                act,
                lora: lora_saved,
            });
        }
        x = x_out;
    }
    let (normed, r_final) = rms_forward(&x, model.final_norm(), eps)?;
    let hidden = normed.index_select(&packed.target_rows, 0)?;
    let logits = project(&hidden, model.lm_head())?;
    let max = logits.max_keepdim(D::Minus1)?;
    let lse = (logits.broadcast_sub(&max)?.exp()?.sum_keepdim(D::Minus1)?.log()? + &max)?;
    let picked = logits.gather(&packed.target_tokens, D::Minus1)?;
    let logprobs: Vec<f32> = (picked - &lse)?.flatten_all()?.to_vec1()?;
    let saved = keep.then_some(Saved {
        layers,
        x_last: x,
        r_final,
        hidden,
        logits,
        lse,
    });
    Ok((logprobs, saved))
}

/// The training forward of the model alone (no adapter), for
/// [`weight_backward`].
pub fn base_forward(model: &Model, packed: &Packed) -> Result<(Vec<f32>, Saved)> {
    let (logprobs, saved) = run(model, None, packed, None, true)?;
    let saved = saved.ok_or_else(|| TrainError::Config("forward kept no activations".into()))?;
    Ok((logprobs, saved))
}

/// One projection in the backward: layer `n`'s `module`, the input `x` it
/// saw and what its layer's forward kept.
struct Projection<'a> {
    n: usize,
    layer: &'a Layer,
    module: Module,
    x: &'a Tensor,
    saved: &'a LayerSaved,
}

/// What a backward differentiates. Every parameterisation passes the same
/// input gradients back through the model; each keeps the gradients of
/// its own tensors.
trait Parameters {
    /// `dx` of projection `at` given its output gradient `dy`, keeping the
    /// projection's gradients.
    fn linear(&mut self, at: &Projection<'_>, dy: &Tensor) -> Result<Tensor>;

    /// An RMSNorm `name` (input `x`, scale `r`, output gradient `dy`).
    fn norm(&mut self, _name: &dyn Fn() -> String, _x: &Tensor, _r: &Tensor, _dy: &Tensor) -> Result<()> {
        Ok(())
    }

    /// The LM head, from the scored rows' logit gradients and hidden states.
    fn head(&mut self, _dlogits: &Tensor, _hidden: &Tensor) -> Result<()> {
        Ok(())
    }

    /// The embedding, from the gradient of its output rows.
    fn embedding(&mut self, _model: &Model, _packed: &Packed, _dx: &Tensor) -> Result<()> {
        Ok(())
    }
}

/// Passes `∂L/∂logprob` of every scored token back through the model,
/// `params` keeping the gradients it differentiates.
fn backprop(
    model: &Model,
    packed: &Packed,
    saved: Saved,
    dlogprobs: &[f32],
    params: &mut dyn Parameters,
) -> Result<()> {
    if dlogprobs.len() != packed.scored() {
        return Err(TrainError::Config(format!(
            "{} logprob gradients for {} scored tokens",
            dlogprobs.len(),
            packed.scored()
        )));
    }
    let c = &model.config;
    let device = model.device();
    // d log p(y)/d logits = onehot(y) − softmax.
    let dl = Tensor::from_slice(dlogprobs, (dlogprobs.len(), 1), device)?;
    let soft = saved.logits.broadcast_sub(&saved.lse)?.exp()?;
    let dlogits = soft
        .broadcast_mul(&dl)?
        .neg()?
        .scatter_add(&packed.target_tokens, &dl, D::Minus1)?;
    let dhidden_targets = dlogits.matmul(model.lm_head())?;
    params.head(&dlogits, &saved.hidden)?;
    drop(saved.hidden);
    let dnormed = Tensor::zeros((packed.rows, c.hidden_size), DType::F32, device)?.index_add(
        &packed.target_rows,
        &dhidden_targets,
        0,
    )?;
    params.norm(
        &|| hone_engine::names::FINAL_NORM.to_owned(),
        &saved.x_last,
        &saved.r_final,
        &dnormed,
    )?;
    let mut dx = rms_backward(&saved.x_last, &saved.r_final, model.final_norm(), &dnormed)?;
    for (n, (layer, s)) in model.layers().iter().zip(saved.layers).enumerate().rev() {
        let mut back = |module: Module, x: &Tensor, dy: &Tensor| {
            let at = Projection {
                n,
                layer,
                module,
                x,
                saved: &s,
            };
            params.linear(&at, dy)
        };
        // MLP.
        let dact = back(Module::DownProj, &s.act, &dx)?;
        let (dgate, dup) = swiglu_backward(&s.gate, &s.up, &dact)?;
        let dh2 = (back(Module::GateProj, &s.h2, &dgate)? + back(Module::UpProj, &s.h2, &dup)?)?;
        // Attention.
        let dx_mid = (&dx + rms_backward(&s.x_mid, &s.r2, &layer.post_norm, &dh2)?)?;
        let dattn = back(Module::OProj, &s.attn, &dx_mid)?;
        let (dq, dk, dv) = attention_backward(model, packed, &s, &dattn)?;
        let dq = rope(&dq, packed, c.num_attention_heads, true)?;
        let dk = rope(&dk, packed, c.num_key_value_heads, true)?;
        let dh1 = ((back(Module::QProj, &s.h1, &dq)? + back(Module::KProj, &s.h1, &dk)?)?
            + back(Module::VProj, &s.h1, &dv)?)?;
        params.norm(&|| hone_engine::names::post_norm(n), &s.x_mid, &s.r2, &dh2)?;
        params.norm(&|| hone_engine::names::input_norm(n), &s.x_in, &s.r1, &dh1)?;
        dx = (dx_mid + rms_backward(&s.x_in, &s.r1, &layer.input_norm, &dh1)?)?;
    }
    params.embedding(model, packed, &dx)
}

/// `y = x·r·w` with `r = 1/√(mean(x²) + eps)`; returns `(y, r)`.
fn rms_forward(x: &Tensor, weight: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
    let r = (x.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?.recip()?;
    Ok((x.broadcast_mul(&r)?.broadcast_mul(weight)?, r))
}

/// `dx = r·g − x·r³·mean(g·x)` with `g = dy·w`.
fn rms_backward(x: &Tensor, r: &Tensor, weight: &Tensor, dy: &Tensor) -> Result<Tensor> {
    let g = dy.broadcast_mul(weight)?;
    let m = (&g * x)?.mean_keepdim(D::Minus1)?;
    let coef = (m * r.powf(3.0)?)?;
    Ok((g.broadcast_mul(r)? - x.broadcast_mul(&coef)?)?)
}

/// RoPE on packed rows `[N, heads·d]` (rotate-half layout); `inverse`
/// applies its transpose, which is its backward.
fn rope(x: &Tensor, packed: &Packed, heads: usize, inverse: bool) -> Result<Tensor> {
    let (rows, width) = x.dims2()?;
    let d = width / heads;
    let x = x.reshape((rows, heads, d))?;
    let first = x.narrow(D::Minus1, 0, d / 2)?;
    let second = x.narrow(D::Minus1, d / 2, d / 2)?;
    let y = if inverse {
        // dx = dy·cos + Rᵀ(dy·sin), Rᵀ[g₁, g₂] = [g₂, −g₁].
        let s = x.broadcast_mul(&packed.sin)?;
        let (s1, s2) = (s.narrow(D::Minus1, 0, d / 2)?, s.narrow(D::Minus1, d / 2, d / 2)?);
        (x.broadcast_mul(&packed.cos)? + Tensor::cat(&[&s2, &s1.neg()?], D::Minus1)?)?
    } else {
        let rotated = Tensor::cat(&[&second.neg()?, &first], D::Minus1)?;
        (x.broadcast_mul(&packed.cos)? + rotated.broadcast_mul(&packed.sin)?)?
    };
    Ok(y.reshape((rows, width))?)
}

/// Causal GQA attention, block by block over the padded layouts. Returns
/// the packed output `[N, heads·d]` and, per block, the padded
/// `q [B, kv, g·Tq, d]`, `k`, `v [B, kv, Tk, d]` and probabilities
/// `[B, kv, g·Tq, Tk]`.
fn attention(
    model: &Model,
    packed: &Packed,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Result<(Tensor, Vec<AttentionSaved>)> {
    let c = &model.config;
    let d = c.head_dim;
    let (heads, kv) = (c.num_attention_heads, c.num_key_value_heads);
    let group = heads / kv;
    let (q, k, v) = (
        packed.with_zero_row(q)?,
        packed.with_zero_row(k)?,
        packed.with_zero_row(v)?,
    );
    let mut outs = Vec::with_capacity(packed.blocks.len());
    let mut saved = Vec::with_capacity(packed.blocks.len());
    for block in &packed.blocks {
        let (b, tq, tk) = (block.batch, block.queries, block.keys);
        let split = |x: &Tensor, index: &Tensor, t: usize, h: usize| -> Result<Tensor> {
            Ok(x.index_select(index, 0)?
                .reshape((b, t, h, d))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        let qp = split(&q, &block.query_index, tq, heads)?.reshape((b, kv, group * tq, d))?;
        let kp = split(&k, &block.key_index, tk, kv)?;
        let vp = split(&v, &block.key_index, tk, kv)?;
        let scores = (qp.matmul(&kp.t()?)? * (1.0 / (d as f64).sqrt()))?
            .reshape((b, kv, group, tq, tk))?
            .broadcast_add(&block.mask)?
            .reshape((b, kv, group * tq, tk))?;
        let probs = softmax_last(&scores)?;
        outs.push(merge_heads(&probs.matmul(&vp)?, block, tq, heads)?);
        saved.push(AttentionSaved {
            q: qp,
            k: kp,
            v: vp,
            probs,
        });
    }
    Ok((packed.rows_of_query_slots(&Tensor::cat(&outs, 0)?)?, saved))
}

/// `[B, h·(g), T, d]`-shaped heads to the block's padded slot rows
/// `[B·T, heads·d]`.
fn merge_heads(x: &Tensor, block: &Block, t: usize, heads: usize) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    let x = x.reshape((block.batch, heads, t, d))?.transpose(1, 2)?.contiguous()?;
    Ok(x.reshape((block.batch * t, heads * d))?)
}

fn attention_backward(
    model: &Model,
    packed: &Packed,
    s: &LayerSaved,
    dattn: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let c = &model.config;
    let d = c.head_dim;
    let (heads, kv) = (c.num_attention_heads, c.num_key_value_heads);
    let scale = 1.0 / (d as f64).sqrt();
    let dattn = packed.with_zero_row(dattn)?;
    let (mut dqs, mut dks, mut dvs) = (Vec::new(), Vec::new(), Vec::new());
    for (block, a) in packed.blocks.iter().zip(&s.attention) {
        let (b, tq, tk) = (block.batch, block.queries, block.keys);
        let dout = dattn
            .index_select(&block.query_index, 0)?
            .reshape((b, tq, heads, d))?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, kv, heads / kv * tq, d))?;
        let dv = a.probs.t()?.matmul(&dout)?;
        let dp = dout.matmul(&a.v.t()?)?;
        let ds = (&a.probs * dp.broadcast_sub(&(&dp * &a.probs)?.sum_keepdim(D::Minus1)?)?)?;
        let dq = (ds.matmul(&a.k)? * scale)?;
        let dk = (ds.t()?.matmul(&a.q)? * scale)?;
        dqs.push(merge_heads(&dq, block, tq, heads)?);
        dks.push(merge_heads(&dk, block, tk, kv)?);
        dvs.push(merge_heads(&dv, block, tk, kv)?);
    }
    Ok((
        packed.rows_of_query_slots(&Tensor::cat(&dqs, 0)?)?,
        packed.rows_of_key_slots(&Tensor::cat(&dks, 0)?)?,
        packed.rows_of_key_slots(&Tensor::cat(&dvs, 0)?)?,
    ))
}

/// `y = x·Wᵀ + b + s·(dropout(x)·Aᵀ)·Bᵀ`.
fn linear_forward(
    linear: &Linear,
    pair: Option<&LoraPair>,
    scale: f64,
    x: &Tensor,
    dropout: Option<&mut Dropout>,
) -> Result<(Tensor, Option<LoraSaved>)> {
    let mut y = project(x, &linear.weight)?;
    if let Some(bias) = &linear.bias {
        y = y.broadcast_add(bias)?;
    }
    let Some(pair) = pair else {
        return Ok((y, None));
    };
    let mask = match dropout {
        Some(d) if d.p > 0.0 => Some(d.mask(x.dims2()?, x.device())?),
        _ => None,
    };
    let xa = match &mask {
        Some(m) => (x * m)?.matmul(&pair.a.t()?)?,
        None => x.matmul(&pair.a.t()?)?,
    };
    let y = (y + (xa.matmul(&pair.b.t()?)? * scale)?)?;
    Ok((y, Some(LoraSaved { mask, xa })))
}
