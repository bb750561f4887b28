//! `hone bench train`: one GRPO training step (forward, loss, LoRA-only
//! backward, clipping, AdamW) of hone-train next to TRL's `GRPOTrainer`
//! (`python/train_trl.py`, run with `--python`) on the same device, the same
//! random checkpoint, the same pre-generated group and the same settings;
//! plus achieved GFLOP/s against each library's measured f32 matmul peak
//! (torch's on a square product; candle's measured in the same run with the
//! memory bandwidth, [`crate::roofline`]). `--runs N` repeats both
//! sides' measurement side by side ([`crate::side_by_side`]) and prints the
//! median step with its range, the ratio of each run's pair with theirs.
//! Prints a table with the ratios; not a test.

use crate::roofline::{Limits, Product};
use crate::side_by_side::{side_by_side, Side, SideBySide};
use crate::support::{random_checkpoint, run_json, Spread};
use anyhow::{Context, Result};
use candle_core::{DType, Device};
use hone_engine::ModelConfig;
use hone_train::data::{GrpoGroup, GrpoSample};
use hone_train::loss::grpo::{group_advantages, GrpoOptions};
use hone_train::optim::{OptimConfig, Schedule};
use hone_train::{Data, LoraSpec, Sequence, TrainConfig, Trainer};
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

const TRL_SCRIPT: &str = include_str!("../python/train_trl.py");

pub struct Options {
    pub presets: Vec<String>,
    pub group: usize,
    pub prompt: usize,
    pub completion: usize,
    pub rank: usize,
    pub reps: usize,
    pub device: String,
    pub python: Option<String>,
    /// Where to write the result file (the command, commit, date,
    /// machine and every table), if anywhere.
    pub out: Option<std::path::PathBuf>,
    /// Times each side's step is measured (a fresh trainer each time).
    pub runs: usize,
}

struct Row {
    preset: String,
    /// hone's median step of each run (seconds) and TRL's result of each;
    /// the machine's limits, the peak the best of the square product and
    /// this model's projections at the step's rows.
    steps: SideBySide<f64, Trl>,
    flops: f64,
    tokens: usize,
}

#[derive(serde::Deserialize)]
struct Trl {
    step_seconds: f64,
    matmul_gflops: f64,
    threads: usize,
    trl: String,
    torch: String,
}

