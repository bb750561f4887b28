//! `hone rewards recompute AGENT`: rewards every recorded episode again under
//! the agent's current reward spec. A judge in the spec calls its model
//! through a gateway (`--gateway`, or one started in-process), so those calls
//! are recorded too.

use crate::context::{agent_config, load_config, open_existing_store, Common, GatewayArgs, GatewayHandle};
use anyhow::Result;
use clap::Subcommand;
use hone_console::note;
use hone_console::runtime;
use hone_learn::client::ChatClient;
use hone_learn::scoring::reward::{recompute, Rewarder};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum RewardsCommand {
    /// Recompute every recorded episode's reward under the agent's current
    /// reward spec (stored under the spec's version).
    Recompute {
        /// The agent whose episodes to score again.
        agent: String,
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
}

pub fn run(command: RewardsCommand) -> Result<ExitCode> {
    let RewardsCommand::Recompute { agent, common, gateway } = command;
    let config = load_config(&common)?;
    let spec = agent_config(&config, &agent)?.reward.clone();
    let store = open_existing_store(&config)?;
    runtime()?.block_on(async {
        let gateway = match spec.judge {
            Some(_) => Some(GatewayHandle::open(&config, &gateway, Duration::from_secs(120)).await?),
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
        let report = recompute(store.as_ref(), &rewarder, hone_types::time::now_ms(), &mut |n| {
            note(format_args!("  {n} episodes"));
        })
        .await?;
        if let Some(g) = gateway {
            g.close().await?;
        }
        writeln!(
            std::io::stdout(),
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
