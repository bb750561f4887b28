//! Losses and LoRA gradients against PyTorch autograd through transformers +
//! PEFT on the same tiny weights (`tests/reference/make_train_reference.py`),
//! and GRPO's off-policy correction against numpy
//! (`tests/reference/grpo_off_policy.py`).

use crate::support::{repo_root, tiny};
use candle_core::{DType, Device, Tensor};
use hone_engine::{Arch, Model};
use hone_train::loss::dpo::{dpo_loss, DpoPair};
use hone_train::loss::grpo::{group_advantages, grpo_loss, Aggregation, GrpoOptions, GrpoSequence};
use hone_train::loss::sft::sft_loss;
use hone_train::loss::LossOutput;
use hone_train::policy::{self, Packed, Sequence};
use hone_train::LoraParams;
use serde_json::Value;
use std::collections::HashMap;

struct Case {
    model: Model,
    lora: LoraParams,
    batch: Value,
    sequences: Vec<Sequence>,
    grads: HashMap<String, Tensor>,
    _dir: tempfile::TempDir,
}

fn case(arch: Arch, name: &str) -> Case {
    let (dir, path) = tiny(arch);
    let model = Model::load(&path, DType::F32, &Device::Cpu).unwrap();
    let reference = repo_root().join("tests/reference/train").join(name);
    let lora = LoraParams::load(&model, &reference.join("adapter")).unwrap();
    let batch: Value = serde_json::from_str(&std::fs::read_to_string(reference.join("batch.json")).unwrap()).unwrap();
    let sequences = batch["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Sequence {
            tokens: serde_json::from_value(s["tokens"].clone()).unwrap(),
            scored: serde_json::from_value(s["scored"].clone()).unwrap(),
        })
        .collect();
    let grads = candle_core::safetensors::load(reference.join("grads.safetensors"), &Device::Cpu).unwrap();
    Case {
        model,
        lora,
        batch,
        sequences,
        grads,
        _dir: dir,
    }
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Runs forward → `loss` → backward and compares the loss and every LoRA
/// gradient with PyTorch's.
fn check(case: &Case, key: &str, loss: impl FnOnce(&[&[f32]]) -> LossOutput) {
    let seqs: Vec<&Sequence> = case.sequences.iter().collect();
    let packed = Packed::new(&case.model, &seqs).unwrap();
    let (flat, saved) = policy::forward(&case.model, &case.lora, &packed, None).unwrap();
    let per_seq: Vec<&[f32]> = packed.ranges.iter().map(|r| &flat[r.clone()]).collect();
    let out = loss(&per_seq);
    let expected = case.batch["losses"][key].as_f64().unwrap();
    assert!(
        (out.loss - expected).abs() <= 1e-5 * expected.abs().max(1.0),
        "{key}: loss {} vs torch {expected}",
        out.loss
    );
    let grads = policy::backward(&case.model, &case.lora, &packed, saved, &out.grads.concat()).unwrap();
    let named: Vec<String> = case
        .lora
        .pairs
        .iter()
        .flat_map(|p| ['A', 'B'].map(|w| hone_engine::lora::peft_name(p.layer, p.module, w)))
        .collect();
    assert_eq!(named.len(), grads.0.len());
    let mut worst = 0.0f32;
    for (name, ours) in named.iter().zip(&grads.0) {
        let theirs = &case.grads[&format!("{key}/{name}")];
        let scale = theirs.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(
            scale > 0.0,
            "{key}/{name}: torch's gradient is zero, the test would prove nothing"
        );
        let err = (ours - theirs)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        worst = worst.max(err / scale);
        assert!(
            err <= 2e-4 * scale + 1e-7,
            "{key}/{name}: max error {err} (max |g| {scale})"
        );
    }
    println!(
        "{key}: loss {:.6} (torch {expected:.6}), worst relative gradient error {worst:.2e}",
        out.loss
    );
}