pub fn run(options: Options) -> Result<ExitCode> {
    let device = hone_engine::device::by_name(&options.device)?;
    let mut out = crate::report::Report::new(options.out.clone());
    let runs = options.runs.max(1);
    writeln!(
        out,
        "hone bench train — GRPO step, f32, {} ({} threads), 1 group of {} × ({} prompt + {} completion tokens), \
         LoRA r={} on q,k,v,o,gate,up,down, median of {} steps, {} run(s)",
        hone_engine::device::label(&device),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        options.group,
        options.prompt,
        options.completion,
        options.rank,
        options.reps,
        runs
    )?;
    let mut rows = Vec::new();
    for name in &options.presets {
        let dir = random_checkpoint(name)?;
        let config = ModelConfig::from_file(&dir.path().join("config.json"))?;
        let batch = Batch::random(&options, config.vocab_size as u32);
        let tokens = options.group * (options.prompt + options.completion);
        let products = Product::projections(&config, &[tokens]);
        let hone_side = format!("[{name}] hone-train (candle)");
        let their_side = format!("[{name}] TRL GRPOTrainer");
        let steps = side_by_side(
            runs,
            || Limits::measure(&device, DType::F32, &products),
            Side::new(&hone_side, || hone_step(dir.path(), &device, &options, &batch)),
            options
                .python
                .as_deref()
                .map(|python| Side::new(&their_side, || trl_step(python, dir.path(), &options, &batch))),
        )?;
        rows.push(Row {
            preset: name.clone(),
            steps,
            flops: step_flops(&config, &options),
            tokens,
        });
    }
    writeln!(out)?;
    for r in &rows {
        writeln!(
            out,
            "[{}] machine limits, same run: {}",
            r.preset,
            r.steps.limits.describe(&device, DType::F32, &[r.tokens], runs)
        )?;
    }
    for (preset, t) in rows
        .iter()
        .filter_map(|r| r.steps.theirs.first().map(|t| (&r.preset, t)))
    {
        writeln!(
            out,
            "                        torch {:.1} GFLOP/s (measured with the {preset} run; torch {}, trl {}, {} threads)",
            t.matmul_gflops, t.torch, t.trl, t.threads
        )?;
    }
    writeln!(
        out,
        "\n| model | hone step ms | hone range | TRL step ms | TRL range | hone speed / TRL | ratio range | roofline ms (candle peak) | hone tok/s | TRL tok/s | hone GFLOP/s (% of candle peak) | TRL GFLOP/s (% of torch peak) |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for r in &rows {
        let peak = r.steps.limits.matmul_gflops;
        let hone = milliseconds(r.steps.ours.iter().copied());
        let hone_seconds = hone.median / 1e3;
        let gflops = r.flops / hone_seconds / 1e9;
        let speed = r.steps.ratios(|ours, trl| trl.step_seconds / ours);
        let (trl_ms, trl_tps, trl_gflops) = match (r.steps.theirs.first(), speed) {
            (Some(first), Some(speed)) => {
                let trl = milliseconds(r.steps.theirs.iter().map(|t| t.step_seconds));
                let trl_seconds = trl.median / 1e3;
                (
                    format!(
                        "{:.1} | {} | {} | {}",
                        trl.median,
                        trl.range(),
                        speed.times(),
                        speed.times_range()
                    ),
                    format!("{:.0}", r.tokens as f64 / trl_seconds),
                    format!(
                        "{:.1} ({:.0}%)",
                        r.flops / trl_seconds / 1e9,
                        100.0 * r.flops / trl_seconds / 1e9 / first.matmul_gflops
                    ),
                )
            }
            _ => ("— | — | — | —".into(), "—".into(), "—".into()),
        };
        writeln!(
            out,
            "| {} | {:.1} | {} | {trl_ms} | {:.1} | {:.0} | {trl_tps} | {gflops:.1} ({:.0}%) | {trl_gflops} |",
            r.preset,
            hone.median,
            hone.range(),
            r.flops / (peak * 1e9) * 1e3,
            r.tokens as f64 / hone_seconds,
            100.0 * gflops / peak
        )?;
    }
    if rows.iter().any(|r| !r.steps.theirs.is_empty()) {
        writeln!(
            out,
            "\nhone speed / TRL: the median over the runs of each run's ratio (the two measured back to back within it), with the least and most."
        )?;
    }
    if options.python.is_none() {
        writeln!(
            out,
            "\n(TRL column skipped: pass --python PATH to a Python with torch, transformers, peft, trl and datasets)"
        )?;
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// Seconds over the runs as milliseconds.
fn milliseconds(seconds: impl Iterator<Item = f64>) -> Spread {
    Spread::of(seconds.map(|s| s * 1e3))
}

/// One pre-generated group: random prompt and completion tokens, rewards.
struct Batch {
    prompts: Vec<Vec<u32>>,
    completions: Vec<Vec<u32>>,
    rewards: Vec<f64>,
}

impl Batch {
    fn random(options: &Options, vocab: u32) -> Self {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        let prompt: Vec<u32> = (0..options.prompt).map(|_| rng.random_range(0..vocab)).collect();
        Self {
            prompts: vec![prompt; options.group],
            completions: (0..options.group)
                .map(|_| (0..options.completion).map(|_| rng.random_range(0..vocab)).collect())
                .collect(),
            rewards: (0..options.group).map(|i| (i % 3) as f64 / 2.0).collect(),
        }
    }
}

fn grpo_options() -> GrpoOptions {
    GrpoOptions {
        kl_beta: 0.0,
        ..GrpoOptions::default()
    }
}

fn hone_step(model: &Path, device: &Device, options: &Options, batch: &Batch) -> Result<f64> {
    let samples = batch
        .prompts
        .iter()
        .zip(&batch.completions)
        .zip(&batch.rewards)
        .map(|((p, c), r)| GrpoSample {
            sequence: Sequence::prompt_completion(p, c),
            reward: *r,
            behaviour: None,
            episode: None,
            off_policy: false,
        })
        .collect();
    let data = Data::Grpo(vec![GrpoGroup {
        line: 1,
        agent: "bench".into(),
        samples,
    }]);
    let config = TrainConfig {
        lora: LoraSpec {
            rank: options.rank,
            alpha: 2.0 * options.rank as f64,
            dropout: 0.0,
            ..LoraSpec::default()
        },
        optim: OptimConfig {
            lr: 1e-4,
            schedule: Schedule::Constant,
            ..OptimConfig::default()
        },
        batch_size: 1,
        steps: Some(options.reps + 1),
        grpo: grpo_options(),
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(model, device, config, data, vec![], None)?;
    // Warm-up (also caches the LoRA-off logprobs the KL report uses).
    trainer.train_step()?;
    let mut times = Vec::with_capacity(options.reps);
    for _ in 0..options.reps {
        let started = Instant::now();
        trainer.train_step()?;
        times.push(started.elapsed().as_secs_f64());
    }
    Ok(median(times))
}

fn trl_step(python: &str, model: &Path, options: &Options, batch: &Batch) -> Result<Trl> {
    let input = tempfile::Builder::new().suffix(".json").tempfile()?;
    let grpo = grpo_options();
    let advantages = group_advantages(&batch.rewards, &grpo).context("the bench group has no reward variance")?;
    let json = serde_json::json!({
        "prompts": batch.prompts,
        "completions": batch.completions,
        "advantages": advantages,
        "rank": options.rank,
        "alpha": 2 * options.rank,
        "lr": 1e-4,
        "epsilon_low": grpo.epsilon_low,
        "epsilon_high": grpo.epsilon_high,
    });
    std::fs::write(input.path(), json.to_string())?;
    let args: Vec<std::ffi::OsString> = vec![
        "--model".into(),
        model.into(),
        "--batch".into(),
        input.path().into(),
        "--reps".into(),
        options.reps.to_string().into(),
        "--device".into(),
        options.device.clone().into(),
    ];
    run_json(python, TRL_SCRIPT, &args)
}

/// Floating-point operations of one step, counted the same for both: the
/// projections forward and their input gradients (no frozen-weight
/// gradients), the LoRA terms forward and backward, attention scores and
/// values forward (2 matmuls) and backward (4), and the LM head on the
/// completion positions forward and backward.
fn step_flops(c: &ModelConfig, o: &Options) -> f64 {
    let (h, i) = (c.hidden_size as f64, c.intermediate_size as f64);
    let q = (c.num_attention_heads * c.head_dim) as f64;
    let kv = (c.num_key_value_heads * c.head_dim) as f64;
    let layers = c.num_hidden_layers as f64;
    let t = (o.prompt + o.completion) as f64;
    let n = o.group as f64 * t;
    let r = o.rank as f64;
    let shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)];
    let base: f64 = shapes.iter().map(|(a, b)| a * b).sum();
    let lora: f64 = shapes.iter().map(|(a, b)| r * (a + b)).sum();
    let linear = layers * n * (4.0 * base + 6.0 * lora);
    let attention = layers * o.group as f64 * 12.0 * t * t * q;
    let head = 4.0 * o.group as f64 * o.completion as f64 * c.vocab_size as f64 * h;
    linear + attention + head
}

/// The median of timings taken (at least one).
fn median(v: Vec<f64>) -> f64 {
    hone_learn::stats::median(&v).unwrap_or(f64::NAN)
}
