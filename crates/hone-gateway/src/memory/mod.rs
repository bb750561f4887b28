//! Episodic memory: the agent's successful episodes, retrieved by
//! similarity to a new request and shown to the model as few-shot examples
//! (a version's `examples` policy, proposed by the `examples` optimiser).
//!
//! An index per (agent, reward spec, policy) is built from the store and
//! rebuilt when older than [`REFRESH`]. Similarity is BM25 over the tasks
//! ([`bm25`]) or, when the policy names an embedding route, cosine over
//! embeddings from an OpenAI-compatible `/v1/embeddings` ([`embeddings`]).
//! An example whose task is the request's own is never shown (so replaying
//! a recorded episode cannot see its own answer).

pub mod bm25;
pub mod embeddings;

use crate::dispatch::Providers;
use hone_store::{CycleStore, Success};
use hone_types::openai::{Message, Role};
use hone_types::ExamplePolicy;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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

#[derive(Default)]
pub struct EpisodicMemory {
    indexes: Mutex<HashMap<String, Arc<Index>>>,
}

impl std::fmt::Debug for EpisodicMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpisodicMemory").finish_non_exhaustive()
    }
}

impl EpisodicMemory {
    /// The `k` most similar successful episodes as alternating user and
    /// assistant messages (most similar last, nearest the request).
    pub async fn examples(
        &self,
        store: &Arc<dyn CycleStore>,
        providers: &Providers,
        agent: &str,
        spec_version: &str,
        policy: &ExamplePolicy,
        query: &str,
    ) -> Result<Vec<Message>, String> {
        let key = format!(
            "{agent}\n{spec_version}\n{}",
            serde_json::to_string(policy).unwrap_or_default()
        );
        let cached = self
            .indexes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .filter(|i| i.built.elapsed() < REFRESH)
            .cloned();
        let index = match cached {
            Some(index) => index,
            None => {
                let index = Arc::new(build(store, providers, agent, spec_version, policy).await?);
                self.indexes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key, index.clone());
                index
            }
        };
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
}

async fn build(
    store: &Arc<dyn CycleStore>,
    providers: &Providers,
    agent: &str,
    spec_version: &str,
    policy: &ExamplePolicy,
) -> Result<Index, String> {
    let (store, a, v, min) = (
        store.clone(),
        agent.to_owned(),
        spec_version.to_owned(),
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
    tracing::debug!(agent, examples = examples.len(), "episodic memory index built");
    Ok(Index {
        built: Instant::now(),
        examples,
        similarity,
    })
}
