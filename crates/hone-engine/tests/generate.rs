//! Sampling: the same seed gives the same tokens, and the logprob reported
//! for each sampled token equals the log-softmax of a teacher-forced forward
//! over prompt + completion (RL importance ratios depend on it).

use candle_core::{DType, Device, Tensor};
use hone_engine::{generate, generate_n, Adapter, Arch, Finish, KvCache, Model, Sampling};
use std::sync::Arc;

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
        top_logprobs: 0,
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
    assert_eq!(out.finish, Finish::Length);

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
    assert_eq!(stopped.finish, Finish::Stop);
    assert_eq!(stopped.tokens, out.tokens[..=first_stop].to_vec());
}

fn reference_adapter(arch: &str) -> Arc<Adapter> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/reference/adapters")
        .join(arch);
    Arc::new(Adapter::load(&dir, DType::F32, &Device::Cpu).unwrap())
}

fn prefill(model: &Model, prompt: &[u32], adapter: Option<&Adapter>) -> KvCache {
    let mut cache = KvCache::new();
    let input = Tensor::new(prompt, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
    model.forward(&input, &mut cache, adapter).unwrap();
    cache
}

#[test]
fn a_batched_decode_step_equals_each_row_alone_with_mixed_lengths_and_adapters() {
    // The reference adapter fits every tiny llama checkpoint.
    let (_dir, mut model) = tiny(Arch::Llama);
    let adapter = reference_adapter("llama");
    let prompts: [&[u32]; 3] = [&[1, 2, 3, 4, 5, 6, 7], &[9, 8], &[40, 41, 42, 43]];
    let adapters = [Some(adapter.as_ref()), Some(adapter.as_ref()), None];
    let next = [11u32, 12, 13];

    let mut alone = Vec::new();
    for ((prompt, adapter), token) in prompts.iter().zip(adapters).zip(next) {
        let mut cache = prefill(&model, prompt, adapter);
        let input = Tensor::new(&[token], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        alone.push(
            model
                .forward_last(&input, &mut cache, adapter)
                .unwrap()
                .squeeze(0)
                .unwrap(),
        );
    }

    // Stacked (padded and masked) attention, then each row attending alone.
    for stack_limit in [usize::MAX, 0] {
        model.set_stack_limit(stack_limit);
        let mut caches: Vec<KvCache> = prompts
            .iter()
            .zip(adapters)
            .map(|(p, a)| prefill(&model, p, a))
            .collect();
        let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
        let runs = [(2, Some(adapter.as_ref())), (1, None)];
        let batched = model.decode(&next, &mut refs, &runs).unwrap();
        for (r, expected) in alone.iter().enumerate() {
            let row = batched.get(r).unwrap();
            let diff: f32 = (row - expected)
                .unwrap()
                .abs()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar()
                .unwrap();
            assert!(
                diff < 1e-5,
                "row {r} (stack limit {stack_limit}): batched differs from alone by {diff}"
            );
        }
        assert_eq!(caches.iter().map(KvCache::len).collect::<Vec<_>>(), vec![8, 3, 5]);
    }
    let mut caches: Vec<KvCache> = prompts
        .iter()
        .zip(adapters)
        .map(|(p, a)| prefill(&model, p, a))
        .collect();
    let mismatched = model.decode(&next, &mut caches.iter_mut().collect::<Vec<_>>(), &[(2, None)]);
    assert!(mismatched.is_err(), "runs that do not cover the batch are refused");
}

#[test]
fn n_samples_share_the_prompt_and_each_equals_its_own_seeded_run() {
    let (_dir, model) = tiny(Arch::Qwen2);
    let prompt: Vec<u32> = b"<|im_start|>user\nwrite".iter().map(|b| *b as u32).collect();
    let sampling = Sampling {
        temperature: 1.0,
        seed: 5,
        max_tokens: 10,
        top_logprobs: 3,
        ..Sampling::default()
    };
    let samples = generate_n(&model, &prompt, None, &sampling, 4).unwrap();
    assert_eq!(samples.len(), 4);
    for (i, sample) in samples.iter().enumerate() {
        let alone = generate(
            &model,
            &prompt,
            None,
            &Sampling {
                seed: 5 + i as u64,
                ..sampling.clone()
            },
        )
        .unwrap();
        assert_eq!(sample.tokens, alone.tokens, "sample {i}");
        for (a, b) in sample.logprobs.iter().zip(&alone.logprobs) {
            assert!((a - b).abs() < 1e-5, "sample {i}: {a} vs {b}");
        }
        assert_eq!(sample.top_logprobs.len(), sample.tokens.len());
        for (top, (token, logprob)) in sample
            .top_logprobs
            .iter()
            .zip(sample.tokens.iter().zip(&sample.logprobs))
        {
            assert_eq!(top.len(), 3);
            assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "sorted, most likely first");
            assert!(*logprob <= top[0].1 + 1e-6);
            if let Some((_, l)) = top.iter().find(|(t, _)| t == token) {
                assert!((l - logprob).abs() < 1e-6);
            }
        }
    }
    let distinct: std::collections::HashSet<_> = samples.iter().map(|s| s.tokens.clone()).collect();
    assert!(distinct.len() > 1, "samples with different seeds should differ");
}

#[test]
fn bf16_and_f16_follow_f32_and_generate() {
    let dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(Arch::Qwen2, hone_engine::init::Preset::Tiny, 4, dir.path()).unwrap();
    let prompt: Vec<u32> = b"<|im_start|>user\nhalf precision".iter().map(|b| *b as u32).collect();
    let input = Tensor::new(prompt.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let full = Model::load(dir.path(), DType::F32, &Device::Cpu).unwrap();
    let reference = full.forward(&input, &mut KvCache::new(), None).unwrap();
    let scale: f32 = reference.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
    for (dtype, tolerance) in [(DType::BF16, 0.05), (DType::F16, 0.01)] {
        let model = Model::load(dir.path(), dtype, &Device::Cpu).unwrap();
        let logits = model
            .forward(&input, &mut KvCache::new(), None)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let diff: f32 = (logits - &reference)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        eprintln!("{dtype:?}: max |logit - f32| = {diff} (logits up to {scale})");
        assert!(diff <= tolerance * scale.max(1.0), "{dtype:?} drifts by {diff}");
        let out = generate(
            &model,
            &prompt,
            None,
            &Sampling {
                max_tokens: 4,
                ..Sampling::default()
            },
        )
        .unwrap();
        assert_eq!(out.tokens.len(), 4);
        assert!(out.logprobs.iter().all(|l| l.is_finite() && *l <= 0.0));
    }
}

#[test]
fn decoding_in_parts_on_threads_samples_what_one_batch_samples() {
    // Rows of different prompts, seeds and adapters (the reference adapter
    // fits every tiny llama checkpoint), sampled at temperature 1 so a
    // changed logit would show as a changed token.
    let (_dir, model) = tiny(Arch::Llama);
    let adapter = reference_adapter("llama");
    let prompts: [&[u32]; 5] = [&[1, 2, 3, 4, 5, 6, 7], &[9, 8], &[40, 41, 42, 43], &[5; 11], &[70, 3]];
    let start = || -> Vec<hone_engine::Sequence> {
        prompts
            .iter()
            .enumerate()
            .flat_map(|(i, prompt)| {
                let sampling = Arc::new(Sampling {
                    temperature: 1.0,
                    seed: 100 + i as u64,
                    max_tokens: 12,
                    ..Sampling::default()
                });
                let adapter = (i % 2 == 0).then(|| adapter.clone());
                hone_engine::generate::start(&model, prompt, KvCache::new(), adapter, None, sampling, 1 + i % 2)
                    .unwrap()
            })
            .collect()
    };
    let decode = |parts: usize| -> Vec<hone_engine::Generation> {
        let mut sequences = start();
        for _ in 0..11 {
            let mut refs: Vec<&mut hone_engine::Sequence> = sequences.iter_mut().collect();
            hone_engine::generate::step_in_parts(&model, &mut refs, parts).unwrap();
        }
        sequences
            .into_iter()
            .map(hone_engine::Sequence::into_generation)
            .collect()
    };
    let whole = decode(1);
    assert_eq!(whole.len(), 7, "five prompts, two of them with two samples");
    assert!(whole.iter().all(|g| g.tokens.len() == 12));
    // Two and three parts of at least two rows; eight asks for more parts
    // than the rows allow and gets three.
    for parts in [2, 3, 8] {
        let cut = decode(parts);
        for (row, (a, b)) in whole.iter().zip(&cut).enumerate() {
            assert_eq!(a.tokens, b.tokens, "row {row}, {parts} parts");
            for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
                assert!((x - y).abs() < 1e-5, "row {row}, {parts} parts: {x} vs {y}");
            }
        }
    }
}
