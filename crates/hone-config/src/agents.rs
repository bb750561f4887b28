//! The `[agents.NAME]` tables: an agent's versions (`[agents.NAME.versions.LABEL]`,
//! each a route to a provider plus prompt and sampling settings) and its
//! traffic split (`[agents.NAME.deployment]`). Its `reward` and `learn`
//! tables are [`crate::reward`] and [`crate::learn`]; this module also adds
//! the agent the judges' own calls are recorded under.
//!
//! ```toml
//! [agents.assistant.versions.v1]
//! provider = "openai"              # or { type = "local", model = "PATH", adapter = "NAME" }
//! model = "gpt-4o-mini"
//! fallbacks = [{ provider = "backup", model = "gpt-4o-mini" }]
//! system_file = "prompts/assistant.md"
//! temperature = 0.2
//! [agents.assistant.deployment]
//! champion = "v1"
//! canaries = { v2 = 0.1 }
//! ```

use crate::env::Env;
use crate::error::{is_adapter_name, is_name, ConfigError};
use crate::learn::{DeploymentPolicy, LearnSpec, RawLearn, RawPolicy};
use crate::providers::{default_local_provider, ProviderConfig, ProviderKind};
use crate::reflect::REFLECTOR_AGENT;
use crate::reward::{RawReward, RewardSpec, JUDGE_AGENT};
use hone_types::{MemoryKind, MemoryPolicy, Route, Setting, VersionId, VersionSpec};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    pub description: Option<String>,
    #[serde(default)]
    pub versions: BTreeMap<String, RawVersion>,
    pub deployment: Option<RawDeployment>,
    pub reward: Option<RawReward>,
    pub learn: Option<RawLearn>,
    /// Where `POST /v1/embeddings` with this agent as `model` goes:
    /// `{ provider = "openai", model = "text-embedding-3-small" }`.
    pub embeddings: Option<RawRoute>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVersion {
    pub provider: RawProviderRef,
    /// Required with a provider name; inline providers carry their own.
    pub model: Option<String>,
    /// A LoRA adapter (local providers).
    pub adapter: Option<String>,
    /// kNN-LM memory for the primary route (local providers):
    /// `{ type = "knn-lm", datastore = "HASH", k = 16, lambda = 0.25, temperature = 1.0 }`.
    pub memory: Option<RawMemory>,
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
    /// Settings whose version value wins over the client's
    /// (`temperature`, `top_p`, `reasoning_effort`); the others are defaults.
    #[serde(default)]
    pub enforce: Vec<String>,
    /// Lessons the version starts with (`L1`, `L2`, … in this order).
    #[serde(default)]
    pub playbook: Vec<String>,
    /// The tool set the version owns (OpenAI `tools` entries); it replaces
    /// the tools clients send.
    #[serde(default)]
    pub tools: Vec<hone_types::openai::Tool>,
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
pub struct RawMemory {
    #[serde(rename = "type")]
    pub kind: String,
    pub datastore: String,
    pub k: Option<u32>,
    pub lambda: Option<f64>,
    pub temperature: Option<f64>,
    /// λ scaled by how near the nearest stored context is (default false).
    pub adaptive: Option<bool>,
}

/// A version's `memory` table, checked: the datastore named by its hash,
/// k ≥ 1, 0 ≤ λ ≤ 1, temperature > 0 (defaults 16, 0.25, 1.0).
fn memory_policy(field: &str, raw: RawMemory) -> Result<MemoryPolicy, ConfigError> {
    if raw.kind != "knn-lm" {
        return Err(ConfigError::at(
            format!("{field}.type"),
            format!("`{}` is not a kind of memory; the one kind is `knn-lm`", raw.kind),
        ));
    }
    if !MemoryPolicy::is_datastore_hash(&raw.datastore) {
        return Err(ConfigError::at(
            format!("{field}.datastore"),
            "names a datastore by its content hash (64 hex digits, as `hone memory build` prints)",
        ));
    }
    let k = raw.k.unwrap_or(16);
    let lambda = raw.lambda.unwrap_or(0.25);
    let temperature = raw.temperature.unwrap_or(1.0);
    if k == 0 {
        return Err(ConfigError::at(format!("{field}.k"), "must be at least 1"));
    }
    if !(0.0..=1.0).contains(&lambda) {
        return Err(ConfigError::at(format!("{field}.lambda"), "must be between 0 and 1"));
    }
    if !(temperature > 0.0 && temperature.is_finite()) {
        return Err(ConfigError::at(format!("{field}.temperature"), "must be above 0"));
    }
    Ok(MemoryPolicy {
        kind: MemoryKind::KnnLm,
        datastore: raw.datastore,
        k,
        lambda,
        temperature,
        adaptive: raw.adaptive.unwrap_or(false),
    })
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
    pub policy: Option<RawPolicy>,
    /// Share of new episodes a learner's canary gets (default 0.1).
    pub canary_share: Option<f64>,
    /// A larger share for a candidate the gate found clearly better.
    pub clear_gain: Option<RawClearGain>,
    /// Canary episodes (with rewards) before promotion is decided (default 50).
    pub canary_episodes: Option<usize>,
    /// Promote only a canary shown to be at most this much online reward
    /// below the champion (non-inferiority); unset, a canary is promoted
    /// unless the champion is shown better.
    pub promote_margin: Option<f64>,
    /// With `promote_margin` or `promotion = "sequential"`: rewarded canary
    /// episodes after which a canary not yet shown within the margin (or
    /// shown better) is rolled back (default 4 × `canary_episodes`, at most
    /// the monitors' window): the bound on how many users meet it.
    pub canary_max_episodes: Option<usize>,
    /// `"sequential"`: users decide — an always-valid sequential test on
    /// the canary's and the champion's online rewards, looked at whenever
    /// the canary is watched; promoted once shown better, rolled back once
    /// shown worse or at `canary_max_episodes`.
    pub promotion: Option<String>,
    /// No longer read: the sequential test bets and needs no scale. Kept
    /// so a config that still sets it is told so by name.
    pub expected_gain: Option<f64>,
    /// With `promotion = "sequential"`: the least reward gain worth a
    /// promotion; a canary shown not to beat the champion by this much is
    /// rolled back (default 0: only once shown worse).
    pub least_gain: Option<f64>,
    /// With `promotion = "sequential"`: the largest share a canary's
    /// traffic grows to as the evidence for it grows (default 0.5).
    pub canary_max_share: Option<f64>,
}

/// `clear_gain = { above, share }` of `[agents.NAME.deployment]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClearGain {
    pub above: f64,
    pub share: f64,
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub name: String,
    pub description: Option<String>,
    /// Label → version, for every version declared under the agent.
    pub versions: BTreeMap<String, DeclaredVersion>,
    pub deployment: DeploymentConfig,
    /// How episodes are scored (defaults when the config has no `reward` table).
    pub reward: RewardSpec,
    /// The learning cycle (no optimisers: the agent is only monitored).
    pub learn: LearnSpec,
    /// The agent's embeddings route (`POST /v1/embeddings`), if it has one.
    pub embeddings: Option<Route>,
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
    pub policy: DeploymentPolicy,
    /// Share of new episodes a learner's canary gets.
    pub canary_share: f64,
    /// A larger share for a candidate the gate found clearly better.
    pub clear_gain: Option<ClearGain>,
    /// Canary episodes with rewards before promotion is decided.
    pub canary_episodes: usize,
    /// What a canary must show online to be promoted.
    pub promotion: PromotionRule,
}

