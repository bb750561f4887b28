//! The whole file: [`RawConfig`] as written, [`Config`] as every other crate
//! reads it, and the conversion that validates the sections in turn. Every
//! section rejects unknown keys, so a typo is reported with its name.

use crate::agents::{self, AgentConfig, RawAgent};
use crate::artefacts::{default_cache_dir, default_memory_dir, ArtefactsConfig, RawArtefacts};
use crate::env::Env;
use crate::error::ConfigError;
use crate::gateway::{self, GatewayConfig, RawGateway};
use crate::learn::{LearnBudget, RawLearnBudget};
use crate::metrics::{self, MetricConfig, RawMetric};
use crate::providers::{self, default_adapters_dir, ProviderConfig, RawProvider};
use crate::recorder::{RawRecorder, RecorderConfig};
use crate::store::{RawStore, StoreConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

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
    pub artefacts: RawArtefacts,
    #[serde(default)]
    pub providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    pub agents: BTreeMap<String, RawAgent>,
    #[serde(default)]
    pub metrics: BTreeMap<String, RawMetric>,
    #[serde(default)]
    pub learn: RawLearnBudget,
}

/// The validated config. Everything here has passed [`crate::load_str`]:
/// references resolve, shares add up, addresses parse.
#[derive(Debug, Clone)]
pub struct Config {
    pub gateway: GatewayConfig,
    pub store: StoreConfig,
    pub recorder: RecorderConfig,
    pub artefacts: ArtefactsConfig,
    pub providers: BTreeMap<String, ProviderConfig>,
    pub agents: BTreeMap<String, AgentConfig>,
    pub metrics: BTreeMap<String, MetricConfig>,
    pub learn: LearnBudget,
}

impl Config {
    /// Validates each section in turn; the first error found is returned.
    pub(crate) fn from_raw(raw: RawConfig, env: &Env) -> Result<Self, ConfigError> {
        let mut raw_gateway = raw.gateway;
        let raw_api_keys = std::mem::take(&mut raw_gateway.api_keys);
        let mut gateway = GatewayConfig::from_raw(raw_gateway, env)?;
        let data_dir = gateway.data_dir.clone();
        let mut providers = providers::from_raw(raw.providers, &data_dir, env)?;
        let agents = agents::from_raw(raw.agents, &mut providers, &data_dir, env)?;
        // API keys name agents, so they are checked once the agents are known.
        gateway.api_keys = gateway::api_keys(raw_api_keys, &|name| agents.contains_key(name))?;
        Ok(Config {
            gateway,
            store: StoreConfig::from_raw(raw.store, &data_dir, env)?,
            recorder: RecorderConfig::from_raw(raw.recorder)?,
            artefacts: ArtefactsConfig::from_raw(raw.artefacts, &data_dir, env)?,
            providers,
            agents,
            metrics: metrics::from_raw(raw.metrics)?,
            learn: LearnBudget::from_raw(raw.learn)?,
        })
    }

    /// Points the data directory somewhere else (`--data-dir`), carrying the
    /// store path along when it was relative to the old one, and a local
    /// provider's adapters directory when it was the default one.
    pub fn set_data_dir(&mut self, dir: PathBuf) {
        if let crate::StoreBackend::Sqlite { path } = &mut self.store.backend {
            if let Ok(relative) = path.strip_prefix(&self.gateway.data_dir) {
                *path = dir.join(relative);
            }
        }
        let old_default = default_adapters_dir(&self.gateway.data_dir);
        for local in self.providers.values_mut().filter_map(|p| p.local.as_mut()) {
            if local.adapters_dir == old_default {
                local.adapters_dir = default_adapters_dir(&dir);
            }
        }
        if self.artefacts.cache_dir == default_cache_dir(&self.gateway.data_dir) {
            self.artefacts.cache_dir = default_cache_dir(&dir);
        }
        if self.artefacts.memory_dir == default_memory_dir(&self.gateway.data_dir) {
            self.artefacts.memory_dir = default_memory_dir(&dir);
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
