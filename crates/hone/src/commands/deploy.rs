//! What happens to candidates after a cycle: `hone front AGENT` (the Pareto
//! front), `hone approve CANDIDATE` (start the canary), `hone rollback AGENT`,
//! `hone alerts [AGENT]` (raised by the online monitors) and `hone history
//! AGENT` (what changed, why, on what evidence). Everything is read from and
//! written to the store, so these work beside a running `hone serve` (whose
//! gateways follow the deployments within half a second).

use crate::context::{agent_config, load_config, open_existing_store, Common, GatewayArgs, GatewayHandle};
use anyhow::{bail, Result};
use clap::Args;
use hone_console::runtime;
use hone_console::{note, print_line, print_table, short_time};
use hone_learn::release::deploy::{self, Change};
use hone_store::CycleStore;
use hone_types::{Candidate, CandidateStatus};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The agent (its name in the config).
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
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this agent's (default: every agent's).
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

#[derive(Debug, Args)]
pub struct FrontArgs {
    /// The agent whose front to show (its name in the config).
    pub agent: String,
    /// Also the candidates off the front (pruned, rolled back, superseded),
    /// each with the reason.
    #[arg(long)]
    pub all: bool,
    /// Each candidate's whole change below the table (a rewritten prompt's
    /// unified diff, the lessons added and retired).
    #[arg(long)]
    pub diff: bool,
    /// One JSON document: the agent, its objective, champion and canary, and
    /// the candidates with every recorded field.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub common: Common,
}

