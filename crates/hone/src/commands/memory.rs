//! `hone memory build --agent A`: builds a kNN-LM datastore from the agent's
//! successful episodes (their recorded token ids, keyed by a version's model
//! on the embedded engine) and prints its content hash — what a version's
//! `memory = { type = "knn-lm", datastore = "HASH", … }` names.

use crate::context::{agent_config, load_config, open_existing_store, resolve_version, Common};
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use hone_artefacts::Artefacts;
use hone_config::ProviderKind;
use hone_console::runtime;
use hone_console::{note, print_line};

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Build a datastore from the agent's successful episodes.
    Build {
        #[arg(long)]
        agent: String,
        /// Whose model keys the datastore (a label or id); default: the champion.
        #[arg(long)]
        version: Option<String>,
        /// Episodes with at least this reward under the agent's reward spec.
        #[arg(long, default_value_t = 0.5)]
        min_reward: f64,
        /// The most recent successful episodes taken.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        #[command(flatten)]
        common: Common,
    },
}

pub fn run(command: MemoryCommand) -> Result<()> {
    let MemoryCommand::Build {
        agent,
        version,
        min_reward,
        limit,
        common,
    } = command;
    let config = load_config(&common)?;
    let agent_config = agent_config(&config, &agent)?;
    let store = open_existing_store(&config)?;
    let (deployment, _) = hone_learn::release::deploy::current(store.as_ref(), agent_config)?;
    let version_id = match &version {
        Some(v) => resolve_version(&config, store.as_ref(), &agent, v)?,
        None => deployment.champion,
    };
    let spec = store
        .version(&version_id)?
        .map(|r| r.spec)
        .or_else(|| {
            agent_config
                .versions
                .values()
                .find(|v| v.id == version_id)
                .map(|v| v.spec.clone())
        })
        .with_context(|| format!("version {version_id} is not stored"))?;
    let Some(route) = spec.routes.first() else {
        bail!("version {version_id} has no route");
    };
    if config.providers.get(&route.provider).map(|p| p.kind) != Some(ProviderKind::Local) {
        bail!(
            "version {version_id} runs on provider `{}`; a datastore is keyed by the embedded engine's hidden states (a `local` provider)",
            route.provider
        );
    }
    let artefacts = Artefacts::new(&config.artefacts)?;
    let spec_version = agent_config.reward.version();
    note(format_args!(
        "building a kNN-LM datastore for `{agent}` from episodes with reward ≥ {min_reward} (spec {spec_version}), keyed by {}",
        route.model
    ));
    let episodes: Vec<_> = store
        .successes(&agent, &spec_version, min_reward, limit)?
        .into_iter()
        .map(|s| s.episode_id)
        .collect();
    let runtime = runtime()?;
    let built = runtime.block_on(hone_learn::data::memory::build(
        store.as_ref(),
        &artefacts,
        &config.adapters_dir(&route.provider),
        route,
        &episodes,
        None,
    ))?;
    if built.keys == 0 {
        bail!(
            "no successful episode of `{agent}` has recorded token ids ({} without tokens); serve it on the embedded engine and reward its episodes first (hone learn, or hone rewards recompute {agent})",
            built.without_tokens
        );
    }
    note(format_args!(
        "{} keys from {} calls of {} episodes ({} episodes without token ids, {} calls of another vocabulary left out) → {}",
        built.keys,
        built.calls,
        built.episodes,
        built.without_tokens,
        built.foreign_calls,
        built.path.display()
    ));
    if let Some(manifest) = runtime.block_on(artefacts.publish_datastore(&built.hash))? {
        note(format_args!(
            "published to {}/memory/{} ({})",
            artefacts.shared_url().unwrap_or_default(),
            built.hash,
            hone_artefacts::human_bytes(manifest.bytes())
        ));
    }
    print_line(&built.hash)?;
    note(format_args!(
        "use it in a version: memory = {{ type = \"knn-lm\", datastore = \"{}\", k = 16, lambda = 0.25 }}",
        built.hash
    ));
    Ok(())
}
