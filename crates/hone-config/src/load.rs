//! Phase two of config loading: raw file → typed [`Config`], with every error
//! naming the key at fault (`agents.assistant.versions.v1.provider`).

use crate::env::expand_env;
use crate::learn::{DeploymentPolicy, LearnBudget, LearnSpec};
use crate::raw::{
    RawConfig, RawHttpProvider, RawLocalProvider, RawPrice, RawProvider, RawProviderRef, RawStore, RawVersion,
};
use crate::reward::{RewardSpec, JUDGE_AGENT};
use crate::typed::*;
use hone_types::{Route, VersionSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A config that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{}{}{message}",
    file.as_ref().map(|f| format!("{f}: ")).unwrap_or_default(),
    field.as_ref().map(|f| format!("`{f}`: ")).unwrap_or_default()
)]
pub struct ConfigError {
    /// The config file, when the config came from one.
    pub file: Option<String>,
    /// Dotted key path of the bad field, when one is to blame.
    pub field: Option<String>,
    pub message: String,
}

impl ConfigError {
    /// An error blamed on one key.
    pub fn at(field: impl Into<String>, message: impl Into<String>) -> Self {
        err(field, message)
    }
}

fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        file: None,
        field: Some(field.into()),
        message: message.into(),
    }
}

/// Reads and validates a config file; relative paths in it are resolved from
/// the file's directory.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: None,
        field: None,
        message: format!("cannot read config file {}: {e}", path.display()),
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    load_str(&text, base, &|name| std::env::var(name).ok()).map_err(|mut e| {
        e.file = Some(path.display().to_string());
        e
    })
}

/// Validates config text. `base_dir` anchors `system_file` paths; `lookup`
/// resolves `${VAR}` references.
pub fn load_str(text: &str, base_dir: &Path, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
        file: None,
        field: None,
        message: e.to_string().trim_end().to_owned(),
    })?;
    Loader { base_dir, lookup }.load(raw)
}

struct Loader<'a> {
    base_dir: &'a Path,
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn ms(value: Option<u64>, default: u64) -> Duration {
    Duration::from_millis(value.unwrap_or(default))
}

