//! `hone learn [AGENT…] [--once]` (the learning loop, or one cycle per
//! agent and a look at its canary), `hone learn status` (each agent's
//! latest cycle, candidates and deployment) and `hone learn cancel AGENT`. Everything is read from and
//! written to the store, so this works beside a running `hone serve`; model
//! calls go through a gateway (`--gateway`, or one started in-process).

use crate::context::{agent_config, load_config, open_existing_store, open_store, Common, GatewayArgs, GatewayHandle};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use hone_console::runtime;
use hone_console::{note, print_table, short_time};
use hone_learn::cycle::Learner;
use hone_learn::release::deploy;
use hone_learn::watch::Verdict;
use hone_types::{Candidate, CandidateStatus, CycleState};
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
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

#[derive(Debug, Subcommand)]
pub enum LearnCommand {
    /// Cycles, their steps, candidates and deployments.
    Status {
        /// Only this agent (default: every agent the config declares).
        agent: Option<String>,
        /// Also the agents hone records its own calls under (`hone-judge`,
        /// `hone-reflector`).
        #[arg(long)]
        all: bool,
        /// One JSON document (an array, one object per agent) instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Cancels the agent's open cycle: it ends `failed` ("cancelled by the
    /// operator"); the `hone learn` running it stops after its current
    /// step, and a training job (TRL's processes too) within seconds.
    Cancel {
        /// The agent whose cycle to cancel.
        agent: String,
        #[command(flatten)]
        common: Common,
    },
}

pub fn run(args: LearnArgs) -> Result<ExitCode> {
    match args.command {
        Some(LearnCommand::Status {
            agent,
            all,
            json,
            common,
        }) => return status(agent.as_deref(), all, json, &common),
        Some(LearnCommand::Cancel { agent, common }) => return cancel(&agent, &common),
        None => {}
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
        let gateway = GatewayHandle::open(&config, &args.gateway, Duration::from_secs(300)).await?;
        let learner = Arc::new(Learner {
            config: Arc::new(config.clone()),
            store: store.clone(),
            gateway: gateway.client.clone(),
            recorder: gateway.recorder.clone(),
            progress: Arc::new(|agent: &str, line: &str| note(format_args!("{agent}: {line}"))),
            pause_at,
            leads: Default::default(),
            stand_ins: Default::default(),
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
                            describe_verdict(&verdict)
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

fn describe_verdict(v: &Verdict) -> String {
    match v {
        Verdict::NoCanary => "none".into(),
        Verdict::Waiting(n) => format!("collecting ({n} rewarded canary episodes)"),
        Verdict::Promoted(s) | Verdict::RolledBack(s) | Verdict::Alerted(s) => s.clone(),
    }
}

fn count_by_status(candidates: &[Candidate]) -> String {
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

fn cancel(agent: &str, common: &Common) -> Result<ExitCode> {
    let config = load_config(common)?;
    agent_config(&config, agent)?;
    let store = open_existing_store(&config)?;
    match hone_learn::cycle::cancel::cancel(store.as_ref(), agent)? {
        Some(cycle) => {
            hone_console::print_line(&format!(
                "cancelled cycle {} of {agent} at {} (a `hone learn` running it stops after its current step; a training job within seconds)",
                cycle.id,
                cycle.state.as_str()
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        None => bail!("agent `{agent}` has no open cycle to cancel (`hone learn status {agent}` shows its latest)"),
    }
}

fn status(agent: Option<&str>, all: bool, json: bool, common: &Common) -> Result<ExitCode> {
    let config = load_config(common)?;
    let store = open_existing_store(&config)?;
    let agents: Vec<&hone_config::AgentConfig> = match agent {
        Some(a) => vec![agent_config(&config, a)?],
        None if all => config.agents.values().collect(),
        None => config.user_agents().collect(),
    };
    let mut rows = Vec::new();
    let mut objects = Vec::new();
    for a in agents {
        let (deployment, _) = deploy::current(store.as_ref(), a).map_err(anyhow::Error::msg)?;
        let cycles = store.cycles(Some(&a.name), 1)?;
        if json {
            let latest = match cycles.first() {
                Some(c) => {
                    let candidates = store.candidates(&a.name, Some(&c.id))?;
                    let mut by_status = serde_json::Map::new();
                    for status in CandidateStatus::ALL {
                        let n = candidates.iter().filter(|x| x.status == status).count();
                        if n > 0 {
                            by_status.insert(status.as_str().to_owned(), n.into());
                        }
                    }
                    serde_json::json!({"id": c.id, "step": c.state.as_str(), "error": c.error,
                        "trigger": c.trigger, "started_at": c.started_at, "updated_at": c.updated_at,
                        "candidates": by_status})
                }
                None => serde_json::Value::Null,
            };
            objects.push(serde_json::json!({"agent": a.name, "cycle": latest,
                "champion": deployment.champion, "canary": deployment.canary,
                "canary_share": deployment.canary_share}));
            continue;
        }
        let (cycle, state, updated, candidates) = match cycles.first() {
            Some(c) => (
                c.id.clone(),
                match &c.error {
                    Some(e) => format!("failed: {e}"),
                    None => c.state.as_str().to_owned(),
                },
                short_time(c.updated_at),
                count_by_status(&store.candidates(&a.name, Some(&c.id))?),
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
    if json {
        hone_console::print_line(&serde_json::to_string_pretty(&objects)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_table(
        &["AGENT", "CYCLE", "STEP", "UPDATED", "CANDIDATES", "CHAMPION", "CANARY"],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}
