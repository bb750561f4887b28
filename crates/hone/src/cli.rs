//! The command line: the clap definitions of `hone` and its sub-commands,
//! and the dispatch that hands each command to its function in `commands/`.
//! Subcommands: `demo`, `serve`, `config check|default`, `key new`, `model init`,
//! `train grpo|dpo|sft`, `rewards recompute`, `dataset build|list|show|export|import`,
//! `eval` (and `eval compare`), `learn` (and `learn status`), `front`,
//! `approve`, `rollback`, `alerts`, `history`, `bench engine|train|dataset|ui|learn|canary`
//! (the demo and the benchmarks run from their own crates, `hone-demo` and
//! `hone-bench`).
//! Arguments that one command family alone takes are defined beside it in
//! `commands/` (and `Common` in `context.rs`), so that imports point from
//! here to the commands and never back. No command logic goes here.

use crate::commands::{
    artefacts, config, dataset, deploy, eval, keys, learn, memory, model, rewards, serve, store, train,
};
use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use hone_bench as bench;
use hone_demo as demo;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "hone", version, about = "hone makes LLM agents learn in production.")]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch an agent learn from implicit feedback, on this machine, in
    /// minutes: the embedded engine, simulated users and the learning loop.
    #[command(
        after_help = "Examples:\n  hone demo --quick              # about a minute: one promotion users decided\n  \
                            hone demo                      # ten minutes, held-out success before and after\n  \
                            hone demo --seeds 1,2,3        # the same over three seeds, with the spread"
    )]
    Demo(Box<demo::DemoArgs>),
    /// Run the gateway: an OpenAI-compatible proxy that records every call.
    #[command(
        after_help = "Examples:\n  hone serve --config hone.toml\n  hone serve --config hone.toml --listen 0.0.0.0:7070 --threads 4"
    )]
    Serve {
        /// Config file (TOML). Without one, the built-in default is used.
        #[arg(long, short, env = "HONE_CONFIG")]
        config: Option<PathBuf>,
        /// Address to listen on (overrides gateway.listen).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Data directory (overrides gateway.data_dir).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Threads serving HTTP (overrides gateway.threads; default 1).
        #[arg(long)]
        threads: Option<usize>,
        /// Serve beyond loopback although no API keys and no admin token are
        /// configured (anyone reaching the address may use /admin/*).
        #[arg(long)]
        insecure_open_admin: bool,
    },
    /// Work with config files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Make data-plane API keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Work with local models.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Train a LoRA adapter with GRPO, DPO or SFT on a JSONL file.
    Train {
        #[arg(value_enum)]
        algorithm: train::Algorithm,
        #[command(flatten)]
        args: Box<train::TrainArgs>,
    },
    /// The store itself: `hone store migrate --from sqlite://… --to postgres://…`.
    Store {
        #[command(subcommand)]
        command: store::StoreCommand,
    },
    /// Adapters and checkpoints in the shared artefact store: list, push, pull.
    Artefacts {
        #[command(subcommand)]
        command: artefacts::ArtefactsCommand,
    },
    /// kNN-LM memory: `hone memory build --agent A` makes a datastore of its successful episodes.
    Memory {
        #[command(subcommand)]
        command: memory::MemoryCommand,
    },
    /// Rewards of recorded episodes.
    Rewards {
        #[command(subcommand)]
        command: rewards::RewardsCommand,
    },
    /// Datasets built from recorded traffic: build, list, show, export, import.
    Dataset {
        #[command(subcommand)]
        command: dataset::DatasetCommand,
    },
    /// Evaluate a version on a dataset, or compare two (`hone eval compare A B --dataset D`).
    #[command(after_help = "Examples:\n  hone eval --version v2 --dataset support.regression\n  \
                            hone eval compare v1 3f2a9c --dataset support.regression   # labels, ids or unique prefixes")]
    Eval(eval::EvalArgs),
    /// Run the learning cycle: `hone learn [AGENT…] [--once]`, or `hone learn status`.
    #[command(
        after_help = "Examples:\n  hone learn --config hone.toml                 # the loop, every agent with optimisers\n  \
                            hone learn support --once --config hone.toml  # one cycle now, then a look at the canary\n  \
                            hone learn status --json --config hone.toml\n  \
                            hone learn cancel support --config hone.toml"
    )]
    Learn(learn::LearnArgs),
    /// An agent's Pareto front of candidates, as a table.
    #[command(
        after_help = "Examples:\n  hone front support               # the front and the champion\n  \
                            hone front support --all --diff  # every candidate, why it was pruned, its whole change\n  \
                            hone front support --json"
    )]
    Front(deploy::FrontArgs),
    /// Approve a candidate on the front: it becomes the canary.
    #[command(after_help = "Example:\n  hone approve 3f2a9c --by alice   # a unique prefix of the version id")]
    Approve(deploy::ApproveArgs),
    /// Roll back the canary, or restore the previous champion, at once.
    Rollback(deploy::AgentArgs),
    /// Alerts raised by the online monitors.
    Alerts(deploy::ListArgs),
    /// Everything that changed for an agent, why, and on what evidence.
    #[command(
        after_help = "Examples:\n  hone history support --limit 20\n  hone history support --json | jq .summary"
    )]
    History(deploy::ListArgs),
    /// Measure hone's parts.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The same base, environment and budget learned by hone (`hone demo`)
    /// and by TRL's GRPOTrainer: learning time and episodes each took to
    /// reach a held-out success threshold, in one run.
    Learn(bench::learn::LearnArgs),
    /// The canary's online test by simulation: how often a canary as good
    /// as its champion is promoted, and how often one 5, 10 or 20 points
    /// better is, with the episodes it takes.
    Canary {
        /// Simulated canaries per cell.
        #[arg(long, default_value_t = 10_000)]
        runs: usize,
        /// The share a canary starts on.
        #[arg(long, default_value_t = 0.1)]
        start_share: f64,
        /// The share it grows to with the evidence.
        #[arg(long, default_value_t = 0.5)]
        max_share: f64,
        /// Canary episodes after which an undecided one is rolled back.
        #[arg(long, default_value_t = 300)]
        max_episodes: usize,
        /// The least reward gain worth a promotion.
        #[arg(long, default_value_t = 0.05)]
        least_gain: f64,
        /// Also write the result to this JSON file: the command, commit,
        /// date and machine, and every table printed, as data.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Build a `traffic` dataset from a large store of recorded calls and
    /// export it as JSONL: time and peak memory.
    Dataset {
        /// Calls in the store (filled with synthetic traffic up to this many).
        #[arg(long, default_value_t = 1_000_000)]
        calls: u64,
        /// Instances in the dataset.
        #[arg(long, default_value_t = 10_000)]
        size: usize,
        /// Where the store lives (kept, so a second run skips the filling).
        #[arg(long)]
        dir: PathBuf,
        /// The engines to measure, in one run: `sqlite`, `postgres` (a
        /// private server started under `--dir`; Debian's `postgresql`).
        #[arg(long, value_delimiter = ',', default_value = "sqlite")]
        stores: Vec<String>,
        /// Also write the result to this JSON file: the command, commit,
        /// date and machine, and every table printed, as data.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// The dashboard's page times on a store of `--baseline` calls and of
    /// `--calls` calls, with their ratio.
    Ui {
        /// Calls in the large store.
        #[arg(long, default_value_t = 1_000_000)]
        calls: u64,
        /// Calls in the baseline store (the same store, measured first).
        #[arg(long, default_value_t = 10_000)]
        baseline: u64,
        /// Requests per page; the median is reported.
        #[arg(long, default_value_t = 9)]
        reps: usize,
        /// Where the store lives (kept, so a second run skips the filling).
        #[arg(long)]
        dir: PathBuf,
        /// Also write the result to this JSON file: the command, commit,
        /// date and machine, and every table printed, as data.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// One GRPO training step of hone-train next to TRL's GRPOTrainer on the
    /// same weights and batch, with GFLOP/s against a measured matmul peak.
    Train {
        /// Model shapes (random weights): `tiny`, `small`, `qwen2.5-0.5b`.
        #[arg(long, value_delimiter = ',', default_value = "tiny,small")]
        presets: Vec<String>,
        /// Completions in the group.
        #[arg(long, default_value_t = 8)]
        group: usize,
        /// Prompt tokens (shared by the group).
        #[arg(long, default_value_t = 64)]
        prompt: usize,
        /// Completion tokens per sample.
        #[arg(long, default_value_t = 64)]
        completion: usize,
        /// LoRA rank (alpha = 2 × rank).
        #[arg(long, default_value_t = 16)]
        rank: usize,
        /// Timed steps (the median is shown), after one warm-up step.
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Times each side is measured, each with a fresh trainer (the
        /// median step of the runs is shown with their range).
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// cpu or cuda (TRL runs on the same device).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// A Python with torch, transformers, peft, trl and datasets, for the comparison column.
        #[arg(long, env = "HONE_BENCH_PYTHON")]
        python: Option<String>,
        /// Also write the result to this JSON file: the command, commit,
        /// date and machine, and every table printed, as data.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Prefill and decode tokens/s of the embedded engine at batch 1 and 8,
    /// next to Hugging Face transformers on the same weights; then requests
    /// served through the engine with its prefix cache off and on, and (on
    /// the CPU) with each decode step in one part and in one per core.
    Engine {
        /// Model shapes to measure (random weights): `tiny`, `mini` (the
        /// demo's), `small`, `qwen2.5-0.5b`.
        #[arg(long, value_delimiter = ',', default_value = "tiny,qwen2.5-0.5b")]
        presets: Vec<String>,
        /// Prompt tokens per row.
        #[arg(long, default_value_t = 64)]
        prompt: usize,
        /// Decode steps timed.
        #[arg(long, default_value_t = 16)]
        new_tokens: usize,
        /// Timed runs per figure (the median is shown).
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Times the whole throughput measurement is repeated, on both
        /// sides (each figure shown as the median of the runs with their
        /// range).
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// A Python interpreter with torch and transformers, for the comparison column.
        #[arg(long, env = "HONE_BENCH_PYTHON")]
        python: Option<String>,
        /// Also decode with kNN-LM memory of these many keys, next to
        /// decoding without it: searched exactly, and through the HNSW index
        /// too above 16,384 keys (with its build time and recall):
        /// `--memory-keys 10000,100000`.
        #[arg(long, value_delimiter = ',')]
        memory_keys: Vec<usize>,
        /// Where both engines run: `cpu`, or `cuda` (a build with `--features cuda`).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Weights and activations: `f32`, `bf16` or `f16`.
        #[arg(long, default_value = "f32", value_parser = ["f32", "bf16", "f16"])]
        dtype: String,
        /// Also write the result to this JSON file: the command, commit,
        /// date and machine, and every table printed, as data.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Write a randomly initialised checkpoint in the Hugging Face layout
    /// (config, safetensors, tokenizer, chat template with tools).
    Init {
        #[arg(long, value_enum)]
        arch: ModelArch,
        /// `tiny` (tests), `mini` (4×128), `small` (4×512, training
        /// benchmarks), `qwen2.5-0.5b` (the real shape, for benchmarks),
        /// `demo`: the trained base policy of `hone demo` (built from its
        /// recipe in about two minutes; `--seed` picks the initialisation),
        /// or `demo-quick`: that of `hone demo --quick`, the same base.
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// Output directory (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Seed for the weights; the same seed writes the same bytes.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// For `demo` and `demo-quick`: the hardest calc level (1 easy, 2 medium, 3 hard) its
        /// demonstrations cover, as `hone demo --max-difficulty` plays.
        #[arg(long, default_value_t = demo::DEFAULT_MAX_DIFFICULTY, value_parser = demo::parse_max_difficulty)]
        max_difficulty: u8,
    },
    /// Convert a GGUF file (llama.cpp, Ollama, LM Studio) into a Hugging
    /// Face checkpoint directory: config, dequantised f32 safetensors,
    /// tokenizer and chat template. Llama and Qwen2 models with byte-level
    /// BPE vocabularies; anything else is refused by name.
    Import {
        /// The `.gguf` file.
        file: PathBuf,
        /// Output directory (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModelArch {
    Llama,
    Qwen2,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file; exits non-zero naming the bad field.
    Check { file: PathBuf },
    /// Print the built-in default config.
    Default,
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Generate a key; prints it once and the config entry holding its hash.
    New {
        /// A name for the key (shown in errors and logs).
        #[arg(long, default_value = "default")]
        name: String,
        /// Agents the key may use, comma-separated; `*` for all.
        #[arg(long, default_value = "*", value_delimiter = ',')]
        agents: Vec<String>,
    },
}

impl From<ModelArch> for hone_engine::Arch {
    fn from(arch: ModelArch) -> Self {
        match arch {
            ModelArch::Llama => hone_engine::Arch::Llama,
            ModelArch::Qwen2 => hone_engine::Arch::Qwen2,
        }
    }
}

impl Command {
    /// Threads per candle op this command wants where the user set none
    /// (`None`: candle's default): one for the commands that run the demo's
    /// small model, which leave the other cores to work of their own (see
    /// `hone_engine::threads::per_op_for_hidden_size`).
    pub fn threads_per_op(&self) -> Option<usize> {
        match self {
            Command::Demo(args) => demo::threads_per_op(args.model.as_deref()),
            Command::Bench {
                command: BenchCommand::Learn(args),
            } => demo::threads_per_op(args.model.as_deref()),
            Command::Model {
                command: ModelCommand::Init {
                    preset, max_difficulty, ..
                },
            } if model::demo_recipe(preset, *max_difficulty).is_some() => demo::threads_per_op(None),
            _ => None,
        }
    }
}

/// Runs one command; its exit code, or the error `main` prints.
pub fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Serve {
            config,
            listen,
            data_dir,
            threads,
            insecure_open_admin,
        } => serve::run(config, listen, data_dir, threads, insecure_open_admin),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => Ok(config::check(&file)),
        Command::Config {
            command: ConfigCommand::Default,
        } => config::print_default(),
        Command::Key {
            command: KeyCommand::New { name, agents },
        } => keys::new(&name, &agents),
        Command::Model {
            command:
                ModelCommand::Init {
                    arch,
                    preset,
                    out,
                    seed,
                    max_difficulty,
                },
        } => model::init(arch.into(), &preset, &out, seed, max_difficulty),
        Command::Model {
            command: ModelCommand::Import { file, out },
        } => model::import(&file, &out),
        Command::Demo(args) => demo::run(*args),
        Command::Train { algorithm, args } => train::run(algorithm, *args),
        Command::Rewards { command } => rewards::run(command),
        Command::Store { command } => store::run(command),
        Command::Artefacts { command } => artefacts::run(command).map(|()| ExitCode::SUCCESS),
        Command::Memory { command } => memory::run(command).map(|()| ExitCode::SUCCESS),
        Command::Dataset { command } => dataset::run(command),
        Command::Eval(args) => eval::run(args),
        Command::Learn(args) => learn::run(args),
        Command::Front(args) => deploy::front(args),
        Command::Approve(args) => deploy::approve(args),
        Command::Rollback(args) => deploy::rollback(args),
        Command::Alerts(args) => deploy::alerts(args),
        Command::History(args) => deploy::history(args),
        Command::Bench {
            command: BenchCommand::Learn(args),
        } => bench::learn::run(args),
        Command::Bench {
            command:
                BenchCommand::Train {
                    presets,
                    group,
                    prompt,
                    completion,
                    rank,
                    reps,
                    runs,
                    device,
                    python,
                    out,
                },
        } => bench::train::run(bench::train::Options {
            presets,
            group,
            prompt,
            completion,
            rank,
            reps,
            runs,
            device,
            python,
            out,
        }),
        Command::Bench {
            command:
                BenchCommand::Canary {
                    runs,
                    start_share,
                    max_share,
                    max_episodes,
                    least_gain,
                    out,
                },
        } => bench::canary::run(bench::canary::Options {
            runs,
            start_share,
            max_share,
            max_episodes,
            least_gain,
            out,
        }),
        Command::Bench {
            command:
                BenchCommand::Dataset {
                    calls,
                    size,
                    dir,
                    stores,
                    out,
                },
        } => bench::dataset::run(bench::dataset::Options {
            calls,
            size,
            dir,
            stores,
            out,
        }),
        Command::Bench {
            command:
                BenchCommand::Ui {
                    calls,
                    baseline,
                    reps,
                    dir,
                    out,
                },
        } => bench::ui::run(bench::ui::Options {
            calls,
            baseline,
            reps,
            dir,
            out,
        }),
        Command::Bench {
            command:
                BenchCommand::Engine {
                    presets,
                    prompt,
                    new_tokens,
                    reps,
                    runs,
                    python,
                    memory_keys,
                    device,
                    dtype,
                    out,
                },
        } => bench::engine::run(bench::engine::Options {
            presets,
            prompt,
            new_tokens,
            reps,
            runs,
            memory_keys,
            python,
            device,
            dtype,
            out,
        }),
    }
}
