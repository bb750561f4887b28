//! Subcommands: `serve`, `config check|default`, `key new`, `model init`,
//! `train grpo|dpo|sft`, `rewards recompute`, `dataset build|list|show|export|import`,
//! `eval` (and `eval compare`), `learn` (and `learn status`), `front`,
//! `approve`, `rollback`, `alerts`, `history`, `bench engine|train|dataset`.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use hone_config::Config;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "hone", version, about = "hone makes LLM agents learn in production.")]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway: an OpenAI-compatible proxy that records every call.
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
        algorithm: crate::train::Algorithm,
        #[command(flatten)]
        args: Box<crate::train::TrainArgs>,
    },
    /// Rewards of recorded episodes.
    Rewards {
        #[command(subcommand)]
        command: crate::learn::RewardsCommand,
    },
    /// Datasets built from recorded traffic: build, list, show, export, import.
    Dataset {
        #[command(subcommand)]
        command: crate::learn::DatasetCommand,
    },
    /// Evaluate a version on a dataset, or compare two (`hone eval compare A B --dataset D`).
    Eval(crate::learn::EvalArgs),
    /// Run the learning cycle: `hone learn [AGENT…] [--once]`, or `hone learn status`.
    Learn(crate::cycle::LearnArgs),
    /// An agent's Pareto front of candidates, as a table.
    Front(crate::cycle::AgentArgs),
    /// Approve a candidate on the front: it becomes the canary.
    Approve(crate::cycle::ApproveArgs),
    /// Roll back the canary, or restore the previous champion, at once.
    Rollback(crate::cycle::AgentArgs),
    /// Alerts raised by the online monitors.
    Alerts(crate::cycle::ListArgs),
    /// Everything that changed for an agent, why, and on what evidence.
    History(crate::cycle::ListArgs),
    /// Measure hone's parts.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
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
        /// cpu or cuda (the TRL column is CPU only).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// A Python with torch, transformers, peft, trl and datasets, for the comparison column.
        #[arg(long, env = "HONE_BENCH_PYTHON")]
        python: Option<String>,
    },
    /// Prefill and decode tokens/s of the embedded engine at batch 1 and 8,
    /// next to Hugging Face transformers on the same weights.
    Engine {
        /// Model shapes to measure (random weights): `tiny`, `qwen2.5-0.5b`.
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
        /// A Python interpreter with torch and transformers, for the comparison column.
        #[arg(long, env = "HONE_BENCH_PYTHON")]
        python: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ModelCommand {
    /// Write a randomly initialised checkpoint in the Hugging Face layout
    /// (config, safetensors, tokenizer, chat template with tools).
    Init {
        #[arg(long, value_enum)]
        arch: ModelArch,
        /// `tiny` (tests, demos), `small` (4×512, training benchmarks) or
        /// `qwen2.5-0.5b` (the real shape, for benchmarks).
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// Output directory (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Seed for the weights; the same seed writes the same bytes.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModelArch {
    Llama,
    Qwen2,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a config file; exits non-zero naming the bad field.
    Check { file: PathBuf },
    /// Print the built-in default config.
    Default,
}

#[derive(Debug, Subcommand)]
enum KeyCommand {
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

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HONE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Serve {
            config,
            listen,
            data_dir,
            threads,
            insecure_open_admin,
        } => serve(config, listen, data_dir, threads, insecure_open_admin),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => Ok(check(&file)),
        Command::Config {
            command: ConfigCommand::Default,
        } => {
            std::io::stdout().write_all(hone_config::DEFAULT_CONFIG.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Model {
            command:
                ModelCommand::Init {
                    arch,
                    preset,
                    out,
                    seed,
                },
        } => model_init(arch, &preset, &out, seed),
        Command::Train { algorithm, args } => crate::train::run(algorithm, *args),
        Command::Rewards { command } => crate::learn::rewards(command),
        Command::Dataset { command } => crate::learn::dataset_command(command),
        Command::Eval(args) => crate::learn::eval(args),
        Command::Learn(args) => crate::cycle::learn(args),
        Command::Front(args) => crate::cycle::front(args),
        Command::Approve(args) => crate::cycle::approve(args),
        Command::Rollback(args) => crate::cycle::rollback(args),
        Command::Alerts(args) => crate::cycle::alerts(args),
        Command::History(args) => crate::cycle::history(args),
        Command::Bench {
            command:
                BenchCommand::Train {
                    presets,
                    group,
                    prompt,
                    completion,
                    rank,
                    reps,
                    device,
                    python,
                },
        } => crate::bench_train::run(crate::bench_train::Options {
            presets,
            group,
            prompt,
            completion,
            rank,
            reps,
            device,
            python,
        }),
        Command::Bench {
            command: BenchCommand::Dataset { calls, size, dir },
        } => crate::bench_dataset::run(crate::bench_dataset::Options { calls, size, dir }),
        Command::Bench {
            command:
                BenchCommand::Engine {
                    presets,
                    prompt,
                    new_tokens,
                    reps,
                    python,
                },
        } => crate::bench_engine::run(crate::bench_engine::Options {
            presets,
            prompt,
            new_tokens,
            reps,
            python,
        }),
        Command::Key {
            command: KeyCommand::New { name, agents },
        } => {
            let key = format!("hone-{}", hex::encode(rand::random::<[u8; 24]>()));
            let hash = hone_gateway::auth::sha256_hex(&key);
            let agents = agents.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
            let mut out = std::io::stdout();
            writeln!(
                out,
                "key (shown once; give it to the client as its API key):\n  {key}\n"
            )?;
            writeln!(out, "add to the config (only the hash is stored):\n[[gateway.api_keys]]\nname = {name:?}\nsha256 = \"{hash}\"\nagents = [{agents}]")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub fn load(config: Option<&PathBuf>) -> Result<Config> {
    match config {
        Some(path) => hone_config::load_file(path).map_err(|e| anyhow::anyhow!("{e}")),
        None => hone_config::load_str(hone_config::DEFAULT_CONFIG, std::path::Path::new("."), &|n| {
            std::env::var(n).ok()
        })
        .map_err(|e| anyhow::anyhow!("built-in config: {e}")),
    }
}

fn check(file: &std::path::Path) -> ExitCode {
    match hone_config::load_file(file) {
        Ok(config) => {
            let versions: usize = config.agents.values().map(|a| a.versions.len()).sum();
            let _ = writeln!(
                std::io::stdout(),
                "{}: ok ({} providers, {} agents, {} versions)",
                file.display(),
                config.providers.len(),
                config.agents.len(),
                versions
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::from(2)
        }
    }
}

fn serve(
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    threads: Option<usize>,
    insecure_open_admin: bool,
) -> Result<ExitCode> {
    let mut config = load(config.as_ref())?;
    config.gateway.insecure_open_admin |= insecure_open_admin;
    if let Some(listen) = listen {
        config.gateway.listen = listen;
    }
    if let Some(dir) = data_dir {
        config.set_data_dir(dir);
    }
    if let Some(threads) = threads {
        anyhow::ensure!(threads > 0, "--threads must be at least 1");
        config.gateway.threads = threads;
    }
    // One event-loop thread is the cheapest way to serve a proxy (no
    // cross-thread wake-ups per call); more threads are there for hosts
    // where one core is not enough.
    let runtime = match config.gateway.threads {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()?,
    };
    runtime.block_on(async move {
        let address = config.gateway.listen;
        if !address.ip().is_loopback() && config.gateway.api_keys.is_empty() {
            tracing::warn!(%address, "listening beyond loopback with no API keys: anyone who can reach this address can use the agents and read episodes; add [[gateway.api_keys]] (see `hone key new`)");
        }
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        let bound = listener.local_addr()?;
        let agents: Vec<_> = config.agents.keys().cloned().collect();
        let data_dir = config.gateway.data_dir.clone();
        let gateway = hone_gateway::Gateway::start(config).context("cannot start the gateway")?;
        tracing::info!(address = %bound, data_dir = %data_dir.display(), agents = ?agents, "hone is serving; point an OpenAI client at http://{bound}/v1");
        gateway.serve(listener, shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => tracing::info!("interrupt received; shutting down"),
        () = terminate => tracing::info!("terminate received; shutting down"),
    }
}

fn model_init(arch: ModelArch, preset: &str, out: &std::path::Path, seed: u64) -> Result<ExitCode> {
    let arch = match arch {
        ModelArch::Llama => hone_engine::Arch::Llama,
        ModelArch::Qwen2 => hone_engine::Arch::Qwen2,
    };
    let preset = hone_engine::init::Preset::parse(preset)
        .with_context(|| format!("unknown preset `{preset}` ({})", hone_engine::init::Preset::NAMES))?;
    hone_engine::init::write_checkpoint(arch, preset, seed, out)
        .with_context(|| format!("cannot write the checkpoint to {}", out.display()))?;
    writeln!(
        std::io::stdout(),
        "wrote a random {arch:?} checkpoint to {}",
        out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
