//! The validated config every other crate reads. Everything here has passed
//! [`crate::load_str`]: references resolve, shares add up, addresses parse.

use hone_types::{MetricLevel, MetricType, VersionId, VersionSpec};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    pub gateway: GatewayConfig,
    pub store: StoreConfig,
    pub recorder: RecorderConfig,
    pub providers: BTreeMap<String, ProviderConfig>,
    pub agents: BTreeMap<String, AgentConfig>,
    pub metrics: BTreeMap<String, MetricConfig>,
    pub learn: crate::learn::LearnBudget,
}

impl Config {
    /// Points the data directory somewhere else (`--data-dir`), carrying the
    /// store path along when it was relative to the old one, and a local
    /// provider's adapters directory when it was the default one.
    pub fn set_data_dir(&mut self, dir: PathBuf) {
        if let Ok(relative) = self.store.path.strip_prefix(&self.gateway.data_dir) {
            self.store.path = dir.join(relative);
        }
        let old_default = default_adapters_dir(&self.gateway.data_dir);
        for local in self.providers.values_mut().filter_map(|p| p.local.as_mut()) {
            if local.adapters_dir == old_default {
                local.adapters_dir = default_adapters_dir(&dir);
            }
        }
        self.gateway.data_dir = dir;
    }

    /// Where adapters named by versions of `provider` live: a local
    /// provider's resolved `adapters_dir`; for any other (or unknown)
    /// provider `<data_dir>/adapters`, where the trainer writes adapters for
    /// a remote OpenAI-compatible server (vLLM) to load.
    pub fn adapters_dir(&self, provider: &str) -> PathBuf {
        match self.providers.get(provider).and_then(|p| p.local.as_ref()) {
            Some(local) => local.adapters_dir.clone(),
            None => default_adapters_dir(&self.gateway.data_dir),
        }
    }
}

/// The adapters directory when none is configured: `<data_dir>/adapters`.
pub(crate) fn default_adapters_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("adapters")
}

/// Default request-body limit: 32 MiB, room for a few images as data URLs.
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub max_body_bytes: usize,
    /// Threads serving HTTP. 1 (the default) runs everything on one
    /// event-loop thread, which costs the least CPU per call; more spread
    /// calls over a work-stealing pool. The recorder, the store and blocking
    /// work have their own threads either way.
    pub threads: usize,
    /// Most client connections open at once; `None`: half the file
    /// descriptors the process may open (the rest serve upstreams and files).
    pub max_connections: Option<usize>,
    /// How long a client may take to send a request's headers, and how long
    /// an idle keep-alive connection is kept.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for in-flight calls and the recorder.
    pub shutdown_grace: Duration,
    /// Serve beyond loopback with `/admin/*` open (no admin token configured).
    pub insecure_open_admin: bool,
    pub admin_token_env: Option<String>,
    pub api_keys: Vec<ApiKeyConfig>,
}

#[derive(Debug, Clone)]
pub struct ApiKeyConfig {
    pub name: String,
    /// Lowercase hex SHA-256 of the key.
    pub sha256: String,
    /// `None` means every agent.
    pub agents: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// Committed data survives a process crash (`kill -9`).
    Normal,
    /// Committed data also survives a power loss (an fsync per commit batch).
    Full,
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub path: PathBuf,
    pub synchronous: Synchronous,
}

#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// Most calls written in one transaction.
    pub max_batch: usize,
    /// How often an unavailable database is retried (calls wait in the journal).
    pub store_retry: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
    /// The embedded engine (`hone-engine`), in-process.
    Local,
}

/// Number format of a local model's weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalDType {
    F32,
    Bf16,
    F16,
}

/// Settings of a `local` provider.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalOptions {
    pub dtype: LocalDType,
    /// `cpu` or `cuda`.
    pub device: String,
    pub max_batch: usize,
    /// Where adapters named by versions are found: the configured
    /// `adapters_dir`, or `<data_dir>/adapters` (resolved at load).
    pub adapters_dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

impl Price {
    pub fn cost_usd(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        (prompt_tokens as f64 * self.input_per_mtok + completion_tokens as f64 * self.output_per_mtok) / 1e6
    }
}

#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    /// Without a trailing slash.
    pub base_url: String,
    pub api_key_env: Option<String>,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub max_retries: u32,
    pub backoff: Duration,
    pub api_version: Option<String>,
    pub prices: BTreeMap<String, Price>,
    /// `Some` for `type = "local"`.
    pub local: Option<LocalOptions>,
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub name: String,
    pub description: Option<String>,
    /// Label → version, for every version declared under the agent.
    pub versions: BTreeMap<String, DeclaredVersion>,
    pub deployment: DeploymentConfig,
    /// How episodes are scored (defaults when the config has no `reward` table).
    pub reward: crate::reward::RewardSpec,
    /// The learning cycle (no optimisers: the agent is only monitored).
    pub learn: crate::learn::LearnSpec,
}

impl AgentConfig {
    /// Resolves a label (`v1`) or an id to a declared version.
    pub fn version(&self, label_or_id: &str) -> Option<&DeclaredVersion> {
        self.versions
            .get(label_or_id)
            .or_else(|| self.versions.values().find(|v| v.id.as_str() == label_or_id))
    }
}

#[derive(Debug, Clone)]
pub struct DeclaredVersion {
    pub label: String,
    pub id: VersionId,
    pub spec: VersionSpec,
}

/// Traffic split: canaries get their shares of new episodes, the champion the rest.
#[derive(Debug, Clone)]
pub struct DeploymentConfig {
    pub champion: String,
    pub canaries: Vec<(String, f64)>,
    pub policy: crate::learn::DeploymentPolicy,
    /// Share of new episodes a learner's canary gets.
    pub canary_share: f64,
    /// Canary episodes with rewards before promotion is decided.
    pub canary_episodes: usize,
}

impl DeploymentConfig {
    pub fn new(champion: String) -> Self {
        Self {
            champion,
            canaries: Vec::new(),
            policy: crate::learn::DeploymentPolicy::Manual,
            canary_share: 0.1,
            canary_episodes: 50,
        }
    }
}

#[derive(Debug, Clone)]
pub struct MetricConfig {
    pub name: String,
    pub kind: MetricType,
    pub level: MetricLevel,
    pub description: Option<String>,
}
