//! Sampling: the same seed gives the same tokens, and the logprob reported
//! for each sampled token equals the log-softmax of a teacher-forced forward
//! over prompt + completion (RL importance ratios depend on it).

use candle_core::{DType, Device, Tensor};
use hone_engine::{generate, Arch, KvCache, Model, Sampling};

fn tiny(arch: Arch) -> (tempfile::TempDir, Model) {
    let dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(arch, hone_engine::init::Preset::Tiny, 7, dir.path()).unwrap();
    let model = Model::load(dir.path(), DType::F32, &Device::Cpu).unwrap();
    (dir, model)
}

#[test]
fn same_seed_same_tokens_and_logprobs_equal_a_teacher_forced_forward() {
    let (_dir, model) = tiny(Arch::Qwen2);
    let prompt: Vec<u32> = b"<|im_start|>user\nhi".iter().map(|b| *b as u32).collect();
    let sampling = Sampling {
        temperature: 0.9,
        top_p: 0.95,
        top_k: 50,
        seed: 42,
        max_tokens: 12,
        stop_tokens: vec![],
    };
    let first = generate(&model, &prompt, None, &sampling).unwrap();
    let again = generate(&model, &prompt, None, &sampling).unwrap();
    assert_eq!(first, again, "the same seed must give the same output");
    assert_eq!(first.tokens.len(), 12);
    let other = generate(
        &model,
        &prompt,
        None,
        &Sampling {
            seed: 43,
            ..sampling.clone()
        },
    )
    .unwrap();
    assert_ne!(first.tokens, other.tokens, "a different seed should sample differently");

    let all: Vec<u32> = prompt.iter().chain(&first.tokens).copied().collect();
    let input = Tensor::new(all.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    let logits = model
        .forward(&input, &mut KvCache::new(), None)
        .unwrap()
        .squeeze(0)
        .unwrap();
    for (k, (token, reported)) in first.tokens.iter().zip(&first.logprobs).enumerate() {
        let position = prompt.len() - 1 + k;
        let row = hone_engine::model::log_softmax_row(&logits.get(position).unwrap()).unwrap();
        let forced = row[*token as usize];
        assert!(
            (forced - reported).abs() <= 1e-5,
            "token {k}: sampled logprob {reported} vs teacher-forced {forced}"
        );
    }
}

#[test]
fn greedy_decoding_takes_the_argmax_and_stops_on_a_stop_token() {
    let (_dir, model) = tiny(Arch::Llama);
    let prompt = vec![72u32, 105];
    let greedy = Sampling {
        temperature: 0.0,
        max_tokens: 5,
        ..Sampling::default()
    };
    let out = generate(&model, &prompt, None, &greedy).unwrap();
    let input = Tensor::new(prompt.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let logits = model.forward_last(&input, &mut KvCache::new(), None).unwrap();
    let argmax: u32 = logits.squeeze(0).unwrap().argmax(0).unwrap().to_scalar().unwrap();
    assert_eq!(out.tokens[0], argmax);
    assert!(!out.stopped);

    let stop_at = out.tokens[2];
    let stopped = generate(
        &model,
        &prompt,
        None,
        &Sampling {
            stop_tokens: vec![stop_at],
            ..greedy
        },
    )
    .unwrap();
    let first_stop = out.tokens.iter().position(|t| *t == stop_at).unwrap();
    assert!(stopped.stopped);
    assert_eq!(stopped.tokens, out.tokens[..=first_stop].to_vec());
}