/// A candidate whose reward gain over the champion at the gate has the low
/// end of its confidence interval at `above` or more goes to its canary on
/// `share` of new episodes instead of `canary_share`. The canary still
/// needs `canary_episodes` episodes before it is judged, so no more users
/// meet it: they meet it sooner, and a clear gain reaches everyone sooner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClearGain {
    /// Least low end of the gate's interval of the gain (reward units).
    pub above: f64,
    /// The canary's share of new episodes then.
    pub share: f64,
}

/// The share a canary starts on, and why when it is not `canary_share`.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryShare {
    pub share: f64,
    pub reason: Option<String>,
}

impl DeploymentConfig {
    pub fn new(champion: String) -> Self {
        Self {
            champion,
            canaries: Vec::new(),
            policy: DeploymentPolicy::Manual,
            canary_share: 0.1,
            clear_gain: None,
            canary_episodes: 50,
            promotion: PromotionRule::NotShownWorse,
        }
    }

    /// The share of new episodes a canary starts on, given the low end of
    /// its gain's interval at the gate (`None`: not gated, e.g. approved by
    /// hand): `clear_gain.share` when that low end reaches `clear_gain.above`,
    /// `canary_share` otherwise.
    pub fn canary_share_for(&self, gate_gain_low: Option<f64>) -> CanaryShare {
        match (self.clear_gain, gate_gain_low) {
            (Some(clear), Some(low)) if low >= clear.above => CanaryShare {
                share: clear.share,
                reason: Some(format!(
                    "a clear gain: the gate's interval starts at {low:+.3} ≥ {}",
                    clear.above
                )),
            },
            _ => CanaryShare {
                share: self.canary_share,
                reason: None,
            },
        }
    }
}

