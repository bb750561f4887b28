//! The decoder-only transformer shared by Llama and Qwen2: token embedding,
//! N × (RMSNorm → GQA attention with RoPE → residual → RMSNorm → SwiGLU MLP →
//! residual), final RMSNorm, LM head (tied to the embedding where the config
//! says so).
//!
//! Every step is written with plain candle tensor ops. candle's fused kernels
//! (`rms_norm`, `softmax_last_dim`, `rope`, …) record no gradient, and the
//! trainer differentiates through this same forward.

use crate::config::{ModelConfig, RopeScaling};
use crate::lora::{Adapter, LoraWeights, Module};
use crate::weights::Weights;
use crate::{EngineError, Result};
use candle_core::{DType, Device, Tensor, D};
use std::path::Path;

/// A projection `y = x·Wᵀ (+ b)`; `W` is `[out, in]` as Hugging Face stores it.
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    /// Applies the projection, plus the LoRA term when an adapter covers it.
    pub fn forward(&self, x: &Tensor, lora: Option<&LoraWeights>) -> Result<Tensor> {
        let (rows, width) = flat_dims(x)?;
        let flat = x.reshape((rows, width))?;
        let mut y = flat.matmul(&self.weight.t()?)?;
        if let Some(bias) = &self.bias {
            y = y.broadcast_add(bias)?;
        }
        if let Some(lora) = lora {
            let delta = flat.matmul(&lora.a.t()?)?.matmul(&lora.b.t()?)?;
            y = (y + (delta * lora.scale)?)?;
        }
        let mut shape = x.dims().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = self.weight.dim(0)?;
        }
        Ok(y.reshape(shape)?)
    }
}

fn flat_dims(x: &Tensor) -> Result<(usize, usize)> {
    let width = x.dim(D::Minus1)?;
    Ok((x.elem_count() / width.max(1), width))
}