impl Loader<'_> {
    fn expand(&self, field: &str, value: &str) -> Result<String, ConfigError> {
        expand_env(value, self.lookup).map_err(|m| err(field, m))
    }

    fn load(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let listen_raw = self.expand(
            "gateway.listen",
            raw.gateway.listen.as_deref().unwrap_or("127.0.0.1:7070"),
        )?;
        let listen = listen_raw.parse().map_err(|_| {
            err(
                "gateway.listen",
                format!("`{listen_raw}` is not a socket address such as `127.0.0.1:7070`"),
            )
        })?;
        let data_dir = PathBuf::from(self.expand(
            "gateway.data_dir",
            raw.gateway.data_dir.as_deref().unwrap_or("./hone-data"),
        )?);
        let max_body_bytes = match raw.gateway.max_body_bytes {
            Some(0) => return Err(err("gateway.max_body_bytes", "must be greater than 0")),
            Some(n) => usize::try_from(n).map_err(|_| err("gateway.max_body_bytes", "is too large"))?,
            None => DEFAULT_MAX_BODY_BYTES,
        };
        let max_connections = match raw.gateway.max_connections {
            Some(0) => return Err(err("gateway.max_connections", "must be at least 1")),
            n => n,
        };
        let positive_ms = |key: &str, value: Option<u64>, default: u64| match value {
            Some(0) => Err(err(key, "must be greater than 0")),
            n => Ok(Duration::from_millis(n.unwrap_or(default))),
        };
        let header_read_timeout = positive_ms(
            "gateway.header_read_timeout_ms",
            raw.gateway.header_read_timeout_ms,
            15_000,
        )?;
        let shutdown_grace = positive_ms("gateway.shutdown_grace_ms", raw.gateway.shutdown_grace_ms, 30_000)?;
        let threads = match raw.gateway.threads {
            Some(0) => return Err(err("gateway.threads", "must be at least 1")),
            Some(n) => n,
            None => 1,
        };
        if let Some(name) = &raw.gateway.admin_token_env {
            if !is_env_name(name) {
                return Err(err(
                    "gateway.admin_token_env",
                    "must be the name of an environment variable, not the token itself",
                ));
            }
        }

        let mut providers = raw
            .providers
            .into_iter()
            .map(|(name, p)| Ok((name.clone(), self.provider(&name, p, &data_dir)?)))
            .collect::<Result<BTreeMap<_, _>, ConfigError>>()?;

        let mut agents = BTreeMap::new();
        let provider_names: Vec<String> = providers.keys().cloned().collect();
        for (name, agent) in raw.agents {
            let field = format!("agents.{name}");
            if name == JUDGE_AGENT {
                return Err(err(
                    &field,
                    format!("`{JUDGE_AGENT}` is reserved: the judge's own calls are recorded under it"),
                ));
            }
            if !is_name(&name) {
                return Err(err(&field, "agent names use letters, digits and `-_.` (at most 64)"));
            }
            if agent.versions.is_empty() {
                return Err(err(format!("{field}.versions"), "an agent needs at least one version"));
            }
            let mut versions = BTreeMap::new();
            for (label, version) in agent.versions {
                let vfield = format!("{field}.versions.{label}");
                if !is_name(&label) {
                    return Err(err(&vfield, "version labels use letters, digits and `-_.`"));
                }
                let spec = self.version(&vfield, &name, version, &mut providers, &data_dir)?;
                versions.insert(
                    label.clone(),
                    DeclaredVersion {
                        label,
                        id: spec.id(),
                        spec,
                    },
                );
            }
            let deployment = match agent.deployment {
                Some(d) => {
                    let dfield = format!("{field}.deployment");
                    if !versions.contains_key(&d.champion) {
                        return Err(err(
                            format!("{dfield}.champion"),
                            format!(
                                "`{}` is not a version of agent `{name}`; declared: {}",
                                d.champion,
                                list(versions.keys())
                            ),
                        ));
                    }
                    let mut total = 0.0;
                    for (label, share) in &d.canaries {
                        let cfield = format!("{dfield}.canaries.{label}");
                        if !versions.contains_key(label) {
                            return Err(err(cfield, format!("`{label}` is not a version of agent `{name}`")));
                        }
                        if *label == d.champion {
                            return Err(err(cfield, "the champion cannot also be a canary"));
                        }
                        if !(share.is_finite() && *share > 0.0 && *share < 1.0) {
                            return Err(err(
                                cfield,
                                format!("a canary share must be between 0 and 1 (exclusive), got {share}"),
                            ));
                        }
                        total += share;
                    }
                    if total >= 1.0 {
                        return Err(err(
                            format!("{dfield}.canaries"),
                            format!("canary shares add up to {total}; they must leave the champion a share"),
                        ));
                    }
                    let share = d.canary_share.unwrap_or(0.1);
                    if !(share.is_finite() && share > 0.0 && share < 1.0) {
                        return Err(err(
                            format!("{dfield}.canary_share"),
                            format!("must be between 0 and 1 (exclusive), got {share}"),
                        ));
                    }
                    let canary_episodes = d.canary_episodes.unwrap_or(50);
                    if canary_episodes == 0 {
                        return Err(err(format!("{dfield}.canary_episodes"), "must be at least 1"));
                    }
                    DeploymentConfig {
                        champion: d.champion,
                        canaries: d.canaries.into_iter().collect(),
                        policy: DeploymentPolicy::from_raw(&format!("{dfield}.policy"), d.policy)?,
                        canary_share: share,
                        canary_episodes,
                    }
                }
                None if versions.len() == 1 => {
                    DeploymentConfig::new(versions.keys().next().cloned().unwrap_or_default())
                }
                None => {
                    return Err(err(
                        format!("{field}.deployment"),
                        format!(
                            "agent `{name}` has {} versions; say which is the champion in [{field}.deployment]",
                            versions.len()
                        ),
                    ))
                }
            };
            let names: Vec<&str> = provider_names.iter().map(String::as_str).collect();
            let reward = RewardSpec::from_raw(&format!("{field}.reward"), agent.reward.unwrap_or_default(), &names)?;
            let learn = LearnSpec::from_raw(&format!("{field}.learn"), agent.learn.unwrap_or_default(), &names)?;
            agents.insert(
                name.clone(),
                AgentConfig {
                    name,
                    description: agent.description,
                    versions,
                    deployment,
                    reward,
                    learn,
                },
            );
        }
        if let Some(judge) = judge_agent(&agents) {
            agents.insert(JUDGE_AGENT.to_owned(), judge);
        }

        let mut api_keys = Vec::new();
        for (i, key) in raw.gateway.api_keys.into_iter().enumerate() {
            let kfield = format!("gateway.api_keys[{i}]");
            let sha = key.sha256.to_ascii_lowercase();
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err(
                    format!("{kfield}.sha256"),
                    "must be the 64 hex digits of the key's SHA-256 (`hone key new` prints it)",
                ));
            }
            let all = key.agents.iter().any(|a| a == "*");
            for agent in key.agents.iter().filter(|a| *a != "*") {
                if !agents.contains_key(agent) {
                    return Err(err(format!("{kfield}.agents"), format!("unknown agent `{agent}`")));
                }
            }
            api_keys.push(ApiKeyConfig {
                name: key.name,
                sha256: sha,
                agents: (!all).then_some(key.agents),
            });
        }

        let store = match raw.store {
            None => StoreConfig {
                path: data_dir.join("hone.db"),
                synchronous: Synchronous::Normal,
            },
            Some(RawStore::Sqlite(s)) => StoreConfig {
                path: match s.path {
                    Some(p) => PathBuf::from(self.expand("store.path", &p)?),
                    None => data_dir.join("hone.db"),
                },
                synchronous: match s.synchronous.as_deref() {
                    None | Some("normal") => Synchronous::Normal,
                    Some("full") => Synchronous::Full,
                    Some(other) => {
                        return Err(err(
                            "store.synchronous",
                            format!("`{other}` is not one of `normal`, `full`"),
                        ))
                    }
                },
            },
        };
        let recorder = RecorderConfig {
            max_batch: match raw.recorder.max_batch {
                Some(0) => return Err(err("recorder.max_batch", "must be at least 1")),
                Some(n) => n,
                None => 512,
            },
            store_retry: ms(raw.recorder.store_retry_ms, 1000),
        };
        let metrics = raw
            .metrics
            .into_iter()
            .map(|(name, m)| {
                if !is_name(&name) {
                    return Err(err(
                        format!("metrics.{name}"),
                        "metric names use letters, digits and `-_.`",
                    ));
                }
                Ok((
                    name.clone(),
                    MetricConfig {
                        name,
                        kind: m.kind,
                        level: m.level,
                        description: m.description,
                    },
                ))
            })
            .collect::<Result<_, _>>()?;

        Ok(Config {
            gateway: GatewayConfig {
                listen,
                data_dir,
                max_body_bytes,
                threads,
                max_connections,
                header_read_timeout,
                shutdown_grace,
                insecure_open_admin: raw.gateway.insecure_open_admin.unwrap_or(false),
                admin_token_env: raw.gateway.admin_token_env,
                api_keys,
            },
            store,
            recorder,
            providers,
            agents,
            metrics,
            learn: LearnBudget::from_raw(raw.learn)?,
        })
    }

    fn provider(&self, name: &str, raw: RawProvider, data_dir: &Path) -> Result<ProviderConfig, ConfigError> {
        let field = format!("providers.{name}");
        if !is_name(name) {
            return Err(err(&field, "provider names use letters, digits and `-_.`"));
        }
        let (kind, p, default_url): (_, RawHttpProvider, _) = match raw {
            RawProvider::OpenAi(p) => (ProviderKind::OpenAi, p, None),
            RawProvider::Anthropic(p) => (ProviderKind::Anthropic, p, Some("https://api.anthropic.com")),
            RawProvider::Local(p) => return self.local_provider(name, p, data_dir),
        };
        let base_url = match (&p.base_url, default_url) {
            (Some(url), _) => self.expand(&format!("{field}.base_url"), url)?,
            (None, Some(url)) => url.to_owned(),
            (None, None) => {
                return Err(err(
                    format!("{field}.base_url"),
                    "is required for an OpenAI-compatible provider",
                ))
            }
        };
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(err(
                format!("{field}.base_url"),
                format!("`{base_url}` must start with http:// or https://"),
            ));
        }
        if let Some(env) = &p.api_key_env {
            if !is_env_name(env) {
                return Err(err(
                    format!("{field}.api_key_env"),
                    "must be the name of an environment variable, not the key itself",
                ));
            }
        }
        if p.api_version.is_some() && kind != ProviderKind::Anthropic {
            return Err(err(
                format!("{field}.api_version"),
                "only applies to `type = \"anthropic\"`",
            ));
        }
        let prices = prices(&field, p.prices)?;
        Ok(ProviderConfig {
            name: name.to_owned(),
            kind,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key_env: p.api_key_env,
            timeout: ms(p.timeout_ms, 120_000),
            connect_timeout: ms(p.connect_timeout_ms, 5_000),
            max_retries: p.max_retries.unwrap_or(2),
            backoff: ms(p.backoff_ms, 250),
            api_version: p.api_version,
            prices,
            local: None,
        })
    }

    fn local_provider(&self, name: &str, p: RawLocalProvider, data_dir: &Path) -> Result<ProviderConfig, ConfigError> {
        let field = format!("providers.{name}");
        let dtype = match p.dtype.as_deref() {
            None | Some("f32") | Some("float32") => LocalDType::F32,
            Some("bf16") | Some("bfloat16") => LocalDType::Bf16,
            Some("f16") | Some("float16") => LocalDType::F16,
            Some(other) => {
                return Err(err(
                    format!("{field}.dtype"),
                    format!("`{other}` is not one of `f32`, `bf16`, `f16`"),
                ))
            }
        };
        let device = p.device.unwrap_or_else(|| "cpu".to_owned());
        if !matches!(device.as_str(), "cpu" | "cuda") {
            return Err(err(
                format!("{field}.device"),
                format!("`{device}` is not `cpu` or `cuda`"),
            ));
        }
        if p.max_batch == Some(0) {
            return Err(err(format!("{field}.max_batch"), "must be at least 1"));
        }
        let adapters_dir = match &p.adapters_dir {
            Some(d) => PathBuf::from(self.expand(&format!("{field}.adapters_dir"), d)?),
            None => default_adapters_dir(data_dir),
        };
        let prices = prices(&field, p.prices)?;
        Ok(ProviderConfig {
            name: name.to_owned(),
            kind: ProviderKind::Local,
            base_url: String::new(),
            api_key_env: None,
            timeout: ms(None, 600_000),
            connect_timeout: ms(None, 5_000),
            // A local failure is not transient; retrying would repeat it.
            max_retries: 0,
            backoff: ms(None, 250),
            api_version: None,
            prices,
            local: Some(LocalOptions {
                dtype,
                device,
                max_batch: p.max_batch.unwrap_or(16),
                adapters_dir,
            }),
        })
    }

    fn version(
        &self,
        field: &str,
        agent: &str,
        raw: RawVersion,
        providers: &mut BTreeMap<String, ProviderConfig>,
        data_dir: &Path,
    ) -> Result<VersionSpec, ConfigError> {
        let primary = match raw.provider {
            RawProviderRef::Name(name) => {
                let model = raw
                    .model
                    .ok_or_else(|| err(format!("{field}.model"), "is required (the upstream model to ask for)"))?;
                Route {
                    provider: name,
                    model: self.expand(&format!("{field}.model"), &model)?,
                    adapter: raw.adapter,
                }
            }
            RawProviderRef::Inline(inline) => {
                if inline.kind != "local" {
                    return Err(err(
                        format!("{field}.provider.type"),
                        format!(
                            "inline providers are `type = \"local\"`; declare `{}` providers under [providers.NAME]",
                            inline.kind
                        ),
                    ));
                }
                if raw.model.is_some() || raw.adapter.is_some() {
                    return Err(err(
                        format!("{field}.model"),
                        "an inline provider carries its own `model` and `adapter`",
                    ));
                }
                // Inline local providers share the provider named `local`,
                // created with default settings unless declared.
                let local = providers
                    .entry("local".to_owned())
                    .or_insert_with(|| default_local_provider("local", data_dir));
                if local.kind != ProviderKind::Local {
                    return Err(err(
                        format!("{field}.provider"),
                        "an inline local provider uses the provider named `local`, which is declared with another type",
                    ));
                }
                Route {
                    provider: "local".to_owned(),
                    model: self.expand(&format!("{field}.provider.model"), &inline.model)?,
                    adapter: inline.adapter,
                }
            }
        };
        let mut routes = vec![primary];
        for (i, fallback) in raw.fallbacks.into_iter().enumerate() {
            routes.push(Route {
                provider: fallback.provider,
                model: self.expand(&format!("{field}.fallbacks[{i}].model"), &fallback.model)?,
                adapter: None,
            });
        }
        for (i, route) in routes.iter().enumerate() {
            let rfield = if i == 0 {
                format!("{field}.provider")
            } else {
                format!("{field}.fallbacks[{}].provider", i - 1)
            };
            if !providers.contains_key(&route.provider) {
                return Err(err(
                    rfield,
                    format!(
                        "unknown provider `{}`; declared providers: {}",
                        route.provider,
                        list(providers.keys())
                    ),
                ));
            }
            if route.model.trim().is_empty() {
                return Err(err(format!("{field}.model"), "must name the upstream model"));
            }
            if let Some(adapter) = &route.adapter {
                if providers[&route.provider].kind != ProviderKind::Local {
                    return Err(err(
                        format!("{field}.adapter"),
                        format!(
                            "adapters are served by `local` providers; `{}` is not one",
                            route.provider
                        ),
                    ));
                }
                if !is_name(adapter) {
                    return Err(err(
                        format!("{field}.adapter"),
                        "adapter names use letters, digits and `-_.`",
                    ));
                }
            }
        }
        let system = match (raw.system, raw.system_file) {
            (Some(_), Some(_)) => {
                return Err(err(
                    format!("{field}.system_file"),
                    "give `system` or `system_file`, not both",
                ))
            }
            (Some(s), None) => Some(self.expand(&format!("{field}.system"), &s)?),
            (None, Some(f)) => {
                let path = self.base_dir.join(self.expand(&format!("{field}.system_file"), &f)?);
                Some(std::fs::read_to_string(&path).map_err(|e| {
                    err(
                        format!("{field}.system_file"),
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?)
            }
            (None, None) => None,
        };
        if let Some(t) = raw.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(err(
                    format!("{field}.temperature"),
                    format!("must be between 0 and 2, got {t}"),
                ));
            }
        }
        if let Some(p) = raw.top_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(err(
                    format!("{field}.top_p"),
                    format!("must be between 0 and 1, got {p}"),
                ));
            }
        }
        if raw.max_tokens == Some(0) {
            return Err(err(format!("{field}.max_tokens"), "must be at least 1"));
        }
        Ok(VersionSpec {
            agent: agent.to_owned(),
            routes,
            system,
            temperature: raw.temperature,
            top_p: raw.top_p,
            max_tokens: raw.max_tokens,
            reasoning_effort: raw.reasoning_effort,
            examples: None,
        })
    }
}

