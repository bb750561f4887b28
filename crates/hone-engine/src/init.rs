//! `hone model init`: randomly initialised checkpoints in exactly the Hugging
//! Face layout (`config.json`, `model.safetensors`, `tokenizer.json`,
//! `tokenizer_config.json` with a ChatML-style template that knows tools), so
//! tests and demos load through the same code a real Qwen2.5 or Llama
//! checkpoint takes — and nothing is downloaded.

use crate::config::Arch;
use crate::lora::Module;
use crate::names;
use crate::{EngineError, Result};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

/// Sizes of a generated model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// A few hundred thousand parameters: fast enough for every test.
    Tiny,
    /// 4 layers of width 128 (~0.8M parameters): the shape of the base
    /// policies hone trains itself (`hone-demo`), small enough to train in
    /// minutes on two cores, large enough to learn a tool-use format.
    Mini,
    /// 4 layers of width 512 (~12M parameters): big enough that training
    /// benchmarks measure arithmetic rather than per-op overhead.
    Small,
    /// The exact shape of Qwen2.5-0.5B (random weights), for benchmarks.
    Qwen25_0_5b,
}

impl Preset {
    /// The names [`Preset::parse`] accepts, for error messages.
    pub const NAMES: &'static str = "tiny, mini, small, qwen2.5-0.5b";

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "tiny" => Some(Self::Tiny),
            "mini" => Some(Self::Mini),
            "small" => Some(Self::Small),
            "qwen2.5-0.5b" => Some(Self::Qwen25_0_5b),
            _ => None,
        }
    }
}

/// The special tokens of the generated tokenizer, after the 256 byte tokens.
pub const SPECIAL_TOKENS: [(&str, bool); 7] = [
    ("<|endoftext|>", true),
    ("<|im_start|>", true),
    ("<|im_end|>", true),
    ("<tool_call>", false),
    ("</tool_call>", false),
    ("<tool_response>", false),
    ("</tool_response>", false),
];

/// The ChatML-style template written into `tokenizer_config.json`.
pub const CHAT_TEMPLATE: &str = include_str!("chat_template.jinja");

/// Writes a random checkpoint of `arch` and `preset` into `out` (created if
/// needed). The same `seed` gives the same bytes.
pub fn write_checkpoint(arch: Arch, preset: Preset, seed: u64, out: &Path) -> Result<()> {
    write_checkpoint_with(arch, preset, seed, out, &tokenizer_json())
}

/// [`write_checkpoint`] with a given `tokenizer.json` (its byte and special
/// tokens at the ids [`write_checkpoint`]'s has, e.g. from
/// [`trained_tokenizer`]); the vocabulary grows to hold every token.
pub fn write_checkpoint_with(
    arch: Arch,
    preset: Preset,
    seed: u64,
    out: &Path,
    tokenizer: &serde_json::Value,
) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| EngineError::io(out, e))?;
    let mut config = config_json(arch, preset);
    let tokens = tokenizer["model"]["vocab"]
        .as_object()
        .map_or(0, |v| v.len())
        .max(256 + SPECIAL_TOKENS.len());
    let vocab = config["vocab_size"]
        .as_u64()
        .unwrap_or(0)
        .max(tokens.next_multiple_of(64) as u64);
    config["vocab_size"] = json!(vocab);
    write_json(&out.join("config.json"), &config)?;
    write_json(&out.join("tokenizer.json"), tokenizer)?;
    write_json(&out.join("tokenizer_config.json"), &tokenizer_config_json())?;
    write_json(
        &out.join("generation_config.json"),
        &json!({"bos_token_id": 256, "eos_token_id": [258, 256], "do_sample": true}),
    )?;
    let tensors = random_weights(&config, seed)?;
    candle_core::safetensors::save(&tensors, out.join("model.safetensors"))?;
    Ok(())
}

/// Writes `value` as pretty-printed JSON with a final newline.
pub(crate) fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| EngineError::Model(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(|e| EngineError::io(path, e))
}

/// A preset's shape: hidden size, MLP size, layers, attention heads,
/// key-value heads, vocabulary, context, rope theta, norm epsilon.
type Shape = (usize, usize, usize, usize, usize, usize, usize, f64, f64);

impl Preset {
    fn shape(self) -> Shape {
        match self {
            Preset::Tiny => (64, 176, 2, 4, 2, 320, 2048, 10_000.0, 1e-6),
            Preset::Mini => (128, 352, 4, 4, 2, 320, 2048, 10_000.0, 1e-6),
            Preset::Small => (512, 1408, 4, 8, 2, 320, 2048, 10_000.0, 1e-6),
            Preset::Qwen25_0_5b => (896, 4864, 24, 14, 2, 151_936, 32_768, 1_000_000.0, 1e-6),
        }
    }

