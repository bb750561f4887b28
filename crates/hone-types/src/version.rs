//! Versions: immutable, content-addressed bundles of everything that decides
//! how an agent answers (docs/ARCHITECTURE.md, "Concepts"). The id is derived from the
//! canonical JSON form, so a changed version always gets a new id and an
//! unchanged one keeps its id across restarts and machines.

use crate::ids::VersionId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One provider and the model name to ask it for (for a `local` provider,
/// the checkpoint directory), with the LoRA adapter to apply, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// The adapter's content hash (the SHA-256 of its files' manifest), set
    /// when hone trained it: part of the version's id, so the id names the
    /// adapter's bytes, not only its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_sha256: Option<String>,
    /// kNN-LM memory the embedded engine decodes with (local providers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryPolicy>,
}

/// The kinds of memory a route may decode with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemoryKind {
    /// kNN-LM (Khandelwal et al.): the next-token distribution interpolated
    /// with that of the tokens that followed the nearest stored contexts.
    #[serde(rename = "knn-lm")]
    KnnLm,
}

/// How a route decodes with a datastore of its agent's successful episodes
/// (`hone_engine::memory`): `p = λ·p_kNN + (1−λ)·p_LM` over the `k` nearest
/// stored hidden states, weighted `exp(−distance / temperature)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryPolicy {
    #[serde(rename = "type")]
    pub kind: MemoryKind,
    /// The datastore's content hash (64 hex digits): the file
    /// `<memory_dir>/<hash>.safetensors`.
    pub datastore: String,
    pub k: u32,
    pub lambda: f64,
    pub temperature: f64,
    /// Scale λ by `exp(−d_nearest / temperature)`: full weight where the
    /// context was seen before, none where nothing stored is near.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adaptive: bool,
}

// λ and the temperature are checked finite wherever a policy is made, so
// equality is reflexive (routes are compared and hashed as keys).
impl Eq for MemoryPolicy {}

impl MemoryPolicy {
    /// Whether `datastore` is a content hash (the only names datastores have).
    pub fn is_datastore_hash(datastore: &str) -> bool {
        datastore.len() == 64
            && datastore
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}

/// The canonical content of a version. Field order is fixed and maps are not
/// used, so serialising it is canonical; add new fields with
/// `skip_serializing_if` so existing ids do not change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VersionSpec {
    pub agent: String,
    /// The primary route, then fallbacks in order.
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Few-shot examples retrieved from the agent's successful episodes
    /// (episodic memory), inserted before the client's messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examples: Option<ExamplePolicy>,
    /// Sampling settings of this version that win over the client's. The
    /// rest of `temperature`, `top_p` and `reasoning_effort` are defaults a
    /// client may override; `max_tokens` is a ceiling either way (see
    /// `hone_types::harness::apply`, the one place the rule is written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enforce: Vec<Setting>,
    /// Lessons the harness adds to the system prompt (`playbook::render`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub playbook: Vec<crate::playbook::Lesson>,
    /// The tool set this version owns: when not empty, it replaces the
    /// tools a client sends (so the `tools` optimiser can change their
    /// descriptions and schemas); the client still runs the calls by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<crate::openai::Tool>,
}

/// A sampling setting a version may enforce over the client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    Temperature,
    TopP,
    ReasoningEffort,
}

impl Setting {
    pub const ALL: [Setting; 3] = [Setting::Temperature, Setting::TopP, Setting::ReasoningEffort];

    pub fn name(self) -> &'static str {
        match self {
            Setting::Temperature => "temperature",
            Setting::TopP => "top_p",
            Setting::ReasoningEffort => "reasoning_effort",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// How a version retrieves examples: the `k` most similar successful
/// episodes (reward at least `min_reward`), found by BM25 over their first
/// user message, or by cosine similarity of embeddings from `embeddings`
/// (an OpenAI-compatible `/v1/embeddings` route) when given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExamplePolicy {
    pub k: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<Route>,
}

impl VersionSpec {
    pub fn canonical_json(&self) -> String {
        // Serialising a struct of strings, numbers and vectors cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether the version's value of `setting` wins over the client's.
    pub fn enforces(&self, setting: Setting) -> bool {
        self.enforce.contains(&setting)
    }

    /// Marks `setting` enforced (kept sorted and unique, so the id is canonical).
    pub fn enforce(&mut self, setting: Setting) {
        if let Err(at) = self.enforce.binary_search(&setting) {
            self.enforce.insert(at, setting);
        }
    }

    pub fn id(&self) -> VersionId {
        let digest = Sha256::digest(self.canonical_json().as_bytes());
        VersionId::from_digest_hex(&hex::encode(digest))
    }
}

/// A version as stored: its spec plus where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionRecord {
    pub id: VersionId,
    pub agent: String,
    /// The name it was declared under in config (`v1`), if any.
    pub label: Option<String>,
    pub spec: VersionSpec,
    pub parent: Option<VersionId>,
    /// `config`, or the optimiser that proposed it.
    pub created_by: String,
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> VersionSpec {
        VersionSpec {
            agent: "assistant".into(),
            routes: vec![Route {
                provider: "openai".into(),
                model: "gpt-4o-mini".into(),
                adapter: None,
                memory: None,
                adapter_sha256: None,
            }],
            temperature: Some(0.3),
            ..Default::default()
        }
    }

    #[test]
    fn the_id_is_stable_and_changes_with_any_field() {
        let a = spec();
        assert_eq!(a.id(), spec().id());
        assert_eq!(a.id().as_str().len(), 16);
        let mut b = spec();
        b.temperature = Some(0.4);
        assert_ne!(a.id(), b.id());
        let mut c = spec();
        c.system = Some("Be brief.".into());
        assert_ne!(a.id(), c.id());
    }
}
