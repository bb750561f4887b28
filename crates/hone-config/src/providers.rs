//! The `[providers.NAME]` tables: the upstreams versions are served by, an
//! OpenAI-compatible or Anthropic API over HTTP, or the embedded engine
//! (`type = "local"`).
//!
//! ```toml
//! [providers.openai]
//! type = "openai"
//! base_url = "${OPENAI_BASE_URL:-https://api.openai.com/v1}"
//! api_key_env = "OPENAI_API_KEY"
//! prices = { "gpt-4o-mini" = { input_per_mtok = 0.15, output_per_mtok = 0.6, cached_input_per_mtok = 0.075 } }
//! [providers.gpu]
//! type = "local"
//! dtype = "bf16"
//! device = "cuda"
//! ```

use crate::env::{is_env_name, Env};
use crate::error::{is_name, ConfigError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug)]
pub enum RawProvider {
    OpenAi(RawHttpProvider),
    Anthropic(RawHttpProvider),
    Local(RawLocalProvider),
}

/// By its `type`, then the rest of the table as that type's fields, so an
/// error names the key it is about (serde's internally tagged enums buffer
/// the table and lose it).
impl<'de> Deserialize<'de> for RawProvider {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut table = toml::Table::deserialize(deserializer)?;
        let kind = match table.remove("type") {
            Some(toml::Value::String(kind)) => kind,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "`type` is {other}, not one of \"openai\", \"anthropic\", \"local\""
                )))
            }
            None => {
                return Err(D::Error::custom(
                    "`type` is missing (\"openai\", \"anthropic\" or \"local\")",
                ))
            }
        };
        fn fields<T: serde::de::DeserializeOwned, E: serde::de::Error>(table: toml::Table) -> Result<T, E> {
            serde_path_to_error::deserialize(toml::Value::Table(table))
                .map_err(|e| E::custom(format!("`{}`: {}", e.path(), e.inner())))
        }
        match kind.as_str() {
            "openai" => fields(table).map(RawProvider::OpenAi),
            "anthropic" => fields(table).map(RawProvider::Anthropic),
            "local" => fields(table).map(RawProvider::Local),
            other => Err(D::Error::custom(format!(
                "unknown type `{other}` (\"openai\", \"anthropic\" or \"local\")"
            ))),
        }
    }
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
    /// MiB of prompt keys and values kept so a prompt that starts like an
    /// earlier one prefills only what is new (default: the engine's, 128;
    /// 0 turns it off).
    pub prefix_cache_mib: Option<usize>,
    /// Adapters kept loaded at once (default: the engine's, 64); past it
    /// the least recently used one is unloaded and loaded again from
    /// `adapters_dir` when next named. 0: no limit.
    pub max_adapters: Option<usize>,
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
    /// OpenAI-compatible only: the server behind `base_url`, where hone can
    /// ask it for more than the OpenAI API offers (`vllm`: the exact token
    /// ids and logprobs of every answer, recorded for training).
    pub engine: Option<String>,
    /// USD per million tokens, per upstream model name.
    #[serde(default)]
    pub prices: BTreeMap<String, RawPrice>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Prompt tokens read from the provider's prompt cache (default: the input price).
    pub cached_input_per_mtok: Option<f64>,
    /// Prompt tokens written to the prompt cache (default: the input price).
    pub cache_write_per_mtok: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
    /// The embedded engine (`hone-engine`), in-process.
    Local,
}

impl ProviderKind {
    /// The name OpenTelemetry's GenAI conventions give this kind of provider
    /// (`gen_ai.provider.name`); the embedded engine is hone's own.
    pub fn semconv_name(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Local => "hone",
        }
    }
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
    /// Bytes of the engine's prefix cache (`prefix_cache_mib`), or `None`
    /// for the engine's default.
    pub prefix_cache_bytes: Option<usize>,
    /// Adapters kept loaded at once (`max_adapters`), or `None` for the
    /// engine's default.
    pub max_adapters: Option<usize>,
    /// Where adapters named by versions are found: the configured
    /// `adapters_dir`, or `<data_dir>/adapters` (resolved at load).
    pub adapters_dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    pub cached_input_per_mtok: f64,
    pub cache_write_per_mtok: f64,
}

