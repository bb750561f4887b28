//! The engine against Hugging Face transformers and PEFT: the tiny
//! checkpoints are regenerated here from the same seed, and their logits
//! (with and without the PEFT adapter that `make_reference.py` saved), the
//! chat template's rendering and the token ids must match the committed
//! values.

use candle_core::{DType, Device, Tensor};
use hone_engine::{Adapter, Arch, KvCache, Model, Tokenizer};
use std::path::{Path, PathBuf};

const TOLERANCE: f32 = 1e-4;

fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/reference")
}

struct Case {
    reference: serde_json::Value,
    model_dir: tempfile::TempDir,
}

fn case(arch: &str) -> Case {
    let text = std::fs::read_to_string(reference_dir().join(format!("{arch}.json"))).unwrap();
    let reference: serde_json::Value = serde_json::from_str(&text).unwrap();
    let model_dir = tempfile::tempdir().unwrap();
    let seed = reference["seed"].as_u64().unwrap();
    hone_engine::init::write_checkpoint(
        Arch::parse(arch).unwrap(),
        hone_engine::init::Preset::Tiny,
        seed,
        model_dir.path(),
    )
    .unwrap();
    Case { reference, model_dir }
}

fn floats(value: &serde_json::Value) -> Vec<f32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect()
}

fn input(reference: &serde_json::Value) -> Tensor {
    let rows: Vec<Vec<u32>> = serde_json::from_value(reference["input_ids"].clone()).unwrap();
    let (b, t) = (rows.len(), rows[0].len());
    Tensor::from_vec(rows.concat(), (b, t), &Device::Cpu).unwrap()
}

/// The largest elementwise |a − b| of two tensors.
fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap()
}

fn max_abs_diff(ours: &Tensor, theirs: &[f32]) -> f32 {
    let ours: Vec<f32> = ours.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(ours.len(), theirs.len());
    ours.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}

fn logits_match(arch: &str) {
    let case = case(arch);
    let model = Model::load(case.model_dir.path(), DType::F32, &Device::Cpu).unwrap();
    let tokens = input(&case.reference);
    let logits = model.forward(&tokens, &mut KvCache::new(), None).unwrap();
    let expected_shape: Vec<usize> = serde_json::from_value(case.reference["logits_shape"].clone()).unwrap();
    assert_eq!(logits.dims(), expected_shape.as_slice());
    let base = max_abs_diff(&logits, &floats(&case.reference["logits"]));
    eprintln!("{arch}: max |ours - transformers| = {base:e}");
    assert!(base <= TOLERANCE, "{arch}: logits differ from transformers by {base}");

    let adapter = Adapter::load(&reference_dir().join("adapters").join(arch), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(adapter.config.scale(), 2.0, "the reference adapter has alpha = 2r");
    let adapted = model.forward(&tokens, &mut KvCache::new(), Some(&adapter)).unwrap();
    let lora = max_abs_diff(&adapted, &floats(&case.reference["lora_logits"]));
    let moved = max_abs_diff(&adapted, &floats(&case.reference["logits"]));
    eprintln!("{arch}: with the PEFT adapter, max |ours - peft| = {lora:e} (the adapter moves logits by {moved})");
    assert!(
        moved > 100.0 * TOLERANCE,
        "the adapter must change the output for this test to mean anything"
    );
    assert!(lora <= TOLERANCE, "{arch}: LoRA logits differ from PEFT by {lora}");
}

#[test]
fn qwen2_logits_match_transformers_and_peft() {
    logits_match("qwen2");
}

#[test]
fn llama_logits_match_transformers_and_peft() {
    logits_match("llama");
}

#[test]
fn chat_template_and_token_ids_match_transformers() {
    for arch in ["qwen2", "llama"] {
        let case = case(arch);
        let tokenizer = Tokenizer::load(case.model_dir.path()).unwrap();
        let chat = &case.reference["chat"];
        let text = tokenizer
            .template
            .render(&chat["messages"], Some(&chat["tools"]), true)
            .unwrap();
        assert_eq!(text, chat["text"].as_str().unwrap(), "{arch}: rendered chat differs");
        let plain = tokenizer.template.render(&chat["plain_messages"], None, true).unwrap();
        assert_eq!(plain, chat["plain_text"].as_str().unwrap());
        let ids: Vec<u32> = serde_json::from_value(chat["ids"].clone()).unwrap();
        assert_eq!(tokenizer.encode(&text).unwrap(), ids, "{arch}: token ids differ");
        assert_eq!(tokenizer.decode(&ids).unwrap(), text);
        let first: Vec<u32> = serde_json::from_value(case.reference["input_ids"][0].clone()).unwrap();
        assert_eq!(
            tokenizer.encode(case.reference["text"].as_str().unwrap()).unwrap(),
            first
        );
    }
}

#[test]
fn incremental_decoding_with_the_cache_equals_one_full_forward() {
    let case = case("qwen2");
    let model = Model::load(case.model_dir.path(), DType::F32, &Device::Cpu).unwrap();
    let tokens = input(&case.reference);
    let full = model.forward(&tokens, &mut KvCache::new(), None).unwrap();
    let t = tokens.dim(1).unwrap();
    let mut cache = KvCache::new();
    let prefix = model
        .forward(&tokens.narrow(1, 0, 5).unwrap(), &mut cache, None)
        .unwrap();
    let mut steps = vec![prefix];
    for i in 5..t {
        steps.push(
            model
                .forward(&tokens.narrow(1, i, 1).unwrap(), &mut cache, None)
                .unwrap(),
        );
    }
    let stepped = Tensor::cat(&steps, 1).unwrap();
    let diff = max_diff(&stepped, &full);
    assert!(diff <= 1e-5, "cached decoding drifts from the full forward by {diff}");
}

#[test]
fn a_zero_b_gives_exactly_the_base_output_and_merging_agrees() {
    let case = case("llama");
    let dir = case.model_dir.path();
    let mut model = Model::load(dir, DType::F32, &Device::Cpu).unwrap();
    let tokens = input(&case.reference);
    let base = model.forward(&tokens, &mut KvCache::new(), None).unwrap();
    let adapter = Adapter::load(&reference_dir().join("adapters/llama"), DType::F32, &Device::Cpu).unwrap();

    let mut zero = adapter.clone();
    for lora in zero.layers.values_mut() {
        lora.b = lora.b.zeros_like().unwrap();
    }
    let with_zero = model.forward(&tokens, &mut KvCache::new(), Some(&zero)).unwrap();
    let exact: Vec<f32> = (with_zero - &base)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert!(
        exact.iter().all(|d| *d == 0.0),
        "B = 0 must give the base output bit for bit"
    );

    let unmerged = model.forward(&tokens, &mut KvCache::new(), Some(&adapter)).unwrap();
    model.merge(&adapter).unwrap();
    let merged = model.forward(&tokens, &mut KvCache::new(), None).unwrap();
    let diff = max_diff(&merged, &unmerged);
    assert!(diff <= 1e-4, "merged and unmerged LoRA differ by {diff}");
}
