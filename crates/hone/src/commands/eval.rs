//! `hone eval --dataset D --version V` and `hone eval compare A B --dataset D`:
//! runs a version on a dataset snapshot (replaying the recorded requests, or
//! through `--endpoint` for multi-step agents) and scores it, or compares two
//! instance by instance with re-runs of apparent regressions. Model calls go
//! through a gateway (`--gateway`, or one started in-process), so every call
//! is recorded. `compare` exits 3 on a confirmed regression.

use crate::context::{
    agent_config, find_dataset, load_config, open_store, resolve_version, Common, GatewayArgs, GatewayHandle,
};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use hone_console::runtime;
use hone_learn::client::ChatClient;
use hone_learn::scoring::reward::Rewarder;
use hone_learn::search::compare::compare;
use hone_learn::search::eval::{summarise, EvalOptions, EvalSummary, Evaluator, Progress, Target};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Exit code of `hone eval compare` when B confirmedly regressed on an instance A passed.
const CONFIRMED_REGRESSION: u8 = 3;

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
        /// The version compared against (a label, an id or a unique prefix of one).
        a: String,
        /// The version that may have regressed (likewise).
        b: String,
        /// Re-runs of each instance that passed under A and failed under B.
        #[arg(long, default_value_t = 2)]
        reruns: u32,
        /// Confidence at which re-runs confirm a regression (one-sided Fisher exact test).
        #[arg(long, default_value_t = 0.95)]
        confidence: f64,
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
    /// Runs of every instance (at temperature > 0, results are per-instance
    /// means and pass rates over these).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    samples: u32,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    gateway: GatewayArgs,
}

fn progress_line(label: &str, p: Progress) {
    // A run finished earlier is reused whole: nothing to count.
    if p.total == 0 {
        return;
    }
    let line = format!(
        "[{label}] {} {}/{} ({} failed)",
        hone_console::progress_bar(p.done, p.total, 24),
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

pub fn run(args: EvalArgs) -> Result<ExitCode> {
    let (run, versions, reruns) = match args.command {
        Some(EvalCommand::Compare {
            a,
            b,
            reruns,
            confidence,
            run,
        }) => {
            if !(confidence > 0.5 && confidence < 1.0) {
                anyhow::bail!("--confidence must be between 0.5 and 1 (exclusive), got {confidence}");
            }
            (run, vec![a, b], Some((reruns, confidence)))
        }
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
    let dataset = find_dataset(store.as_ref(), dataset_name)?;
    let agent = dataset.agent.clone();
    let spec = agent_config(&config, &agent)?.reward.clone();
    let ids = versions
        .iter()
        .map(|v| resolve_version(&config, store.as_ref(), &agent, v))
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
        samples: run.samples,
        only: None,
    };
    runtime()?.block_on(async {
        let gateway = GatewayHandle::open(&config, &run.gateway, options.timeout).await?;
        let client: Arc<dyn ChatClient> = Arc::new(gateway.client.clone());
        let rewarder = Rewarder::new(&agent, &spec, Some(client)).map_err(anyhow::Error::msg)?;
        let evaluator = Evaluator {
            store: store.clone(),
            gateway: gateway.client.clone(),
            rewarder: Arc::new(rewarder),
            recorder: gateway.recorder.clone(),
        };
        let mut o = std::io::stdout();
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
                ExitCode::from(CONFIRMED_REGRESSION)
            } else {
                ExitCode::SUCCESS
            })
        } else {
            let (info, results) = evaluator
                .run(&dataset, &ids[0], &target, &options, &|p| progress_line("eval", p))
                .await?;
            let summary = summarise(&info.id, &results, options.samples);
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
