//! Benchmark: one LoRA training forward + backward on a batch shaped like
//! the demo's agent calls (a long prompt every call shares — system prompt
//! and tool list — then a short task and completion of its own), with the
//! shared prompt packed once against every sequence packed whole, in the
//! same run. Prints the time of each and the ratio.
//!
//! `cargo run --release -p hone-train --example shared_prompt -- [PRESET]
//! [BATCH] [SHARED] [OWN] [REPEATS]` (defaults: mini 32 280 50 5;
//! PRESET is tiny, mini or small).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use candle_core::{DType, Device};
use hone_engine::init::{write_checkpoint, Preset};
use hone_engine::{Arch, Model};
use hone_train::loss::sft::sft_loss;
use hone_train::policy::{self, Packed, Sequence};
use hone_train::{LoraParams, LoraSpec};
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    hone_engine::threads::fix_thread_count();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().expect("a number"));
    let preset = match args.first().map_or("mini", String::as_str) {
        "tiny" => Preset::Tiny,
        "small" => Preset::Small,
        _ => Preset::Mini,
    };
    let (batch, shared, own, repeats) = (arg(1, 32), arg(2, 280), arg(3, 50), arg(4, 5));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model");
    write_checkpoint(Arch::Qwen2, preset, 0, &path).unwrap();
    let model = Model::load(&path, DType::F32, &Device::Cpu).unwrap();
    let lora = LoraParams::init(&model, &LoraSpec::default(), 1).unwrap();
    let vocab = model.config.vocab_size as u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let prompt: Vec<u32> = (0..shared).map(|_| rng.random_range(0..vocab)).collect();
    let sequences: Vec<Sequence> = (0..batch)
        .map(|_| {
            let mut tokens = prompt.clone();
            tokens.extend((0..own / 2).map(|_| rng.random_range(0..vocab)));
            let completion: Vec<u32> = (0..own - own / 2).map(|_| rng.random_range(0..vocab)).collect();
            Sequence::prompt_completion(&tokens, &completion)
        })
        .collect();
    let refs: Vec<&Sequence> = sequences.iter().collect();
    let step = |packed: &Packed| {
        let (lps, saved) = policy::forward(&model, &lora, packed, None).unwrap();
        let per_seq: Vec<&[f32]> = packed.ranges.iter().map(|r| &lps[r.clone()]).collect();
        let out = sft_loss(&per_seq);
        policy::backward(&model, &lora, packed, saved, &out.grads.concat()).unwrap();
    };
    let time = |share: bool| {
        let packed = if share {
            Packed::new(&model, &refs).unwrap()
        } else {
            Packed::unshared(&model, &refs).unwrap()
        };
        step(&packed); // warm-up
        let started = Instant::now();
        for _ in 0..repeats {
            step(&packed);
        }
        (started.elapsed().as_secs_f64() / repeats as f64, packed.rows())
    };
    let (whole, whole_rows) = time(false);
    let (once, once_rows) = time(true);
    println!(
        "{preset:?}, {batch} sequences of {shared} shared + {own} own tokens, forward + backward, mean of {repeats}:"
    );
    println!("  every sequence whole: {:.3} s ({whole_rows} rows)", whole);
    println!("  shared prompt once:   {:.3} s ({once_rows} rows)", once);
    println!("  speed-up: {:.2}×", whole / once);
}