/// What a canary must show online to be promoted (a canary the champion is
/// shown to beat is rolled back under every rule). The first two are
/// fixed-horizon tests, decided once it has `canary_episodes` rewarded
/// episodes; the sequential one decides at any look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PromotionRule {
    /// Promoted unless the champion's online reward is significantly
    /// higher (the default).
    NotShownWorse,
    /// Promoted once its reward is shown to be at most `margin` below the
    /// champion's (a one-sided test at the monitors' confidence); until
    /// then it keeps collecting, and after `max_episodes` rewarded
    /// episodes it is rolled back.
    WithinMargin { margin: f64, max_episodes: usize },
    /// Users decide (`promotion = "sequential"`): a test by betting on the
    /// difference of online rewards (`hone_learn::stats::betting`), valid
    /// at every sample size however often it is looked at. Promoted once
    /// shown better at the level the sequence of canaries allows it
    /// (`hone_learn::stats::online_fdr`); rolled back once shown worse, or
    /// shown not better by `least_gain`, or after `max_episodes` rewarded
    /// canary episodes. Its share of traffic starts at the deployment's
    /// `canary_share` and grows with the evidence for it up to `max_share`.
    Sequential {
        max_episodes: usize,
        least_gain: f64,
        max_share: f64,
    },
}

/// Where a version's routes are checked against: the providers declared so
/// far (an inline local provider adds `local`), and the data directory a
/// default `local` provider keeps its adapters under.
struct Providers<'a> {
    declared: &'a mut BTreeMap<String, ProviderConfig>,
    data_dir: &'a Path,
}

/// Validates every `[agents.NAME]`, then adds the judge's agent
/// ([`JUDGE_AGENT`]) when any agent has a judge. Inline local providers are
/// added to `providers` as `local`.
pub(crate) fn from_raw(
    raw: BTreeMap<String, RawAgent>,
    providers: &mut BTreeMap<String, ProviderConfig>,
    data_dir: &Path,
    env: &Env,
) -> Result<BTreeMap<String, AgentConfig>, ConfigError> {
    // Judges and optimisers may name the declared providers (not an inline `local`).
    let provider_names: Vec<String> = providers.keys().cloned().collect();
    let names: Vec<&str> = provider_names.iter().map(String::as_str).collect();
    let mut providers = Providers {
        declared: providers,
        data_dir,
    };
    let mut agents = BTreeMap::new();
    for (name, agent) in raw {
        let agent = AgentConfig::from_raw(name.clone(), agent, &mut providers, &names, env)?;
        agents.insert(name, agent);
    }
    if let Some(judge) = judge_agent(&agents) {
        agents.insert(JUDGE_AGENT.to_owned(), judge);
    }
    if let Some(reflector) = reflector_agent(&agents) {
        agents.insert(REFLECTOR_AGENT.to_owned(), reflector);
    }
    Ok(agents)
}