fn all_losses(arch: Arch, name: &str) {
    let case = case(arch, name);
    check(&case, "sft", sft_loss);

    // The LoRA-off forward gives the reference logprobs torch computed.
    let seqs: Vec<&Sequence> = case.sequences.iter().collect();
    let packed = Packed::new(&case.model, &seqs).unwrap();
    let base = policy::logprobs(&case.model, None, &packed).unwrap();
    let reference: Vec<Vec<f32>> = packed.ranges.iter().map(|r| base[r.clone()].to_vec()).collect();
    for (ours, theirs) in reference.iter().zip(case.batch["reference"].as_array().unwrap()) {
        for (a, b) in ours.iter().zip(floats(theirs)) {
            assert!((a - b).abs() < 1e-4, "reference logprob {a} vs torch {b}");
        }
    }

    let rewards: Vec<f64> = serde_json::from_value(case.batch["rewards"].clone()).unwrap();
    let behaviour: Vec<Vec<f32>> = case.batch["behaviour"].as_array().unwrap().iter().map(floats).collect();
    for (aggregation, key) in [
        (Aggregation::Token, "grpo_token"),
        (Aggregation::Sequence, "grpo_sequence"),
        (Aggregation::DrGrpo, "grpo_dr_grpo"),
    ] {
        let options = GrpoOptions {
            aggregation,
            epsilon_low: case.batch["grpo"]["epsilon_low"].as_f64().unwrap(),
            epsilon_high: case.batch["grpo"]["epsilon_high"].as_f64().unwrap(),
            kl_beta: case.batch["grpo"]["kl_beta"].as_f64().unwrap(),
            ..GrpoOptions::default()
        };
        let advantages = group_advantages(&rewards, &options).unwrap();
        for (a, b) in advantages.iter().zip(floats(&case.batch["advantages"])) {
            assert!((a - b as f64).abs() < 1e-5, "advantage {a} vs torch {b}");
        }
        check(&case, key, |lps| {
            let inputs: Vec<GrpoSequence> = (0..lps.len())
                .map(|i| GrpoSequence {
                    advantage: advantages[i],
                    logprobs: lps[i],
                    behaviour: Some(&behaviour[i]),
                    proximal: None,
                    reference: Some(&reference[i]),
                })
                .collect();
            let (out, stats) = grpo_loss(&inputs, &options);
            assert!(stats.clip_fraction > 0.0, "the batch should exercise clipping");
            out
        });
    }

    let beta = case.batch["dpo_beta"].as_f64().unwrap();
    check(&case, "dpo", |lps| {
        let pairs: Vec<DpoPair> = [(0, 1), (2, 3)]
            .iter()
            .map(|&(c, r)| DpoPair {
                chosen: lps[c],
                rejected: lps[r],
                ref_chosen: &reference[c],
                ref_rejected: &reference[r],
            })
            .collect();
        dpo_loss(&pairs, beta).0
    });
}

#[test]
fn qwen2_losses_and_gradients_match_pytorch() {
    all_losses(Arch::Qwen2, "qwen2");
}

#[test]
fn llama_losses_and_gradients_match_pytorch() {
    all_losses(Arch::Llama, "llama");
}

