//! The decoder-only transformer shared by Llama and Qwen2: token embedding,
//! N × (RMSNorm → GQA attention with RoPE → residual → RMSNorm → SwiGLU MLP →
//! residual), final RMSNorm, LM head (tied to the embedding where the config
//! says so).
//!
//! Every step is written with plain candle tensor ops. candle's fused kernels
//! (`rms_norm`, `softmax_last_dim`, `rope`, …) record no gradient, and
//! hone-train's tests differentiate through this same forward with candle's
//! autograd as the reference for the trainer's hand-written backward; the
//! exceptions, taken only where no gradient flows, are RoPE and the
//! attention's softmax (candle-nn's kernels) and the MLP's activation
//! ([`crate::swiglu`]).

use crate::config::{ModelConfig, RopeScaling};
use crate::lora::{Adapter, LoraWeights, Module};
use crate::names;
use crate::weights::Weights;
use crate::{EngineError, Result};
use candle_core::{DType, Device, Tensor, D};
use std::path::Path;

/// Whether a projection has a bias, and the config key that says so.
#[derive(Debug, Clone, Copy)]
enum Bias {
    None,
    By(&'static str),
}

impl Bias {
    fn of(on: bool, key: &'static str) -> Self {
        if on {
            Bias::By(key)
        } else {
            Bias::None
        }
    }
}

/// A projection `y = x·Wᵀ (+ b)`; `W` is `[out, in]` as Hugging Face stores it.
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    /// Applies the projection, plus the LoRA term when an adapter covers it.
    pub fn forward(&self, x: &Tensor, lora: Option<&LoraWeights>) -> Result<Tensor> {
        let (rows, _) = flat_dims(x)?;
        self.forward_runs(x, &[(rows, lora)])
    }

    /// Applies the projection to a batch whose consecutive runs of rows (of
    /// the input flattened to `[rows, in]`) use different LoRA terms.
    pub fn forward_runs(&self, x: &Tensor, runs: &[(usize, Option<&LoraWeights>)]) -> Result<Tensor> {
        let (rows, width) = flat_dims(x)?;
        let flat = x.reshape((rows, width))?;
        let mut y = project(&flat, &self.weight)?;
        if let Some(bias) = &self.bias {
            y = y.broadcast_add(bias)?;
        }
        if runs.iter().any(|(_, lora)| lora.is_some()) {
            let out = self.weight.dim(0)?;
            let mut deltas = Vec::with_capacity(runs.len());
            let mut start = 0;
            for (count, lora) in runs {
                deltas.push(match lora {
                    Some(lora) => {
                        let part = flat.narrow(0, start, *count)?;
                        (part.matmul(&lora.a.t()?)?.matmul(&lora.b.t()?)? * lora.scale)?
                    }
                    None => Tensor::zeros((*count, out), y.dtype(), y.device())?,
                });
                start += count;
            }
            let delta = if deltas.len() == 1 {
                deltas.remove(0)
            } else {
                Tensor::cat(&deltas, 0)?
            };
            y = (y + delta)?;
        }
        let mut shape = x.dims().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = self.weight.dim(0)?;
        }
        Ok(y.reshape(shape)?)
    }
}

/// Rows up to which `x·Wᵀ` is computed as `(W·xᵀ)ᵀ`: with few rows
/// (decoding), candle's GEMM is about twice as fast with the weight as the
/// left operand (measured on Qwen2.5-0.5B shapes: 0.80 vs 1.49 ms for an
/// 8×896 · 896×4864 product, 22 vs 38 ms for the LM head).
const FEW_ROWS: usize = 16;

/// `x·Wᵀ` for `x` `[rows, in]` and `W` `[out, in]`.
pub fn project(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let rows = x.dim(0)?;
    if rows > FEW_ROWS {
        return Ok(x.matmul(&weight.t()?)?);
    }
    if let Some(y) = few_rows_on_cpu(x, weight)? {
        return Ok(y);
    }
    Ok(weight.matmul(&x.t()?.contiguous()?)?.t()?.contiguous()?)
}