impl AgentConfig {
    /// Validates `[agents.NAME]`; `names` are the declared providers'.
    fn from_raw(
        name: String,
        raw: RawAgent,
        providers: &mut Providers,
        names: &[&str],
        env: &Env,
    ) -> Result<Self, ConfigError> {
        let field = format!("agents.{name}");
        if crate::is_internal_agent(&name) {
            return Err(ConfigError::at(
                &field,
                format!("`{name}` is reserved: hone records its own model calls under it"),
            ));
        }
        if !is_name(&name) {
            return Err(ConfigError::at(
                &field,
                "agent names use letters, digits and `-_.` (at most 64)",
            ));
        }
        if raw.versions.is_empty() {
            return Err(ConfigError::at(
                format!("{field}.versions"),
                "an agent needs at least one version",
            ));
        }
        let mut versions = BTreeMap::new();
        for (label, version) in raw.versions {
            let vfield = format!("{field}.versions.{label}");
            if !is_name(&label) {
                return Err(ConfigError::at(&vfield, "version labels use letters, digits and `-_.`"));
            }
            let spec = version_spec(&vfield, &name, version, providers, env)?;
            let id = spec.id();
            versions.insert(label.clone(), DeclaredVersion { label, id, spec });
        }
        let mut learn = LearnSpec::from_raw(&format!("{field}.learn"), raw.learn.unwrap_or_default(), names)?;
        if let crate::trainer::TrainerSpec::Trl(trl) = &mut learn.trainer {
            trl.anchor(env.base_dir);
        }
        learn.upload.anchor(env.base_dir);
        let deployment = DeploymentConfig::from_raw(&field, &name, raw.deployment, &versions, learn.monitor.window)?;
        let reward = RewardSpec::from_raw(&format!("{field}.reward"), raw.reward.unwrap_or_default(), names)?;
        let embeddings = match raw.embeddings {
            None => None,
            Some(raw) => {
                let efield = format!("{field}.embeddings");
                let route = Route {
                    provider: raw.provider,
                    model: env.expand(&format!("{efield}.model"), &raw.model)?,
                    adapter: None,
                    memory: None,
                    adapter_sha256: None,
                };
                check_routes(&efield, std::slice::from_ref(&route), providers.declared)?;
                if providers.declared.get(&route.provider).map(|p| p.kind) != Some(ProviderKind::OpenAi) {
                    return Err(ConfigError::at(
                        format!("{efield}.provider"),
                        "embeddings come from an OpenAI-compatible provider (`type = \"openai\"`)",
                    ));
                }
                Some(route)
            }
        };
        Ok(AgentConfig {
            name,
            description: raw.description,
            versions,
            deployment,
            reward,
            learn,
            embeddings,
        })
    }
}

/// Validates `[agents.NAME.versions.LABEL]` (at `field`) into the spec it serves.
fn version_spec(
    field: &str,
    agent: &str,
    raw: RawVersion,
    providers: &mut Providers,
    env: &Env,
) -> Result<VersionSpec, ConfigError> {
    let mut primary = primary_route(field, raw.provider, raw.model, raw.adapter, providers, env)?;
    primary.memory = raw
        .memory
        .map(|m| memory_policy(&format!("{field}.memory"), m))
        .transpose()?;
    let mut routes = vec![primary];
    for (i, fallback) in raw.fallbacks.into_iter().enumerate() {
        routes.push(Route {
            provider: fallback.provider,
            model: env.expand(&format!("{field}.fallbacks[{i}].model"), &fallback.model)?,
            adapter: None,
            memory: None,
            adapter_sha256: None,
        });
    }
    check_routes(field, &routes, providers.declared)?;
    let system = system_prompt(field, raw.system, raw.system_file, env)?;
    check_sampling(field, raw.temperature, raw.top_p, raw.max_tokens)?;
    let mut spec = VersionSpec {
        agent: agent.to_owned(),
        routes,
        system,
        temperature: raw.temperature,
        top_p: raw.top_p,
        max_tokens: raw.max_tokens,
        reasoning_effort: raw.reasoning_effort,
        ..Default::default()
    };
    for (i, name) in raw.enforce.iter().enumerate() {
        let at = || format!("{field}.enforce[{i}]");
        let setting = Setting::parse(name).ok_or_else(|| {
            let names: Vec<&str> = Setting::ALL.iter().map(|s| s.name()).collect();
            ConfigError::at(
                at(),
                format!("`{name}` cannot be enforced (one of: {})", names.join(", ")),
            )
        })?;
        let set = match setting {
            Setting::Temperature => spec.temperature.is_some(),
            Setting::TopP => spec.top_p.is_some(),
            Setting::ReasoningEffort => spec.reasoning_effort.is_some(),
        };
        if !set {
            return Err(ConfigError::at(
                at(),
                format!("enforces `{name}` but the version does not set it"),
            ));
        }
        spec.enforce(setting);
    }
    spec.playbook = seeded_playbook(field, raw.playbook)?;
    spec.tools = owned_tools(field, raw.tools)?;
    Ok(spec)
}

/// `playbook = ["…", …]`: lessons `L1`, `L2`, … with no history yet.
fn seeded_playbook(field: &str, texts: Vec<String>) -> Result<Vec<hone_types::Lesson>, ConfigError> {
    texts
        .into_iter()
        .enumerate()
        .map(|(i, text)| {
            if text.trim().is_empty() {
                return Err(ConfigError::at(format!("{field}.playbook[{i}]"), "a lesson needs text"));
            }
            Ok(hone_types::Lesson {
                id: format!("L{}", i + 1),
                text,
                helpful: 0,
                harmful: 0,
                sources: Vec::new(),
            })
        })
        .collect()
}

