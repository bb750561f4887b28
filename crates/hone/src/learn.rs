//! `hone rewards`, `hone dataset` and `hone eval`: the command-line face of
//! hone-learn. Commands that call models (a judge, an evaluation) send their
//! calls through a gateway — the one at `--gateway URL`, or one started
//! in-process on a loopback port over the same data directory — so that
//! every call is recorded.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use hone_config::Config;
use hone_learn::client::{ChatClient, GatewayClient};
use hone_learn::compare::compare;
use hone_learn::dataset::{self, BuildOptions, Builder, ExportFormat};
use hone_learn::eval::{summarise, EvalOptions, EvalSummary, Evaluator, Progress, Target};
use hone_learn::reward::{recompute, Rewarder};
use hone_store::{EpisodeFilter, LearnStore, Recorder, SqliteStore};
use hone_types::time::{format_rfc3339, parse_time};
use hone_types::{DatasetInfo, VersionId};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Where the config, the data and the gateway are.
#[derive(Debug, Args)]
pub struct Common {
    /// Config file (TOML). Without one, the built-in default is used.
    #[arg(long, short, env = "HONE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory (overrides gateway.data_dir).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// A running gateway over the same data directory (`http://127.0.0.1:7070`)
    /// to send judge and evaluation calls through. Without it one is started
    /// in-process on a loopback port.
    #[arg(long, env = "HONE_GATEWAY")]
    gateway: Option<String>,
    /// API key for the gateway, when it requires one.
    #[arg(long, env = "HONE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum RewardsCommand {
    /// Recompute every recorded episode's reward under the agent's current
    /// reward spec (stored under the spec's version).
    Recompute {
        agent: String,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// Build a snapshot from recorded episodes: regression, errors, traffic or cost.
    Build {
        /// `regression` (passed under the champion), `errors` (failed or
        /// flagged), `traffic` (stratified sample), `cost` (most expensive).
        builder: String,
        #[arg(long)]
        agent: String,
        /// Snapshot name (default: the builder's name). Each build makes `NAME@N+1`.
        #[arg(long)]
        name: Option<String>,
        /// Most instances.
        #[arg(long, default_value_t = 200)]
        size: usize,
        /// Sampling seed: the same seed over the same episodes picks the same instances.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Only calls of this version (label or id).
        #[arg(long)]
        version: Option<String>,
        /// Only episodes from this time on (RFC 3339 or unix ms).
        #[arg(long)]
        since: Option<String>,
        /// Only episodes before this time.
        #[arg(long)]
        until: Option<String>,
        /// Only episodes with a signal of this name.
        #[arg(long)]
        signal: Option<String>,
        /// Keep near-duplicate inputs.
        #[arg(long)]
        no_dedup: bool,
        #[command(flatten)]
        common: Common,
    },
    /// List snapshots.
    List {
        #[command(flatten)]
        common: Common,
    },
    /// Show a snapshot (`NAME` for the latest, `NAME@N`) and its first instances.
    Show {
        dataset: String,
        #[arg(long, default_value_t = 5)]
        limit: usize,
        #[command(flatten)]
        common: Common,
    },
    /// Export a snapshot as JSONL: `chat` (OpenAI fine-tuning / `hone train
    /// sft`), `dpo`, `grpo`, or `hone` (instances, for `import`).
    Export {
        dataset: String,
        #[arg(long, default_value = "chat")]
        format: String,
        /// Output file; `-` for stdout.
        #[arg(long, default_value = "-")]
        out: PathBuf,
        #[command(flatten)]
        common: Common,
    },
    /// Import instances from JSONL (hone instances, OpenAI chat fine-tuning
    /// lines, or `{"input": …, "reference": …}`) as a new snapshot.
    Import {
        file: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long)]
        agent: String,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EvalArgs {
    #[command(subcommand)]
    command: Option<EvalCommand>,
    /// The version to evaluate (label or id).
    #[arg(long)]
    version: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Compare version B with version A on a dataset, instance by instance.
    Compare {
        a: String,
        b: String,
        /// Re-runs of each instance that passed under A and failed under B.
        #[arg(long, default_value_t = 2)]
        reruns: u32,
        #[command(flatten)]
        run: RunArgs,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The dataset (`NAME` for the latest snapshot, or `NAME@N`).
    #[arg(long)]
    dataset: Option<String>,
    /// The agent endpoint (`http://host:port/run`) for multi-step agents;
    /// without it the recorded requests are replayed.
    #[arg(long)]
    endpoint: Option<String>,
    /// Instances run at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Seconds per instance and try.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Extra tries of an instance whose run failed (not one that scored low).
    #[arg(long, default_value_t = 1)]
    retries: u32,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

pub(crate) fn load_config(common: &Common) -> Result<Config> {
    let mut config = crate::cli::load(common.config.as_ref())?;
    if let Some(dir) = &common.data_dir {
        config.set_data_dir(dir.clone());
    }
    Ok(config)
}

pub(crate) fn open_store(config: &Config) -> Result<Arc<SqliteStore>> {
    let full = config.store.synchronous == hone_config::Synchronous::Full;
    Ok(Arc::new(SqliteStore::open(&config.store.path, full)?))
}

fn out() -> std::io::Stdout {
    std::io::stdout()
}

pub(crate) fn note(message: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// A gateway to call models through: the given one, or one started here.
pub(crate) struct GatewayHandle {
    pub(crate) client: GatewayClient,
    pub(crate) recorder: Option<Arc<Recorder>>,
    stop: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    )>,
    journal: Option<PathBuf>,
}

impl GatewayHandle {
    pub(crate) async fn open(config: &Config, common: &Common, timeout: Duration) -> Result<Self> {
        if let Some(url) = &common.gateway {
            return Ok(Self {
                client: GatewayClient::new(url, common.api_key.clone(), timeout).map_err(anyhow::Error::msg)?,
                recorder: None,
                stop: None,
                journal: None,
            });
        }
        // The in-process gateway gets a journal of its own, so it can never
        // touch the journal of a `hone serve` on the same data directory.
        let mut config = config.clone();
        let data_dir = config.gateway.data_dir.clone();
        for p in config.providers.values_mut() {
            if let Some(local) = p.local.as_mut() {
                local.adapters_dir.get_or_insert_with(|| data_dir.join("adapters"));
            }
        }
        let journal = data_dir.join(format!("cli-{}", std::process::id()));
        config.gateway.data_dir = journal.clone();
        let gateway = hone_gateway::Gateway::start(config).context("cannot start the in-process gateway")?;
        let recorder = gateway.state().recorder.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(gateway.serve(listener, async move {
            let _ = rx.await;
        }));
        Ok(Self {
            client: GatewayClient::new(url, common.api_key.clone(), timeout).map_err(anyhow::Error::msg)?,
            recorder: Some(recorder),
            stop: Some((tx, task)),
            journal: Some(journal),
        })
    }

    /// Stops an in-process gateway after its recorder has drained.
    pub(crate) async fn close(self) -> Result<()> {
        if let Some((tx, task)) = self.stop {
            let _ = tx.send(());
            task.await??;
        }
        if let Some(dir) = self.journal {
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok(())
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

pub(crate) fn agent_config<'a>(config: &'a Config, agent: &str) -> Result<&'a hone_config::AgentConfig> {
    config.agents.get(agent).with_context(|| {
        format!(
            "agent `{agent}` is not in the config (configured: {})",
            config.agents.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    })
}

fn resolve_version(config: &Config, store: &SqliteStore, agent: &str, label_or_id: &str) -> Result<VersionId> {
    if let Some(v) = config.agents.get(agent).and_then(|a| a.version(label_or_id)) {
        return Ok(v.id.clone());
    }
    let known = VersionId::parse(label_or_id)
        .map(|id| hone_store::Store::version(store, &id))
        .transpose()?
        .flatten();
    match known {
        Some(v) if v.agent == agent => Ok(v.id),
        _ => bail!(
            "`{label_or_id}` is neither a version label of agent `{agent}` in the config nor a stored version id of it"
        ),
    }
}

pub fn rewards(command: RewardsCommand) -> Result<ExitCode> {
    let RewardsCommand::Recompute { agent, common } = command;
    let config = load_config(&common)?;
    let spec = agent_config(&config, &agent)?.reward.clone();
    let store = open_store(&config)?;
    runtime()?.block_on(async {
        let gateway = match spec.judge {
            Some(_) => Some(GatewayHandle::open(&config, &common, Duration::from_secs(120)).await?),
            None => None,
        };
        let client = gateway
            .as_ref()
            .map(|g| Arc::new(g.client.clone()) as Arc<dyn ChatClient>);
        let rewarder = Rewarder::new(&agent, &spec, client).map_err(anyhow::Error::msg)?;
        note(format_args!(
            "recomputing rewards of `{agent}` under reward spec {}",
            rewarder.spec_version
        ));
        let report = recompute(store.as_ref(), &rewarder, hone_gateway::state::now_ms(), &mut |n| {
            note(format_args!("  {n} episodes"));
        })
        .await?;
        if let Some(g) = gateway {
            g.close().await?;
        }
        writeln!(
            out(),
            "{agent}: {} episodes rewarded under spec {}: mean {}, passed {}/{}, {} with a critic or judge failure",
            report.episodes,
            report.spec_version,
            report.mean.map(|m| format!("{m:.3}")).unwrap_or_else(|| "-".into()),
            report.passed,
            report.episodes,
            report.failures
        )?;
        Ok(ExitCode::SUCCESS)
    })
}

fn time_arg(name: &str, raw: Option<&String>) -> Result<Option<i64>> {
    raw.map(|r| parse_time(r).with_context(|| format!("--{name} `{r}` is not RFC 3339 or unix milliseconds")))
        .transpose()
}

fn find_dataset(store: &SqliteStore, name: &str) -> Result<DatasetInfo> {
    store
        .dataset(name)?
        .with_context(|| format!("no dataset `{name}` (see `hone dataset list`)"))
}

pub fn dataset_command(command: DatasetCommand) -> Result<ExitCode> {
    match command {
        DatasetCommand::Build {
            builder,
            agent,
            name,
            size,
            seed,
            version,
            since,
            until,
            signal,
            no_dedup,
            common,
        } => {
            let config = load_config(&common)?;
            let agent_cfg = agent_config(&config, &agent)?;
            let store = open_store(&config)?;
            let kind = Builder::parse(&builder)
                .with_context(|| format!("unknown builder `{builder}` (one of {})", Builder::NAMES.join(", ")))?;
            anyhow::ensure!(size > 0, "--size must be at least 1");
            let version = version
                .map(|v| resolve_version(&config, &store, &agent, &v))
                .transpose()?;
            let champion = agent_cfg.version(&agent_cfg.deployment.champion).map(|v| v.id.clone());
            let spec_version = agent_cfg.reward.version();
            let options = BuildOptions {
                builder: kind,
                name: name.unwrap_or_else(|| builder.clone()),
                filter: EpisodeFilter {
                    agent: agent.clone(),
                    version,
                    since: time_arg("since", since.as_ref())?,
                    until: time_arg("until", until.as_ref())?,
                    signal,
                    spec_version: Some(spec_version.clone()),
                },
                size,
                seed,
                dedup: !no_dedup,
                champion,
                reference_signal: agent_cfg.reward.reference_signal.clone(),
            };
            let started = std::time::Instant::now();
            let (info, stats) = dataset::build(store.as_ref(), &options, hone_gateway::state::now_ms(), &mut |n| {
                note(format_args!("  scanned {n} episodes"))
            })?;
            if stats.unrewarded > 0 {
                note(format_args!(
                    "note: {} episodes have no reward under spec {spec_version}; run `hone rewards recompute {agent}` to include them",
                    stats.unrewarded
                ));
            }
            writeln!(
                out(),
                "{}: {} instances ({} episodes scanned, {} eligible, {} near-duplicates dropped) in {:.1} s",
                info.id,
                info.item_count,
                stats.scanned,
                stats.eligible,
                stats.duplicates,
                started.elapsed().as_secs_f64()
            )?;
            Ok(ExitCode::SUCCESS)
        }
        DatasetCommand::List { common } => {
            let store = open_store(&load_config(&common)?)?;
            let mut o = out();
            writeln!(
                o,
                "{:<28} {:<12} {:<12} {:>8}  {:<20}  content",
                "dataset", "builder", "agent", "items", "created"
            )?;
            for d in store.datasets()? {
                writeln!(
                    o,
                    "{:<28} {:<12} {:<12} {:>8}  {:<20}  {}",
                    d.id,
                    d.builder,
                    d.agent,
                    d.item_count,
                    format_rfc3339(d.created_at),
                    &d.content_hash[..12]
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        DatasetCommand::Show { dataset, limit, common } => {
            let store = open_store(&load_config(&common)?)?;
            let info = find_dataset(&store, &dataset)?;
            let items = store.dataset_items(&info.id)?;
            let mut o = out();
            writeln!(o, "{}", serde_json::to_string_pretty(&info)?)?;
            for i in items.iter().take(limit) {
                writeln!(o, "{}", serde_json::to_string(i)?)?;
            }
            if items.len() > limit {
                writeln!(o, "… {} more", items.len() - limit)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        DatasetCommand::Export {
            dataset,
            format,
            out: path,
            common,
        } => {
            let store = open_store(&load_config(&common)?)?;
            let fmt = ExportFormat::parse(&format)
                .with_context(|| format!("unknown format `{format}` (one of chat, dpo, grpo, hone)"))?;
            let info = find_dataset(&store, &dataset)?;
            let items = store.dataset_items(&info.id)?;
            let lines = if path.as_os_str() == "-" {
                let mut o = std::io::BufWriter::new(out().lock());
                let n = dataset::export(&items, fmt, &mut o)?;
                o.flush()?;
                n
            } else {
                let tmp = path.with_extension("partial");
                let mut w = std::io::BufWriter::new(
                    std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?,
                );
                let n = dataset::export(&items, fmt, &mut w)?;
                w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                n
            };
            note(format_args!(
                "{}: {lines} {format} lines from {} instances",
                info.id,
                items.len()
            ));
            Ok(ExitCode::SUCCESS)
        }
        DatasetCommand::Import {
            file,
            name,
            agent,
            common,
        } => {
            let config = load_config(&common)?;
            agent_config(&config, &agent)?;
            let store = open_store(&config)?;
            let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let items =
                dataset::read_instances(&file.display().to_string(), &text, &agent).map_err(anyhow::Error::msg)?;
            let params = serde_json::json!({"builder": "import", "file": file.display().to_string()});
            let info = store.create_dataset(&name, &agent, "import", &params, &items, hone_gateway::state::now_ms())?;
            writeln!(out(), "{}: {} instances imported", info.id, info.item_count)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn progress_line(label: &str, p: Progress) {
    let line = format!(
        "[{label}] {} {}/{} ({} failed)",
        crate::progress::bar(p.done, p.total, 24),
        p.done,
        p.total,
        p.failed
    );
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r{line}");
        if p.done == p.total {
            let _ = writeln!(err);
        }
    } else if p.done == p.total || p.done.is_multiple_of(10) {
        let _ = writeln!(err, "{line}");
    }
}

fn print_summary(o: &mut dyn Write, label: &str, s: &EvalSummary) -> std::io::Result<()> {
    let ci = s
        .ci95
        .map(|(a, b)| format!("[{a:.3}, {b:.3}]"))
        .unwrap_or_else(|| "-".into());
    writeln!(
        o,
        "{label}: {} instances, {} failed to run | mean score {} 95% CI {ci} | pass {:.1}%",
        s.instances,
        s.errors,
        s.mean_score.map(|m| format!("{m:.3}")).unwrap_or_else(|| "-".into()),
        s.pass_rate * 100.0
    )?;
    writeln!(
        o,
        "  cost ${:.6}/instance | latency mean {:.0} ms, p95 {:.0} ms",
        s.mean_cost_usd, s.mean_latency_ms, s.p95_latency_ms
    )?;
    let r = &s.rates;
    writeln!(
        o,
        "  rates: invalid tool call {:.1}%, clarifying question {:.1}%, refusal {:.1}%, empty {:.1}%, truncated {:.1}%, tool use {:.1}% | mean answer {:.0} chars",
        r.invalid_tool_call * 100.0,
        r.clarifying_question * 100.0,
        r.refusal * 100.0,
        r.empty * 100.0,
        r.truncated * 100.0,
        r.tool_use * 100.0,
        r.mean_answer_chars
    )
}

pub fn eval(args: EvalArgs) -> Result<ExitCode> {
    let (run, versions, reruns) = match args.command {
        Some(EvalCommand::Compare { a, b, reruns, run }) => (run, vec![a, b], Some(reruns)),
        None => {
            let version = args
                .version
                .context("say which version to evaluate: `hone eval --dataset D --version V` (or `hone eval compare A B --dataset D`)")?;
            (args.run, vec![version], None)
        }
    };
    let dataset_name = run.dataset.as_deref().context("--dataset is required")?;
    let config = load_config(&run.common)?;
    let store = open_store(&config)?;
    let dataset = find_dataset(&store, dataset_name)?;
    let agent = dataset.agent.clone();
    let spec = agent_config(&config, &agent)?.reward.clone();
    let ids = versions
        .iter()
        .map(|v| resolve_version(&config, &store, &agent, v))
        .collect::<Result<Vec<_>>>()?;
    let target = match &run.endpoint {
        Some(url) => Target::Endpoint(url.clone()),
        None => Target::Replay,
    };
    let options = EvalOptions {
        concurrency: run.concurrency.max(1),
        timeout: Duration::from_secs(run.timeout_s.max(1)),
        retries: run.retries,
        attempt: 0,
        only: None,
    };
    runtime()?.block_on(async {
        let gateway = GatewayHandle::open(&config, &run.common, options.timeout).await?;
        let client: Arc<dyn ChatClient> = Arc::new(gateway.client.clone());
        let rewarder = Rewarder::new(&agent, &spec, Some(client)).map_err(anyhow::Error::msg)?;
        let evaluator = Evaluator {
            store: store.clone(),
            gateway: gateway.client.clone(),
            rewarder: Arc::new(rewarder),
            recorder: gateway.recorder.clone(),
        };
        let mut o = out();
        let result = if let Some(reruns) = reruns {
            let cmp = compare(
                &evaluator,
                &dataset,
                (&ids[0], &ids[1]),
                &target,
                &options,
                reruns,
                &|label, p| progress_line(label, p),
            )
            .await?;
            if run.json {
                writeln!(o, "{}", serde_json::to_string_pretty(&cmp)?)?;
            } else {
                writeln!(
                    o,
                    "{} vs {} on {} ({} paired instances)",
                    versions[0], versions[1], dataset.id, cmp.pairs
                )?;
                writeln!(
                    o,
                    "  mean A {} | mean B {} | B wins {}, loses {}, ties {}",
                    cmp.mean_a.map(|m| format!("{m:.3}")).unwrap_or_else(|| "-".into()),
                    cmp.mean_b.map(|m| format!("{m:.3}")).unwrap_or_else(|| "-".into()),
                    cmp.wins,
                    cmp.losses,
                    cmp.ties
                )?;
                for f in &cmp.regressions {
                    writeln!(
                        o,
                        "  regressed: {} (A passed {}/{}, B passed {}/{}) {}",
                        f.instance_id,
                        f.a_passes,
                        f.runs,
                        f.b_passes,
                        f.runs,
                        if f.confirmed { "CONFIRMED" } else { "noise" }
                    )?;
                }
                writeln!(o, "verdict: {}", cmp.verdict)?;
            }
            Ok(if cmp.regressions.iter().any(|f| f.confirmed) {
                ExitCode::from(3)
            } else {
                ExitCode::SUCCESS
            })
        } else {
            let (info, results) = evaluator
                .run(&dataset, &ids[0], &target, &options, &|p| progress_line("eval", p))
                .await?;
            let summary = summarise(&info.id, &results);
            if run.json {
                writeln!(o, "{}", serde_json::to_string_pretty(&summary)?)?;
            } else {
                print_summary(
                    &mut o,
                    &format!("{} on {} (run {})", versions[0], dataset.id, info.id),
                    &summary,
                )?;
            }
            Ok(ExitCode::SUCCESS)
        };
        gateway.close().await?;
        result
    })
}