impl Price {
    /// What a call's tokens cost: prompt tokens read from or written to the
    /// provider's prompt cache at their own prices, the rest at the input
    /// price, completion tokens at the output price.
    pub fn cost_usd(&self, usage: &hone_types::openai::Usage) -> f64 {
        let cached = usage.cached_prompt_tokens();
        let written = usage.cache_write_tokens();
        let uncached = usage.prompt_tokens.saturating_sub(cached + written);
        (uncached as f64 * self.input_per_mtok
            + cached as f64 * self.cached_input_per_mtok
            + written as f64 * self.cache_write_per_mtok
            + usage.completion_tokens as f64 * self.output_per_mtok)
            / 1e6
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
    /// The server an OpenAI-compatible provider is, when it is known.
    pub engine: Option<HttpEngine>,
    pub prices: BTreeMap<String, Price>,
    /// `Some` for `type = "local"`.
    pub local: Option<LocalOptions>,
}

/// Servers an OpenAI-compatible provider may be (`engine = "…"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpEngine {
    /// vLLM: asked for every answer's token ids (`return_token_ids`) and
    /// logprobs, so its episodes train like the embedded engine's.
    Vllm,
}

impl HttpEngine {
    pub const NAMES: &'static str = "vllm";

    pub fn parse(name: &str) -> Option<Self> {
        (name == "vllm").then_some(Self::Vllm)
    }
}

/// The adapters directory when none is configured: `<data_dir>/adapters`.
pub(crate) fn default_adapters_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("adapters")
}

/// Validates every `[providers.NAME]`; `data_dir` places a local provider's
/// default adapters directory.
pub(crate) fn from_raw(
    raw: BTreeMap<String, RawProvider>,
    data_dir: &Path,
    env: &Env,
) -> Result<BTreeMap<String, ProviderConfig>, ConfigError> {
    raw.into_iter()
        .map(|(name, p)| Ok((name.clone(), ProviderConfig::from_raw(&name, p, data_dir, env)?)))
        .collect()
}

fn ms(value: Option<u64>, default: u64) -> Duration {
    Duration::from_millis(value.unwrap_or(default))
}

impl ProviderConfig {
    /// The price of `model`: its own entry, or for a fine-tuned model
    /// (`ft:BASE:…`) the entry `ft:BASE` (hosts price every model tuned
    /// from one base alike, above the base's own price).
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model).or_else(|| {
            let base = model.strip_prefix("ft:")?.split(':').next()?;
            self.prices.get(&format!("ft:{base}"))
        })
    }

    /// Validates `[providers.NAME]`.
    fn from_raw(name: &str, raw: RawProvider, data_dir: &Path, env: &Env) -> Result<Self, ConfigError> {
        let field = format!("providers.{name}");
        if !is_name(name) {
            return Err(ConfigError::at(&field, "provider names use letters, digits and `-_.`"));
        }
        let (kind, p, default_url): (_, RawHttpProvider, _) = match raw {
            RawProvider::OpenAi(p) => (ProviderKind::OpenAi, p, None),
            RawProvider::Anthropic(p) => (ProviderKind::Anthropic, p, Some("https://api.anthropic.com")),
            RawProvider::Local(p) => return Self::local(name, p, data_dir, env),
        };
        let base_url = base_url(&field, p.base_url.as_deref(), default_url, env)?;
        if let Some(key_env) = &p.api_key_env {
            if !is_env_name(key_env) {
                return Err(ConfigError::at(
                    format!("{field}.api_key_env"),
                    "must be the name of an environment variable, not the key itself",
                ));
            }
        }
        if p.api_version.is_some() && kind != ProviderKind::Anthropic {
            return Err(ConfigError::at(
                format!("{field}.api_version"),
                "only applies to `type = \"anthropic\"`",
            ));
        }
        let engine = match p.engine.as_deref() {
            None => None,
            Some(_) if kind != ProviderKind::OpenAi => {
                return Err(ConfigError::at(
                    format!("{field}.engine"),
                    "only applies to `type = \"openai\"`",
                ))
            }
            Some(name) => Some(HttpEngine::parse(name).ok_or_else(|| {
                ConfigError::at(
                    format!("{field}.engine"),
                    format!("`{name}` is not a known server ({})", HttpEngine::NAMES),
                )
            })?),
        };
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
            engine,
            prices,
            local: None,
        })
    }

    /// Validates a `type = "local"` provider.
    fn local(name: &str, p: RawLocalProvider, data_dir: &Path, env: &Env) -> Result<Self, ConfigError> {
        let field = format!("providers.{name}");
        let dtype = match p.dtype.as_deref() {
            None | Some("f32") | Some("float32") => LocalDType::F32,
            Some("bf16") | Some("bfloat16") => LocalDType::Bf16,
            Some("f16") | Some("float16") => LocalDType::F16,
            Some(other) => {
                return Err(ConfigError::at(
                    format!("{field}.dtype"),
                    format!("`{other}` is not one of `f32`, `bf16`, `f16`"),
                ))
            }
        };
        let device = p.device.unwrap_or_else(|| "cpu".to_owned());
        if !matches!(device.as_str(), "cpu" | "cuda") {
            return Err(ConfigError::at(
                format!("{field}.device"),
                format!("`{device}` is not `cpu` or `cuda`"),
            ));
        }
        if p.max_batch == Some(0) {
            return Err(ConfigError::at(format!("{field}.max_batch"), "must be at least 1"));
        }
        let adapters_dir = match &p.adapters_dir {
            Some(d) => env.path(&format!("{field}.adapters_dir"), d)?,
            None => default_adapters_dir(data_dir),
        };
        let prices = prices(&field, p.prices)?;
        Ok(ProviderConfig {
            prices,
            local: Some(LocalOptions {
                dtype,
                device,
                max_batch: p.max_batch.unwrap_or(16),
                prefix_cache_bytes: p.prefix_cache_mib.map(|mib| mib.saturating_mul(1 << 20)),
                max_adapters: p.max_adapters,
                adapters_dir,
            }),
            ..default_local_provider(name, data_dir)
        })
    }
}

