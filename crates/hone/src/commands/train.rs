//! `hone train grpo|dpo|sft --base DIR --data FILE.jsonl --out DIR`: LoRA
//! training on a JSONL file, with a progress line per step on stderr,
//! `OUT/metrics.jsonl`, checkpoints under `OUT/checkpoints/`, and the
//! adapter in PEFT format in `OUT`.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use hone_engine::lora::Module;
use hone_train::data::{self, Renderer};
use hone_train::loss::grpo::{Aggregation, GrpoOptions};
use hone_train::optim::{OptimConfig, Schedule};
use hone_train::{Data, LoraSpec, StepReport, TrainConfig, Trainer};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Algorithm {
    /// Group-relative policy optimisation on groups with rewards.
    Grpo,
    /// Direct preference optimisation on (prompt, chosen, rejected).
    Dpo,
    /// Supervised fine-tuning on the assistant tokens of chats.
    Sft,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ScheduleArg {
    Cosine,
    Constant,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Base model directory (Hugging Face layout: config.json, safetensors, tokenizer).
    #[arg(long)]
    pub base: PathBuf,
    /// Training data, JSONL (schemas: docs/training-data.md).
    #[arg(long)]
    pub data: PathBuf,
    /// Output directory: the PEFT adapter, metrics.jsonl, checkpoints/.
    #[arg(long)]
    pub out: PathBuf,
    /// Continue training this PEFT adapter instead of starting a new one.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// Resume from the newest checkpoint under --out.
    #[arg(long)]
    pub resume: bool,
    /// LoRA rank.
    #[arg(long, default_value_t = 16)]
    pub rank: usize,
    /// LoRA alpha (the scale is alpha / rank).
    #[arg(long, default_value_t = 32.0)]
    pub alpha: f64,
    /// LoRA dropout.
    #[arg(long, default_value_t = 0.05)]
    pub dropout: f64,
    /// Projections to adapt.
    #[arg(long, value_delimiter = ',', default_value = "q,k,v,o,gate,up,down")]
    pub targets: Vec<String>,
    /// Scale by alpha / √rank (rsLoRA).
    #[arg(long)]
    pub rslora: bool,
    /// Peak learning rate.
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f64,
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f64,
    /// Clip the global gradient norm (0: off).
    #[arg(long, default_value_t = 1.0)]
    pub max_grad_norm: f64,
    /// Linear warm-up steps.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    #[arg(long, value_enum, default_value_t = ScheduleArg::Cosine)]
    pub schedule: ScheduleArg,
    /// Groups (GRPO), pairs (DPO) or examples (SFT) per micro-batch.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Micro-batches per optimiser step.
    #[arg(long, default_value_t = 1)]
    pub accumulation: usize,
    /// Optimiser steps (default: --epochs passes over the data).
    #[arg(long)]
    pub steps: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub epochs: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Checkpoint every N steps (0: only at the end); the newest two are kept.
    #[arg(long, default_value_t = 0)]
    pub save_every: usize,
    /// GRPO: lower clip range ε_low.
    #[arg(long, default_value_t = 0.2)]
    pub epsilon_low: f64,
    /// GRPO: upper clip range ε_high (DAPO's clip-higher).
    #[arg(long, default_value_t = 0.28)]
    pub epsilon_high: f64,
    /// GRPO: weight of KL(π‖base), the base being LoRA switched off (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub kl_beta: f64,
    /// GRPO: do not divide advantages by the group's std (Dr. GRPO).
    #[arg(long)]
    pub no_std_scaling: bool,
    /// GRPO: keep groups whose rewards are all equal (they carry no signal).
    #[arg(long)]
    pub keep_zero_variance: bool,
    /// GRPO: loss aggregation — token (DAPO), sequence (GRPO), dr-grpo.
    #[arg(long, default_value = "token")]
    pub loss_aggregation: String,
    /// GRPO: step of the running per-agent baseline for single-sample groups.
    #[arg(long, default_value_t = 0.1)]
    pub baseline_rate: f64,
    /// GRPO: largest importance weight of an `"off_policy"` token
    /// (truncated importance sampling against the starting policy).
    #[arg(long, default_value_t = 2.0)]
    pub is_cap: f64,
    /// DPO: β.
    #[arg(long, default_value_t = 0.1)]
    pub beta: f64,
    /// Replay buffer: earlier successes (SFT JSONL) mixed into every micro-batch.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// Replay examples per micro-batch.
    #[arg(long, default_value_t = 1)]
    pub replay_per_batch: usize,
    /// Weight of the replay NLL.
    #[arg(long, default_value_t = 1.0)]
    pub replay_weight: f64,
    /// EWC strength (diagonal Fisher on the replay set; 0: off).
    #[arg(long, default_value_t = 0.0)]
    pub ewc: f64,
    /// Device: cpu or cuda.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

pub fn run(algorithm: Algorithm, args: TrainArgs) -> Result<ExitCode> {
    let device = hone_engine::device::by_name(&args.device)?;
    let targets = args
        .targets
        .iter()
        .map(|t| {
            let name = if t.ends_with("_proj") {
                t.clone()
            } else {
                format!("{t}_proj")
            };
            Module::parse(&name).with_context(|| format!("unknown target module `{t}` (q,k,v,o,gate,up,down)"))
        })
        .collect::<Result<Vec<_>>>()?;
    let aggregation = Aggregation::parse(&args.loss_aggregation).with_context(|| {
        format!(
            "unknown --loss-aggregation `{}` (token, sequence, dr-grpo)",
            args.loss_aggregation
        )
    })?;
    let config = TrainConfig {
        lora: LoraSpec {
            rank: args.rank,
            alpha: args.alpha,
            dropout: args.dropout,
            targets,
            rslora: args.rslora,
        },
        optim: OptimConfig {
            lr: args.lr,
            weight_decay: args.weight_decay,
            max_grad_norm: args.max_grad_norm,
            warmup_steps: args.warmup,
            schedule: match args.schedule {
                ScheduleArg::Cosine => Schedule::Cosine,
                ScheduleArg::Constant => Schedule::Constant,
            },
            ..OptimConfig::default()
        },
        batch_size: args.batch_size,
        accumulation: args.accumulation,
        steps: args.steps,
        epochs: args.epochs,
        seed: args.seed,
        save_every: args.save_every,
        grpo: GrpoOptions {
            scale_by_std: !args.no_std_scaling,
            drop_zero_variance: !args.keep_zero_variance,
            aggregation,
            epsilon_low: args.epsilon_low,
            epsilon_high: args.epsilon_high,
            kl_beta: args.kl_beta,
            max_completion_tokens: 0,
            baseline_rate: args.baseline_rate,
            is_cap: args.is_cap,
        },
        dpo_beta: args.beta,
        replay_per_batch: if args.replay.is_some() {
            args.replay_per_batch
        } else {
            0
        },
        replay_weight: args.replay_weight,
        ewc_lambda: args.ewc,
        baselines: Default::default(),
    };
    // Token-id data needs no tokenizer; chat data fails clearly without one.
    let tokenizer = hone_engine::Tokenizer::load(&args.base)
        .inspect_err(|e| tracing::warn!(error = %e, "no tokenizer: only token-id data can be read"))
        .ok();
    let renderer = Renderer {
        tokenizer: tokenizer.as_ref(),
    };
    let data = match algorithm {
        Algorithm::Grpo => Data::Grpo(data::read_grpo(&args.data, renderer)?),
        Algorithm::Dpo => Data::Dpo(data::read_dpo(&args.data, renderer)?),
        Algorithm::Sft => Data::Sft(data::read_sft(&args.data, renderer)?),
    };
    let replay = match &args.replay {
        Some(path) => data::read_sft(path, renderer)?,
        None => Vec::new(),
    };
    let examples = data.len();
    let mut trainer = Trainer::new(&args.base, &device, config, data, replay, args.adapter.as_deref())
        .with_context(|| format!("cannot start training on {}", args.base.display()))?;
    if args.resume {
        match hone_train::checkpoint::latest(&args.out) {
            Some(dir) => {
                trainer.resume(&dir)?;
                status(format_args!(
                    "resuming from {} (step {})",
                    dir.display(),
                    trainer.step()
                ))?;
            }
            None => status(format_args!(
                "no checkpoint under {}; starting fresh",
                args.out.display()
            ))?,
        }
    }
    status(format_args!(
        "{} on {} examples from {}: {} steps, {} trainable parameters",
        format!("{algorithm:?}").to_lowercase(),
        examples,
        args.data.display(),
        trainer.total_steps(),
        trainer.lora.parameter_count()
    ))?;
    let started = Instant::now();
    let first = trainer.step();
    trainer.run(&args.out, &mut |report| {
        let _ = progress(report, started, first);
    })?;
    status(format_args!(
        "done in {:.1}s; adapter written to {} (load it with POST /admin/adapters or PeftModel.from_pretrained)",
        started.elapsed().as_secs_f64(),
        args.out.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}

fn status(message: std::fmt::Arguments) -> std::io::Result<()> {
    writeln!(std::io::stderr(), "{message}")
}

/// `[  3/20] ███░░░░░░░░░░░░░░░░░  15% loss 0.4121 reward 0.50 kl 0.0012 |g| 0.84 lr 1.0e-4 812 tok/s eta 12s`
fn progress(r: &StepReport, started: Instant, first: usize) -> std::io::Result<()> {
    const WIDTH: usize = 20;
    let bar = hone_console::progress_bar(r.step, r.total_steps, WIDTH);
    let elapsed = started.elapsed().as_secs_f64();
    let taken = (r.step - first).max(1) as f64;
    let eta = elapsed / taken * (r.total_steps - r.step) as f64;
    let width = r.total_steps.to_string().len();
    let mut line = format!(
        "[{:>width$}/{}] {bar} {:>3}% loss {:.4}",
        r.step,
        r.total_steps,
        r.step * 100 / r.total_steps.max(1),
        r.loss
    );
    if let Some(reward) = r.reward {
        line += &format!(" reward {reward:.3}");
    }
    line += &format!(
        " kl {:.4} |g| {:.3} lr {:.1e} {:.0} tok/s",
        r.kl, r.grad_norm, r.lr, r.tokens_per_second
    );
    for (k, v) in &r.extra {
        line += &format!(" {k} {v:.3}");
    }
    line += &format!(" eta {eta:.0}s");
    writeln!(std::io::stderr(), "{line}")
}
