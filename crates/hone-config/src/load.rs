//! Phase two of config loading: raw file → typed [`Config`], with every error
//! naming the key at fault (`agents.assistant.versions.v1.provider`).

use crate::env::expand_env;
use crate::raw::{RawConfig, RawHttpProvider, RawProvider, RawStore, RawVersion};
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

        let providers = raw
            .providers
            .into_iter()
            .map(|(name, p)| Ok((name.clone(), self.provider(&name, p)?)))
            .collect::<Result<BTreeMap<_, _>, ConfigError>>()?;

        let mut agents = BTreeMap::new();
        for (name, agent) in raw.agents {
            let field = format!("agents.{name}");
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
                let spec = self.version(&vfield, &name, version, &providers)?;
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
                    DeploymentConfig {
                        champion: d.champion,
                        canaries: d.canaries.into_iter().collect(),
                    }
                }
                None if versions.len() == 1 => DeploymentConfig {
                    champion: versions.keys().next().cloned().unwrap_or_default(),
                    canaries: Vec::new(),
                },
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
            agents.insert(
                name.clone(),
                AgentConfig {
                    name,
                    description: agent.description,
                    versions,
                    deployment,
                },
            );
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
                admin_token_env: raw.gateway.admin_token_env,
                api_keys,
            },
            store,
            recorder,
            providers,
            agents,
            metrics,
        })
    }

    fn provider(&self, name: &str, raw: RawProvider) -> Result<ProviderConfig, ConfigError> {
        let field = format!("providers.{name}");
        if !is_name(name) {
            return Err(err(&field, "provider names use letters, digits and `-_.`"));
        }
        let (kind, p, default_url): (_, RawHttpProvider, _) = match raw {
            RawProvider::OpenAi(p) => (ProviderKind::OpenAi, p, None),
            RawProvider::Anthropic(p) => (ProviderKind::Anthropic, p, Some("https://api.anthropic.com")),
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
        let mut prices = BTreeMap::new();
        for (model, price) in p.prices {
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
        })
    }

    fn version(
        &self,
        field: &str,
        agent: &str,
        raw: RawVersion,
        providers: &BTreeMap<String, ProviderConfig>,
    ) -> Result<VersionSpec, ConfigError> {
        let mut routes = vec![Route {
            provider: raw.provider,
            model: self.expand(&format!("{field}.model"), &raw.model)?,
        }];
        for (i, fallback) in raw.fallbacks.into_iter().enumerate() {
            routes.push(Route {
                provider: fallback.provider,
                model: self.expand(&format!("{field}.fallbacks[{i}].model"), &fallback.model)?,
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
        })
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
}