/// `tools = [{ type = "function", function = { name, description, parameters } }]`:
/// function tools with distinct names and object schemas.
fn owned_tools(
    field: &str,
    tools: Vec<hone_types::openai::Tool>,
) -> Result<Vec<hone_types::openai::Tool>, ConfigError> {
    let mut names = std::collections::BTreeSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("{field}.tools[{i}]");
        if tool.kind != "function" {
            return Err(ConfigError::at(
                at,
                format!("`{}` tools cannot be owned (function only)", tool.kind),
            ));
        }
        if !names.insert(tool.function.name.as_str()) {
            return Err(ConfigError::at(at, format!("`{}` is listed twice", tool.function.name)));
        }
        if let Some(p) = &tool.function.parameters {
            if !p.is_object() {
                return Err(ConfigError::at(
                    format!("{at}.function.parameters"),
                    "must be a JSON schema object",
                ));
            }
        }
    }
    Ok(tools)
}

/// The version's own route: a declared provider by name with `model` (and
/// `adapter`), or an inline local provider carrying both.
fn primary_route(
    field: &str,
    provider: RawProviderRef,
    model: Option<String>,
    adapter: Option<String>,
    providers: &mut Providers,
    env: &Env,
) -> Result<Route, ConfigError> {
    let inline = match provider {
        RawProviderRef::Name(name) => {
            let model = model.ok_or_else(|| {
                ConfigError::at(format!("{field}.model"), "is required (the upstream model to ask for)")
            })?;
            return Ok(Route {
                provider: name,
                model: env.expand(&format!("{field}.model"), &model)?,
                adapter,
                memory: None,
                adapter_sha256: None,
            });
        }
        RawProviderRef::Inline(inline) => inline,
    };
    if inline.kind != "local" {
        return Err(ConfigError::at(
            format!("{field}.provider.type"),
            format!(
                "inline providers are `type = \"local\"`; declare `{}` providers under [providers.NAME]",
                inline.kind
            ),
        ));
    }
    if model.is_some() || adapter.is_some() {
        return Err(ConfigError::at(
            format!("{field}.model"),
            "an inline provider carries its own `model` and `adapter`",
        ));
    }
    // Inline local providers share the provider named `local`, created with
    // default settings unless declared.
    let data_dir = providers.data_dir;
    let local = providers
        .declared
        .entry("local".to_owned())
        .or_insert_with(|| default_local_provider("local", data_dir));
    if local.kind != ProviderKind::Local {
        return Err(ConfigError::at(
            format!("{field}.provider"),
            "an inline local provider uses the provider named `local`, which is declared with another type",
        ));
    }
    Ok(Route {
        provider: "local".to_owned(),
        model: env.expand(&format!("{field}.provider.model"), &inline.model)?,
        adapter: inline.adapter,
        memory: None,
        adapter_sha256: None,
    })
}

/// Every route names a declared provider and a model; adapters only on local providers.
fn check_routes(
    field: &str,
    routes: &[Route],
    providers: &BTreeMap<String, ProviderConfig>,
) -> Result<(), ConfigError> {
    for (i, route) in routes.iter().enumerate() {
        let rfield = if i == 0 {
            format!("{field}.provider")
        } else {
            format!("{field}.fallbacks[{}].provider", i - 1)
        };
        let Some(provider) = providers.get(&route.provider) else {
            return Err(ConfigError::at(
                rfield,
                format!(
                    "unknown provider `{}`; declared providers: {}",
                    route.provider,
                    list(providers.keys())
                ),
            ));
        };
        if route.model.trim().is_empty() {
            return Err(ConfigError::at(
                format!("{field}.model"),
                "must name the upstream model",
            ));
        }
        if provider.kind == ProviderKind::Local && crate::is_artefact_url(&route.model) {
            crate::check_artefact_url(&format!("{field}.model"), &route.model)?;
        }
        if route.memory.is_some() && provider.kind != ProviderKind::Local {
            return Err(ConfigError::at(
                format!("{field}.memory"),
                format!(
                    "memory is decoded by the embedded engine (`local` providers); `{}` is not one",
                    route.provider
                ),
            ));
        }
        if let Some(adapter) = &route.adapter {
            if provider.kind != ProviderKind::Local {
                return Err(ConfigError::at(
                    format!("{field}.adapter"),
                    format!(
                        "adapters are served by `local` providers; `{}` is not one",
                        route.provider
                    ),
                ));
            }
            if crate::is_artefact_url(adapter) {
                crate::check_artefact_url(&format!("{field}.adapter"), adapter)?;
            } else if !is_adapter_name(adapter) {
                return Err(ConfigError::at(
                    format!("{field}.adapter"),
                    "an adapter is a name (letters, digits and `-_.`, not starting with `.`) or a URL (s3://…, file:///…)",
                ));
            }
        }
    }
    Ok(())
}