#[derive(Debug)]
struct Layer {
    input_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Layer {
    fn linear(&self, module: Module) -> &Linear {
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

/// Per-layer keys and values of the tokens seen so far, `[B, kv_heads, S, head_dim]`.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokens cached so far.
    pub fn len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .and_then(|(k, _)| k.dim(2).ok())
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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
}

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
        let linear = |w: &mut Weights, name: &str, out: usize, inp: usize, bias: bool| -> Result<Linear> {
            Ok(Linear {
                weight: w.take(&format!("{name}.weight"), &[out, inp])?,
                bias: if bias {
                    Some(w.take(&format!("{name}.bias"), &[out])?)
                } else {
                    None
                },
            })
        };
        let embed = w.take("model.embed_tokens.weight", &[c.vocab_size, h])?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for n in 0..c.num_hidden_layers {
            let p = format!("model.layers.{n}");
            layers.push(Layer {
                input_norm: w.take(&format!("{p}.input_layernorm.weight"), &[h])?,
                q: linear(&mut w, &format!("{p}.self_attn.q_proj"), q_out, h, c.qkv_bias)?,
                k: linear(&mut w, &format!("{p}.self_attn.k_proj"), kv_out, h, c.qkv_bias)?,
                v: linear(&mut w, &format!("{p}.self_attn.v_proj"), kv_out, h, c.qkv_bias)?,
                o: linear(&mut w, &format!("{p}.self_attn.o_proj"), h, q_out, c.o_bias)?,
                post_norm: w.take(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                gate: linear(&mut w, &format!("{p}.mlp.gate_proj"), i, h, c.mlp_bias)?,
                up: linear(&mut w, &format!("{p}.mlp.up_proj"), i, h, c.mlp_bias)?,
                down: linear(&mut w, &format!("{p}.mlp.down_proj"), h, i, c.mlp_bias)?,
            });
        }
        let norm = w.take("model.norm.weight", &[h])?;
        let lm_head = if c.tie_word_embeddings {
            // Some tied checkpoints still carry a copy; it must equal the embedding.
            w.take_optional("lm_head.weight", &[c.vocab_size, h])?;
            None
        } else {
            Some(w.take("lm_head.weight", &[c.vocab_size, h])?)
        };
        let left: Vec<&str> = w
            .remaining()
            .into_iter()
            .filter(|n| !n.contains("rotary_emb"))
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
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
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
        if past + t > self.cos.dim(0)? {
            return Err(EngineError::Model(format!(
                "{} tokens exceed the model's context of {}",
                past + t,
                self.cos.dim(0)?
            )));
        }
        if cache.layers.len() != self.layers.len() {
            cache.layers = vec![None; self.layers.len()];
        }
        let mut x = self
            .embed
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, t, self.config.hidden_size))?;
        let cos = self.cos.narrow(0, past, t)?;
        let sin = self.sin.narrow(0, past, t)?;
        let mask = causal_mask(t, past, self.dtype, &self.device)?;
        for (n, layer) in self.layers.iter().enumerate() {
            let lora = |m: Module| adapter.and_then(|a| a.get(n, m));
            let h = rms_norm(&x, &layer.input_norm, self.config.rms_norm_eps)?;
            let attn = self.attention(n, layer, &h, &cos, &sin, mask.as_ref(), cache, &lora)?;
            x = (x + attn)?;
            let h = rms_norm(&x, &layer.post_norm, self.config.rms_norm_eps)?;
            let gate = layer.gate.forward(&h, lora(Module::GateProj))?.silu()?;
            let up = layer.up.forward(&h, lora(Module::UpProj))?;
            x = (x + layer.down.forward(&(gate * up)?, lora(Module::DownProj))?)?;
        }
        rms_norm(&x, &self.norm, self.config.rms_norm_eps)
    }

    /// Projects hidden states onto the vocabulary.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let (b, t, h) = hidden.dims3()?;
        let logits = hidden.reshape((b * t, h))?.matmul(&head.t()?)?;
        Ok(logits.reshape((b, t, self.config.vocab_size))?)
    }

    #[allow(clippy::too_many_arguments)]
    fn attention<'a>(
        &'a self,
        n: usize,
        layer: &Layer,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
        cache: &mut KvCache,
        lora: &dyn Fn(Module) -> Option<&'a LoraWeights>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (b, t, _) = x.dims3()?;
        let (heads, kv_heads, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let split = |y: Tensor, heads: usize| -> Result<Tensor> {
            Ok(y.reshape((b, t, heads, d))?.transpose(1, 2)?.contiguous()?)
        };
        let q = split(layer.q.forward(x, lora(Module::QProj))?, heads)?;
        let k = split(layer.k.forward(x, lora(Module::KProj))?, kv_heads)?;
        let v = split(layer.v.forward(x, lora(Module::VProj))?, kv_heads)?;
        let q = apply_rope(&q, cos, sin)?;
        let k = apply_rope(&k, cos, sin)?;
        let (k, v) = match cache.layers[n].take() {
            Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 2)?, Tensor::cat(&[&pv, &v], 2)?),
            None => (k, v),
        };
        cache.layers[n] = Some((k.clone(), v.clone()));
        let s = k.dim(2)?;
        // Grouped-query attention without copying K/V: the `group` query heads
        // that share a KV head are stacked along the sequence axis.
        let group = heads / kv_heads;
        let q = q.reshape((b, kv_heads, group * t, d))?;
        let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?;
        let scores = match mask {
            Some(mask) => scores.reshape((b, kv_heads, group, t, s))?.broadcast_add(mask)?,
            None => scores,
        };
        let probs = softmax_last(&scores)?.reshape((b, kv_heads, group * t, s))?;
        let out = probs.matmul(&v)?.reshape((b, heads, t, d))?;
        let out = out.transpose(1, 2)?.reshape((b, t, heads * d))?;
        layer.o.forward(&out, lora(Module::OProj))
    }

    /// The model's projection for `module` in layer `n` (for merging and training).
    pub fn projection(&self, n: usize, module: Module) -> Option<&Linear> {
        self.layers.get(n).map(|l| l.linear(module))
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

/// RoPE in Hugging Face's "rotate half" layout: `x·cos + rotate_half(x)·sin`.
fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    let first = x.narrow(D::Minus1, 0, d / 2)?;
    let second = x.narrow(D::Minus1, d / 2, d / 2)?;
    let rotated = Tensor::cat(&[&second.neg()?, &first], D::Minus1)?;
    Ok((x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?)?)
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