/// `x·Wᵀ` by [`crate::gemv`] when both are f32 on the CPU and `W` is laid
/// out as stored and large enough (`None` otherwise, for candle to
/// compute).
fn few_rows_on_cpu(x: &Tensor, weight: &Tensor) -> Result<Option<Tensor>> {
    if !x.device().is_cpu()
        || x.dtype() != DType::F32
        || weight.dtype() != DType::F32
        || weight.elem_count() < crate::gemv::MIN_WEIGHTS
    {
        return Ok(None);
    }
    let (rows, width) = x.dims2()?;
    let out = weight.dim(0)?;
    let inputs = x.flatten_all()?.to_vec1::<f32>()?;
    let product = crate::cpu_f32::with_slices([weight], |[weight]| {
        crate::gemv::few_rows_transposed(&inputs, rows, weight, width)
    });
    match product {
        Some(y) => Ok(Some(Tensor::from_vec(y, (out, rows), x.device())?.t()?.contiguous()?)),
        None => Ok(None),
    }
}

fn flat_dims(x: &Tensor) -> Result<(usize, usize)> {
    let width = x.dim(D::Minus1)?;
    Ok((x.elem_count() / width.max(1), width))
}

/// One decoder block's weights.
#[derive(Debug)]
pub struct Layer {
    pub input_norm: Tensor,
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub post_norm: Tensor,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

impl Layer {
    pub fn linear(&self, module: Module) -> &Linear {
        match module {
            Module::QProj => &self.q,
            Module::KProj => &self.k,
            Module::VProj => &self.v,
            Module::OProj => &self.o,
            Module::GateProj => &self.gate,
            Module::UpProj => &self.up,
            Module::DownProj => &self.down,
        }
    }
}

/// Per-layer keys and values of the tokens seen so far, in buffers
/// `[B, kv_heads, capacity, head_dim]` that grow by doubling, so a decode
/// step writes one position instead of copying the whole cache.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
    /// Appends concatenate instead of writing into a buffer (see
    /// [`KvCache::differentiable`]).
    concat: bool,
}

impl KvCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache whose every append makes new tensors (concatenation) rather
    /// than writing in place, so gradients flow back through the cached
    /// positions and clones share them safely: candle's autograd through
    /// the forward, the reference the trainer's backward is checked against.
    pub fn differentiable() -> Self {
        Self {
            concat: true,
            ..Self::default()
        }
    }

    /// Tokens cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An independent copy (a sample that continues from a shared prompt).
    pub fn fork(&self) -> Result<Self> {
        self.fork_prefix(self.len)
    }

    /// An independent copy of the first `len` positions (at most all).
    pub fn fork_prefix(&self, len: usize) -> Result<Self> {
        let len = len.min(self.len);
        let layers = self
            .layers
            .iter()
            .map(|layer| match layer {
                Some((k, v)) => Ok(Some((k.narrow(2, 0, len)?.copy()?, v.narrow(2, 0, len)?.copy()?))),
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            layers,
            len,
            concat: false,
        })
    }

    /// Bytes of the keys and values of the cached positions (not counting a
    /// buffer's spare room).
    pub fn bytes(&self) -> usize {
        // Keys and values are `[B, kv_heads, positions, head_dim]` alike.
        let per_position = |t: &Tensor| match t.dims() {
            [b, heads, _, d] => b * heads * d * t.dtype().size_in_bytes(),
            _ => 0,
        };
        self.layers
            .iter()
            .flatten()
            .map(|(k, _)| 2 * per_position(k) * self.len)
            .sum()
    }

    /// Appends layer `n`'s new keys and values `[B, kv_heads, t, d]` after the
    /// cached ones and returns all of them. The first append keeps the
    /// tensors themselves (so a forward from an empty cache stays
    /// differentiable); later ones write into a buffer with room to spare.
    fn append(&mut self, n: usize, k: Tensor, v: Tensor) -> Result<(Tensor, Tensor)> {
        if self.layers.len() <= n {
            self.layers.resize(n + 1, None);
        }
        let past = self.len;
        let Some((kb, vb)) = self.layers[n].take() else {
            self.layers[n] = Some((k.clone(), v.clone()));
            return Ok((k, v));
        };
        if self.concat {
            let all = (Tensor::cat(&[&kb, &k], 2)?, Tensor::cat(&[&vb, &v], 2)?);
            self.layers[n] = Some(all.clone());
            return Ok(all);
        }
        let t = k.dim(2)?;
        let (kb, vb) = if past + t > kb.dim(2)? {
            let capacity = (past + t).max(2 * kb.dim(2)?).next_multiple_of(64);
            (grow(&kb, past, capacity)?, grow(&vb, past, capacity)?)
        } else {
            (kb, vb)
        };
        kb.slice_set(&k.contiguous()?, 2, past)?;
        vb.slice_set(&v.contiguous()?, 2, past)?;
        let all = (kb.narrow(2, 0, past + t)?, vb.narrow(2, 0, past + t)?);
        self.layers[n] = Some((kb, vb));
        Ok(all)
    }
}