/// `system`, expanded, or the contents of `system_file` (relative to the config file).
fn system_prompt(
    field: &str,
    system: Option<String>,
    system_file: Option<String>,
    env: &Env,
) -> Result<Option<String>, ConfigError> {
    match (system, system_file) {
        (Some(_), Some(_)) => Err(ConfigError::at(
            format!("{field}.system_file"),
            "give `system` or `system_file`, not both",
        )),
        (Some(s), None) => Ok(Some(env.expand(&format!("{field}.system"), &s)?)),
        (None, Some(f)) => {
            let path = env.base_dir.join(env.expand(&format!("{field}.system_file"), &f)?);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ConfigError::at(
                    format!("{field}.system_file"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            Ok(Some(text))
        }
        (None, None) => Ok(None),
    }
}

/// `temperature`, `top_p` and `max_tokens` within their ranges.
fn check_sampling(
    field: &str,
    temperature: Option<f64>,
    top_p: Option<f64>,
    max_tokens: Option<u32>,
) -> Result<(), ConfigError> {
    if let Some(t) = temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(ConfigError::at(
                format!("{field}.temperature"),
                format!("must be between 0 and 2, got {t}"),
            ));
        }
    }
    if let Some(p) = top_p {
        if !(0.0..=1.0).contains(&p) {
            return Err(ConfigError::at(
                format!("{field}.top_p"),
                format!("must be between 0 and 1, got {p}"),
            ));
        }
    }
    if max_tokens == Some(0) {
        return Err(ConfigError::at(format!("{field}.max_tokens"), "must be at least 1"));
    }
    Ok(())
}

impl DeploymentConfig {
    /// Validates `[agents.NAME.deployment]` (`field` is `agents.NAME`); it
    /// may be left out when the agent has a single version. `window` is the
    /// monitors' window: the most episodes of a version a decision sees.
    fn from_raw(
        field: &str,
        agent: &str,
        raw: Option<RawDeployment>,
        versions: &BTreeMap<String, DeclaredVersion>,
        window: usize,
    ) -> Result<Self, ConfigError> {
        let d = match raw {
            Some(d) => d,
            // One version: it is the champion, with every default.
            None if versions.len() == 1 => RawDeployment {
                champion: versions.keys().next().cloned().unwrap_or_default(),
                canaries: BTreeMap::new(),
                policy: None,
                canary_share: None,
                clear_gain: None,
                canary_episodes: None,
                promote_margin: None,
                canary_max_episodes: None,
                promotion: None,
                expected_gain: None,
                least_gain: None,
                canary_max_share: None,
            },
            None => {
                return Err(ConfigError::at(
                    format!("{field}.deployment"),
                    format!(
                        "agent `{agent}` has {} versions; say which is the champion in [{field}.deployment]",
                        versions.len()
                    ),
                ))
            }
        };
        let dfield = format!("{field}.deployment");
        if !versions.contains_key(&d.champion) {
            return Err(ConfigError::at(
                format!("{dfield}.champion"),
                format!(
                    "`{}` is not a version of agent `{agent}`; declared: {}",
                    d.champion,
                    list(versions.keys())
                ),
            ));
        }
        check_canaries(&dfield, agent, &d, versions)?;
        let share = d.canary_share.unwrap_or(0.1);
        if !(share.is_finite() && share > 0.0 && share < 1.0) {
            return Err(ConfigError::at(
                format!("{dfield}.canary_share"),
                format!("must be between 0 and 1 (exclusive), got {share}"),
            ));
        }
        let clear_gain = d
            .clear_gain
            .as_ref()
            .map(|c| ClearGain::from_raw(&format!("{dfield}.clear_gain"), c, share))
            .transpose()?;
        let canary_episodes = d.canary_episodes.unwrap_or(50).min(window);
        if canary_episodes == 0 {
            return Err(ConfigError::at(
                format!("{dfield}.canary_episodes"),
                "must be at least 1",
            ));
        }
        if d.canary_episodes.is_some_and(|n| n > window) {
            return Err(ConfigError::at(
                format!("{dfield}.canary_episodes"),
                format!("must be at most the monitors' window ({window} episodes, learn.monitor.window): a canary is judged on its last {window}"),
            ));
        }
        let promotion = PromotionRule::from_raw(&dfield, &d, canary_episodes, window, share)?;
        Ok(DeploymentConfig {
            champion: d.champion,
            canaries: d.canaries.into_iter().collect(),
            policy: DeploymentPolicy::from_raw(&format!("{dfield}.policy"), d.policy)?,
            canary_share: share,
            clear_gain,
            canary_episodes,
            promotion,
        })
    }
}

