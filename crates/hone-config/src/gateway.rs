//! The `[gateway]` table: where and how the HTTP server listens, where its
//! data lives, and the `[[gateway.api_keys]]` clients may call it with.
//!
//! ```toml
//! [gateway]
//! listen = "127.0.0.1:7070"
//! data_dir = "./hone-data"
//! [[gateway.api_keys]]
//! name = "ci"
//! sha256 = "…"              # `hone key new` prints it
//! agents = ["assistant"]    # or ["*"]
//! ```

use crate::env::{is_env_name, Env};
use crate::error::ConfigError;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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

impl GatewayConfig {
    /// Validates `[gateway]` except its API keys, which name agents and so
    /// are checked by [`api_keys`] once the agents are known (`raw.api_keys`
    /// is ignored here and `api_keys` left empty).
    pub(crate) fn from_raw(raw: RawGateway, env: &Env) -> Result<Self, ConfigError> {
        let listen = listen(raw.listen.as_deref(), env)?;
        let data_dir = env.path("gateway.data_dir", raw.data_dir.as_deref().unwrap_or("./hone-data"))?;
        let max_body_bytes = match raw.max_body_bytes {
            Some(0) => return Err(ConfigError::at("gateway.max_body_bytes", "must be greater than 0")),
            Some(n) => usize::try_from(n).map_err(|_| ConfigError::at("gateway.max_body_bytes", "is too large"))?,
            None => DEFAULT_MAX_BODY_BYTES,
        };
        let max_connections = match raw.max_connections {
            Some(0) => return Err(ConfigError::at("gateway.max_connections", "must be at least 1")),
            n => n,
        };
        let header_read_timeout = positive_ms("gateway.header_read_timeout_ms", raw.header_read_timeout_ms, 15_000)?;
        let shutdown_grace = positive_ms("gateway.shutdown_grace_ms", raw.shutdown_grace_ms, 30_000)?;
        let threads = match raw.threads {
            Some(0) => return Err(ConfigError::at("gateway.threads", "must be at least 1")),
            Some(n) => n,
            None => 1,
        };
        if let Some(name) = &raw.admin_token_env {
            if !is_env_name(name) {
                return Err(ConfigError::at(
                    "gateway.admin_token_env",
                    "must be the name of an environment variable, not the token itself",
                ));
            }
        }
        Ok(GatewayConfig {
            listen,
            data_dir,
            max_body_bytes,
            threads,
            max_connections,
            header_read_timeout,
            shutdown_grace,
            insecure_open_admin: raw.insecure_open_admin.unwrap_or(false),
            admin_token_env: raw.admin_token_env,
            api_keys: Vec::new(),
        })
    }
}

/// `gateway.listen`, expanded and parsed (default `127.0.0.1:7070`).
fn listen(raw: Option<&str>, env: &Env) -> Result<SocketAddr, ConfigError> {
    let listen = env.expand("gateway.listen", raw.unwrap_or("127.0.0.1:7070"))?;
    // `localhost` is the loopback address, as the clients' URLs say it.
    let address = match listen.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => listen.clone(),
    };
    address.parse().map_err(|_| {
        ConfigError::at(
            "gateway.listen",
            format!("`{listen}` is not a socket address such as `127.0.0.1:7070` or `localhost:7070`"),
        )
    })
}

/// A duration in milliseconds that may not be 0.
fn positive_ms(key: &str, value: Option<u64>, default: u64) -> Result<Duration, ConfigError> {
    match value {
        Some(0) => Err(ConfigError::at(key, "must be greater than 0")),
        n => Ok(Duration::from_millis(n.unwrap_or(default))),
    }
}

/// Validates `[[gateway.api_keys]]`; `is_agent` says whether an agent is declared.
pub(crate) fn api_keys(raw: Vec<RawApiKey>, is_agent: &dyn Fn(&str) -> bool) -> Result<Vec<ApiKeyConfig>, ConfigError> {
    let mut api_keys = Vec::new();
    for (i, key) in raw.into_iter().enumerate() {
        let kfield = format!("gateway.api_keys[{i}]");
        let sha = key.sha256.to_ascii_lowercase();
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ConfigError::at(
                format!("{kfield}.sha256"),
                "must be the 64 hex digits of the key's SHA-256 (`hone key new` prints it)",
            ));
        }
        let all = key.agents.iter().any(|a| a == "*");
        for agent in key.agents.iter().filter(|a| *a != "*") {
            if !is_agent(agent) {
                return Err(ConfigError::at(
                    format!("{kfield}.agents"),
                    format!("unknown agent `{agent}`"),
                ));
            }
        }
        api_keys.push(ApiKeyConfig {
            name: key.name,
            sha256: sha,
            agents: (!all).then_some(key.agents),
        });
    }
    Ok(api_keys)
}