    /// The width of the preset's hidden states.
    pub fn hidden_size(self) -> usize {
        self.shape().0
    }
}

fn config_json(arch: Arch, preset: Preset) -> serde_json::Value {
    let (hidden, inter, layers, heads, kv, vocab, max_pos, theta, eps) = preset.shape();
    let mut config = json!({
        "architectures": [arch.hf_class()],
        "model_type": match arch { Arch::Llama => "llama", Arch::Qwen2 => "qwen2" },
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "hidden_act": "silu",
        "max_position_embeddings": max_pos,
        "rms_norm_eps": eps,
        "rope_theta": theta,
        "bos_token_id": 256,
        "eos_token_id": 258,
        "torch_dtype": "float32",
        "initializer_range": 0.02,
        "use_cache": true,
    });
    match arch {
        Arch::Qwen2 => {
            config["tie_word_embeddings"] = json!(true);
            config["use_sliding_window"] = json!(false);
            config["sliding_window"] = json!(max_pos);
            config["max_window_layers"] = json!(layers);
            config["attention_dropout"] = json!(0.0);
        }
        Arch::Llama => {
            // Llama 3.1-style RoPE scaling, so the tiny model exercises it.
            config["tie_word_embeddings"] = json!(false);
            config["attention_bias"] = json!(false);
            config["mlp_bias"] = json!(false);
            config["rope_scaling"] = json!({
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": max_pos / 4,
            });
        }
    }
    config
}

/// Normal(0, std) from a seeded generator (Box–Muller).
fn normal(rng: &mut rand::rngs::StdRng, n: usize, std: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
            let u2: f64 = rng.random();
            ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32 * std
        })
        .collect()
}

fn random_weights(config: &serde_json::Value, seed: u64) -> Result<HashMap<String, Tensor>> {
    let parsed = crate::ModelConfig::from_json(&config.to_string()).map_err(EngineError::Model)?;
    let c = &parsed;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let device = Device::Cpu;
    let mut tensors = HashMap::new();
    let mut add = |name: String, shape: Vec<usize>, values: Vec<f32>| -> Result<()> {
        tensors.insert(name, Tensor::from_vec(values, shape, &device)?);
        Ok(())
    };
    let (h, i, v) = (c.hidden_size, c.intermediate_size, c.vocab_size);
    let q_out = c.num_attention_heads * c.head_dim;
    let kv_out = c.num_key_value_heads * c.head_dim;
    // Norm weights near 1 and non-zero biases, so every tensor matters.
    let norm = |rng: &mut rand::rngs::StdRng| normal(rng, h, 0.1).into_iter().map(|x| 1.0 + x).collect();
    add(names::EMBEDDING.into(), vec![v, h], normal(&mut rng, v * h, 0.02))?;
    for n in 0..c.num_hidden_layers {
        add(names::input_norm(n), vec![h], norm(&mut rng))?;
        add(names::post_norm(n), vec![h], norm(&mut rng))?;
        for (module, out, inp, bias) in [
            (Module::QProj, q_out, h, c.qkv_bias),
            (Module::KProj, kv_out, h, c.qkv_bias),
            (Module::VProj, kv_out, h, c.qkv_bias),
            (Module::OProj, h, q_out, c.o_bias),
            (Module::GateProj, i, h, c.mlp_bias),
            (Module::UpProj, i, h, c.mlp_bias),
            (Module::DownProj, h, i, c.mlp_bias),
        ] {
            let name = names::projection(n, module);
            add(
                format!("{name}.weight"),
                vec![out, inp],
                normal(&mut rng, out * inp, 0.02),
            )?;
            if bias {
                add(format!("{name}.bias"), vec![out], normal(&mut rng, out, 0.02))?;
            }
        }
    }
    add(names::FINAL_NORM.into(), vec![h], norm(&mut rng))?;
    if !c.tie_word_embeddings {
        add(names::LM_HEAD.into(), vec![v, h], normal(&mut rng, v * h, 0.02))?;
    }
    Ok(tensors)
}

/// GPT-2's byte → printable character table used by byte-level BPE.
pub fn byte_to_char() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut next = 256;
    (0u32..256)
        .map(|b| {
            let code = if printable(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(code).unwrap_or('?')
        })
        .collect()
}

/// A byte-level BPE tokenizer: the 256 byte tokens (id = byte) and the
/// special tokens, no merges.
fn tokenizer_json() -> serde_json::Value {
    let vocab: serde_json::Map<String, serde_json::Value> = byte_to_char()
        .into_iter()
        .enumerate()
        .map(|(id, c)| (c.to_string(), json!(id)))
        .collect();
    let added: Vec<serde_json::Value> = SPECIAL_TOKENS
        .iter()
        .enumerate()
        .map(|(k, (content, special))| {
            json!({"id": 256 + k, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": special})
        })
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []
        }
    })
}