impl ClearGain {
    /// `above` is a gain of 0 or more; `share` is a share at least
    /// `canary_share` that leaves the champion some traffic.
    fn from_raw(field: &str, raw: &RawClearGain, canary_share: f64) -> Result<Self, ConfigError> {
        if !(raw.above.is_finite() && raw.above >= 0.0) {
            return Err(ConfigError::at(
                format!("{field}.above"),
                format!("must be a reward gain of 0 or more, got {}", raw.above),
            ));
        }
        if !(raw.share.is_finite() && raw.share >= canary_share && raw.share < 1.0) {
            return Err(ConfigError::at(
                format!("{field}.share"),
                format!(
                    "must be at least canary_share ({canary_share}) and below 1, got {}",
                    raw.share
                ),
            ));
        }
        Ok(Self {
            above: raw.above,
            share: raw.share,
        })
    }
}

impl PromotionRule {
    /// A promotion margin is a reward difference of 0 or more.
    pub fn check_margin(margin: f64) -> Result<f64, String> {
        if margin.is_finite() && margin >= 0.0 {
            Ok(margin)
        } else {
            Err(format!("must be a reward difference of 0 or more, got {margin}"))
        }
    }

    /// The largest share a sequential canary grows to when not told.
    pub const MAX_SHARE: f64 = 0.5;

    /// `promotion`, `promote_margin`, `canary_max_episodes`, `least_gain`
    /// and `canary_max_share` of `[agents.NAME.deployment]`.
    fn from_raw(
        dfield: &str,
        d: &RawDeployment,
        canary_episodes: usize,
        window: usize,
        canary_share: f64,
    ) -> Result<Self, ConfigError> {
        let max_episodes = || {
            let max = d.canary_max_episodes.unwrap_or((4 * canary_episodes).min(window));
            if (canary_episodes..=window).contains(&max) {
                Ok(max)
            } else {
                Err(ConfigError::at(
                    format!("{dfield}.canary_max_episodes"),
                    format!(
                        "must be at least canary_episodes ({canary_episodes}) and at most the monitors' window ({window}, learn.monitor.window), got {max}"
                    ),
                ))
            }
        };
        let sequential = match d.promotion.as_deref() {
            None | Some("not_shown_worse") => false,
            Some("sequential") => true,
            Some(other) => {
                return Err(ConfigError::at(
                    format!("{dfield}.promotion"),
                    format!(
                        "unknown promotion rule `{other}`; expected \"not_shown_worse\" (default) or \"sequential\""
                    ),
                ))
            }
        };
        if d.expected_gain.is_some() {
            return Err(ConfigError::at(
                format!("{dfield}.expected_gain"),
                "is no longer read: the sequential test bets on the rewards and needs no scale; remove it (`least_gain` sets the least gain worth a promotion)",
            ));
        }
        for (key, set) in [
            ("least_gain", d.least_gain.is_some()),
            ("canary_max_share", d.canary_max_share.is_some()),
        ] {
            if set && !sequential {
                return Err(ConfigError::at(
                    format!("{dfield}.{key}"),
                    "applies only with promotion = \"sequential\"",
                ));
            }
        }
        if sequential {
            if d.promote_margin.is_some() {
                return Err(ConfigError::at(
                    format!("{dfield}.promote_margin"),
                    "does not apply with promotion = \"sequential\" (a sequential canary must be shown better)",
                ));
            }
            let least_gain = d.least_gain.unwrap_or(0.0);
            if !(least_gain.is_finite() && least_gain >= 0.0) {
                return Err(ConfigError::at(
                    format!("{dfield}.least_gain"),
                    format!("must be a reward gain of 0 or more, got {least_gain}"),
                ));
            }
            let max_share = d.canary_max_share.unwrap_or(Self::MAX_SHARE.max(canary_share));
            if !(max_share.is_finite() && max_share >= canary_share && max_share < 1.0) {
                return Err(ConfigError::at(
                    format!("{dfield}.canary_max_share"),
                    format!("must be at least canary_share ({canary_share}) and below 1, got {max_share}"),
                ));
            }
            return Ok(PromotionRule::Sequential {
                max_episodes: max_episodes()?,
                least_gain,
                max_share,
            });
        }
        let Some(margin) = d.promote_margin else {
            if d.canary_max_episodes.is_some() {
                return Err(ConfigError::at(
                    format!("{dfield}.canary_max_episodes"),
                    "applies only with promote_margin or promotion = \"sequential\" (without them a canary is decided at canary_episodes)",
                ));
            }
            return Ok(PromotionRule::NotShownWorse);
        };
        Self::check_margin(margin).map_err(|e| ConfigError::at(format!("{dfield}.promote_margin"), e))?;
        Ok(PromotionRule::WithinMargin {
            margin,
            max_episodes: max_episodes()?,
        })
    }
}