/// A buffer with `capacity` positions holding the first `len` of `buffer`.
fn grow(buffer: &Tensor, len: usize, capacity: usize) -> Result<Tensor> {
    let (b, heads, _, d) = buffer.dims4()?;
    let bigger = Tensor::zeros((b, heads, capacity, d), buffer.dtype(), buffer.device())?;
    if len > 0 {
        bigger.slice_set(&buffer.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
    }
    Ok(bigger)
}

/// Which adapter each run of consecutive batch rows uses: `(rows, adapter)`.
pub type AdapterRuns<'a> = [(usize, Option<&'a Adapter>)];

/// The LoRA terms of projection `module` in layer `n` for each run, with the
/// row counts multiplied by `per_row` (tokens per batch row).
fn lora_runs<'a>(
    runs: &AdapterRuns<'a>,
    n: usize,
    module: Module,
    per_row: usize,
) -> Vec<(usize, Option<&'a LoraWeights>)> {
    runs.iter()
        .map(|(rows, adapter)| (rows * per_row, adapter.and_then(|a| a.get(n, module))))
        .collect()
}

/// A loaded model.
#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    device: Device,
    dtype: DType,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    /// `None` when tied to the embedding.
    lm_head: Option<Tensor>,
    cos: Tensor,
    sin: Tensor,
    /// See [`Model::set_stack_limit`].
    stack_limit: usize,
}

/// Default for [`Model::set_stack_limit`]: 4 Mi elements (16 MiB in f32).
const STACK_LIMIT: usize = 4 << 20;

impl Model {
    /// Loads `config.json` and the safetensors of a checkpoint directory.
    pub fn load(dir: &Path, dtype: DType, device: &Device) -> Result<Self> {
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        let weights = Weights::load(dir, dtype, device)?;
        Self::from_weights(config, weights, dtype, device)
    }

