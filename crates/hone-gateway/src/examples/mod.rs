//! Few-shot examples: the agent's successful episodes, retrieved by
//! similarity to a new request and shown to the model as few-shot examples
//! (a version's `examples` policy, proposed by the `examples` optimiser).
//!
//! An index per (agent, policy) is built from the store on first use (the
//! requests that arrive meanwhile wait for that one build) and afterwards
//! rebuilt in the background when older than [`REFRESH`] — one rebuild at a
//! time, while requests keep using the index they have. Similarity is BM25
//! over the tasks ([`bm25`]) or, when the policy names an embedding route,
//! cosine over embeddings from an OpenAI-compatible `/v1/embeddings`
//! ([`embeddings`]). An example whose task is the request's own is never
//! shown (so replaying a recorded episode cannot see its own answer).

pub mod bm25;
pub mod embeddings;

use crate::dispatch::Providers;
use hone_config::Config;
use hone_store::{CycleStore, Success};
use hone_types::openai::{Message, Role};
use hone_types::ExamplePolicy;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio_util::task::TaskTracker;

/// How long an index serves before it is rebuilt from the store.
pub const REFRESH: Duration = Duration::from_secs(30);
/// Most successful episodes an index holds (the most recent).
pub const POOL: usize = 2000;

enum Similarity {
    Bm25(bm25::Bm25),
    Embeddings(Vec<Vec<f32>>),
}

struct Index {
    built: Instant,
    examples: Vec<Success>,
    similarity: Similarity,
}

/// One (agent, policy)'s index: absent until first built; `rebuilding`
/// while a background rebuild runs; `first_build` held by the one request
/// that builds it first.
#[derive(Default)]
struct Slot {
    index: Mutex<Option<Arc<Index>>>,
    rebuilding: AtomicBool,
    first_build: tokio::sync::Mutex<()>,
}

impl Slot {
    fn current(&self) -> Option<Arc<Index>> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn replace(&self, index: Index) -> Arc<Index> {
        let index = Arc::new(index);
        *self.index.lock().unwrap_or_else(PoisonError::into_inner) = Some(index.clone());
        index
    }
}

/// What building an index reads: owned, so a rebuild can run in the background.
#[derive(Clone)]
struct Source {
    store: Arc<dyn CycleStore>,
    providers: Providers,
    agent: String,
    spec_version: String,
    policy: ExamplePolicy,
}

pub struct ExampleIndex {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    /// Each agent's reward spec version, hashed once at start.
    spec_versions: HashMap<String, String>,
    /// How old an index may get before it is rebuilt ([`REFRESH`]).
    refresh: Duration,
    /// Indexes built so far (first builds and rebuilds).
    builds: Arc<AtomicU64>,
}

impl std::fmt::Debug for ExampleIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExampleIndex").finish_non_exhaustive()
    }
}

impl ExampleIndex {
    pub fn new(config: &Config) -> Self {
        Self {
            slots: Mutex::default(),
            refresh: REFRESH,
            builds: Arc::default(),
            spec_versions: config
                .agents
                .iter()
                .map(|(name, agent)| (name.clone(), agent.reward.version()))
                .collect(),
        }
    }

