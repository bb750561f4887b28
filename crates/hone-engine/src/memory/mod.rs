//! kNN-LM memory (Khandelwal et al., arXiv:1911.00172): a datastore of
//! (context → next token) pairs taken from successful episodes, and the
//! next-token distribution interpolated with the model's,
//!
//! ```text
//! p(y | x) = λ · p_kNN(y | x) + (1 − λ) · p_LM(y | x)
//! p_kNN(y | x) ∝ Σ over the k nearest keys k_i with value v_i = y of exp(−d(q, k_i) / T)
//! ```
//!
//! where `q` is the model's final hidden state (after the last norm) at the
//! position that predicts `y`, `d` the squared Euclidean distance and `T` a
//! temperature over distances. Behaviour changes with no weight update: the
//! datastore is built from recorded token ids and can be dropped at once.
//!
//! Search is exact (every key scanned, norms precomputed) up to
//! [`EXACT_LIMIT`] keys; a larger datastore gets an HNSW index
//! ([`index`]) when the server loading it calls [`Datastore::indexed`], since a
//! scan's cost per decoded token grows with the datastore and an index's
//! barely does (`hone bench engine --memory-keys` measures both). The datastore is a safetensors file (`keys`
//! `[n, dim]` f32, `values` `[n]` u32) named by its content hash.

mod index;

use crate::lora::Adapter;
use crate::model::{KvCache, Model};
use crate::{EngineError, Result};
use candle_core::{DType, Device, Tensor};
use index::Index;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Up to this many keys a datastore is searched exactly; beyond, through an
/// HNSW index: where a scan is still a small part of a decode step and an
/// index's build time (seconds at this size) is still small
/// (`hone bench engine --memory-keys` measures both sides).
pub const EXACT_LIMIT: usize = 16_384;

/// Keys and the tokens that followed them.
#[derive(Debug, Clone)]
pub struct Datastore {
    keys: Arc<Keys>,
    values: Vec<u32>,
    /// Built by [`Datastore::indexed`] for stores above [`EXACT_LIMIT`];
    /// dropped by any change.
    index: Option<Arc<Index>>,
}

/// The key matrix, shared with the index's points.
#[derive(Debug, Clone, PartialEq)]
struct Keys {
    dim: usize,
    /// `n × dim`, row-major.
    data: Vec<f32>,
    /// Squared norm of each key.
    norms: Vec<f32>,
}

impl Keys {
    fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// Squared Euclidean distance between key `i` and a vector of squared
    /// norm `norm`.
    fn distance(&self, i: usize, other: &[f32], norm: f32) -> f32 {
        (norm - 2.0 * dot(self.row(i), other) + self.norms[i]).max(0.0)
    }
}

impl PartialEq for Datastore {
    /// The same pairs; whether either is indexed does not matter.
    fn eq(&self, other: &Self) -> bool {
        self.keys == other.keys && self.values == other.values
    }
}

/// One neighbour of a query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour {
    /// Squared Euclidean distance to the query.
    pub distance: f32,
    pub value: u32,
}

impl Datastore {
    pub fn new(dim: usize) -> Self {
        Self {
            keys: Arc::new(Keys {
                dim,
                data: Vec::new(),
                norms: Vec::new(),
            }),
            values: Vec::new(),
            index: None,
        }
    }

    pub fn dim(&self) -> usize {
        self.keys.dim
    }

