//! The trainer's mechanics on a tiny model: gradient coverage, the dropout
//! path against finite differences, exact resume, PEFT export read back by
//! the engine, replay and EWC, the baseline mode.

use crate::support::tiny;
use candle_core::{DType, Device, Tensor};
use hone_engine::{Adapter, Arch, KvCache, Model};
use hone_train::data::{GrpoGroup, GrpoSample, SftExample};
use hone_train::loss::sft::sft_loss;
use hone_train::optim::{OptimConfig, Schedule};
use hone_train::policy::{self, Dropout, Packed, Sequence};
use hone_train::{Data, LoraParams, LoraSpec, TrainConfig, Trainer};

fn sequences() -> Vec<Sequence> {
    vec![
        Sequence::prompt_completion(&[1, 7, 9, 33, 4], &[50, 51, 52, 53]),
        Sequence::prompt_completion(&[2, 8], &[60, 61, 62, 63, 64, 65, 66]),
        Sequence::prompt_completion(&[3, 5, 7, 11, 13, 17, 19], &[70, 71]),
    ]
}

fn sft_data() -> Data {
    Data::Sft(
        sequences()
            .into_iter()
            .enumerate()
            .map(|(line, sequence)| SftExample { line, sequence })
            .collect(),
    )
}

fn config(steps: usize) -> TrainConfig {
    TrainConfig {
        lora: LoraSpec {
            rank: 4,
            alpha: 8.0,
            dropout: 0.1,
            ..LoraSpec::default()
        },
        optim: OptimConfig {
            lr: 1e-2,
            weight_decay: 0.01,
            warmup_steps: 1,
            schedule: Schedule::Cosine,
            ..OptimConfig::default()
        },
        batch_size: 2,
        accumulation: 2,
        steps: Some(steps),
        seed: 7,
        ..TrainConfig::default()
    }
}

fn loss_of(model: &Model, lora: &LoraParams, packed: &Packed, seed: u64) -> f64 {
    let mut dropout = Dropout::new(0.1, seed);
    let (lps, _) = policy::forward(model, lora, packed, Some(&mut dropout)).unwrap();
    let per_seq: Vec<&[f32]> = packed.ranges.iter().map(|r| &lps[r.clone()]).collect();
    sft_loss(&per_seq).loss
}

#[test]
fn every_lora_tensor_gets_a_gradient_and_dropout_backward_matches_finite_differences() {
    let (_dir, path) = tiny(Arch::Llama);
    let model = Model::load(&path, DType::F32, &Device::Cpu).unwrap();
    let mut lora = LoraParams::init(&model, &config(1).lora, 3).unwrap();
    // PEFT's init has B = 0, so only B gets a gradient at first; give B
    // values as one optimiser step would.
    let bs: Vec<Tensor> = lora
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i % 2 == 1 {
                t.randn_like(0.0, 0.05).unwrap()
            } else {
                (*t).clone()
            }
        })
        .collect();
    lora.set_tensors(bs).unwrap();
    let seqs = sequences();
    let refs: Vec<&Sequence> = seqs.iter().collect();
    let packed = Packed::new(&model, &refs).unwrap();
    let mut dropout = Dropout::new(0.1, 11);
    let (lps, saved) = policy::forward(&model, &lora, &packed, Some(&mut dropout)).unwrap();
    let per_seq: Vec<&[f32]> = packed.ranges.iter().map(|r| &lps[r.clone()]).collect();
    let out = sft_loss(&per_seq);
    let grads = policy::backward(&model, &lora, &packed, saved, &out.grads.concat()).unwrap();
    assert_eq!(grads.0.len(), 2 * 2 * 7, "2 layers × 7 projections × (A, B)");
    for (i, g) in grads.0.iter().enumerate() {
        let norm = g.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(norm > 0.0, "LoRA tensor {i} got no gradient");
    }
    // Directional derivative along the gradient: (L(θ+εd) − L(θ−εd)) / 2ε ≈ ‖g‖,
    // with the same dropout masks on both sides.
    let norm = grads.norm().unwrap();
    let eps = 1e-2;
    let shifted = |sign: f64| {
        let mut moved = lora.clone();
        let tensors = lora
            .tensors()
            .iter()
            .zip(&grads.0)
            .map(|(p, g)| (*p + (g * (sign * eps / norm)).unwrap()).unwrap())
            .collect();
        moved.set_tensors(tensors).unwrap();
        loss_of(&model, &moved, &packed, 11)
    };
    let numeric = (shifted(1.0) - shifted(-1.0)) / (2.0 * eps);
    assert!(
        (numeric - norm).abs() < 0.02 * norm,
        "finite difference {numeric} vs analytic {norm}"
    );
}