/// How a learned tokenizer cuts numbers before its merges are learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Numbers {
    /// Every digit is a token of its own (as in Qwen2's tokenizer).
    #[default]
    Digits,
    /// A run of digits is one piece that merges may join, so frequent
    /// numbers become single tokens (Llama 3 joins up to three digits).
    Runs,
}

/// A byte-level BPE tokenizer whose merges are learned from `corpus` (the
/// maintained `tokenizers` trainer) until it has about `vocab_size` tokens;
/// `numbers` says how digits are cut.
/// The 256 byte tokens and the special tokens keep their ids; learned
/// tokens follow them, so a model made for [`write_checkpoint`]'s tokenizer
/// reads the same ids for the same bytes.
pub fn trained_tokenizer(corpus: &[String], vocab_size: usize, numbers: Numbers) -> Result<serde_json::Value> {
    use tokenizers::models::bpe::BpeTrainerBuilder;
    use tokenizers::models::TrainerWrapper;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    let fail = |e: tokenizers::Error| EngineError::Model(format!("training the tokenizer: {e}"));
    let mut base = tokenizer_json();
    // Numbers are cut apart from the text around them either way, so a
    // number reads the same wherever it is copied to.
    base["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": numbers == Numbers::Digits},
        base["pre_tokenizer"].clone(),
    ]});
    let mut tokenizer: tokenizers::Tokenizer = base.to_string().parse().map_err(fail)?;
    let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
        .vocab_size(vocab_size.saturating_sub(SPECIAL_TOKENS.len()))
        .min_frequency(2)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .show_progress(false)
        .build()
        .into();
    tokenizer.train(&mut trainer, corpus.iter()).map_err(fail)?;
    let trained: serde_json::Value = serde_json::from_str(&tokenizer.to_string(false).map_err(fail)?)
        .map_err(|e| EngineError::Model(e.to_string()))?;
    let bytes: HashMap<String, usize> = byte_to_char()
        .into_iter()
        .enumerate()
        .map(|(id, c)| (c.to_string(), id))
        .collect();
    // Learned tokens in the trainer's order, after the bytes and the specials.
    let mut learned: Vec<(String, u64)> = trained["model"]["vocab"]
        .as_object()
        .map(|v| {
            v.iter()
                .filter(|(t, _)| !bytes.contains_key(*t) && !SPECIAL_TOKENS.iter().any(|(s, _)| s == t))
                .map(|(t, id)| (t.clone(), id.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    learned.sort_by_key(|(_, id)| *id);
    let first = 256 + SPECIAL_TOKENS.len();
    let mut vocab: serde_json::Map<String, serde_json::Value> =
        bytes.iter().map(|(t, id)| (t.clone(), json!(id))).collect();
    // The special tokens sit in the vocabulary at their ids too: the
    // `tokenizers` library gives an added token the id its model has for
    // it, and otherwise the next free id, which would move them.
    for (k, (special, _)) in SPECIAL_TOKENS.iter().enumerate() {
        vocab.insert((*special).to_owned(), json!(256 + k));
    }
    for (k, (token, _)) in learned.into_iter().enumerate() {
        vocab.insert(token, json!(first + k));
    }
    // Merges are `[left, right]` (or `"left right"`); keep those whose parts
    // and result are tokens (the special tokens were left out above).
    let pair = |m: &serde_json::Value| -> Option<(String, String)> {
        match m {
            serde_json::Value::Array(p) => Some((p.first()?.as_str()?.to_owned(), p.get(1)?.as_str()?.to_owned())),
            serde_json::Value::String(s) => s.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())),
            _ => None,
        }
    };
    let merges: Vec<serde_json::Value> = trained["model"]["merges"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(pair)
                .filter(|(a, b)| {
                    vocab.contains_key(a) && vocab.contains_key(b) && vocab.contains_key(&format!("{a}{b}"))
                })
                .map(|(a, b)| json!([a, b]))
                .collect()
        })
        .unwrap_or_default();
    let mut out = base;
    out["model"]["vocab"] = serde_json::Value::Object(vocab);
    out["model"]["merges"] = serde_json::Value::Array(merges);
    Ok(out)
}

fn tokenizer_config_json() -> serde_json::Value {
    let decoder: serde_json::Map<String, serde_json::Value> = SPECIAL_TOKENS
        .iter()
        .enumerate()
        .map(|(k, (content, special))| {
            (
                (256 + k).to_string(),
                json!({"content": content, "lstrip": false, "normalized": false, "rstrip": false,
                       "single_word": false, "special": special}),
            )
        })
        .collect();
    json!({
        "added_tokens_decoder": decoder,
        "bos_token": null,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": null,
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": false,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    })
}