/// An HTTP provider's `base_url`, expanded, or the type's default; it must be http(s).
fn base_url(field: &str, raw: Option<&str>, default: Option<&str>, env: &Env) -> Result<String, ConfigError> {
    let base_url = match (raw, default) {
        (Some(url), _) => env.expand(&format!("{field}.base_url"), url)?,
        (None, Some(url)) => url.to_owned(),
        (None, None) => {
            return Err(ConfigError::at(
                format!("{field}.base_url"),
                "is required for an OpenAI-compatible provider",
            ))
        }
    };
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(ConfigError::at(
            format!("{field}.base_url"),
            format!("`{base_url}` must start with http:// or https://"),
        ));
    }
    Ok(base_url)
}

/// Validated prices per model.
fn prices(field: &str, raw: BTreeMap<String, RawPrice>) -> Result<BTreeMap<String, Price>, ConfigError> {
    let mut prices = BTreeMap::new();
    for (model, price) in raw {
        let cached = price.cached_input_per_mtok.unwrap_or(price.input_per_mtok);
        let write = price.cache_write_per_mtok.unwrap_or(price.input_per_mtok);
        if ![price.input_per_mtok, price.output_per_mtok, cached, write]
            .iter()
            .all(|p| *p >= 0.0 && p.is_finite())
        {
            return Err(ConfigError::at(
                format!("{field}.prices.{model}"),
                "prices must be non-negative numbers",
            ));
        }
        prices.insert(
            model,
            Price {
                input_per_mtok: price.input_per_mtok,
                output_per_mtok: price.output_per_mtok,
                cached_input_per_mtok: cached,
                cache_write_per_mtok: write,
            },
        );
    }
    Ok(prices)
}

