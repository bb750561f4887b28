//! Full-weight training: the hand-written gradients of every weight against
//! candle's autograd through the engine's own forward (an independent
//! computation) and against central finite differences of the same loss,
//! and a random tiny model that learns a task no LoRA on it could, on
//! held-out prompts; the saved checkpoint loads in the engine and gives the
//! same loss.

use crate::support::tiny;
use candle_core::{DType, Device, Tensor, Var};
use hone_engine::model::{KvCache, Model};
use hone_engine::weights::Weights;
use hone_engine::Arch;
use hone_train::full::FullTrainer;
use hone_train::optim::OptimConfig;
use hone_train::Sequence;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// A prompt of random letters (bytes 97..=122) and the same letters again:
/// learnable only by attending back (an induction-style copy).
fn copy_task(rng: &mut rand::rngs::StdRng, n: usize) -> Sequence {
    let letters: Vec<u32> = (0..n).map(|_| rng.random_range(97..=122)).collect();
    let mut prompt = vec![256];
    prompt.extend(&letters);
    prompt.push(u32::from(b'='));
    Sequence::prompt_completion(&prompt, &letters)
}

/// Sequences of random letters that share a prompt of `prompt` letters,
/// each answering with its own of `answers` lengths.
fn shared_prompt_batch(seed: u64, prompt: usize, answers: &[usize]) -> Vec<Sequence> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let prompt: Vec<u32> = (0..prompt).map(|_| rng.random_range(97..=122)).collect();
    answers
        .iter()
        .map(|&n| {
            let answer: Vec<u32> = (0..n).map(|_| rng.random_range(97..=122)).collect();
            Sequence::prompt_completion(&prompt, &answer)
        })
        .collect()
}

/// The mean negative log-likelihood of `batch`'s scored tokens through
/// the engine's forward (each sequence on its own, no packing), with every
/// weight a candle variable, and its autograd gradient by weight name.
fn autograd_gradients(trainer: &FullTrainer, batch: &[&Sequence]) -> (f64, HashMap<String, Tensor>) {
    let device = Device::Cpu;
    let vars: Vec<(String, Var)> = trainer
        .names()
        .iter()
        .map(|n| (n.to_string(), Var::from_tensor(trainer.weight(n).unwrap()).unwrap()))
        .collect();
    let tensors = vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect();
    let model_dir = tempfile::tempdir().unwrap();
    let model = Model::from_weights(
        trainer.model().unwrap().config.clone(),
        Weights::from_tensors(tensors, model_dir.path()),
        DType::F32,
        &device,
    )
    .unwrap();
    let count: usize = batch.iter().map(|s| s.scored_count()).sum();
    let mut total = Tensor::zeros((), DType::F32, &device).unwrap();
    for s in batch {
        let tokens = Tensor::new(s.tokens.as_slice(), &device).unwrap().unsqueeze(0).unwrap();
        let hidden = model.hidden(&tokens, &mut KvCache::differentiable(), None).unwrap();
        let logits = model.logits(&hidden).unwrap().squeeze(0).unwrap();
        let max = logits.max_keepdim(1).unwrap().detach();
        let shifted = logits.broadcast_sub(&max).unwrap();
        let log_z = shifted.exp().unwrap().sum_keepdim(1).unwrap().log().unwrap();
        let log_probs = shifted.broadcast_sub(&log_z).unwrap();
        for i in 1..s.tokens.len() {
            if s.scored[i] {
                let lp = log_probs.get(i - 1).unwrap().get(s.tokens[i] as usize).unwrap();
                total = (total - lp).unwrap();
            }
        }
    }
    let mean = (total / count as f64).unwrap();
    let store = mean.backward().unwrap();
    let grads = vars
        .iter()
        .map(|(n, v)| (n.clone(), store.get(v.as_tensor()).unwrap().detach()))
        .collect();
    (f64::from(mean.to_scalar::<f32>().unwrap()), grads)
}