    /// The same datastore with an HNSW index over its keys when it holds
    /// more than [`EXACT_LIMIT`] (building one takes seconds to minutes:
    /// call it off the async runtime); unchanged otherwise.
    #[must_use]
    pub fn indexed(mut self) -> Self {
        if self.len() > EXACT_LIMIT && self.index.is_none() {
            self.index = Some(Arc::new(Index::build(&self.keys)));
        }
        self
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[f32] {
        self.keys.row(i)
    }

    /// Whether searches go through an index (else every key is scanned).
    pub fn is_indexed(&self) -> bool {
        self.index.is_some()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Adds one pair; `key` must have `dim` entries.
    pub fn add(&mut self, key: &[f32], value: u32) -> Result<()> {
        if key.len() != self.dim() {
            return Err(EngineError::Model(format!(
                "a datastore key has {} entries, the datastore {}",
                key.len(),
                self.dim()
            )));
        }
        // The index's points share the keys: drop it before changing them.
        self.index = None;
        let keys = Arc::make_mut(&mut self.keys);
        keys.norms.push(key.iter().map(|v| v * v).sum());
        keys.data.extend_from_slice(key);
        self.values.push(value);
        Ok(())
    }

    /// Adds every completion token of one sequence: the key of completion
    /// token `j` is the final hidden state at the position before it (the
    /// one that predicts it), run with `adapter` as it was served. Returns
    /// how many pairs were added.
    pub fn add_sequence(
        &mut self,
        model: &Model,
        prompt: &[u32],
        completion: &[u32],
        adapter: Option<&Adapter>,
    ) -> Result<usize> {
        if prompt.is_empty() || completion.is_empty() {
            return Ok(0);
        }
        // Every position but the last: the last completion token predicts
        // nothing that is stored.
        let mut context: Vec<u32> = prompt.to_vec();
        context.extend_from_slice(&completion[..completion.len() - 1]);
        let input = Tensor::new(context.as_slice(), model.device())?.unsqueeze(0)?;
        let hidden = model.hidden(&input, &mut KvCache::new(), adapter)?;
        let rows = hidden
            .squeeze(0)?
            .narrow(0, prompt.len() - 1, completion.len())?
            .to_dtype(DType::F32)?
            .to_vec2::<f32>()?;
        for (key, value) in rows.iter().zip(completion) {
            self.add(key, *value)?;
        }
        Ok(completion.len())
    }

    /// The `k` nearest keys to `query`, nearest first: exact (ties by
    /// insertion order), or approximate once [`Datastore::indexed`].
    pub fn search(&self, query: &[f32], k: usize) -> Vec<Neighbour> {
        if query.len() != self.dim() || k == 0 || self.is_empty() {
            return Vec::new();
        }
        let found = match &self.index {
            Some(index) => index.search(query, k),
            None => self.scan(query, k),
        };
        found
            .into_iter()
            .map(|(distance, i)| Neighbour {
                distance,
                value: self.values[i],
            })
            .collect()
    }

    /// The exact `k` nearest as (distance, row), every key scanned.
    fn scan(&self, query: &[f32], k: usize) -> Vec<(f32, usize)> {
        let q_norm: f32 = query.iter().map(|v| v * v).sum();
        let mut scored: Vec<(f32, usize)> = (0..self.len())
            .map(|i| (self.keys.distance(i, query, q_norm), i))
            .collect();
        let k = k.min(scored.len());
        let by_distance = |a: &(f32, usize), b: &(f32, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
        if k < scored.len() {
            scored.select_nth_unstable_by(k - 1, by_distance);
            scored.truncate(k);
        }
        scored.sort_by(by_distance);
        scored
    }

    /// Recall of the index: the share of the exact `k` nearest of each
    /// query that the index finds (1 when not indexed).
    pub fn recall(&self, queries: &[Vec<f32>], k: usize) -> f64 {
        let Some(index) = &self.index else {
            return 1.0;
        };
        let (mut found, mut wanted) = (0usize, 0usize);
        for query in queries {
            let exact: Vec<usize> = self.scan(query, k).into_iter().map(|(_, i)| i).collect();
            let approximate: Vec<usize> = index.search(query, k).into_iter().map(|(_, i)| i).collect();
            found += exact.iter().filter(|i| approximate.contains(i)).count();
            wanted += exact.len();
        }
        found as f64 / wanted.max(1) as f64
    }

    /// SHA-256 over the dimension, keys and values: the datastore's version.
    pub fn content_hash(&self) -> String {
        let mut digest = Sha256::new();
        digest.update((self.dim() as u64).to_le_bytes());
        for v in &self.keys.data {
            digest.update(v.to_le_bytes());
        }
        for v in &self.values {
            digest.update(v.to_le_bytes());
        }
        hex::encode(digest.finalize())
    }

    /// Writes the datastore to `path` (through a temporary file and a rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let n = self.len();
        let mut tensors = HashMap::new();
        tensors.insert(
            "keys".to_owned(),
            Tensor::from_slice(&self.keys.data, (n, self.dim()), &Device::Cpu)?,
        );
        tensors.insert("values".to_owned(), Tensor::from_slice(&self.values, n, &Device::Cpu)?);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
        }
        let partial = path.with_extension("partial");
        candle_core::safetensors::save(&tensors, &partial)?;
        std::fs::rename(&partial, path).map_err(|e| EngineError::io(path, e))
    }

    /// Reads a datastore written by [`Datastore::save`] (not indexed: a
    /// server calls [`Datastore::indexed`], a builder adds to it first).
    pub fn load(path: &Path) -> Result<Self> {
        let tensors = candle_core::safetensors::load(path, &Device::Cpu)?;
        let get = |name: &str| {
            tensors
                .get(name)
                .ok_or_else(|| EngineError::Model(format!("{}: no `{name}` tensor", path.display())))
        };
        let keys = get("keys")?;
        let (n, dim) = keys.dims2()?;
        let values: Vec<u32> = get("values")?.to_vec1()?;
        if values.len() != n {
            return Err(EngineError::Model(format!(
                "{}: {n} keys but {} values",
                path.display(),
                values.len()
            )));
        }
        let mut store = Datastore::new(dim);
        for (key, value) in keys.to_dtype(DType::F32)?.to_vec2::<f32>()?.iter().zip(values) {
            store.add(key, value)?;
        }
        Ok(store)
    }
}

/// `a · b` in eight independent lanes, which the compiler turns into SIMD
/// (one running sum would pin the order of additions and stay scalar).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a_chunks, a_rest) = a.as_chunks::<8>();
    let (b_chunks, b_rest) = b.as_chunks::<8>();
    let mut lanes = [0f32; 8];
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for lane in 0..8 {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    let rest: f32 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + rest
}

/// How a version decodes with its datastore.
#[derive(Debug, Clone)]
pub struct KnnLm {
    pub datastore: std::sync::Arc<Datastore>,
    /// Neighbours retrieved per token.
    pub k: usize,
    /// Weight of the kNN distribution, 0 to 1; 0 is the model alone.
    pub lambda: f64,
    /// Divides the distances before the softmax over neighbours.
    pub temperature: f64,
    /// λ scaled by `exp(−d_nearest / temperature)`, so memory speaks only
    /// where a stored context is near (adaptive kNN-LM).
    pub adaptive: bool,
}

impl KnnLm {
    /// Interpolates the model's log-probabilities `lm` (over the whole
    /// vocabulary) with the kNN distribution of `query`'s neighbours;
    /// returns log-probabilities of the mixture. λ = 0, or an empty
    /// datastore, returns `lm` unchanged.
    pub fn interpolate(&self, lm: &[f32], query: &[f32]) -> Vec<f32> {
        let neighbours = self.datastore.search(query, self.k);
        let lambda = match (self.adaptive, neighbours.first()) {
            (true, Some(nearest)) => {
                self.lambda * (-f64::from(nearest.distance) / self.temperature.max(f64::MIN_POSITIVE)).exp()
            }
            _ => self.lambda,
        };
        interpolate(lm, &neighbours, lambda, self.temperature)
    }
}

/// The mixture `λ · p_kNN + (1 − λ) · p_LM` as log-probabilities, given the
/// model's log-probabilities and the neighbours (distances and values).
pub fn interpolate(lm: &[f32], neighbours: &[Neighbour], lambda: f64, temperature: f64) -> Vec<f32> {
    if lambda <= 0.0 || neighbours.is_empty() {
        return lm.to_vec();
    }
    let lambda = lambda.min(1.0);
    let temperature = temperature.max(f64::MIN_POSITIVE);
    // Softmax over −distance / T, shifted by the nearest for stability.
    let nearest = neighbours
        .iter()
        .map(|n| f64::from(n.distance))
        .fold(f64::INFINITY, f64::min);
    let mut knn: HashMap<u32, f64> = HashMap::new();
    let mut total = 0.0;
    for n in neighbours {
        let w = (-(f64::from(n.distance) - nearest) / temperature).exp();
        total += w;
        *knn.entry(n.value).or_default() += w;
    }
    let log_rest = (1.0 - lambda).ln();
    let mut out: Vec<f32> = lm.iter().map(|l| (log_rest + f64::from(*l)) as f32).collect();
    for (token, weight) in knn {
        let Some(slot) = out.get_mut(token as usize) else {
            continue;
        };
        let from_knn = (lambda * weight / total).ln();
        let from_lm = log_rest + f64::from(lm[token as usize]);
        *slot = log_add_exp(from_knn, from_lm) as f32;
    }
    out
}

fn log_add_exp(a: f64, b: f64) -> f64 {
    let high = a.max(b);
    if high == f64::NEG_INFINITY {
        return high;
    }
    high + ((a - high).exp() + (b - high).exp()).ln()
}
