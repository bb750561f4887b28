//! The tokenizer a GGUF file describes, written the way Hugging Face
//! keeps it: `tokenizer.json` (byte-level BPE: the file's tokens, merges
//! and the pre-tokenizer it names), `tokenizer_config.json` (special
//! tokens) and the chat template.
//!
//! A pre-tokenizer is the one part of a tokenizer a GGUF file names rather
//! than holds (`tokenizer.ggml.pre`, llama.cpp's names); [`PreTokenizer`]
//! lists those converted, each written as the Hugging Face tokenizer of that
//! family declares it, and any other is refused.

use super::metadata::Metadata;
use serde_json::json;

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const NORMAL: u64 = 1;
const UNKNOWN: u64 = 2;
const CONTROL: u64 = 3;
const USER_DEFINED: u64 = 4;
const BYTE: u64 = 6;

/// The pre-tokenizers converted, by the name llama.cpp writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// GPT-2's: byte-level with its own split regex.
    Gpt2,
    /// SmolLM's: every digit alone, then GPT-2's.
    SmolLm,
    /// Qwen2's: its split regex (single digits), NFC-normalised text.
    Qwen2,
    /// Llama 3's: its split regex (digits in threes).
    Llama3,
}

impl PreTokenizer {
    pub const NAMES: &str = "gpt-2, smollm, qwen2, llama-bpe";

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "gpt-2" => Some(Self::Gpt2),
            "smollm" => Some(Self::SmolLm),
            "qwen2" => Some(Self::Qwen2),
            "llama-bpe" => Some(Self::Llama3),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Gpt2 => "gpt-2",
            Self::SmolLm => "smollm",
            Self::Qwen2 => "qwen2",
            Self::Llama3 => "llama-bpe",
        }
    }

    fn normalizer(self) -> serde_json::Value {
        match self {
            Self::Qwen2 => json!({"type": "NFC"}),
            _ => serde_json::Value::Null,
        }
    }

    fn pre_tokenizer(self) -> serde_json::Value {
        const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
        let split = |regex: &str| json!({"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false});
        match self {
            Self::Gpt2 => byte_level(true),
            Self::SmolLm => json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                byte_level(true),
            ]}),
            Self::Qwen2 => json!({"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(false)]}),
            Self::Llama3 => json!({"type": "Sequence", "pretokenizers": [split(LLAMA3), byte_level(false)]}),
        }
    }
}

/// The file's tokenizer.
#[derive(Debug, Clone)]
pub struct Vocab {
    pub tokens: Vec<String>,
    pub types: Vec<u64>,
    pub merges: Vec<(String, String)>,
    pub pre: PreTokenizer,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// End-of-turn ids beside `eos` (`eot`, `eom`): where generation stops.
    pub stops: Vec<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub chat_template: Option<String>,
}

