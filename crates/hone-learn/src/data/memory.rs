//! Building a kNN-LM datastore (`hone_engine::memory`) from an agent's
//! successful episodes: every call the embedded engine served, with its
//! recorded prompt and completion token ids, run once more through the
//! route's model (and adapter) to take the final hidden state before each
//! completion token as the key and the token as the value. The file is
//! named by its content hash, so a version's `memory.datastore` says
//! exactly what it decodes with; `held.json` beside it says which model
//! and episodes it holds, so the next build extends it.

use crate::error::LearnError;
use hone_artefacts::Artefacts;
use hone_engine::{Adapter, Datastore, Model};
use hone_store::CycleStore;
use hone_types::{EpisodeId, Route};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a failed build says it was doing (the cause follows).
const BUILDING: &str = "building the kNN-LM datastore";

/// What a build used and wrote.
#[derive(Debug, Clone)]
pub struct Built {
    /// The datastore's content hash (its name).
    pub hash: String,
    pub path: PathBuf,
    /// Whether an earlier datastore was extended (its pairs kept).
    pub extended: bool,
    /// Episodes added by this build.
    pub episodes: usize,
    pub calls: usize,
    /// Keys (completion tokens) stored.
    pub keys: usize,
    /// Successful episodes with no recorded token ids (served by another
    /// provider), left out.
    pub without_tokens: usize,
    /// Calls whose token ids lie outside this model's vocabulary, left out.
    pub foreign_calls: usize,
}

/// What a datastore holds, beside it (`held.json`): the model and adapter
/// its keys come from, and the episodes taken — so a later build can
/// extend it instead of starting again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Held {
    pub model: String,
    pub adapter: Option<String>,
    /// Sorted.
    pub episodes: Vec<EpisodeId>,
}

/// The sidecar's file name in a datastore's directory.
const HELD: &str = "held.json";

/// Builds the datastore of `episodes`' calls, keyed by `route`'s model
/// (and adapter, found in `adapters_dir`), and writes it to the memory
/// directory. With `extend` (a datastore's hash) whose keys come from the
/// same model and adapter, its pairs are kept and only episodes it does
/// not hold yet are added — memory accumulates across cycles; otherwise
/// the build starts empty.
pub async fn build(
    store: &dyn CycleStore,
    artefacts: &Artefacts,
    adapters_dir: &std::path::Path,
    route: &Route,
    episodes: &[EpisodeId],
    extend: Option<&str>,
) -> Result<Built, LearnError> {
    let checkpoint = artefacts
        .checkpoint(&route.model)
        .await
        .map_err(LearnError::training(BUILDING))?;
    let adapter_dir = match &route.adapter {
        Some(a) => Some(
            artefacts
                .adapter(a, adapters_dir)
                .await
                .map_err(LearnError::training(BUILDING))?,
        ),
        None => None,
    };
    let mut held = Held {
        model: route.model.clone(),
        adapter: route.adapter.clone(),
        episodes: Vec::new(),
    };
    let mut start = None;
    if let Some(hash) = extend {
        let path = artefacts
            .datastore(hash)
            .await
            .map_err(LearnError::training(BUILDING))?;
        let before: Option<Held> = std::fs::read(path.with_file_name(HELD))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        if let Some(before) = before.filter(|b| b.model == held.model && b.adapter == held.adapter) {
            start = Some(path);
            held.episodes = before.episodes;
        }
    }
    let mut sequences = Vec::new();
    let mut skipped = 0;
    let mut taken = 0;
    for id in episodes {
        if held.episodes.binary_search(id).is_ok() {
            continue;
        }
        taken += 1;
        let Some(episode) = store.episode(id)? else {
            skipped += 1;
            continue;
        };
        let tokens: Vec<_> = episode.calls.iter().filter_map(|c| c.sampled_tokens()).collect();
        if tokens.is_empty() {
            skipped += 1;
        } else if let Err(at) = held.episodes.binary_search(id) {
            held.episodes.insert(at, id.clone());
        }
        sequences.extend(tokens);
    }
    let extended = start.is_some();
    let job = tokio::task::spawn_blocking(move || -> Result<(Datastore, usize, usize), LearnError> {
        let device = candle_core::Device::Cpu;
        let model =
            Model::load(&checkpoint, candle_core::DType::F32, &device).map_err(LearnError::training(BUILDING))?;
        let adapter = adapter_dir
            .map(|dir| Adapter::load(&dir, candle_core::DType::F32, &device))
            .transpose()
            .map_err(LearnError::training(BUILDING))?;
        let vocab = model.config.vocab_size as u32;
        let mut datastore = match start {
            Some(path) => Datastore::load(&path).map_err(LearnError::training(BUILDING))?,
            None => Datastore::new(model.config.hidden_size),
        };
        let (mut calls, mut foreign) = (0, 0);
        for s in &sequences {
            if s.prompt.iter().chain(&s.completion).any(|t| *t >= vocab) {
                foreign += 1;
                continue;
            }
            if datastore
                .add_sequence(&model, &s.prompt, &s.completion, adapter.as_ref())
                .map_err(LearnError::training(BUILDING))?
                > 0
            {
                calls += 1;
            }
        }
        Ok((datastore, calls, foreign))
    });
    let (datastore, calls, foreign) = job.await??;
    let hash = datastore.content_hash();
    let path = artefacts.datastore_path(&hash);
    datastore.save(&path).map_err(LearnError::training(BUILDING))?;
    let sidecar = serde_json::to_vec_pretty(&held).map_err(LearnError::training(BUILDING))?;
    std::fs::write(path.with_file_name(HELD), sidecar).map_err(LearnError::training(BUILDING))?;
    Ok(Built {
        hash,
        path,
        extended,
        episodes: taken - skipped,
        calls,
        keys: datastore.len(),
        without_tokens: skipped,
        foreign_calls: foreign,
    })
}