/// A `local` provider with default settings (what an inline local provider
/// uses when no provider named `local` is declared).
pub(crate) fn default_local_provider(name: &str, data_dir: &Path) -> ProviderConfig {
    ProviderConfig {
        name: name.to_owned(),
        kind: ProviderKind::Local,
        base_url: String::new(),
        api_key_env: None,
        timeout: Duration::from_secs(600),
        connect_timeout: Duration::from_secs(5),
        // A local failure is not transient; retrying would repeat it.
        max_retries: 0,
        backoff: Duration::from_millis(250),
        api_version: None,
        engine: None,
        prices: BTreeMap::new(),
        local: Some(LocalOptions {
            dtype: LocalDType::F32,
            device: "cpu".to_owned(),
            max_batch: 16,
            prefix_cache_bytes: None,
            max_adapters: None,
            adapters_dir: default_adapters_dir(data_dir),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hone_types::openai::Usage;

    #[test]
    fn a_fine_tuned_model_is_priced_as_its_base_s_fine_tunes() {
        let raw = BTreeMap::from([
            (
                "gpt-4o-mini".to_owned(),
                RawPrice {
                    input_per_mtok: 0.15,
                    output_per_mtok: 0.6,
                    cached_input_per_mtok: None,
                    cache_write_per_mtok: None,
                },
            ),
            (
                "ft:gpt-4o-mini".to_owned(),
                RawPrice {
                    input_per_mtok: 0.3,
                    output_per_mtok: 1.2,
                    cached_input_per_mtok: None,
                    cache_write_per_mtok: None,
                },
            ),
        ]);
        let config = ProviderConfig {
            prices: prices("providers.p", raw).unwrap(),
            ..default_local_provider("p", Path::new("."))
        };
        let tuned = config
            .price("ft:gpt-4o-mini-2024-07-18:org:hone-a-1:abc")
            .map(|p| p.input_per_mtok);
        assert_eq!(tuned, None, "a dated base is another base");
        let tuned = config.price("ft:gpt-4o-mini:org:hone-a-1:abc").unwrap();
        assert_eq!(tuned.input_per_mtok, 0.3);
        assert_eq!(config.price("gpt-4o-mini").unwrap().input_per_mtok, 0.15);
        assert!(config.price("ft:gpt-4o:org:x:y").is_none());
    }

    #[test]
    fn cached_and_cache_written_prompt_tokens_are_priced_apart() {
        let raw = BTreeMap::from([(
            "m".to_owned(),
            RawPrice {
                input_per_mtok: 2.0,
                output_per_mtok: 8.0,
                cached_input_per_mtok: Some(0.5),
                cache_write_per_mtok: Some(2.5),
            },
        )]);
        let price = prices("providers.p", raw).unwrap()["m"];
        let usage: Usage = serde_json::from_value(serde_json::json!({
            "prompt_tokens": 1_000_000, "completion_tokens": 100_000, "total_tokens": 1_100_000,
            "prompt_tokens_details": {"cached_tokens": 600_000},
            "cache_creation_input_tokens": 100_000
        }))
        .unwrap();
        // 300k uncached × 2 + 600k cached × 0.5 + 100k written × 2.5 + 100k out × 8, per million.
        let expected = 0.6 + 0.3 + 0.25 + 0.8;
        assert!(
            (price.cost_usd(&usage) - expected).abs() < 1e-12,
            "{}",
            price.cost_usd(&usage)
        );

        // Without cache prices every prompt token costs the input price.
        let plain = prices(
            "providers.p",
            BTreeMap::from([(
                "m".to_owned(),
                RawPrice {
                    input_per_mtok: 2.0,
                    output_per_mtok: 8.0,
                    cached_input_per_mtok: None,
                    cache_write_per_mtok: None,
                },
            )]),
        )
        .unwrap()["m"];
        assert!((plain.cost_usd(&usage) - (2.0 + 0.8)).abs() < 1e-12);

        let negative = BTreeMap::from([(
            "m".to_owned(),
            RawPrice {
                input_per_mtok: 2.0,
                output_per_mtok: 8.0,
                cached_input_per_mtok: Some(-1.0),
                cache_write_per_mtok: None,
            },
        )]);
        assert!(prices("providers.p", negative).is_err());
    }
}

#[cfg(test)]
mod engine_tests {
    use super::*;

    fn provider(kind: &str, engine: &str) -> Result<ProviderConfig, ConfigError> {
        let text = format!("type = {kind:?}\nbase_url = \"http://127.0.0.1:8000/v1\"\nengine = {engine:?}\n");
        let raw: RawProvider = toml::from_str(&text).unwrap();
        let env = Env {
            base_dir: Path::new("/tmp"),
            lookup: &|_| None,
        };
        ProviderConfig::from_raw("p", raw, Path::new("/tmp"), &env)
    }

    #[test]
    fn engine_names_the_server_behind_an_openai_compatible_provider() {
        assert_eq!(provider("openai", "vllm").unwrap().engine, Some(HttpEngine::Vllm));
        let unknown = provider("openai", "sglang").unwrap_err().to_string();
        assert!(
            unknown.contains("providers.p.engine") && unknown.contains("vllm"),
            "{unknown}"
        );
        let anthropic = provider("anthropic", "vllm").unwrap_err().to_string();
        assert!(anthropic.contains("only applies to `type = \"openai\"`"), "{anthropic}");
    }
}