    pub fn from_weights(config: ModelConfig, mut w: Weights, dtype: DType, device: &Device) -> Result<Self> {
        let c = &config;
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let q_out = c.num_attention_heads * c.head_dim;
        let kv_out = c.num_key_value_heads * c.head_dim;
        // A bias is taken when the config asks for it: a missing one names the key.
        let linear = |w: &mut Weights, name: &str, out: usize, inp: usize, bias: Bias| -> Result<Linear> {
            Ok(Linear {
                weight: w.take(&format!("{name}.weight"), &[out, inp])?,
                bias: match bias {
                    Bias::None => None,
                    Bias::By(key) => Some(
                        w.take(&format!("{name}.bias"), &[out])
                            .map_err(|e| EngineError::Model(format!("{e} (the config sets {key})")))?,
                    ),
                },
            })
        };
        let (qkv_bias, o_bias, mlp_bias) = (
            Bias::of(
                c.qkv_bias,
                if c.arch == crate::Arch::Qwen2 {
                    "model_type qwen2"
                } else {
                    "attention_bias"
                },
            ),
            Bias::of(c.o_bias, "attention_bias"),
            Bias::of(c.mlp_bias, "mlp_bias"),
        );
        let embed = w.take(names::EMBEDDING, &[c.vocab_size, h])?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for n in 0..c.num_hidden_layers {
            let mut linear = |module: Module, out: usize, inp: usize, bias: Bias| {
                linear(&mut w, &names::projection(n, module), out, inp, bias)
            };
            let (q, k, v, o) = (
                linear(Module::QProj, q_out, h, qkv_bias)?,
                linear(Module::KProj, kv_out, h, qkv_bias)?,
                linear(Module::VProj, kv_out, h, qkv_bias)?,
                linear(Module::OProj, h, q_out, o_bias)?,
            );
            let (gate, up, down) = (
                linear(Module::GateProj, i, h, mlp_bias)?,
                linear(Module::UpProj, i, h, mlp_bias)?,
                linear(Module::DownProj, h, i, mlp_bias)?,
            );
            layers.push(Layer {
                input_norm: w.take(&names::input_norm(n), &[h])?,
                q,
                k,
                v,
                o,
                post_norm: w.take(&names::post_norm(n), &[h])?,
                gate,
                up,
                down,
            });
        }
        let norm = w.take(names::FINAL_NORM, &[h])?;
        let lm_head = if c.tie_word_embeddings {
            // Some tied checkpoints still carry a copy; it must equal the embedding.
            if let Some(copy) = w.take_optional(names::LM_HEAD, &[c.vocab_size, h])? {
                let apart = (&copy - &embed)?
                    .abs()?
                    .flatten_all()?
                    .max(0)?
                    .to_dtype(DType::F32)?
                    .to_scalar::<f32>()?;
                if apart > 0.0 {
                    return Err(EngineError::Model(format!(
                        "tie_word_embeddings is true but the checkpoint's own `{}` differs from the embedding \
                         (by up to {apart}); set tie_word_embeddings to false to use it",
                        names::LM_HEAD
                    )));
                }
            }
            None
        } else {
            Some(
                w.take(names::LM_HEAD, &[c.vocab_size, h])
                    .map_err(|e| EngineError::Model(format!("{e} (tie_word_embeddings is false)")))?,
            )
        };
        let left: Vec<&str> = w
            .remaining()
            .into_iter()
            .filter(|n| !names::is_rotary_table(n))
            .collect();
        if !left.is_empty() {
            tracing::warn!(tensors = ?left, "checkpoint tensors the model does not use");
        }
        let (cos, sin) = rope_tables(c, dtype, device)?;
        Ok(Self {
            config,
            device: device.clone(),
            dtype,
            embed,
            layers,
            norm,
            lm_head,
            cos,
            sin,
            stack_limit: STACK_LIMIT,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The decoder blocks (the trainer runs its own forward over them).
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The token embedding `[vocab, hidden]`.
    pub fn embedding(&self) -> &Tensor {
        &self.embed
    }

    /// The final RMSNorm's weight.
    pub fn final_norm(&self) -> &Tensor {
        &self.norm
    }

    /// The LM head `[vocab, hidden]` (the embedding when tied).
    pub fn lm_head(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// The RoPE tables `(cos, sin)`, `[max_positions, head_dim]` each.
    pub fn rope(&self) -> (&Tensor, &Tensor) {
        (&self.cos, &self.sin)
    }

    /// Logits `[B, T, vocab]` for `tokens` `[B, T]` that follow what `cache`
    /// holds; the cache is extended with them.
    pub fn forward(&self, tokens: &Tensor, cache: &mut KvCache, adapter: Option<&Adapter>) -> Result<Tensor> {
        let hidden = self.hidden(tokens, cache, adapter)?;
        self.logits(&hidden)
    }

    /// Logits of the last position only, `[B, vocab]` (what decoding needs).
    pub fn forward_last(&self, tokens: &Tensor, cache: &mut KvCache, adapter: Option<&Adapter>) -> Result<Tensor> {
        let hidden = self.hidden(tokens, cache, adapter)?;
        let t = hidden.dim(1)?;
        let last = hidden.narrow(1, t - 1, 1)?;
        Ok(self.logits(&last)?.squeeze(1)?)
    }

    /// Final hidden states `[B, T, hidden]` (after the last norm).
    pub fn hidden(&self, tokens: &Tensor, cache: &mut KvCache, adapter: Option<&Adapter>) -> Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        let past = cache.len();
        self.check_context(past + t)?;
        let mut x = self.embed(tokens)?;
        let rotation = Rotation::new(self.cos.narrow(0, past, t)?, self.sin.narrow(0, past, t)?, None)?;
        let mask = causal_mask(t, past, self.dtype, &self.device)?;
        let runs = [(b, adapter)];
        for (n, layer) in self.layers.iter().enumerate() {
            let lora = |m: Module| lora_runs(&runs, n, m, t);
            let h = rms_norm(&x, &layer.input_norm, self.config.rms_norm_eps)?;
            let (q, k, v) = self.qkv(layer, &h, &rotation, &lora)?;
            let (k, v) = cache.append(n, k, v)?;
            let out = self.attend(&q, &k, &v, mask.as_ref())?;
            x = self.finish_layer(layer, x, out, &lora)?;
        }
        cache.len += t;
        rms_norm(&x, &self.norm, self.config.rms_norm_eps)
    }

    /// One decode step for a batch of independent sequences: row `r` feeds
    /// `tokens[r]` after what `caches[r]` holds (each at its own position) and
    /// uses the adapter its run names. The projections and the MLP run once
    /// for the whole batch (one pass over the weights); attention runs per
    /// row against that row's cache, so no padding is needed. Returns the
    /// logits `[B, vocab]`.
    pub fn decode(&self, tokens: &[u32], caches: &mut [&mut KvCache], runs: &AdapterRuns) -> Result<Tensor> {
        let hidden = self.decode_hidden(tokens, caches, runs)?;
        Ok(self.logits(&hidden)?.squeeze(1)?)
    }

    /// [`Model::decode`]'s final hidden states `[B, 1, hidden]`, before the
    /// projection onto the vocabulary (kNN-LM memory searches with them).
    pub fn decode_hidden(&self, tokens: &[u32], caches: &mut [&mut KvCache], runs: &AdapterRuns) -> Result<Tensor> {
        let b = tokens.len();
        if caches.len() != b || runs.iter().map(|r| r.0).sum::<usize>() != b {
            return Err(EngineError::Model(format!(
                "decode: {b} tokens, {} caches and adapter runs over {} rows",
                caches.len(),
                runs.iter().map(|r| r.0).sum::<usize>()
            )));
        }
        let positions: Vec<u32> = caches.iter().map(|c| c.len() as u32).collect();
        for cache in caches.iter() {
            self.check_context(cache.len() + 1)?;
        }
        let index = Tensor::new(positions.as_slice(), &self.device)?;
        let rotation = Rotation::new(
            self.cos.index_select(&index, 0)?,
            self.sin.index_select(&index, 0)?,
            Some(b),
        )?;
        let input = Tensor::new(tokens, &self.device)?.unsqueeze(1)?;
        let mut x = self.embed(&input)?;
        for (n, layer) in self.layers.iter().enumerate() {
            let lora = |m: Module| lora_runs(runs, n, m, 1);
            let h = rms_norm(&x, &layer.input_norm, self.config.rms_norm_eps)?;
            let (q, k, v) = self.qkv(layer, &h, &rotation, &lora)?;
            let mut rows = Vec::with_capacity(b);
            for (r, cache) in caches.iter_mut().enumerate() {
                rows.push(cache.append(n, k.narrow(0, r, 1)?, v.narrow(0, r, 1)?)?);
            }
            let out = self.attend_rows(&q, rows)?;
            x = self.finish_layer(layer, x, out, &lora)?;
        }
        for cache in caches.iter_mut() {
            cache.len += 1;
        }
        rms_norm(&x, &self.norm, self.config.rms_norm_eps)
    }

    /// Decode attention for rows with their own caches (`[1, kv, S_r, d]`
    /// each). While the padded batch is small, the rows are stacked (shorter
    /// ones padded and masked) and attended in one go — a few large ops
    /// instead of many small ones; beyond that, copying the caches would
    /// cost more than it saves, and each row attends alone.
    fn attend_rows(&self, q: &Tensor, rows: Vec<(Tensor, Tensor)>) -> Result<Tensor> {
        let b = rows.len();
        let lens: Vec<usize> = rows.iter().map(|(k, _)| k.dim(2)).collect::<candle_core::Result<_>>()?;
        let longest = lens.iter().copied().max().unwrap_or(0);
        let c = &self.config;
        if b == 1 || b * longest * c.num_key_value_heads * c.head_dim > self.stack_limit {
            let mut outs = Vec::with_capacity(b);
            for (r, (k, v)) in rows.iter().enumerate() {
                outs.push(self.attend(&q.narrow(0, r, 1)?, k, v, None)?);
            }
            return Ok(if b == 1 { outs.remove(0) } else { Tensor::cat(&outs, 0)? });
        }
        let pad = |t: &Tensor, len: usize| -> Result<Tensor> {
            if len == longest {
                return Ok(t.clone());
            }
            let (_, heads, _, d) = t.dims4()?;
            let zeros = Tensor::zeros((1, heads, longest - len, d), t.dtype(), t.device())?;
            Ok(Tensor::cat(&[t, &zeros], 2)?)
        };
        let mut ks = Vec::with_capacity(b);
        let mut vs = Vec::with_capacity(b);
        for ((k, v), len) in rows.iter().zip(&lens) {
            ks.push(pad(k, *len)?);
            vs.push(pad(v, *len)?);
        }
        let k = Tensor::cat(&ks, 0)?;
        let v = Tensor::cat(&vs, 0)?;
        let mask = if lens.iter().all(|l| *l == longest) {
            None
        } else {
            let values: Vec<f32> = lens
                .iter()
                .flat_map(|len| (0..longest).map(move |j| if j < *len { 0.0 } else { f32::NEG_INFINITY }))
                .collect();
            Some(Tensor::from_vec(values, (b, 1, 1, 1, longest), &self.device)?.to_dtype(self.dtype)?)
        };
        self.attend(q, &k, &v, mask.as_ref())
    }

    /// Sets how many cached key elements (rows × positions × kv heads ×
    /// head dim) a decode step may stack to attend all rows at once
    /// (0: every row attends alone). For tests and tuning.
    pub fn set_stack_limit(&mut self, elements: usize) {
        self.stack_limit = elements;
    }

    fn check_context(&self, needed: usize) -> Result<()> {
        let context = self.cos.dim(0)?;
        if needed > context {
            return Err(EngineError::Model(format!(
                "{needed} tokens exceed the model's context of {context}"
            )));
        }
        Ok(())
    }

    fn embed(&self, tokens: &Tensor) -> Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        Ok(self
            .embed
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, t, self.config.hidden_size))?)
    }