/// Validated prices per model.
/// The agent the judges' calls are recorded under: one version per judged
/// agent (labelled with that agent's name), answering deterministically.
fn judge_agent(agents: &BTreeMap<String, AgentConfig>) -> Option<AgentConfig> {
    let versions: BTreeMap<String, DeclaredVersion> = agents
        .values()
        .filter_map(|a| Some((a.name.clone(), a.reward.judge.as_ref()?)))
        .map(|(label, judge)| {
            let spec = VersionSpec {
                agent: JUDGE_AGENT.to_owned(),
                routes: vec![Route {
                    provider: judge.provider.clone(),
                    model: judge.model.clone(),
                    adapter: None,
                }],
                system: None,
                temperature: Some(0.0),
                top_p: None,
                max_tokens: None,
                reasoning_effort: None,
                examples: None,
            };
            (
                label.clone(),
                DeclaredVersion {
                    label,
                    id: spec.id(),
                    spec,
                },
            )
        })
        .collect();
    let champion = versions.keys().next()?.clone();
    Some(AgentConfig {
        name: JUDGE_AGENT.to_owned(),
        description: Some("The LLM judge's own calls.".to_owned()),
        versions,
        deployment: DeploymentConfig::new(champion),
        reward: RewardSpec::default(),
        learn: LearnSpec::default(),
    })
}