/// `hone front AGENT`: the agent's Pareto front (and the champion), with scores.
pub fn front(args: FrontArgs) -> Result<ExitCode> {
    let config = load_config(&args.common)?;
    let agent = agent_config(&config, &args.agent)?;
    let store = open_existing_store(&config)?;
    let (deployment, _) = deploy::current(store.as_ref(), agent).map_err(anyhow::Error::msg)?;
    let all = store.candidates(&agent.name, None)?;
    let shown: Vec<&Candidate> = all.iter().filter(|c| args.all || c.status.is_live()).collect();
    let role = |c: &Candidate| deploy::role(&deployment, c).to_owned();
    let history = store.history(&agent.name, 100_000)?;
    // What users showed of it online: where no user's signal reached an
    // offline run, the only evidence of its reward.
    let online = |c: &Candidate| match deploy::online_evidence(&history, &c.version_id) {
        Some(evidence) => evidence,
        None if deployment.canary.as_ref() == Some(&c.version_id) => {
            format!("collecting on {:.0}%", deployment.canary_share * 100.0)
        }
        None => "-".to_owned(),
    };
    if args.json {
        let candidates: Vec<serde_json::Value> = shown
            .iter()
            .map(|c| {
                let mut value = serde_json::to_value(c).unwrap_or_default();
                value["role"] = serde_json::json!(role(c));
                value["online"] = serde_json::json!(online(c));
                value
            })
            .collect();
        let document = serde_json::json!({
            "agent": agent.name,
            "objective": agent.learn.objective.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
            "champion": deployment.champion,
            "canary": deployment.canary,
            "canary_share": deployment.canary_share,
            "candidates": candidates,
        });
        print_line(&serde_json::to_string_pretty(&document)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    for c in &shown {
        let s = c.scores.clone().unwrap_or_default();
        let offline = |shown: String| {
            if s.offline_blind {
                "users decide".to_owned()
            } else {
                shown
            }
        };
        let mut row = vec![
            c.version_id.to_string(),
            role(c),
            c.optimiser.clone(),
            offline(s.target_mean.map_or("-".into(), |m| format!("{m:.3}"))),
            offline(format!("{:.0}%", s.target_pass_rate * 100.0)),
            online(c),
            s.regression_pass_rate
                .map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
            format!("{:.6}", s.mean_cost_usd),
            format!("{:.0}", s.mean_latency_ms),
            c.training
                .as_ref()
                .map_or("-".into(), |t| format!("{:.4}", t.kl_to_base)),
            c.spend.map_or("-".into(), |s| s.to_string()),
            c.cycle_id.clone(),
            // The summary line; `--diff` shows the whole change.
            c.diff.lines().next().unwrap_or_default().to_owned(),
        ];
        if args.all {
            row.push(c.reason.clone().unwrap_or_default());
        }
        rows.push(row);
    }
    let hidden = all.len() - shown.len();
    if rows.is_empty() {
        match store.cycles(Some(&agent.name), 1)?.first() {
            Some(cycle) if !all.is_empty() => {
                let latest: Vec<&Candidate> = all.iter().filter(|c| c.cycle_id == cycle.id).collect();
                let pruned = latest.iter().filter(|c| c.status == CandidateStatus::Pruned).count();
                note(format_args!(
                    "agent `{}` has no candidate on its front (champion {}): cycle {} proposed {}, pruned {pruned}; \
                     `hone front {} --all` shows every candidate and why",
                    agent.name,
                    deployment.champion,
                    cycle.id,
                    latest.len(),
                    agent.name
                ));
            }
            Some(cycle) => note(format_args!(
                "agent `{}` has no candidate (champion {}): cycle {} is {}; `hone history {}` shows what it did",
                agent.name,
                deployment.champion,
                cycle.id,
                cycle.state.as_str(),
                agent.name
            )),
            None => note(format_args!(
                "agent `{}` has no candidate yet (champion {}); `hone learn {} --once` runs a cycle",
                agent.name, deployment.champion, agent.name
            )),
        }
        return Ok(ExitCode::SUCCESS);
    }
    print_line(&format!(
        "{} of `{}` over {}",
        if args.all { "candidates" } else { "front" },
        agent.name,
        agent
            .learn
            .objective
            .iter()
            .map(|o| o.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let mut header = vec![
        "VERSION",
        "STATUS",
        "OPTIMISER",
        "REWARD",
        "PASS",
        "ONLINE (USERS)",
        "REGRESSION",
        "COST $",
        "LATENCY ms",
        "KL TO BASE",
        "SPENT",
        "CYCLE",
        "CHANGE",
    ];
    if args.all {
        header.push("REASON");
    }
    print_table(&header, &rows)?;
    if hidden > 0 {
        print_line(&format!(
            "{hidden} more candidates off the front (pruned, rolled back or superseded): `--all` shows them and why"
        ))?;
    }
    if args.diff {
        for c in &shown {
            print_line(&format!("\n{} ({}):\n{}", c.version_id, c.optimiser, c.diff))?;
        }
    }
    // What stands in for users offline: the last measured reward model.
    if let Some(quality) = store
        .cycles(Some(&agent.name), 20)?
        .iter()
        .find_map(|c| c.detail.reward_model)
    {
        print_line(&format!(
            "reward model learned from users' signals: {}",
            quality.summary()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn find_candidate(store: &dyn CycleStore, config: &hone_config::Config, prefix: &str) -> Result<Candidate> {
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
    let store = open_existing_store(&config)?;
    let candidate = find_candidate(store.as_ref(), &config, &args.candidate)?;
    let agent = agent_config(&config, &candidate.agent)?;
    let change = runtime()?.block_on(async {
        // A candidate with an adapter on vLLM is loaded through a gateway.
        let gateway = GatewayHandle::open(&config, &args.gateway, Duration::from_secs(60)).await?;
        let change = deploy::start_canary(&config, &gateway.client, store.as_ref(), agent, &candidate, &args.by).await;
        gateway.close().await?;
        anyhow::Ok(change?)
    })?;
    print_change(change)
}

/// `hone rollback AGENT`: the canary goes, or the previous champion returns, at once.
pub fn rollback(args: AgentArgs) -> Result<ExitCode> {
    let config = load_config(&args.common)?;
    let store = open_existing_store(&config)?;
    let agent = agent_config(&config, &args.agent)?;
    let change = deploy::rollback(store.as_ref(), agent, "hone rollback", None).map_err(anyhow::Error::msg)?;
    print_change(change)
}

fn print_change(change: Change) -> Result<ExitCode> {
    match change {
        Change::Applied(s) | Change::AlreadyDone(s) => {
            print_line(&s)?;
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
    let store = open_existing_store(&config)?;
    if let Some(a) = &args.agent {
        agent_config(&config, a)?;
    }
    let alerts = store.alerts(args.agent.as_deref(), args.limit)?;
    if args.json {
        for a in &alerts {
            print_line(&serde_json::to_string(a)?)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = alerts
        .iter()
        .map(|a| {
            vec![
                short_time(a.at),
                a.agent.clone(),
                a.version_id.to_string(),
                a.firing.metric.clone(),
                format!("{:.3} ({} ep)", a.firing.canary_rate, a.firing.canary_episodes),
                format!("{:.3} ({} ep)", a.firing.champion_rate, a.firing.champion_episodes),
                format!("{:.4}", a.firing.p_value),
                a.action.as_str().to_owned(),
                a.firing.episodes.iter().take(3).cloned().collect::<Vec<_>>().join(" "),
            ]
        })
        .collect();
    print_table(
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
    let store = open_existing_store(&config)?;
    let Some(agent) = &args.agent else {
        bail!("name the agent: hone history AGENT");
    };
    agent_config(&config, agent)?;
    let events = store.history(agent, args.limit)?;
    for e in &events {
        if args.json {
            print_line(&serde_json::to_string(e)?)?;
        } else {
            // A diff's further lines are indented under the summary.
            let head = format!("{}  {:<14} ", short_time(e.at), e.kind);
            let indent = " ".repeat(head.chars().count());
            print_line(&format!("{head}{}", e.summary.replace('\n', &format!("\n{indent}"))))?;
        }
    }
    if events.is_empty() && !args.json {
        note(format_args!("no history for `{agent}` yet"));
    }
    Ok(ExitCode::SUCCESS)
}