/// The written backward gives every weight's gradient as candle's autograd
/// does through the engine's forward: embeddings (tied to the LM head in
/// Qwen2's tiny preset, separate in Llama's), norms, projections and the
/// Qwen2 query/key/value biases, for a batch that shares a prompt.
#[test]
fn written_gradients_of_every_weight_match_autograd() {
    for arch in [Arch::Qwen2, Arch::Llama] {
        let (_dir, path) = tiny(arch);
        let trainer = FullTrainer::load(&path, &Device::Cpu, OptimConfig::default()).unwrap();
        let batch = shared_prompt_batch(6, 9, &[3, 6, 1, 4]);
        let refs: Vec<&Sequence> = batch.iter().collect();
        let (loss, grads, _) = trainer.gradients(&refs).unwrap();
        let (reference_loss, reference) = autograd_gradients(&trainer, &refs);
        assert!(
            (loss - reference_loss).abs() < 1e-5,
            "{arch:?}: loss {loss} vs {reference_loss}"
        );
        assert_eq!(trainer.names().len(), reference.len());
        for (name, ours) in trainer.names().iter().zip(&grads.0) {
            let theirs: Vec<f32> = reference[*name].flatten_all().unwrap().to_vec1().unwrap();
            let ours: Vec<f32> = ours.flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(ours.len(), theirs.len(), "{name}");
            let scale = theirs.iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!(scale > 0.0, "{arch:?} {name}: autograd gives no gradient");
            let worst = ours.iter().zip(&theirs).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                worst <= 1e-4 * scale,
                "{arch:?} {name}: off by {worst} (largest {scale})"
            );
        }
    }
}

#[test]
fn full_weight_gradients_match_finite_differences() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let mut trainer = FullTrainer::load(&path, &candle_core::Device::Cpu, OptimConfig::default()).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let batch = [copy_task(&mut rng, 5), copy_task(&mut rng, 7)];
    let refs: Vec<&Sequence> = batch.iter().collect();
    let (loss, grads, tokens) = trainer.gradients(&refs).unwrap();
    assert_eq!(tokens, 12);
    assert!((loss - trainer.loss(&refs).unwrap()).abs() < 1e-6);
    let names: Vec<String> = trainer.names().iter().map(|s| s.to_string()).collect();
    let mut checked = 0;
    for wanted in [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight",
        "model.norm.weight",
    ] {
        let i = names.iter().position(|n| n == wanted).unwrap();
        let original = trainer.weight(wanted).unwrap().copy().unwrap();
        let flat: Vec<f32> = original.flatten_all().unwrap().to_vec1().unwrap();
        let grad: Vec<f32> = grads.0[i].flatten_all().unwrap().to_vec1().unwrap();
        // The three entries with the largest gradient (a central difference of
        // an f32 loss is only accurate where the slope is not tiny).
        let mut order: Vec<usize> = (0..grad.len()).collect();
        order.sort_by(|a, b| grad[*b].abs().total_cmp(&grad[*a].abs()));
        for &j in order.iter().take(3) {
            let eps = 1e-2f32;
            let mut probe = |delta: f32| {
                let mut values = flat.clone();
                values[j] += delta;
                let t = candle_core::Tensor::from_vec(values, original.shape(), original.device()).unwrap();
                trainer.set_weight(wanted, &t).unwrap();
                trainer.loss(&refs).unwrap()
            };
            let numeric = (probe(eps) - probe(-eps)) / (2.0 * f64::from(eps));
            trainer.set_weight(wanted, &original).unwrap();
            let analytic = f64::from(grad[j]);
            assert!(
                (numeric - analytic).abs() <= 0.03 * analytic.abs() + 1e-4,
                "{wanted}[{j}]: written {analytic:.6} vs finite difference {numeric:.6}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 15);
}

/// A batch's gradient computed in parts, each on a thread of its own, is
/// the whole batch's: the same loss, token count and gradient (up to the
/// order of float sums), also when the parts share a prompt and have
/// different numbers of scored tokens.
#[test]
fn a_gradient_in_parts_on_threads_is_the_whole_batchs() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let mut trainer = FullTrainer::load(&path, &candle_core::Device::Cpu, OptimConfig::default()).unwrap();
    let batch = shared_prompt_batch(4, 10, &[2, 7, 3, 5, 1]);
    let refs: Vec<&Sequence> = batch.iter().collect();
    let (whole_loss, whole, whole_tokens) = trainer.gradients(&refs).unwrap();
    let flat = |g: &candle_core::Tensor| g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for parts in [2, 3, 5, 8] {
        trainer.set_parts(parts);
        let (loss, grads, tokens) = trainer.gradients(&refs).unwrap();
        assert_eq!(tokens, whole_tokens);
        assert!(
            (loss - whole_loss).abs() < 1e-5,
            "{parts} parts: loss {loss} vs {whole_loss}"
        );
        for ((name, a), b) in trainer.names().iter().zip(&whole.0).zip(&grads.0) {
            let (a, b) = (flat(a), flat(b));
            let scale = a.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
            let worst = a.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(
                worst <= 1e-4 * scale,
                "{parts} parts, {name}: off by {worst} (largest {scale})"
            );
        }
    }
}

/// Training keeps values, never graphs: the gradients of a batch that
/// shares its prompt, and the optimiser's moments and updates even when a
/// gradient carries the graph that made it (as candle's autograd's
/// products with a variable do). A moment that kept its graph held every
/// earlier step's alive: the demo's base build grew to 18 GB before this
/// held, when the full-weight trainer still ran on autograd.
#[test]
fn gradients_and_the_optimiser_state_hold_no_graph() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let trainer = FullTrainer::load(&path, &candle_core::Device::Cpu, OptimConfig::default()).unwrap();
    let batch = shared_prompt_batch(9, 12, &[2, 5, 3]);
    let refs: Vec<&Sequence> = batch.iter().collect();
    let (_, grads, _) = trainer.gradients(&refs).unwrap();
    for (name, g) in trainer.names().iter().zip(&grads.0) {
        assert!(!g.track_op(), "the gradient of {name} carries a graph");
    }

    // A gradient that does carry one, as candle's can.
    let device = candle_core::Device::Cpu;
    let weight = candle_core::Var::new(&[0.5f32, -1.0, 2.0], &device).unwrap();
    let graph_carrying = (weight.as_tensor() * 3.0).unwrap();
    assert!(graph_carrying.track_op());
    let mut adam = hone_train::optim::AdamW::new(OptimConfig::default(), &[weight.as_tensor()]).unwrap();
    let updated = adam
        .step(&[weight.as_tensor()], &hone_train::Grads(vec![graph_carrying]), 1e-2)
        .unwrap();
    assert!(!adam.m[0].track_op() && !adam.v[0].track_op(), "a moment keeps a graph");
    assert!(!updated[0].track_op(), "the update keeps a graph");
}