fn prices(field: &str, raw: BTreeMap<String, RawPrice>) -> Result<BTreeMap<String, Price>, ConfigError> {
    let mut prices = BTreeMap::new();
    for (model, price) in raw {
        if !(price.input_per_mtok >= 0.0 && price.output_per_mtok >= 0.0) {
            return Err(err(
                format!("{field}.prices.{model}"),
                "prices must be non-negative numbers",
            ));
        }
        prices.insert(
            model,
            Price {
                input_per_mtok: price.input_per_mtok,
                output_per_mtok: price.output_per_mtok,
            },
        );
    }
    Ok(prices)
}

/// A `local` provider with default settings.
fn default_local_provider(name: &str, data_dir: &Path) -> ProviderConfig {
    ProviderConfig {
        name: name.to_owned(),
        kind: ProviderKind::Local,
        base_url: String::new(),
        api_key_env: None,
        timeout: Duration::from_secs(600),
        connect_timeout: Duration::from_secs(5),
        max_retries: 0,
        backoff: Duration::from_millis(250),
        api_version: None,
        prices: BTreeMap::new(),
        local: Some(LocalOptions {
            dtype: LocalDType::F32,
            device: "cpu".to_owned(),
            max_batch: 16,
            adapters_dir: default_adapters_dir(data_dir),
        }),
    }
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

fn list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<_> = names.map(|n| format!("`{n}`")).collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DEFAULT_CONFIG;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn load(text: &str) -> Result<Config, ConfigError> {
        load_str(text, Path::new("."), &no_env)
    }

    const BASE: &str = r#"
[providers.up]
type = "openai"
base_url = "http://127.0.0.1:9/v1"
[agents.a.versions.v1]
provider = "up"
model = "m"
"#;

    #[test]
    fn the_default_config_loads_without_any_environment() {
        let c = load(DEFAULT_CONFIG).unwrap();
        assert_eq!(c.providers["openai"].base_url, "https://api.openai.com/v1");
        assert_eq!(c.agents["assistant"].deployment.champion, "v1");
        assert_eq!(c.store.path, PathBuf::from("./hone-data/hone.db"));
    }

    #[test]
    fn a_typo_names_the_key() {
        let e = load(&format!("{BASE}tempreature = 0.3\n")).unwrap_err();
        assert!(e.message.contains("tempreature"), "{e}");
        let e = load(&format!("{BASE}[providers.x]\ntype = \"grpc\"\n")).unwrap_err();
        assert!(e.message.contains("grpc"), "{e}");
    }

    #[test]
    fn cross_field_errors_name_the_field() {
        let e = load(&BASE.replace("provider = \"up\"", "provider = \"nope\"")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.versions.v1.provider"));
        let e = load(&format!("{BASE}[agents.a.deployment]\nchampion = \"v9\"\n")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.deployment.champion"));
        let two = format!("{BASE}[agents.a.versions.v2]\nprovider = \"up\"\nmodel = \"m2\"\n");
        let e = load(&format!(
            "{two}[agents.a.deployment]\nchampion = \"v1\"\ncanaries = {{ v2 = 1.5 }}\n"
        ))
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.deployment.canaries.v2"));
        let e = load(&two).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.deployment"));
        let e = load(&BASE.replace("http://127.0.0.1:9/v1", "${UPSTREAM}")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("providers.up.base_url"));
        assert!(e.message.contains("UPSTREAM"));
    }

    #[test]
    fn a_changed_version_gets_a_new_id() {
        let a = load(BASE).unwrap();
        let b = load(&format!("{BASE}temperature = 0.2\n")).unwrap();
        let c = load(BASE).unwrap();
        assert_ne!(a.agents["a"].versions["v1"].id, b.agents["a"].versions["v1"].id);
        assert_eq!(a.agents["a"].versions["v1"].id, c.agents["a"].versions["v1"].id);
    }

    #[test]
    fn an_inline_local_provider_names_a_model_directory_and_an_adapter() {
        let text = r#"
[agents.a.versions.v1]
provider = { type = "local", model = "/models/qwen", adapter = "v2" }
"#;
        let c = load(text).unwrap();
        let route = &c.agents["a"].versions["v1"].spec.routes[0];
        assert_eq!(
            (route.provider.as_str(), route.model.as_str(), route.adapter.as_deref()),
            ("local", "/models/qwen", Some("v2"))
        );
        let local = c.providers["local"].local.as_ref().unwrap();
        assert_eq!((local.dtype, local.max_batch), (LocalDType::F32, 16));

        let declared = format!("[providers.local]\ntype = \"local\"\ndtype = \"bf16\"\nmax_batch = 4\n{text}");
        let c = load(&declared).unwrap();
        assert_eq!(c.providers["local"].local.as_ref().unwrap().dtype, LocalDType::Bf16);

        let bad = load(&declared.replace("bf16", "int3")).unwrap_err();
        assert_eq!(bad.field.as_deref(), Some("providers.local.dtype"));
        let remote = load(&text.replace("\"local\", model", "\"openai\", model")).unwrap_err();
        assert_eq!(remote.field.as_deref(), Some("agents.a.versions.v1.provider.type"));
        let clash = format!("[providers.local]\ntype = \"openai\"\nbase_url = \"http://x\"\n{text}");
        assert!(load(&clash).unwrap_err().message.contains("another type"));
    }

    #[test]
    fn the_adapters_dir_is_resolved_at_load_and_follows_a_moved_data_dir() {
        let text = "[gateway]\ndata_dir = \"/d\"\n[providers.gpu]\ntype = \"local\"\n[providers.pinned]\ntype = \"local\"\nadapters_dir = \"/pinned\"\n";
        let mut c = load(&format!("{text}{BASE}")).unwrap();
        assert_eq!(
            c.providers["gpu"].local.as_ref().unwrap().adapters_dir,
            PathBuf::from("/d/adapters")
        );
        assert_eq!(c.adapters_dir("gpu"), PathBuf::from("/d/adapters"));
        assert_eq!(c.adapters_dir("pinned"), PathBuf::from("/pinned"));
        // A remote server (vLLM) loads adapters the trainer wrote under the data dir.
        assert_eq!(c.adapters_dir("up"), PathBuf::from("/d/adapters"));
        assert_eq!(c.adapters_dir("unknown"), PathBuf::from("/d/adapters"));

        c.set_data_dir(PathBuf::from("/e"));
        assert_eq!(c.adapters_dir("gpu"), PathBuf::from("/e/adapters"));
        assert_eq!(c.adapters_dir("pinned"), PathBuf::from("/pinned"));
        assert_eq!(c.adapters_dir("up"), PathBuf::from("/e/adapters"));
        assert_eq!(c.store.path, PathBuf::from("/e/hone.db"));

        let inline = load(
            "[gateway]\ndata_dir = \"/d\"\n[agents.a.versions.v1]\nprovider = { type = \"local\", model = \"/m\" }\n",
        )
        .unwrap();
        assert_eq!(inline.adapters_dir("local"), PathBuf::from("/d/adapters"));
    }

    #[test]
    fn adapters_need_a_local_provider_and_the_adapter_changes_the_version_id() {
        let e = load(&format!("{BASE}adapter = \"v2\"\n")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.versions.v1.adapter"));
        let named = "[providers.gpu]\ntype = \"local\"\n[agents.a.versions.v1]\nprovider = \"gpu\"\nmodel = \"/m\"\n";
        let base = load(named).unwrap();
        let tuned = load(&format!("{named}adapter = \"v2\"\n")).unwrap();
        assert_ne!(base.agents["a"].versions["v1"].id, tuned.agents["a"].versions["v1"].id);
        let missing_model =
            load("[providers.gpu]\ntype = \"local\"\n[agents.a.versions.v1]\nprovider = \"gpu\"\n").unwrap_err();
        assert_eq!(missing_model.field.as_deref(), Some("agents.a.versions.v1.model"));
    }
}