    /// Indexes built so far, first builds and rebuilds.
    pub fn builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }

    /// The `k` most similar successful episodes as alternating user and
    /// assistant messages (most similar last, nearest the request). A stale
    /// index is served while `tasks` rebuilds it.
    pub async fn examples(
        &self,
        store: &Arc<dyn CycleStore>,
        providers: &Providers,
        tasks: &TaskTracker,
        agent: &str,
        policy: &ExamplePolicy,
        query: &str,
    ) -> Result<Vec<Message>, String> {
        let source = Source {
            store: store.clone(),
            providers: providers.clone(),
            agent: agent.to_owned(),
            spec_version: self.spec_versions.get(agent).cloned().unwrap_or_default(),
            policy: policy.clone(),
        };
        let index = self.index(source, tasks).await?;
        let scores = match &index.similarity {
            Similarity::Bm25(bm25) => bm25.scores(query),
            Similarity::Embeddings(vectors) => {
                let route = policy.embeddings.as_ref().ok_or("embedding index without a route")?;
                let q = embeddings::embed(providers, route, &[query.to_owned()]).await?;
                let q = q.first().ok_or("no embedding for the request")?;
                vectors.iter().map(|v| embeddings::cosine(q, v)).collect()
            }
        };
        let mut ranked: Vec<(usize, f64)> = scores
            .into_iter()
            .enumerate()
            .filter(|(i, s)| *s > 0.0 && index.examples[*i].task.trim() != query.trim())
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(policy.k as usize);
        ranked.reverse();
        Ok(ranked
            .into_iter()
            .flat_map(|(i, _)| {
                let e = &index.examples[i];
                [
                    Message::new(Role::User, e.task.clone()),
                    Message::new(Role::Assistant, e.answer.clone()),
                ]
            })
            .collect())
    }

    /// The slot's index: built now if it never was (single-flight), else
    /// the one it has, with a background rebuild started when it is stale.
    async fn index(&self, source: Source, tasks: &TaskTracker) -> Result<Arc<Index>, String> {
        let key = format!(
            "{}\n{}\n{}",
            source.agent,
            source.spec_version,
            serde_json::to_string(&source.policy).unwrap_or_default()
        );
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default()
            .clone();
        let index = match slot.current() {
            Some(index) => index,
            None => {
                let _building = slot.first_build.lock().await;
                match slot.current() {
                    Some(index) => index,
                    None => {
                        self.builds.fetch_add(1, Ordering::Relaxed);
                        slot.replace(build(&source).await?)
                    }
                }
            }
        };
        if index.built.elapsed() >= self.refresh && !slot.rebuilding.swap(true, Ordering::AcqRel) {
            let builds = self.builds.clone();
            tasks.spawn(async move {
                builds.fetch_add(1, Ordering::Relaxed);
                match build(&source).await {
                    Ok(fresh) => {
                        slot.replace(fresh);
                    }
                    Err(e) => tracing::warn!(agent = %source.agent, error = %e, "example index not rebuilt"),
                }
                slot.rebuilding.store(false, Ordering::Release);
            });
        }
        Ok(index)
    }
}

async fn build(source: &Source) -> Result<Index, String> {
    let Source {
        providers,
        agent,
        policy,
        ..
    } = source;
    let (store, a, v, min) = (
        source.store.clone(),
        agent.clone(),
        source.spec_version.clone(),
        policy.min_reward.unwrap_or(f64::MIN),
    );
    let examples = tokio::task::spawn_blocking(move || store.successes(&a, &v, min, POOL))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let similarity = match &policy.embeddings {
        None => Similarity::Bm25(bm25::Bm25::new(examples.iter().map(|e| e.task.as_str()))),
        Some(route) => {
            let tasks: Vec<String> = examples.iter().map(|e| e.task.clone()).collect();
            let mut vectors = Vec::with_capacity(tasks.len());
            for chunk in tasks.chunks(64) {
                vectors.extend(embeddings::embed(providers, route, chunk).await?);
            }
            Similarity::Embeddings(vectors)
        }
    };
    tracing::debug!(agent = %agent, examples = examples.len(), "example index built");
    Ok(Index {
        built: Instant::now(),
        examples,
        similarity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hone_store::SqliteStore;

    fn index_and_store() -> (ExampleIndex, Arc<dyn CycleStore>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn CycleStore> = Arc::new(SqliteStore::open(&dir.path().join("hone.db"), false).unwrap());
        let config = hone_config::load_str(hone_config::DEFAULT_CONFIG, dir.path(), &|_| None).unwrap();
        (ExampleIndex::new(&config), store, dir)
    }

    async fn ask_many(index: &ExampleIndex, store: &Arc<dyn CycleStore>, tasks: &TaskTracker, n: usize) {
        let policy = ExamplePolicy {
            k: 2,
            min_reward: None,
            embeddings: None,
        };
        let providers = Providers::new();
        let asks = (0..n).map(|_| index.examples(store, &providers, tasks, "assistant", &policy, "what is 2+2?"));
        for examples in futures::future::join_all(asks).await {
            assert_eq!(examples.unwrap(), Vec::<Message>::new());
        }
    }

    // One thread: spawned rebuilds run only when the test yields to them.
    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_requests_build_an_index_once_and_stale_ones_rebuild_it_once_in_the_background() {
        let (mut index, store, _dir) = index_and_store();
        let tasks = TaskTracker::new();
        ask_many(&index, &store, &tasks, 16).await;
        assert_eq!(index.builds(), 1, "the first requests share one build");

        index.refresh = Duration::ZERO;
        ask_many(&index, &store, &tasks, 16).await;
        // All 16 were answered from the stale index: none ran a build.
        assert_eq!(index.builds(), 1, "a stale index is rebuilt outside the requests");
        tasks.close();
        tasks.wait().await;
        assert_eq!(index.builds(), 2, "one rebuild for the whole stale burst");
    }
}