/// A batch whose sequences share a prompt runs it once: the log-probabilities
/// and every LoRA gradient equal those of the same batch packed whole (which
/// `reference.rs` checks against PyTorch), also where a sequence scores
/// tokens inside the shared part or ends one token after it.
#[test]
fn a_shared_prompt_runs_once_with_the_logprobs_and_gradients_of_whole_sequences() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let model = Model::load(&path, DType::F32, &Device::Cpu).unwrap();
    let mut lora = LoraParams::init(&model, &config(1).lora, 5).unwrap();
    let moved: Vec<Tensor> = lora
        .tensors()
        .iter()
        .map(|t| t.randn_like(0.0, 0.05).unwrap())
        .collect();
    lora.set_tensors(moved).unwrap();
    let prompt: Vec<u32> = (0..12).map(|i| 20 + 3 * i).collect();
    let with = |own: &[u32], completion: &[u32]| {
        let mut tokens = prompt.clone();
        tokens.extend_from_slice(own);
        Sequence::prompt_completion(&tokens, completion)
    };
    let mut scored_inside = Sequence::prompt_completion(&prompt[..8], &prompt[8..]);
    scored_inside.tokens.extend([90, 91]);
    scored_inside.scored.extend([true, true]);
    let seqs = [
        with(&[5, 6, 7], &[50, 51, 52, 53]),
        with(&[], &[60]),
        with(&[8], &[70, 71, 72, 73, 74, 75, 76]),
        scored_inside,
    ];
    let refs: Vec<&Sequence> = seqs.iter().collect();
    let shared = Packed::new(&model, &refs).unwrap();
    let whole = Packed::unshared(&model, &refs).unwrap();
    assert_eq!((shared.shared, whole.shared), (12, 0));
    assert_eq!(shared.rows(), whole.rows() - 3 * 12);
    assert_eq!(shared.token_count, whole.token_count);

    let run = |packed: &Packed| {
        let (lps, saved) = policy::forward(&model, &lora, packed, None).unwrap();
        let per_seq: Vec<&[f32]> = packed.ranges.iter().map(|r| &lps[r.clone()]).collect();
        let out = sft_loss(&per_seq);
        let grads = policy::backward(&model, &lora, packed, saved, &out.grads.concat()).unwrap();
        (lps, grads)
    };
    let (lps_shared, grads_shared) = run(&shared);
    let (lps_whole, grads_whole) = run(&whole);
    assert_eq!(lps_shared.len(), lps_whole.len());
    for (i, (a, b)) in lps_shared.iter().zip(&lps_whole).enumerate() {
        assert!((a - b).abs() < 1e-5, "logprob {i}: shared {a} vs whole {b}");
    }
    for (i, (a, b)) in grads_shared.0.iter().zip(&grads_whole.0).enumerate() {
        let diff = (a - b)
            .unwrap()
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .sqrt();
        let norm = b.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap().sqrt();
        assert!(norm > 0.0, "LoRA tensor {i} got no gradient");
        assert!(
            diff <= 1e-4 * norm + 1e-7,
            "LoRA tensor {i}: ‖shared − whole‖ {diff} of ‖whole‖ {norm}"
        );
    }
}

