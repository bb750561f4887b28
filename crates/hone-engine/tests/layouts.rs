//! Checkpoints as the installed transformers saves them
//! (`tests/reference/config_keys.py`): a tiny llama and qwen2 loaded and
//! saved again by transformers (`dtype` and `rope_parameters` in
//! config.json, the chat template in chat_template.jinja, a list of EOS ids
//! in generation_config.json) load and match transformers; and every copy
//! with one forward-changing config key altered is either refused, naming
//! the key, or gives transformers' logits for that copy.
//!
//! Needs the Python `scripts/test` installs (`HONE_TEST_TRL_PYTHON`);
//! skipped without it unless `HONE_REQUIRE_TRL` is set.

use candle_core::{DType, Device, Tensor};
use hone_engine::{Arch, Engine, EngineOptions, KvCache, Model, Tokenizer};
use serde_json::Value;
use std::path::Path;

const TOLERANCE: f32 = 1e-4;

fn python() -> Option<String> {
    match std::env::var("HONE_TEST_TRL_PYTHON") {
        Ok(python) => Some(python),
        Err(_) if std::env::var_os("HONE_REQUIRE_TRL").is_some() => {
            panic!("HONE_REQUIRE_TRL is set but HONE_TEST_TRL_PYTHON names no Python")
        }
        Err(_) => {
            eprintln!("SKIPPED: HONE_TEST_TRL_PYTHON names no Python with transformers");
            None
        }
    }
}

/// A tiny checkpoint of `arch` saved again by transformers, its variants,
/// and what transformers computed on them.
fn saved_by_transformers(python: &str, arch: &str, dir: &Path) -> Value {
    let source = dir.join("source");
    hone_engine::init::write_checkpoint(Arch::parse(arch).unwrap(), hone_engine::init::Preset::Tiny, 3, &source)
        .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/reference/config_keys.py");
    let output = std::process::Command::new(python)
        .arg(&script)
        .args(["--arch", arch, "--source"])
        .arg(&source)
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "config_keys.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

fn logits(dir: &Path, input: &Value) -> hone_engine::Result<Vec<f32>> {
    let model = Model::load(dir, DType::F32, &Device::Cpu)?;
    let rows: Vec<Vec<u32>> = serde_json::from_value(input.clone()).unwrap();
    let tokens = Tensor::from_vec(rows.concat(), (rows.len(), rows[0].len()), &Device::Cpu)?;
    let out = model.forward(&tokens, &mut KvCache::new(), None)?;
    Ok(out.flatten_all()?.to_vec1()?)
}

fn max_abs_diff(ours: &[f32], theirs: &Value) -> f32 {
    let theirs: Vec<f32> = serde_json::from_value(theirs.clone()).unwrap();
    assert_eq!(ours.len(), theirs.len());
    ours.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}

fn every_key_is_read_or_refused(arch: &str) {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let report = saved_by_transformers(&python, arch, dir.path());
    let saved = Path::new(report["saved"].as_str().unwrap());

    // Today's layout, as written: the template in its own file, rope_parameters.
    let files: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(files.contains(&"chat_template.jinja"), "{files:?}");
    let keys: Vec<&str> = report["config_keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(keys.contains(&"rope_parameters") && keys.contains(&"dtype"), "{keys:?}");
    let tokenizer = Tokenizer::load(saved).unwrap();
    let chat = &report["chat"];
    let text = tokenizer.template.render(&chat["messages"], None, true).unwrap();
    assert_eq!(
        text,
        chat["text"].as_str().unwrap(),
        "{arch}: the chat renders as transformers renders it"
    );
    let engine = Engine::load(saved, EngineOptions::default()).unwrap();
    for id in report["eos_token_ids"].as_array().unwrap() {
        let id = u32::try_from(id.as_u64().unwrap()).unwrap();
        assert!(engine.stop_tokens().contains(&id), "{arch}: EOS id {id} of the list");
    }
    drop(engine);

    let (mut refused, mut wrong) = (0, Vec::new());
    for variant in report["variants"].as_array().unwrap() {
        let name = variant["name"].as_str().unwrap();
        let dir = Path::new(variant["dir"].as_str().unwrap());
        match (logits(dir, &report["input_ids"]), variant.get("logits")) {
            (Ok(ours), Some(theirs)) => {
                let diff = max_abs_diff(&ours, theirs);
                eprintln!(
                    "{arch} / {name}: read; max |hone - transformers| = {diff:e} (the change moves transformers' logits by {})",
                    variant["moved"]
                );
                if diff > TOLERANCE {
                    wrong.push(format!("{name}: hone loads it but differs from transformers by {diff}"));
                }
            }
            (Ok(_), None) => wrong.push(format!(
                "{name}: transformers refuses it ({}) and hone loads it",
                variant["transformers_refuses"]
            )),
            (Err(e), _) => {
                let message = e.to_string();
                let key = variant["key"].as_str().expect("the unaltered checkpoint must load");
                let named = key.rsplit('.').next().unwrap();
                eprintln!("{arch} / {name}: refused: {message}");
                if !message.contains(named) {
                    wrong.push(format!("{name}: the refusal must name `{named}`: {message}"));
                }
                refused += 1;
            }
        }
    }
    assert!(wrong.is_empty(), "{arch}:\n{}", wrong.join("\n"));
    assert!(refused > 0, "{arch}: some variant should be one the engine cannot run");
}

#[test]
fn a_llama_checkpoint_saved_by_transformers_loads_and_each_forward_key_is_read_or_refused() {
    every_key_is_read_or_refused("llama");
}

#[test]
fn a_qwen2_checkpoint_saved_by_transformers_loads_and_each_forward_key_is_read_or_refused() {
    every_key_is_read_or_refused("qwen2");
}
