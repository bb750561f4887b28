//! `hone model import FILE.gguf`: a GGUF file, as llama.cpp, Ollama and LM
//! Studio keep models, turned into a Hugging Face checkpoint directory that
//! the engine, the trainers, PEFT and vLLM load.
//!
//! - [`metadata`]: the file's key–value header, typed, and the
//!   `config.json` and `generation_config.json` it describes;
//! - [`tensors`]: GGUF tensor names → Hugging Face names, dequantised to
//!   f32 by candle's GGML kernels, with llama.cpp's rotary row permutation
//!   of the Llama query and key projections undone;
//! - [`vocab`]: `tokenizer.json`, `tokenizer_config.json` and
//!   `chat_template.jinja` from the file's vocabulary, merges, token types,
//!   named pre-tokenizer and chat template.
//!
//! Whatever cannot be converted faithfully — another architecture, a
//! quantisation candle does not dequantise, a SentencePiece vocabulary, a
//! pre-tokenizer not in [`vocab::PreTokenizer`], RoPE scaling or a partial
//! rotary dimension — is refused by name before anything is written.

pub mod metadata;
pub mod tensors;
pub mod vocab;

use crate::init::write_json;
use crate::{Arch, EngineError, Result};
use candle_core::quantized::gguf_file::Content;
use std::collections::BTreeMap;
use std::path::Path;

/// What an import wrote.
#[derive(Debug, Clone)]
pub struct Imported {
    pub arch: Arch,
    /// The file's `general.name`, if it has one.
    pub name: Option<String>,
    pub tensors: usize,
    pub parameters: usize,
    /// How many tensors were stored in each GGML type (`Q4_1`, `F32`, …).
    pub stored_as: BTreeMap<String, usize>,
    pub vocab_size: usize,
    /// The pre-tokenizer the file names (`tokenizer.ggml.pre`).
    pub pre_tokenizer: String,
}

/// Converts the GGUF file `file` into a checkpoint in `out` (created if
/// missing). Everything is checked before the first file is written.
pub fn import(file: &Path, out: &Path) -> Result<Imported> {
    let mut reader = std::io::BufReader::new(std::fs::File::open(file).map_err(|e| EngineError::io(file, e))?);
    let content = Content::read(&mut reader).map_err(|e| refusal(file, &e.to_string()))?;
    let meta = metadata::Metadata::new(&content.metadata);
    let fail = |message: String| EngineError::Model(format!("{}: {message}", file.display()));
    let model = meta.model(&content).map_err(fail)?;
    let vocab = vocab::Vocab::read(&meta).map_err(fail)?;
    if vocab.tokens.len() != model.vocab_size {
        return Err(fail(format!(
            "the vocabulary holds {} tokens, the embedding {} rows",
            vocab.tokens.len(),
            model.vocab_size
        )));
    }
    let weights = tensors::dequantize(&content, &mut reader, &model).map_err(|e| match e {
        EngineError::Model(m) => fail(m),
        other => other,
    })?;
    std::fs::create_dir_all(out).map_err(|e| EngineError::io(out, e))?;
    write_json(&out.join("config.json"), &model.config_json(&vocab))?;
    write_json(&out.join("generation_config.json"), &vocab.generation_config())?;
    write_json(&out.join("tokenizer.json"), &vocab.tokenizer_json())?;
    write_json(
        &out.join("tokenizer_config.json"),
        &vocab.tokenizer_config(model.context_length),
    )?;
    if let Some(template) = &vocab.chat_template {
        let path = out.join("chat_template.jinja");
        std::fs::write(&path, template).map_err(|e| EngineError::io(&path, e))?;
    }
    let parameters = weights.tensors.values().map(|t| t.elem_count()).sum();
    candle_core::safetensors::save(&weights.tensors, out.join("model.safetensors"))?;
    Ok(Imported {
        arch: model.arch,
        name: meta.string("general.name").ok().map(str::to_owned),
        tensors: weights.tensors.len(),
        parameters,
        stored_as: weights.stored_as,
        vocab_size: vocab.tokens.len(),
        pre_tokenizer: vocab.pre.name().to_owned(),
    })
}

/// candle's reading error, with an unknown GGML type said by name.
fn refusal(file: &Path, message: &str) -> EngineError {
    let named = message
        .strip_prefix("unknown dtype for tensor ")
        .and_then(|n| n.trim().parse::<u32>().ok())
        .map(|n| {
            format!(
                "its tensors are stored as GGML type {n} ({}), which is not converted; \
                 F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K to Q6_K are",
                tensors::ggml_type_name(n)
            )
        });
    EngineError::Model(format!(
        "{}: {}",
        file.display(),
        named.unwrap_or_else(|| format!("not a GGUF file hone can read: {message}"))
    ))
}