#[test]
fn a_resumed_run_takes_exactly_the_same_steps() {
    let (dir, path) = tiny(Arch::Qwen2);
    let straight = dir.path().join("straight");
    let mut a = Trainer::new(&path, &Device::Cpu, config(4), sft_data(), vec![], None).unwrap();
    let mut losses_a = Vec::new();
    a.run(&straight, &mut |r| losses_a.push(r.loss)).unwrap();

    let split = dir.path().join("split");
    let mut b = Trainer::new(&path, &Device::Cpu, config(4), sft_data(), vec![], None).unwrap();
    let mut losses_b = vec![b.train_step().unwrap().loss, b.train_step().unwrap().loss];
    let checkpoint = b.save_checkpoint(&split).unwrap();
    drop(b);
    let mut c = Trainer::new(&path, &Device::Cpu, config(4), sft_data(), vec![], None).unwrap();
    c.resume(&checkpoint).unwrap();
    assert_eq!(c.step(), 2);
    c.run(&split, &mut |r| losses_b.push(r.loss)).unwrap();
    assert_eq!(losses_a, losses_b, "per-step losses differ after resuming");
    for (x, y) in a.lora.tensors().iter().zip(c.lora.tensors()) {
        let diff = (*x - y)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_eq!(diff, 0.0, "parameters differ after resuming");
    }
    // Losses went down on this tiny set.
    assert!(losses_a[3] < losses_a[0], "{losses_a:?}");
}

#[test]
fn the_exported_adapter_runs_in_the_engine_as_it_trained() {
    let (dir, path) = tiny(Arch::Qwen2);
    let out = dir.path().join("out");
    let mut config = config(3);
    config.lora.dropout = 0.0;
    let mut trainer = Trainer::new(&path, &Device::Cpu, config, sft_data(), vec![], None).unwrap();
    trainer.run(&out, &mut |_| {}).unwrap();
    // The engine loads the PEFT files; its inference forward gives the
    // logprobs the training forward gives.
    let model = Model::load(&path, DType::F32, &Device::Cpu).unwrap();
    let adapter = Adapter::load(&out, DType::F32, &Device::Cpu).unwrap();
    model.check_adapter(&adapter).unwrap();
    let seq = &sequences()[0];
    let input = Tensor::new(seq.tokens.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let logits = model
        .forward(&input, &mut KvCache::new(), Some(&adapter))
        .unwrap()
        .squeeze(0)
        .unwrap();
    let packed = Packed::new(&model, &[seq]).unwrap();
    let trained = policy::logprobs(&model, Some(&trainer.lora), &packed).unwrap();
    let mut k = 0;
    for t in 1..seq.tokens.len() {
        if !seq.scored[t] {
            continue;
        }
        let row = hone_engine::model::log_softmax_row(&logits.get(t - 1).unwrap()).unwrap();
        let engine = row[seq.tokens[t] as usize];
        assert!(
            (engine - trained[k]).abs() < 1e-4,
            "token {t}: engine {engine} vs trainer {}",
            trained[k]
        );
        k += 1;
    }
    let base = policy::logprobs(&model, None, &packed).unwrap();
    let moved = base
        .iter()
        .zip(&trained)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(moved > 1e-3, "training did not change the model ({moved})");
    // The checkpoint directory is also a loadable adapter, with its optimiser state.
    let latest = hone_train::checkpoint::latest(&out).unwrap();
    assert!(latest.join("optimizer.safetensors").is_file());
    Adapter::load(&latest, DType::F32, &Device::Cpu).unwrap();
}

#[test]
fn replay_and_ewc_hold_the_adapter_closer_to_where_it_started() {
    let (dir, path) = tiny(Arch::Llama);
    let replay: Vec<SftExample> = vec![SftExample {
        line: 1,
        sequence: Sequence::prompt_completion(&[9, 9, 9], &[100, 101, 102]),
    }];
    // The Fisher-weighted drift Σ F·(θ − θ₀)² after six steps, read off the
    // reported EWC penalty λ/2·Σ F·(θ − θ₀)².
    let drift = |ewc: f64, out: &str| {
        let mut config = config(6);
        config.lora.dropout = 0.0;
        config.optim.lr = 5e-2;
        config.replay_per_batch = 1;
        config.ewc_lambda = ewc;
        let mut trainer = Trainer::new(&path, &Device::Cpu, config, sft_data(), replay.clone(), None).unwrap();
        let mut reports = Vec::new();
        trainer
            .run(&dir.path().join(out), &mut |r| reports.push(r.clone()))
            .unwrap();
        assert!(reports.iter().all(|r| r.extra["replay_nll"] > 0.0));
        reports.last().unwrap().extra["ewc"] / (0.5 * ewc)
    };
    let free = drift(1e-9, "free");
    let anchored = drift(1e3, "anchored");
    assert!(free > 0.0);
    assert!(
        anchored < 0.5 * free,
        "EWC should at least halve the drift: {anchored} vs {free}"
    );
}

#[test]
fn single_samples_train_against_a_running_baseline() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let group = |line: usize, reward: f64| GrpoGroup {
        line,
        agent: "support".into(),
        samples: vec![GrpoSample {
            sequence: Sequence::prompt_completion(&[1, 2, 3], &[40 + line as u32, 41]),
            reward,
            behaviour: None,
            episode: None,
            off_policy: false,
        }],
    };
    let data = Data::Grpo(vec![group(1, 1.0), group(2, 0.0), group(3, 1.0), group(4, 0.0)]);
    let mut config = config(4);
    config.batch_size = 1;
    config.accumulation = 1;
    let mut trainer = Trainer::new(&path, &Device::Cpu, config, data, vec![], None).unwrap();
    let mut reports = Vec::new();
    trainer
        .run(&tempfile::tempdir().unwrap().path().join("o"), &mut |r| {
            reports.push(r.clone())
        })
        .unwrap();
    // The first episode starts the baseline (advantage 0, no gradient);
    // later ones move away from it and produce gradients.
    assert_eq!(reports[0].grad_norm, 0.0);
    assert!(reports[1..].iter().any(|r| r.grad_norm > 0.0));
    assert!(reports.iter().all(|r| r.reward.is_some()));
}