/// The loss of a batch whose sequences share a long prompt (run once, then
/// continued per sequence) equals the mean loss computed from each
/// sequence's own full forward, and its gradient matches finite differences.
#[test]
fn a_shared_prompt_runs_once_and_gives_the_same_loss_as_full_forwards() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let mut trainer = FullTrainer::load(&path, &candle_core::Device::Cpu, OptimConfig::default()).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let prompt: Vec<u32> = (0..40).map(|_| rng.random_range(97..=122)).collect();
    let batch: Vec<Sequence> = [3usize, 6, 4]
        .iter()
        .map(|&n| {
            let mut own = prompt.clone();
            own.extend((0..n).map(|_| rng.random_range(97..=122u32)));
            let answer: Vec<u32> = (0..n).map(|_| rng.random_range(97..=122)).collect();
            Sequence::prompt_completion(&own, &answer)
        })
        .collect();
    let refs: Vec<&Sequence> = batch.iter().collect();
    // Reference: every sequence through its own full forward, log-softmax by hand.
    let model = trainer.model().unwrap();
    let (mut sum, mut count) = (0.0f64, 0usize);
    for s in &batch {
        let tokens = candle_core::Tensor::new(s.tokens.as_slice(), &candle_core::Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits: Vec<Vec<f32>> = model
            .forward(&tokens, &mut hone_engine::model::KvCache::new(), None)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec2()
            .unwrap();
        for i in 1..s.tokens.len() {
            if s.scored[i] {
                let row = &logits[i - 1];
                let max = row.iter().cloned().fold(f32::MIN, f32::max) as f64;
                let z: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln() + max;
                sum += z - row[s.tokens[i] as usize] as f64;
                count += 1;
            }
        }
    }
    let shared = trainer.loss(&refs).unwrap();
    assert!(
        (shared - sum / count as f64).abs() < 1e-5,
        "shared-prompt loss {shared} vs full forwards {}",
        sum / count as f64
    );
    // The gradient reaches the shared positions: an embedding row only the
    // prompt uses moves the loss as the written backward says.
    let (_, grads, _) = trainer.gradients(&refs).unwrap();
    let names = trainer.names();
    let embed = names.iter().position(|n| *n == "model.embed_tokens.weight").unwrap();
    let original = trainer.weight("model.embed_tokens.weight").unwrap().copy().unwrap();
    let (vocab, hidden) = original.dims2().unwrap();
    let grad: Vec<f32> = grads.0[embed].flatten_all().unwrap().to_vec1().unwrap();
    let row = prompt[0] as usize;
    let j = (0..hidden)
        .max_by(|a, b| grad[row * hidden + a].abs().total_cmp(&grad[row * hidden + b].abs()))
        .unwrap();
    let flat: Vec<f32> = original.flatten_all().unwrap().to_vec1().unwrap();
    let mut probe = |delta: f32| {
        let mut values = flat.clone();
        values[row * hidden + j] += delta;
        let t = candle_core::Tensor::from_vec(values, (vocab, hidden), original.device()).unwrap();
        trainer.set_weight("model.embed_tokens.weight", &t).unwrap();
        trainer.loss(&refs).unwrap()
    };
    let numeric = (probe(1e-2) - probe(-1e-2)) / 2e-2;
    let analytic = f64::from(grad[row * hidden + j]);
    assert!(analytic.abs() > 1e-5, "no gradient reached the shared prompt");
    assert!(
        (numeric - analytic).abs() <= 0.03 * analytic.abs() + 1e-4,
        "written {analytic:.6} vs finite difference {numeric:.6}"
    );
}

