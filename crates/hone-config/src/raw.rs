//! The config file as written: every table rejects unknown keys so that a
//! typo is reported with its name instead of being ignored.

use hone_types::{MetricLevel, MetricType};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub gateway: RawGateway,
    #[serde(default)]
    pub store: Option<RawStore>,
    #[serde(default)]
    pub recorder: RawRecorder,
    #[serde(default)]
    pub providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    pub agents: BTreeMap<String, RawAgent>,
    #[serde(default)]
    pub metrics: BTreeMap<String, RawMetric>,
    #[serde(default)]
    pub learn: crate::learn::RawLearnBudget,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGateway {
    pub listen: Option<String>,
    pub data_dir: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub threads: Option<usize>,
    /// Most client connections open at once (default: half the file
    /// descriptors the process may open).
    pub max_connections: Option<usize>,
    /// How long a client may take to send a request's headers (also how long
    /// an idle keep-alive connection stays open).
    pub header_read_timeout_ms: Option<u64>,
    /// How long shutdown waits for in-flight calls before giving up on them.
    pub shutdown_grace_ms: Option<u64>,
    /// Allow serving beyond loopback with `/admin/*` open (no admin token).
    pub insecure_open_admin: Option<bool>,
    /// Name of the environment variable holding the admin token.
    pub admin_token_env: Option<String>,
    #[serde(default)]
    pub api_keys: Vec<RawApiKey>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApiKey {
    pub name: String,
    /// Hex SHA-256 of the key (`hone key new` prints it).
    pub sha256: String,
    /// Agents this key may call; `["*"]` for all.
    pub agents: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RawStore {
    Sqlite(RawSqlite),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSqlite {
    pub path: Option<String>,
    /// `normal` (survives a process crash) or `full` (also a power loss).
    pub synchronous: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecorder {
    pub max_batch: Option<usize>,
    #[serde(alias = "spool_retry_ms")]
    pub store_retry_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RawProvider {
    #[serde(rename = "openai")]
    OpenAi(RawHttpProvider),
    Anthropic(RawHttpProvider),
    Local(RawLocalProvider),
}

/// `type = "local"`: the embedded engine, in-process.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLocalProvider {
    /// `f32` (default), `bf16` or `f16`.
    pub dtype: Option<String>,
    /// `cpu` (default) or `cuda` (a build with `--features cuda`).
    pub device: Option<String>,
    /// Most samples decoded together (default 16).
    pub max_batch: Option<usize>,
    /// Where adapters named by versions are found (default `<data_dir>/adapters`).
    pub adapters_dir: Option<String>,
    #[serde(default)]
    pub prices: BTreeMap<String, RawPrice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpProvider {
    pub base_url: Option<String>,
    /// Name of the environment variable that holds the key (never the key).
    pub api_key_env: Option<String>,
    pub timeout_ms: Option<u64>,
    pub connect_timeout_ms: Option<u64>,
    pub max_retries: Option<u32>,
    pub backoff_ms: Option<u64>,
    /// Anthropic only: the `anthropic-version` header.
    pub api_version: Option<String>,
    /// USD per million tokens, per upstream model name.
    #[serde(default)]
    pub prices: BTreeMap<String, RawPrice>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    pub description: Option<String>,
    #[serde(default)]
    pub versions: BTreeMap<String, RawVersion>,
    pub deployment: Option<RawDeployment>,
    pub reward: Option<crate::reward::RawReward>,
    pub learn: Option<crate::learn::RawLearn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVersion {
    pub provider: RawProviderRef,
    /// Required with a provider name; inline providers carry their own.
    pub model: Option<String>,
    /// A LoRA adapter (local providers).
    pub adapter: Option<String>,
    #[serde(default)]
    pub fallbacks: Vec<RawRoute>,
    /// System prompt, prepended to the client's messages.
    pub system: Option<String>,
    /// Path of a file holding the system prompt (relative to the config file).
    pub system_file: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_tokens: Option<u32>,
    pub reasoning_effort: Option<String>,
}

/// A version's provider: a declared provider's name, or an inline local
/// one, `{ type = "local", model = "PATH", adapter = "NAME" }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawProviderRef {
    Name(String),
    Inline(RawInlineProvider),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInlineProvider {
    #[serde(rename = "type")]
    pub kind: String,
    pub model: String,
    pub adapter: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub provider: String,
    pub model: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDeployment {
    pub champion: String,
    /// Canary version label → share of new episodes (0 < share < 1).
    #[serde(default)]
    pub canaries: BTreeMap<String, f64>,
    /// `"manual"` (default) or `{ type = "auto", min_gain, max_cost_ratio }`.
    pub policy: Option<crate::learn::RawPolicy>,
    /// Share of new episodes a learner's canary gets (default 0.1).
    pub canary_share: Option<f64>,
    /// Canary episodes (with rewards) before promotion is decided (default 50).
    pub canary_episodes: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetric {
    #[serde(rename = "type")]
    pub kind: MetricType,
    pub level: MetricLevel,
    pub description: Option<String>,
}
