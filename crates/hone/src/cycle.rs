//! The learning cycle on the command line: `hone learn [AGENT…] [--once]`
//! (the loop, or one cycle), `hone learn status`, `hone front AGENT`,
//! `hone approve CANDIDATE`, `hone rollback AGENT`, `hone alerts`,
//! `hone history AGENT`. Everything is read from and written to the store,
//! so these work beside a running `hone serve` (whose gateways follow the
//! deployments within half a second).

use crate::learn::{agent_config, load_config, note, open_store, runtime, Common, GatewayHandle};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use hone_learn::cycle::Learner;
use hone_learn::deploy::{self, Change};
use hone_learn::watch::Verdict;
use hone_store::{CycleStore, SqliteStore};
use hone_types::time::format_rfc3339;
use hone_types::{Candidate, CandidateStatus, CycleState};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LearnArgs {
    #[command(subcommand)]
    pub command: Option<LearnCommand>,
    /// Agents to learn for (default: every agent with `[agents.NAME.learn]` optimisers).
    pub agents: Vec<String>,
    /// Run one cycle per agent (resuming an unfinished one) and a look at its canary, then exit.
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Subcommand)]
pub enum LearnCommand {
    /// Cycles, their steps, candidates and deployments.
    Status {
        agent: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    pub agent: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The candidate's version id (a unique prefix will do).
    pub candidate: String,
    /// Who approves (recorded in the history).
    #[arg(long, default_value = "operator")]
    pub by: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    pub agent: Option<String>,
    /// Most entries shown.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub common: Common,
}

fn out(line: &str) -> Result<()> {
    writeln!(std::io::stdout(), "{line}")?;
    Ok(())
}

/// Left-aligned columns, widths from the content.
fn table(header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    out(&line(header.iter().map(|h| h.to_string()).collect()))?;
    for row in rows {
        out(&line(row.clone()))?;
    }
    Ok(())
}

fn time(ms: i64) -> String {
    format_rfc3339(ms).chars().take(19).collect()
}

pub fn learn(args: LearnArgs) -> Result<ExitCode> {
    if let Some(LearnCommand::Status { agent, common }) = args.command {
        return status(agent.as_deref(), &common);
    }
    let config = load_config(&args.common)?;
    let agents: Vec<String> = if args.agents.is_empty() {
        config
            .agents
            .values()
            .filter(|a| !a.learn.optimisers.is_empty())
            .map(|a| a.name.clone())
            .collect()
    } else {
        for a in &args.agents {
            agent_config(&config, a)?;
        }
        args.agents.clone()
    };
    if agents.is_empty() {
        bail!("no agent has optimisers: add `[agents.NAME.learn] optimisers = [\"model\", …]` to the config");
    }
    let pause_at = match std::env::var("HONE_LEARN_PAUSE_AT") {
        Ok(s) => Some(CycleState::parse(&s).with_context(|| format!("HONE_LEARN_PAUSE_AT: unknown step `{s}`"))?),
        Err(_) => None,
    };
    let store = open_store(&config)?;
    runtime()?.block_on(async {
        let gateway = GatewayHandle::open(&config, &args.common, Duration::from_secs(300)).await?;
        let learner = Arc::new(Learner {
            config: Arc::new(config.clone()),
            store: store.clone(),
            gateway: gateway.client.clone(),
            recorder: gateway.recorder.clone(),
            progress: Arc::new(|agent: &str, line: &str| note(format_args!("{agent}: {line}"))),
            pause_at,
        });
        let mut failed = false;
        if args.once {
            for agent in &agents {
                match learner.run_once(agent).await {
                    Ok((cycle, verdict)) => {
                        note(format_args!(
                            "{agent}: cycle {} {}{}; canary: {}",
                            cycle.id,
                            cycle.state.as_str(),
                            cycle.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default(),
                            describe(&verdict)
                        ));
                        failed |= cycle.state == CycleState::Failed;
                    }
                    Err(e) => {
                        note(format_args!("{agent}: {e}"));
                        failed = true;
                    }
                }
            }
        } else {
            note(format_args!(
                "learning for {} (every {} s; at most {} cycles at once); Ctrl-C stops",
                agents.join(", "),
                config.learn.poll_seconds,
                config.learn.max_concurrent_cycles
            ));
            learner
                .clone()
                .run_forever(agents, async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await;
        }
        gateway.close().await?;
        Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
    })
}

fn describe(v: &Verdict) -> String {
    match v {
        Verdict::NoCanary => "none".into(),
        Verdict::Waiting(n) => format!("collecting ({n} rewarded canary episodes)"),
        Verdict::Promoted(s) | Verdict::RolledBack(s) | Verdict::Alerted(s) => s.clone(),
    }
}

fn counts(candidates: &[Candidate]) -> String {
    let mut parts = Vec::new();
    for status in CandidateStatus::ALL {
        let n = candidates.iter().filter(|c| c.status == status).count();
        if n > 0 {
            parts.push(format!("{n} {}", status.as_str()));
        }
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

fn status(agent: Option<&str>, common: &Common) -> Result<ExitCode> {
    let config = load_config(common)?;
    let store = open_store(&config)?;
    let agents: Vec<&hone_config::AgentConfig> = match agent {
        Some(a) => vec![agent_config(&config, a)?],
        None => config.agents.values().collect(),
    };
    let mut rows = Vec::new();
    for a in agents {
        let (deployment, _) = deploy::current(store.as_ref(), a).map_err(anyhow::Error::msg)?;
        let cycles = store.cycles(Some(&a.name), 1)?;
        let (cycle, state, updated, candidates) = match cycles.first() {
            Some(c) => (
                c.id.clone(),
                match &c.error {
                    Some(e) => format!("failed: {e}"),
                    None => c.state.as_str().to_owned(),
                },
                time(c.updated_at),
                counts(&store.candidates(&a.name, Some(&c.id))?),
            ),
            None => ("-".into(), "never ran".into(), "-".into(), "-".into()),
        };
        rows.push(vec![
            a.name.clone(),
            cycle,
            state,
            updated,
            candidates,
            deployment.champion.to_string(),
            deployment
                .canary
                .map(|c| format!("{c} ({:.0}%)", deployment.canary_share * 100.0))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    table(
        &["AGENT", "CYCLE", "STEP", "UPDATED", "CANDIDATES", "CHAMPION", "CANARY"],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `hone front AGENT`: the agent's Pareto front (and the champion), with scores.
pub fn front(args: AgentArgs) -> Result<ExitCode> {
    let config = load_config(&args.common)?;
    let agent = agent_config(&config, &args.agent)?;
    let store = open_store(&config)?;
    let (deployment, _) = deploy::current(store.as_ref(), agent).map_err(anyhow::Error::msg)?;
    let all = store.candidates(&agent.name, None)?;
    let live = [
        CandidateStatus::OnFront,
        CandidateStatus::Approved,
        CandidateStatus::Canary,
        CandidateStatus::Champion,
    ];
    let mut rows = Vec::new();
    for c in all.iter().filter(|c| live.contains(&c.status)) {
        let s = c.scores.clone().unwrap_or_default();
        let role = if c.version_id == deployment.champion {
            "champion".to_owned()
        } else if deployment.canary.as_ref() == Some(&c.version_id) {
            "canary".to_owned()
        } else {
            c.status.as_str().to_owned()
        };
        rows.push(vec![
            c.version_id.to_string(),
            role,
            c.optimiser.clone(),
            s.target_mean.map_or("-".into(), |m| format!("{m:.3}")),
            format!("{:.0}%", s.target_pass_rate * 100.0),
            format!("{:.0}%", s.regression_pass_rate * 100.0),
            format!("{:.6}", s.mean_cost_usd),
            format!("{:.0}", s.mean_latency_ms),
            c.cycle_id.clone(),
            c.diff.clone(),
        ]);
    }
    if rows.is_empty() {
        note(format_args!(
            "agent `{}` has no candidate on its front (champion {}); `hone learn {} --once` runs a cycle",
            agent.name, deployment.champion, agent.name
        ));
        return Ok(ExitCode::SUCCESS);
    }
    out(&format!(
        "front of `{}` over {}",
        agent.name,
        agent
            .learn
            .objective
            .iter()
            .map(|o| o.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    table(
        &[
            "VERSION",
            "STATUS",
            "OPTIMISER",
            "REWARD",
            "PASS",
            "REGRESSION",
            "COST $",
            "LATENCY ms",
            "CYCLE",
            "CHANGE",
        ],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

fn find_candidate(store: &SqliteStore, config: &hone_config::Config, prefix: &str) -> Result<Candidate> {
    let mut found: Vec<Candidate> = Vec::new();
    for agent in config.agents.keys() {
        for c in store.candidates(agent, None)? {
            if c.version_id.as_str().starts_with(prefix) {
                found.retain(|f| f.version_id != c.version_id);
                found.push(c);
            }
        }
    }
    match found.len() {
        0 => bail!("no candidate `{prefix}` (see `hone front AGENT` or `hone history AGENT`)"),
        1 => Ok(found.remove(0)),
        _ => bail!(
            "`{prefix}` matches {} candidates ({}); give more of the id",
            found.len(),
            found
                .iter()
                .map(|c| c.version_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `hone approve CANDIDATE`: starts the canary.
pub fn approve(args: ApproveArgs) -> Result<ExitCode> {
    let config = load_config(&args.common)?;
    let store = open_store(&config)?;
    let candidate = find_candidate(&store, &config, &args.candidate)?;
    let agent = agent_config(&config, &candidate.agent)?;
    let change = runtime()?
        .block_on(deploy::start_canary(
            &config,
            store.as_ref(),
            agent,
            &candidate,
            &args.by,
        ))
        .map_err(anyhow::Error::msg)?;
    report(change)
}

/// `hone rollback AGENT`: the canary goes, or the previous champion returns, at once.
pub fn rollback(args: AgentArgs) -> Result<ExitCode> {
    let config = load_config(&args.common)?;
    let store = open_store(&config)?;
    let agent = agent_config(&config, &args.agent)?;
    let change = deploy::rollback(store.as_ref(), agent, "hone rollback", None).map_err(anyhow::Error::msg)?;
    report(change)
}

fn report(change: Change) -> Result<ExitCode> {
    match change {
        Change::Applied(s) | Change::AlreadyDone(s) => {
            out(&s)?;
            Ok(ExitCode::SUCCESS)
        }
        Change::Refused(s) => {
            note(format_args!("refused: {s}"));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `hone alerts [AGENT]`.
pub fn alerts(args: ListArgs) -> Result<ExitCode> {
    let config = load_config(&args.common)?;
    let store = open_store(&config)?;
    if let Some(a) = &args.agent {
        agent_config(&config, a)?;
    }
    let alerts = store.alerts(args.agent.as_deref(), args.limit)?;
    if args.json {
        for a in &alerts {
            out(&serde_json::to_string(a)?)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = alerts
        .iter()
        .map(|a| {
            vec![
                time(a.at),
                a.agent.clone(),
                a.version_id.to_string(),
                a.metric.clone(),
                format!("{:.3} ({} ep)", a.canary_rate, a.canary_episodes),
                format!("{:.3} ({} ep)", a.champion_rate, a.champion_episodes),
                format!("{:.4}", a.p_value),
                a.action.clone(),
                a.episodes.iter().take(3).cloned().collect::<Vec<_>>().join(" "),
            ]
        })
        .collect();
    table(
        &[
            "AT", "AGENT", "VERSION", "METRIC", "CANARY", "CHAMPION", "P", "ACTION", "EPISODES",
        ],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `hone history AGENT`: what changed, why, on what evidence.
pub fn history(args: ListArgs) -> Result<ExitCode> {
    let config = load_config(&args.common)?;
    let store = open_store(&config)?;
    let Some(agent) = &args.agent else {
        bail!("name the agent: hone history AGENT");
    };
    agent_config(&config, agent)?;
    let events = store.history(agent, args.limit)?;
    for e in &events {
        if args.json {
            out(&serde_json::to_string(e)?)?;
        } else {
            out(&format!("{}  {:<14} {}", time(e.at), e.kind, e.summary))?;
        }
    }
    if events.is_empty() && !args.json {
        note(format_args!("no history for `{agent}` yet"));
    }
    Ok(ExitCode::SUCCESS)
}
