//! What the commands share: the `Common` arguments (config file, data
//! directory, gateway), loading the config, opening the store, the
//! in-process gateway (`GatewayHandle`), and finding agents,
//! versions and datasets by the names an operator types. No command's own
//! logic goes here, and nothing here prints (that is `hone-console`).

use anyhow::{bail, Context, Result};
use clap::Args;
use hone_config::Config;
use hone_learn::client::GatewayClient;
use hone_store::{CycleStore, Recorder};
use hone_types::{DatasetInfo, VersionId};
use std::path::{Path, PathBuf};
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
}

/// The gateway a command's model calls go through (commands that make some).
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// A running gateway over the same data directory (`http://127.0.0.1:7070`)
    /// to send this command's model calls through (so they are recorded
    /// there), and vLLM's adapter loads. Without it one is started
    /// in-process on a loopback port.
    #[arg(long, env = "HONE_GATEWAY")]
    gateway: Option<String>,
    /// API key for the gateway, when it requires one.
    #[arg(long, env = "HONE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

/// The config at `path`, or the built-in default without one.
pub fn load_config_file(path: Option<&Path>) -> Result<Config> {
    match path {
        Some(path) => hone_config::load_file(path).map_err(|e| anyhow::anyhow!("{e}")),
        None => hone_config::load_str(hone_config::DEFAULT_CONFIG, Path::new("."), &|n| std::env::var(n).ok())
            .map_err(|e| anyhow::anyhow!("built-in config: {e}")),
    }
}

/// The config named by `--config`, with `--data-dir` applied.
pub fn load_config(common: &Common) -> Result<Config> {
    let mut config = load_config_file(common.config.as_deref())?;
    if let Some(dir) = &common.data_dir {
        config.set_data_dir(dir.clone());
    }
    Ok(config)
}

/// The store, made if it does not exist yet (for commands that write).
pub fn open_store(config: &Config) -> Result<Arc<dyn CycleStore>> {
    Ok(hone_store::open(&config.store, hone_store::Wait::Patient)?)
}

/// The store, which must exist already: a command that reads (or acts on
/// what is recorded) never leaves an empty database behind a wrong path.
pub fn open_existing_store(config: &Config) -> Result<Arc<dyn CycleStore>> {
    if let Some(path) = config.store.sqlite_path() {
        if !path.exists() {
            anyhow::bail!(
                "no hone store at {} (`hone serve` or `hone demo` makes one there); `--config FILE` names the config \
                 whose data_dir holds yours, `--data-dir DIR` the directory",
                path.display()
            );
        }
    }
    open_store(config)
}

/// A gateway to call models through: the given one, or one started here.
pub struct GatewayHandle {
    pub client: GatewayClient,
    pub recorder: Option<Arc<Recorder>>,
    stop: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    )>,
    journal: Option<PathBuf>,
}

impl GatewayHandle {
    pub async fn open(config: &Config, common: &GatewayArgs, timeout: Duration) -> Result<Self> {
        // The admin API (loading an adapter into vLLM) takes the token the
        // config names, from the same environment as the gateway's.
        let admin_token = config
            .gateway
            .admin_token_env
            .as_ref()
            .and_then(|name| std::env::var(name).ok())
            .filter(|t| !t.is_empty());
        let client = |url: &str| -> Result<GatewayClient> {
            Ok(GatewayClient::new(url, common.api_key.clone(), timeout)?.with_admin_token(admin_token.clone()))
        };
        if let Some(url) = &common.gateway {
            return Ok(Self {
                client: client(url)?,
                recorder: None,
                stop: None,
                journal: None,
            });
        }
        // The in-process gateway gets a journal of its own, so it can never
        // touch the journal of a `hone serve` on the same data directory.
        let mut config = config.clone();
        // Local providers keep their adapters directory: hone-config resolved
        // it against the real data directory, not the journal's.
        let data_dir = config.gateway.data_dir.clone();
        let journal = data_dir.join(format!("cli-{}", std::process::id()));
        config.gateway.data_dir = journal.clone();
        let gateway = hone_gateway::Gateway::start(config).context("cannot start the in-process gateway")?;
        let recorder = gateway.state().recorder.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Awaited in `close`, which is what lets the recorder drain.
        #[allow(clippy::disallowed_methods, reason = "the handle is kept and awaited in `close`")]
        let task = tokio::spawn(gateway.serve(listener, async move {
            let _ = rx.await;
        }));
        Ok(Self {
            client: client(&url)?,
            recorder: Some(recorder),
            stop: Some((tx, task)),
            journal: Some(journal),
        })
    }

    /// Stops an in-process gateway after its recorder has drained.
    pub async fn close(self) -> Result<()> {
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

pub fn agent_config<'a>(config: &'a Config, agent: &str) -> Result<&'a hone_config::AgentConfig> {
    config.agents.get(agent).with_context(|| {
        format!(
            "agent `{agent}` is not in the config (configured: {})",
            config.agents.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    })
}

/// A version of `agent` by its label in the config or its stored id.
pub fn resolve_version(config: &Config, store: &dyn CycleStore, agent: &str, label_or_id: &str) -> Result<VersionId> {
    if let Some(v) = config.agents.get(agent).and_then(|a| a.version(label_or_id)) {
        return Ok(v.id.clone());
    }
    // A stored version id, or a unique prefix of one (as `hone front` and
    // `hone approve` show and take them).
    let wanted = label_or_id.to_ascii_lowercase();
    let matching: Vec<VersionId> = hone_store::Store::versions(store, Some(agent))?
        .into_iter()
        .filter(|v| v.id.as_str().starts_with(&wanted))
        .map(|v| v.id)
        .collect();
    match matching.as_slice() {
        [one] if !wanted.is_empty() => Ok(one.clone()),
        [] | [_] => bail!(
            "`{label_or_id}` is neither a version label of agent `{agent}` in the config nor a stored version id of it (or a prefix of one)"
        ),
        many => bail!(
            "`{label_or_id}` is the start of {} versions of agent `{agent}`; give more of the id",
            many.len()
        ),
    }
}

/// A dataset snapshot: `NAME` for the latest, or `NAME@N`.
pub fn find_dataset(store: &dyn CycleStore, name: &str) -> Result<DatasetInfo> {
    store
        .dataset(name)?
        .with_context(|| format!("no dataset `{name}` (see `hone dataset list`)"))
}