    /// Projects `h` `[B, T, hidden]` onto queries `[B, heads, T, d]` and keys
    /// and values `[B, kv_heads, T, d]`, with RoPE applied.
    fn qkv<'a>(
        &self,
        layer: &Layer,
        h: &Tensor,
        rotation: &Rotation,
        lora: &dyn Fn(Module) -> Vec<(usize, Option<&'a LoraWeights>)>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let c = &self.config;
        let (b, t, _) = h.dims3()?;
        let split = |y: Tensor, heads: usize| -> Result<Tensor> {
            Ok(y.reshape((b, t, heads, c.head_dim))?.transpose(1, 2)?.contiguous()?)
        };
        let q = split(layer.q.forward_runs(h, &lora(Module::QProj))?, c.num_attention_heads)?;
        let k = split(layer.k.forward_runs(h, &lora(Module::KProj))?, c.num_key_value_heads)?;
        let v = split(layer.v.forward_runs(h, &lora(Module::VProj))?, c.num_key_value_heads)?;
        Ok((rotation.apply(&q)?, rotation.apply(&k)?, v))
    }

    /// Scaled dot-product attention of `q` `[B, heads, T, d]` over `k`/`v`
    /// `[B, kv_heads, S, d]`; returns `[B, T, heads·d]`.
    fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let c = &self.config;
        let (b, heads, t, d) = q.dims4()?;
        let kv_heads = c.num_key_value_heads;
        let s = k.dim(2)?;
        // Grouped-query attention without copying K/V: the `group` query heads
        // that share a KV head are stacked along the sequence axis.
        let group = heads / kv_heads;
        // Scaled before the product: T·d queries instead of T·S scores.
        let q = (q.reshape((b, kv_heads, group * t, d))? * (1.0 / (d as f64).sqrt()))?;
        let scores = q.matmul(&k.t()?)?;
        let scores = match mask {
            Some(mask) => scores.reshape((b, kv_heads, group, t, s))?.broadcast_add(mask)?,
            None => scores,
        };
        let probs = attention_softmax(&scores)?.reshape((b, kv_heads, group * t, s))?;
        let out = probs.matmul(v)?.reshape((b, heads, t, d))?;
        Ok(out.transpose(1, 2)?.reshape((b, t, heads * d))?)
    }

    /// The output projection, the residual, and the MLP block.
    fn finish_layer<'a>(
        &self,
        layer: &Layer,
        x: Tensor,
        attn: Tensor,
        lora: &dyn Fn(Module) -> Vec<(usize, Option<&'a LoraWeights>)>,
    ) -> Result<Tensor> {
        let x = (x + layer.o.forward_runs(&attn, &lora(Module::OProj))?)?;
        let h = rms_norm(&x, &layer.post_norm, self.config.rms_norm_eps)?;
        let gate = layer.gate.forward_runs(&h, &lora(Module::GateProj))?;
        let up = layer.up.forward_runs(&h, &lora(Module::UpProj))?;
        let act = crate::swiglu::swiglu(&gate, &up)?;
        Ok((x + layer.down.forward_runs(&act, &lora(Module::DownProj))?)?)
    }

    /// Projects hidden states onto the vocabulary.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let (b, t, h) = hidden.dims3()?;
        let logits = project(&hidden.reshape((b * t, h))?, head)?;
        Ok(logits.reshape((b, t, self.config.vocab_size))?)
    }

    /// The model's projection for `module` in layer `n` (for merging and training).
    pub fn projection(&self, n: usize, module: Module) -> Option<&Linear> {
        self.layers.get(n).map(|l| l.linear(module))
    }

    /// Checks that every adapted projection exists and has the adapter's shapes.
    pub fn check_adapter(&self, adapter: &Adapter) -> Result<()> {
        for (&(n, module), lora) in &adapter.layers {
            let linear = self.projection(n, module).ok_or_else(|| {
                EngineError::Adapter(format!(
                    "the adapter has layer {n}; the model has {} layers",
                    self.layers.len()
                ))
            })?;
            let (out, inp) = linear.weight.dims2()?;
            let (r, a_in) = lora.a.dims2()?;
            let (b_out, b_r) = lora.b.dims2()?;
            if a_in != inp || b_out != out || b_r != r {
                return Err(EngineError::Adapter(format!(
                    "layer {n} {}: A {:?} and B {:?} do not fit the model's [{out}, {inp}] projection",
                    module.name(),
                    lora.a.dims(),
                    lora.b.dims()
                )));
            }
        }
        Ok(())
    }

    /// Folds an adapter into the base weights (`W += s·B·A`); the result
    /// needs no LoRA term. Used to check that merged and unmerged agree.
    pub fn merge(&mut self, adapter: &Adapter) -> Result<()> {
        for (&(n, module), lora) in &adapter.layers {
            let layer = self
                .layers
                .get_mut(n)
                .ok_or_else(|| EngineError::Adapter(format!("layer {n} does not exist")))?;
            let linear = match module {
                Module::QProj => &mut layer.q,
                Module::KProj => &mut layer.k,
                Module::VProj => &mut layer.v,
                Module::OProj => &mut layer.o,
                Module::GateProj => &mut layer.gate,
                Module::UpProj => &mut layer.up,
                Module::DownProj => &mut layer.down,
            };
            let delta = (lora.b.matmul(&lora.a)? * lora.scale)?;
            linear.weight = (&linear.weight + delta)?;
        }
        Ok(())
    }
}