impl Vocab {
    pub fn read(meta: &Metadata) -> Result<Self, String> {
        let model = meta.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(format!(
                "tokenizer.ggml.model `{model}` is not converted (gpt2, byte-level BPE, is; \
                 `llama` is SentencePiece)"
            ));
        }
        let pre_name = meta.string("tokenizer.ggml.pre").unwrap_or("default");
        let pre = PreTokenizer::parse(pre_name).ok_or_else(|| {
            format!(
                "tokenizer.ggml.pre `{pre_name}` is not a pre-tokenizer hone converts faithfully ({})",
                PreTokenizer::NAMES
            )
        })?;
        let tokens: Vec<String> = meta
            .strings("tokenizer.ggml.tokens")?
            .into_iter()
            .map(str::to_owned)
            .collect();
        let types = match meta.has("tokenizer.ggml.token_type") {
            true => meta.integers("tokenizer.ggml.token_type")?,
            false => vec![NORMAL; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(format!("{} token types for {} tokens", types.len(), tokens.len()));
        }
        if let Some(i) = types.iter().position(|t| *t == BYTE) {
            return Err(format!(
                "token {i} is a byte-fallback token: that vocabulary is not converted"
            ));
        }
        let merges = meta
            .strings("tokenizer.ggml.merges")?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| format!("merge `{m}` is not two tokens"))
            })
            .collect::<Result<_, _>>()?;
        let id = |key: &str| -> Result<Option<u32>, String> {
            if !meta.has(key) {
                return Ok(None);
            }
            let id = meta.integer(key)?;
            match usize::try_from(id).is_ok_and(|i| i < tokens.len()) {
                true => Ok(Some(id as u32)),
                false => Err(format!("`{key}` = {id} is outside the vocabulary")),
            }
        };
        let flag = |key: &str| if meta.has(key) { meta.boolean(key) } else { Ok(false) };
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let stops = ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"]
            .into_iter()
            .map(id)
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .filter(|s| Some(*s) != eos)
            .collect();
        let chat_template = match meta.has("tokenizer.chat_template") {
            true => Some(meta.string("tokenizer.chat_template")?.to_owned()),
            false => None,
        };
        Ok(Self {
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos,
            stops,
            pad: id("tokenizer.ggml.padding_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            tokens,
            types,
            merges,
            pre,
            chat_template,
        })
    }

    /// Tokens matched whole before the BPE: control and user-defined ones.
    fn added(&self) -> impl Iterator<Item = (usize, &str, bool)> {
        self.tokens
            .iter()
            .zip(&self.types)
            .enumerate()
            .filter(|(_, (_, t))| matches!(**t, UNKNOWN | CONTROL | USER_DEFINED))
            .map(|(i, (token, t))| (i, token.as_str(), *t != USER_DEFINED))
    }

    fn token(&self, id: Option<u32>) -> serde_json::Value {
        id.map_or(serde_json::Value::Null, |i| json!(self.tokens[i as usize]))
    }

    pub fn tokenizer_json(&self) -> serde_json::Value {
        let added: Vec<_> = self
            .added()
            .map(|(id, content, special)| {
                json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": !special, "special": special})
            })
            .collect();
        let vocab: serde_json::Map<String, serde_json::Value> = self
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), json!(i)))
            .collect();
        let merges: Vec<_> = self.merges.iter().map(|(a, b)| json!([a, b])).collect();
        let mut post = json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true});
        if self.add_bos || self.add_eos {
            post = self.template_processor().unwrap_or(post);
        }
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": self.pre.normalizer(),
            "pre_tokenizer": self.pre.pre_tokenizer(),
            "post_processor": post,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {
                "type": "BPE",
                "dropout": null,
                "unk_token": self.token(self.unk),
                "continuing_subword_prefix": null,
                "end_of_word_suffix": null,
                "fuse_unk": false,
                "byte_fallback": false,
                "ignore_merges": false,
                "vocab": vocab,
                "merges": merges,
            },
        })
    }

    /// The BOS / EOS the file says to add around every encoding.
    fn template_processor(&self) -> Option<serde_json::Value> {
        let mut specials = serde_json::Map::new();
        let mut around = |add: bool, id: Option<u32>, type_id: u32| -> Vec<serde_json::Value> {
            match (add, id) {
                (true, Some(id)) => {
                    let token = self.tokens[id as usize].clone();
                    specials.insert(token.clone(), json!({"id": token, "ids": [id], "tokens": [token]}));
                    vec![json!({"SpecialToken": {"id": token, "type_id": type_id}})]
                }
                _ => Vec::new(),
            }
        };
        let sequence = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
        let mut single = around(self.add_bos, self.bos, 0);
        single.push(sequence("A", 0));
        single.extend(around(self.add_eos, self.eos, 0));
        let mut pair = single.clone();
        pair.extend(around(self.add_bos, self.bos, 1));
        pair.push(sequence("B", 1));
        pair.extend(around(self.add_eos, self.eos, 1));
        Some(json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}))
    }

    pub fn tokenizer_config(&self, context_length: usize) -> serde_json::Value {
        let decoder: serde_json::Map<String, serde_json::Value> = self
            .added()
            .map(|(id, content, special)| {
                (
                    id.to_string(),
                    json!({"content": content, "lstrip": false, "normalized": !special, "rstrip": false,
                           "single_word": false, "special": special}),
                )
            })
            .collect();
        json!({
            "added_tokens_decoder": decoder,
            "add_bos_token": self.add_bos,
            "add_eos_token": self.add_eos,
            "bos_token": self.token(self.bos),
            "eos_token": self.token(self.eos),
            "pad_token": self.token(self.pad),
            "unk_token": self.token(self.unk),
            "clean_up_tokenization_spaces": false,
            "model_max_length": context_length,
            "tokenizer_class": "PreTrainedTokenizerFast",
        })
    }

    pub fn generation_config(&self) -> serde_json::Value {
        let eos: Vec<u32> = self.eos.into_iter().chain(self.stops.iter().copied()).collect();
        json!({"bos_token_id": self.bos, "eos_token_id": eos, "pad_token_id": self.pad})
    }
}