#[test]
fn a_random_tiny_model_learns_to_copy_on_held_out_prompts_and_the_saved_checkpoint_loads() {
    let (dir, path) = tiny(Arch::Qwen2);
    let optim = OptimConfig {
        lr: 3e-3,
        warmup_steps: 10,
        ..OptimConfig::default()
    };
    let mut trainer = FullTrainer::load(&path, &candle_core::Device::Cpu, optim.clone()).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let held_out: Vec<Sequence> = (0..16).map(|_| copy_task(&mut rng, 6)).collect();
    let held: Vec<&Sequence> = held_out.iter().collect();
    let before = trainer.loss(&held).unwrap();
    let steps = 150;
    for step in 0..steps {
        let batch: Vec<Sequence> = (0..8).map(|_| copy_task(&mut rng, 6)).collect();
        let refs: Vec<&Sequence> = batch.iter().collect();
        trainer.step(&refs, optim.lr_at(step, steps)).unwrap();
    }
    let after = trainer.loss(&held).unwrap();
    println!("copy task, held-out loss per token: {before:.3} → {after:.3} after {steps} steps");
    // ln(26) = 3.26 nats is guessing the letters; copying them is far below.
    assert!(before > 5.0, "{before}");
    assert!(after < 1.5, "{after}");

    let out = dir.path().join("trained");
    trainer.save(&out).unwrap();
    let reloaded = FullTrainer::load(&out, &candle_core::Device::Cpu, optim).unwrap();
    let again = reloaded.loss(&held).unwrap();
    assert!((again - after).abs() < 1e-4, "{again} vs {after}");
    hone_engine::model::Model::load(&out, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
}

/// A tied checkpoint may still store a copy of the LM head (the engine
/// takes it and uses the embedding): the trainer trains the embedding and
/// leaves the copy out rather than asking for a gradient it has no use for.
#[test]
fn a_tied_checkpoints_stored_head_copy_is_not_a_weight_of_its_own() {
    let (_dir, path) = tiny(Arch::Qwen2);
    let file = path.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let embedding = tensors[hone_engine::names::EMBEDDING].clone();
    tensors.insert(hone_engine::names::LM_HEAD.to_owned(), embedding);
    candle_core::safetensors::save(&tensors, &file).unwrap();
    let mut trainer = FullTrainer::load(&path, &Device::Cpu, OptimConfig::default()).unwrap();
    assert!(!trainer.names().contains(&hone_engine::names::LM_HEAD));
    assert!(trainer.names().contains(&hone_engine::names::EMBEDDING));
    let batch = shared_prompt_batch(2, 6, &[3, 4]);
    let refs: Vec<&Sequence> = batch.iter().collect();
    let step = trainer.step(&refs, 1e-3).unwrap();
    assert!(step.loss.is_finite() && step.grad_norm > 0.0, "{step:?}");
}