/// `x / sqrt(mean(x²) + eps) · w`, computed in f32 as Hugging Face does.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let dtype = x.dtype();
    let x32 = x.to_dtype(DType::F32)?;
    let variance = x32.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = x32.broadcast_div(&(variance + eps)?.sqrt()?)?.to_dtype(dtype)?;
    Ok(normed.broadcast_mul(weight)?)
}

/// Softmax over the last axis from differentiable primitives.
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?;
    let e = x.broadcast_sub(&max)?.exp()?;
    Ok(e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?)
}

/// The attention's softmax over the last axis: candle-nn's fused kernel
/// (one pass over the scores, on the CPU and on a GPU, where the scores of
/// a long prompt are the largest tensors of the forward) when no gradient
/// flows through them; [`softmax_last`] when one does (the fused kernel
/// records none).
fn attention_softmax(scores: &Tensor) -> Result<Tensor> {
    if scores.track_op() {
        return softmax_last(scores);
    }
    Ok(candle_nn::ops::softmax_last_dim(&scores.contiguous()?)?)
}

/// `-inf` above the diagonal, shifted right by the `past` cached tokens;
/// `None` for a single new token (it may see everything).
fn causal_mask(t: usize, past: usize, dtype: DType, device: &Device) -> Result<Option<Tensor>> {
    if t == 1 {
        return Ok(None);
    }
    let s = past + t;
    let values: Vec<f32> = (0..t)
        .flat_map(|i| (0..s).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Ok(Some(Tensor::from_vec(values, (t, s), device)?.to_dtype(dtype)?))
}

/// The RoPE rows of the positions one forward covers, applied in Hugging
/// Face's "rotate half" layout: `x·cos + rotate_half(x)·sin`.
struct Rotation {
    /// `[T, d]`, or `[B, 1, 1, d]` for a decode step's rows at positions of
    /// their own: broadcast against `[B, heads, T, d]`.
    cos: Tensor,
    sin: Tensor,
    /// The rows' first halves (the second repeats them), `[T, d/2]` or
    /// `[B, 1, d/2]`, as candle-nn's fused kernel takes them.
    cos_half: Tensor,
    sin_half: Tensor,
}

impl Rotation {
    /// From table rows `[T, d]`, or `[B, d]` (one position a row) when
    /// `rows` is `Some(B)`.
    fn new(cos: Tensor, sin: Tensor, rows: Option<usize>) -> Result<Self> {
        let d = cos.dim(D::Minus1)?;
        let half = |t: &Tensor| -> Result<Tensor> {
            let half = t.narrow(D::Minus1, 0, d / 2)?.contiguous()?;
            Ok(match rows {
                Some(b) => half.reshape((b, 1, d / 2))?,
                None => half,
            })
        };
        let full = |t: Tensor| -> Result<Tensor> {
            Ok(match rows {
                Some(b) => t.reshape((b, 1, 1, d))?,
                None => t,
            })
        };
        Ok(Self {
            cos_half: half(&cos)?,
            sin_half: half(&sin)?,
            cos: full(cos)?,
            sin: full(sin)?,
        })
    }

    /// Rotates `x` `[B, heads, T, d]`: candle-nn's fused kernel (one pass,
    /// the same products and sums, so the same values) where no gradient
    /// flows; plain ops where one does.
    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        if !x.track_op() && x.is_contiguous() {
            return Ok(candle_nn::rotary_emb::rope(x, &self.cos_half, &self.sin_half)?);
        }
        let d = x.dim(D::Minus1)?;
        let first = x.narrow(D::Minus1, 0, d / 2)?;
        let second = x.narrow(D::Minus1, d / 2, d / 2)?;
        let rotated = Tensor::cat(&[&second.neg()?, &first], D::Minus1)?;
        Ok((x.broadcast_mul(&self.cos)? + rotated.broadcast_mul(&self.sin)?)?)
    }
}