/// Canaries are declared versions other than the champion, with shares in
/// (0, 1) that leave the champion some traffic.
fn check_canaries(
    dfield: &str,
    agent: &str,
    d: &RawDeployment,
    versions: &BTreeMap<String, DeclaredVersion>,
) -> Result<(), ConfigError> {
    let mut total = 0.0;
    for (label, share) in &d.canaries {
        let cfield = format!("{dfield}.canaries.{label}");
        if !versions.contains_key(label) {
            return Err(ConfigError::at(
                cfield,
                format!("`{label}` is not a version of agent `{agent}`"),
            ));
        }
        if *label == d.champion {
            return Err(ConfigError::at(cfield, "the champion cannot also be a canary"));
        }
        if !(share.is_finite() && *share > 0.0 && *share < 1.0) {
            return Err(ConfigError::at(
                cfield,
                format!("a canary share must be between 0 and 1 (exclusive), got {share}"),
            ));
        }
        total += share;
    }
    if total >= 1.0 {
        return Err(ConfigError::at(
            format!("{dfield}.canaries"),
            format!("canary shares add up to {total}; they must leave the champion a share"),
        ));
    }
    Ok(())
}

/// The agent the judges' calls are recorded under: one version per judged
/// agent (labelled with that agent's name), answering deterministically.
fn judge_agent(agents: &BTreeMap<String, AgentConfig>) -> Option<AgentConfig> {
    let routes = agents.values().filter_map(|a| {
        let judge = a.reward.judge.as_ref()?;
        Some((
            a.name.clone(),
            Route {
                provider: judge.provider.clone(),
                model: judge.model.clone(),
                adapter: None,
                memory: None,
                adapter_sha256: None,
            },
        ))
    });
    service_agent(JUDGE_AGENT, "The LLM judge's own calls.", routes.collect())
}

/// The agent reflective optimisers' calls are recorded under: one version
/// per agent and optimiser (labelled `AGENT.OPTIMISER`).
fn reflector_agent(agents: &BTreeMap<String, AgentConfig>) -> Option<AgentConfig> {
    let routes = agents.values().flat_map(|a| {
        a.learn.optimisers.iter().filter_map(move |o| {
            let (route, _) = o.reflector()?;
            Some((crate::reflect::reflector_label(&a.name, o.name()), route.clone()))
        })
    });
    service_agent(
        REFLECTOR_AGENT,
        "The reflection models' own calls (prompt, playbook and tools optimisers).",
        routes.collect(),
    )
}

/// An agent of hone's own whose versions are `routes` by label, each
/// answering at temperature 0; `None` when there are none.
fn service_agent(name: &str, description: &str, routes: Vec<(String, Route)>) -> Option<AgentConfig> {
    let versions: BTreeMap<String, DeclaredVersion> = routes
        .into_iter()
        .map(|(label, route)| {
            let spec = VersionSpec {
                agent: name.to_owned(),
                routes: vec![route],
                temperature: Some(0.0),
                ..Default::default()
            };
            let id = spec.id();
            (label.clone(), DeclaredVersion { label, id, spec })
        })
        .collect();
    let champion = versions.keys().next()?.clone();
    Some(AgentConfig {
        name: name.to_owned(),
        description: Some(description.to_owned()),
        versions,
        deployment: DeploymentConfig::new(champion),
        reward: RewardSpec::default(),
        learn: LearnSpec::default(),
        embeddings: None,
    })
}

/// `` `a`, `b` `` for a message, or `none`.
fn list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<_> = names.map(|n| format!("`{n}`")).collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