/// Production samples from an older version: with `off_policy` the clip acts
/// against the starting policy (ratio 1 on the first step) and each token is
/// weighted by the truncated importance weight to the recorded behaviour;
/// without it the ratio to that behaviour is far from 1 at once and every
/// token is clipped.
#[test]
fn off_policy_samples_are_corrected_against_the_starting_policy() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let model = Model::load(&path, DType::F32, &Device::Cpu).unwrap();
    let sequences = [
        Sequence::prompt_completion(&[1, 2, 3], &[40, 41, 42]),
        Sequence::prompt_completion(&[1, 2, 3], &[50, 51]),
    ];
    let packed = Packed::new(&model, &sequences.iter().collect::<Vec<_>>()).unwrap();
    let current = policy::logprobs(&model, None, &packed).unwrap();
    // The older version found these tokens e^1.5 times less likely.
    let behaviour: Vec<Vec<f32>> = packed
        .ranges
        .iter()
        .map(|r| current[r.clone()].iter().map(|l| l - 1.5).collect())
        .collect();
    // The group, its samples in order or reversed.
    let data = |off_policy: bool, reversed: bool| {
        let mut samples: Vec<GrpoSample> = sequences
            .iter()
            .zip(&behaviour)
            .zip([1.0, 0.0])
            .map(|((sequence, b), reward)| GrpoSample {
                sequence: sequence.clone(),
                reward,
                behaviour: Some(b.clone()),
                episode: None,
                off_policy,
            })
            .collect();
        if reversed {
            samples.reverse();
        }
        Data::Grpo(vec![GrpoGroup {
            line: 1,
            agent: "support".into(),
            samples,
        }])
    };
    let trainer_on = |data: Data| {
        let mut config = config(2);
        config.lora.dropout = 0.0;
        Trainer::new(&path, &Device::Cpu, config, data, vec![], None).unwrap()
    };
    let first_step = |off_policy: bool| trainer_on(data(off_policy, false)).train_step().unwrap();
    let corrected = first_step(true);
    let extra = |k: &str| corrected.extra.get(k).copied().unwrap_or(f64::NAN);
    assert!((extra("ratio") - 1.0).abs() < 1e-3, "{:?}", corrected.extra);
    assert_eq!(extra("clip_fraction"), 0.0, "{:?}", corrected.extra);
    assert!(
        (extra("is_weight") - 2.0).abs() < 1e-9,
        "truncated at the cap: {:?}",
        corrected.extra
    );
    assert_eq!(extra("is_truncated"), 1.0, "{:?}", corrected.extra);
    assert!(corrected.grad_norm > 0.0);

    let naive = first_step(false);
    assert!((naive.extra["ratio"] - 1.5f64.exp()).abs() < 1e-2, "{:?}", naive.extra);
    assert_eq!(naive.extra["clip_fraction"], 1.0, "{:?}", naive.extra);
    assert!(!naive.extra.contains_key("is_weight"));

    // Online use: data replaced between steps gets proximal logprobs of its
    // own. A trainer begun on the same samples in the other order (other
    // lengths at the same places) corrects the new ones against the
    // policy as it is when they arrive: ratio 1 again, nothing clipped.
    let mut trainer = trainer_on(data(true, true));
    trainer.replace_data(data(true, false)).unwrap();
    let replaced = trainer.train_step().unwrap();
    assert!((replaced.extra["ratio"] - 1.0).abs() < 1e-3, "{:?}", replaced.extra);
    assert_eq!(replaced.extra["clip_fraction"], 0.0, "{:?}", replaced.extra);
}