/// An adapter `hone train sft` exported, loaded by `PeftModel.from_pretrained`
/// (the script), gives the logits the engine gives with it.
fn exported_adapter_matches_peft(arch: Arch, name: &str) {
    let (_dir, path) = tiny(arch);
    let model = Model::load(&path, DType::F32, &Device::Cpu).unwrap();
    let reference = repo_root().join("tests/reference/train").join(name);
    let adapter = hone_engine::Adapter::load(&reference.join("exported"), DType::F32, &Device::Cpu).unwrap();
    let batch: Value = serde_json::from_str(&std::fs::read_to_string(reference.join("batch.json")).unwrap()).unwrap();
    let ids: Vec<u32> = serde_json::from_value(batch["exported_ids"].clone()).unwrap();
    let input = Tensor::new(ids.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let ours: Vec<f32> = model
        .forward(&input, &mut hone_engine::KvCache::new(), Some(&adapter))
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let base: Vec<f32> = model
        .forward(&input, &mut hone_engine::KvCache::new(), None)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let theirs = floats(&batch["exported_logits"]);
    assert_eq!(ours.len(), theirs.len());
    let err = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    let moved = ours
        .iter()
        .zip(&base)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("{name}: exported adapter, max |engine − PEFT| = {err:.2e}, max |adapter − base| = {moved:.2e}");
    assert!(err < 1e-4, "engine and PEFT disagree on hone's exported adapter: {err}");
    assert!(
        moved > 100.0 * err,
        "the exported adapter barely changes the logits ({moved})"
    );
}

#[test]
fn exported_adapters_load_in_peft_with_the_same_logits() {
    exported_adapter_matches_peft(Arch::Qwen2, "qwen2");
    exported_adapter_matches_peft(Arch::Llama, "llama");
}

/// Decoupled clip against the proximal policy and truncated importance
/// weights, loss and per-token gradient, against numpy's finite differences.
#[test]
fn grpo_off_policy_correction_matches_numpy() {
    let path = repo_root().join("tests/reference/grpo_off_policy.json");
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let floats = |v: &Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    let seqs = reference["sequences"].as_array().unwrap();
    let column = |key: &str| -> Vec<Option<Vec<f32>>> {
        seqs.iter()
            .map(|s| (!s[key].is_null()).then(|| floats(&s[key])))
            .collect()
    };
    let (lps, prox, behaviour, refs) = (
        column("logprobs"),
        column("proximal"),
        column("behaviour"),
        column("reference"),
    );
    let advantages: Vec<f64> = serde_json::from_value(reference["advantages"].clone()).unwrap();
    let o = &reference["options"];
    for (aggregation, key) in [(Aggregation::Token, "token"), (Aggregation::Sequence, "sequence")] {
        let options = GrpoOptions {
            aggregation,
            epsilon_low: o["epsilon_low"].as_f64().unwrap(),
            epsilon_high: o["epsilon_high"].as_f64().unwrap(),
            is_cap: o["is_cap"].as_f64().unwrap(),
            kl_beta: o["kl_beta"].as_f64().unwrap(),
            ..GrpoOptions::default()
        };
        let inputs: Vec<GrpoSequence> = (0..seqs.len())
            .map(|i| GrpoSequence {
                advantage: advantages[i],
                logprobs: lps[i].as_deref().unwrap(),
                behaviour: behaviour[i].as_deref(),
                proximal: prox[i].as_deref(),
                reference: refs[i].as_deref(),
            })
            .collect();
        let (out, stats) = grpo_loss(&inputs, &options);
        let want = &reference["cases"][key];
        let close = |a: f64, b: f64| (a - b).abs() < 2e-5 * (1.0 + b.abs());
        assert!(
            close(out.loss, want["loss"].as_f64().unwrap()),
            "{key}: loss {} vs {}",
            out.loss,
            want["loss"]
        );
        assert!(
            close(stats.mean_is_weight, want["mean_is_weight"].as_f64().unwrap()),
            "{key}: {stats:?}"
        );
        assert!(
            close(stats.truncated_fraction, want["truncated_fraction"].as_f64().unwrap()),
            "{key}: {stats:?}"
        );
        assert!(stats.truncated_fraction > 0.0, "the batch should exercise truncation");
        for (i, (got, want)) in out.grads.iter().zip(want["grads"].as_array().unwrap()).enumerate() {
            for (t, (g, w)) in got.iter().zip(floats(want)).enumerate() {
                assert!(
                    close(f64::from(*g), f64::from(w)),
                    "{key}: grad [{i}][{t}] {g} vs numpy {w}"
                );
            }
        }
    }
}
