//! `hone dataset build|list|show|export|import`: dataset snapshots built
//! from recorded episodes (or imported from JSONL), listed, shown and
//! exported for training. Builds and exports read the store only; nothing
//! here calls a model.

use crate::context::{
    agent_config, find_dataset, load_config, open_existing_store, open_store, resolve_version, Common,
};
use anyhow::{Context, Result};
use clap::Subcommand;
use hone_console::note;
use hone_learn::data::dataset::{self, BuildOptions, Builder, ExportFormat};
use hone_store::EpisodeFilter;
use hone_types::time::{format_rfc3339, parse_time};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// Build a snapshot from recorded episodes: regression, errors, traffic or cost.
    Build {
        /// `regression` (passed under the champion), `errors` (failed or
        /// flagged), `traffic` (stratified sample), `cost` (most expensive).
        builder: String,
        /// The agent whose episodes to sample.
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
        /// One JSON document (an array of snapshots) instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Show a snapshot (`NAME` for the latest, `NAME@N`) and its first instances.
    Show {
        /// The snapshot: `NAME` (its latest) or `NAME@N`.
        dataset: String,
        /// Instances shown.
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// One JSON document (`{"dataset": …, "instances": […], "more": N}`)
        /// instead of the snapshot and one instance a line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Export a snapshot as JSONL: `chat` (OpenAI fine-tuning / `hone train
    /// sft`), `dpo`, `grpo`, or `hone` (instances, for `import`).
    Export {
        /// The snapshot: `NAME` (its latest) or `NAME@N`.
        dataset: String,
        /// `chat` (also `sft`, `openai`), `dpo`, `grpo` or `hone` (also `jsonl`).
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
        /// The JSONL file to read.
        file: PathBuf,
        /// The snapshot's name (it becomes `NAME@1`, or the next number).
        #[arg(long)]
        name: String,
        /// The agent the instances are for.
        #[arg(long)]
        agent: String,
        #[command(flatten)]
        common: Common,
    },
}

fn time_arg(name: &str, raw: Option<&String>) -> Result<Option<i64>> {
    raw.map(|r| parse_time(r).with_context(|| format!("--{name} `{r}` is not RFC 3339 or unix milliseconds")))
        .transpose()
}

pub fn run(command: DatasetCommand) -> Result<ExitCode> {
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
                .map(|v| resolve_version(&config, store.as_ref(), &agent, &v))
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
            let (info, stats) = dataset::build(store.as_ref(), &options, hone_types::time::now_ms(), &mut |n| {
                note(format_args!("  scanned {n} episodes"))
            })?;
            if stats.unrewarded > 0 {
                note(format_args!(
                    "note: {} episodes have no reward under spec {spec_version}; run `hone rewards recompute {agent}` to include them",
                    stats.unrewarded
                ));
            }
            writeln!(
                std::io::stdout(),
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
        DatasetCommand::List { json, common } => {
            let store = open_existing_store(&load_config(&common)?)?;
            let mut o = std::io::stdout();
            if json {
                writeln!(o, "{}", serde_json::to_string_pretty(&store.datasets()?)?)?;
                return Ok(ExitCode::SUCCESS);
            }
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
        DatasetCommand::Show {
            dataset,
            limit,
            json,
            common,
        } => {
            let store = open_existing_store(&load_config(&common)?)?;
            let info = find_dataset(store.as_ref(), &dataset)?;
            let items = store.dataset_items(&info.id)?;
            let mut o = std::io::stdout();
            if json {
                let document = serde_json::json!({
                    "dataset": info,
                    "instances": items.iter().take(limit).collect::<Vec<_>>(),
                    "more": items.len().saturating_sub(limit),
                });
                writeln!(o, "{}", serde_json::to_string_pretty(&document)?)?;
                return Ok(ExitCode::SUCCESS);
            }
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
            let store = open_existing_store(&load_config(&common)?)?;
            let fmt = ExportFormat::parse(&format)
                .with_context(|| format!("unknown format `{format}` (one of chat, dpo, grpo, hone)"))?;
            let info = find_dataset(store.as_ref(), &dataset)?;
            let items = store.dataset_items(&info.id)?;
            let lines = if path.as_os_str() == "-" {
                let mut o = std::io::BufWriter::new(std::io::stdout().lock());
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
            let info = store.create_dataset(&name, &agent, "import", &params, &items, hone_types::time::now_ms())?;
            writeln!(std::io::stdout(), "{}: {} instances imported", info.id, info.item_count)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