/// A batch cut into parts, each run forward and backward on a thread of its
/// own, trains as the whole batch does: the same losses, tokens, GRPO
/// statistics and adapter after three steps (up to the order of float
/// sums), for groups whose samples share a prompt and for SFT.
#[test]
fn a_batch_in_parts_on_threads_trains_as_the_whole_batch() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let grpo = Data::Grpo(
        (0..3)
            .map(|line| GrpoGroup {
                line,
                agent: "support".into(),
                samples: (0..4)
                    .map(|j| GrpoSample {
                        sequence: Sequence::prompt_completion(
                            &[1, 2, 3 + line as u32],
                            &(0..2 + j).map(|k| 40 + (7 * j + k + line) as u32).collect::<Vec<_>>(),
                        ),
                        reward: ((j + line) % 3) as f64 / 2.0,
                        behaviour: None,
                        episode: None,
                        off_policy: false,
                    })
                    .collect(),
            })
            .collect(),
    );
    for data in [grpo, sft_data()] {
        let run = |parts: usize| {
            let mut config = config(3);
            config.lora.dropout = 0.0;
            config.batch_size = 3;
            config.accumulation = 1;
            let mut trainer = Trainer::new(&path, &Device::Cpu, config, data.clone(), vec![], None).unwrap();
            trainer.set_parts(parts);
            let reports: Vec<_> = (0..3).map(|_| trainer.train_step().unwrap()).collect();
            let weights: Vec<Vec<f32>> = trainer
                .lora
                .tensors()
                .iter()
                .map(|t| t.flatten_all().unwrap().to_vec1().unwrap())
                .collect();
            (reports, weights)
        };
        let (whole, whole_weights) = run(1);
        assert!(whole.iter().any(|r| r.grad_norm > 0.0));
        for parts in [2, 3, 5] {
            let (split, weights) = run(parts);
            for (a, b) in whole.iter().zip(&split) {
                assert_eq!(a.tokens, b.tokens);
                assert!(
                    (a.loss - b.loss).abs() < 1e-5,
                    "{parts} parts: {} vs {}",
                    a.loss,
                    b.loss
                );
                assert!((a.grad_norm - b.grad_norm).abs() < 1e-4 * a.grad_norm.max(1e-3));
                assert_eq!(a.extra.keys().collect::<Vec<_>>(), b.extra.keys().collect::<Vec<_>>());
                for (k, v) in &a.extra {
                    assert!(
                        (v - b.extra[k]).abs() < 1e-5,
                        "{parts} parts, {k}: {v} vs {}",
                        b.extra[k]
                    );
                }
            }
            for (a, b) in whole_weights.iter().zip(&weights) {
                let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                // Adam divides by the gradient's own scale, so float-order noise in
                // a near-zero gradient moves a weight by up to ~1e-5 of the ~1e-2 steps.
                assert!(worst < 1e-4, "{parts} parts: adapter off by {worst}");
            }
        }
    }
}