/// The inverse frequencies, rescaled as the config asks.
pub fn inv_freq(config: &ModelConfig) -> Vec<f64> {
    let d = config.head_dim;
    let base: Vec<f64> = (0..d / 2)
        .map(|i| 1.0 / config.rope_theta.powf((2 * i) as f64 / d as f64))
        .collect();
    match &config.rope_scaling {
        None => base,
        Some(RopeScaling::Linear { factor }) => base.into_iter().map(|f| f / factor).collect(),
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: original,
        }) => {
            let low_wavelen = original / low_freq_factor;
            let high_wavelen = original / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}

/// cos/sin tables `[max_positions, head_dim]`.
fn rope_tables(config: &ModelConfig, dtype: DType, device: &Device) -> Result<(Tensor, Tensor)> {
    let freqs = inv_freq(config);
    let positions = config.max_position_embeddings;
    let d = config.head_dim;
    let mut cos = Vec::with_capacity(positions * d);
    let mut sin = Vec::with_capacity(positions * d);
    for p in 0..positions {
        for _half in 0..2 {
            for f in &freqs {
                // f32 product, as the reference computes it.
                let angle = (p as f32 * *f as f32) as f64;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
    }
    let cos = Tensor::from_vec(cos, (positions, d), device)?.to_dtype(dtype)?;
    let sin = Tensor::from_vec(sin, (positions, d), device)?.to_dtype(dtype)?;
    Ok((cos, sin))
}

/// Log-softmax of one row of logits, in f32.
pub fn log_softmax_row(logits: &Tensor) -> Result<Vec<f32>> {
    let row: Vec<f32> = logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|v| ((v - max) as f64).exp()).sum();
    let log_sum = max as f64 + sum.ln();
    Ok(row.iter().map(|v| (*v as f64 - log_sum) as f32).collect())
}
