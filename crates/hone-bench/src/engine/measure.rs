//! Throughput measurements for `hone bench engine`: prefill and decode
//! tokens/s at batch 1 and batch 8, measured the way
//! `python/engine_hf.py` measures Hugging Face transformers, so the two
//! columns compare like with like: the same prompt ids, greedy next tokens,
//! the last position's logits only during prefill, the median of `reps`
//! timed runs after one warm-up.

use candle_core::{Tensor, D};
use hone_engine::model::{KvCache, Model};
use hone_engine::Result;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct BenchSettings {
    /// Prompt tokens per row.
    pub prompt: usize,
    /// Decode steps timed after the prompt.
    pub new_tokens: usize,
    /// Timed repetitions (the median is reported).
    pub reps: usize,
}

/// Tokens per second.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Figures {
    pub prefill_b1: f64,
    pub prefill_b8: f64,
    pub decode_b1: f64,
    pub decode_b8: f64,
}

/// The prompt ids every benchmark uses: `(31·i + 7) mod min(vocab, 256)`.
pub fn prompt_ids(len: usize, vocab: usize) -> Vec<u32> {
    let range = vocab.min(256) as u32;
    (0..len as u32).map(|i| (31 * i + 7) % range).collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `f` once to warm up, then `reps` times; the median of its tokens/s.
fn timed(reps: usize, mut f: impl FnMut() -> Result<f64>) -> Result<f64> {
    f()?;
    let mut rates = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        rates.push(f()?);
    }
    Ok(median(rates))
}

fn prefill(model: &Model, batch: usize, prompt: &[u32]) -> Result<(Vec<KvCache>, Vec<u32>)> {
    let mut caches = Vec::with_capacity(batch);
    let mut next = Vec::with_capacity(batch);
    for _ in 0..batch {
        let mut cache = KvCache::new();
        let input = Tensor::new(prompt, model.device())?.unsqueeze(0)?;
        let logits = model.forward_last(&input, &mut cache, None)?;
        next.push(logits.argmax(D::Minus1)?.squeeze(0)?.to_scalar::<u32>()?);
        caches.push(cache);
    }
    Ok((caches, next))
}

/// Measures `model` under `settings`.
pub fn measure(model: &Model, settings: BenchSettings) -> Result<Figures> {
    let prompt = prompt_ids(settings.prompt, model.config.vocab_size);
    let prefill_rate = |batch: usize| {
        timed(settings.reps, || {
            let rows: Vec<u32> = (0..batch).flat_map(|_| prompt.iter().copied()).collect();
            let input = Tensor::from_vec(rows, (batch, prompt.len()), model.device())?;
            let started = Instant::now();
            let logits = model.forward_last(&input, &mut KvCache::new(), None)?;
            logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
            Ok((batch * prompt.len()) as f64 / started.elapsed().as_secs_f64())
        })
    };
    let decode_rate = |batch: usize| {
        timed(settings.reps, || {
            let (mut caches, mut next) = prefill(model, batch, &prompt)?;
            let started = Instant::now();
            for _ in 0..settings.new_tokens {
                let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
                let logits = model.decode(&next, &mut refs, &[(batch, None)])?;
                next = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
            }
            Ok((batch * settings.new_tokens) as f64 / started.elapsed().as_secs_f64())
        })
    };
    Ok(Figures {
        prefill_b1: prefill_rate(1)?,
        prefill_b8: prefill_rate(8)?,
        decode_b1: decode_rate(1)?,
        decode_b8: decode_rate(8)?,
    })
}

/// Decode tokens/s through the engine's own sampling path
/// ([`hone_engine::generate::start`] and [`hone_engine::generate::step`], greedy) without
/// and with a kNN-LM datastore of `keys` entries, at batch 1 and 8, with
/// one way of searching it.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct MemoryFigures {
    pub keys: usize,
    /// `exact` (every key scanned) or `hnsw` (the index).
    pub search: &'static str,
    pub decode_b1: f64,
    pub decode_b1_memory: f64,
    pub decode_b8: f64,
    pub decode_b8_memory: f64,
    /// Seconds to build the index (`hnsw` only).
    pub index_seconds: Option<f64>,
    /// Share of the exact 16 nearest the index finds, over queries near
    /// stored keys (`hnsw` only).
    pub recall: Option<f64>,
}

/// A datastore of `keys` seeded pseudo-random keys and values shaped for
/// `model`, clustered as real ones are (the contexts of an agent's
/// episodes recur): keys scattered around `keys / 16` random centres.
pub fn synthetic_datastore(model: &Model, keys: usize, seed: u64) -> Result<hone_engine::memory::Datastore> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dim = model.config.hidden_size;
    let vocab = model.config.vocab_size as u32;
    let centres: Vec<Vec<f32>> = (0..keys.div_ceil(16))
        .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect())
        .collect();
    let mut store = hone_engine::memory::Datastore::new(dim);
    for i in 0..keys {
        let key: Vec<f32> = centres[i % centres.len()]
            .iter()
            .map(|c| c + rng.random_range(-0.2f32..0.2))
            .collect();
        store.add(&key, rng.random_range(0..vocab))?;
    }
    Ok(store)
}

/// Measures decoding without and with memory of `keys` entries (k = 16,
/// λ = 0.25), in the same run: searched exactly, and through the HNSW
/// index too when the datastore is above [`hone_engine::memory::EXACT_LIMIT`].
pub fn measure_memory(model: &Model, settings: BenchSettings, keys: usize) -> Result<Vec<MemoryFigures>> {
    use hone_engine::generate::{start, step, Sampling};
    use hone_engine::memory::{KnnLm, EXACT_LIMIT};
    use std::sync::Arc;
    let prompt = prompt_ids(settings.prompt, model.config.vocab_size);
    let exact = synthetic_datastore(model, keys, 7)?;
    let sampling = Arc::new(Sampling {
        temperature: 0.0,
        max_tokens: settings.new_tokens + 1,
        ..Sampling::default()
    });
    let rate = |batch: usize, memory: Option<Arc<KnnLm>>| {
        timed(settings.reps, || {
            let mut sequences = start(
                model,
                &prompt,
                KvCache::new(),
                None,
                memory.clone(),
                sampling.clone(),
                batch,
            )?;
            let started = Instant::now();
            for _ in 0..settings.new_tokens {
                let mut refs: Vec<_> = sequences.iter_mut().collect();
                step(model, &mut refs)?;
            }
            Ok((batch * settings.new_tokens) as f64 / started.elapsed().as_secs_f64())
        })
    };
    let (decode_b1, decode_b8) = (rate(1, None)?, rate(8, None)?);
    let with = |datastore: hone_engine::memory::Datastore| {
        let memory = Arc::new(KnnLm {
            datastore: Arc::new(datastore),
            k: 16,
            lambda: 0.25,
            temperature: 1.0,
            adaptive: false,
        });
        Ok::<_, hone_engine::EngineError>((rate(1, Some(memory.clone()))?, rate(8, Some(memory))?))
    };
    let row = |search, (b1, b8): (f64, f64), index_seconds, recall| MemoryFigures {
        keys,
        search,
        decode_b1,
        decode_b1_memory: b1,
        decode_b8,
        decode_b8_memory: b8,
        index_seconds,
        recall,
    };
    // The scan first; the index is built over the same keys afterwards.
    let mut rows = vec![row("exact", with(exact.clone())?, None, None)];
    if keys > EXACT_LIMIT {
        use rand::{Rng, SeedableRng};
        let started = Instant::now();
        let indexed = exact.indexed();
        let index_seconds = started.elapsed().as_secs_f64();
        // Queries near stored keys, as a recurring context is.
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let queries: Vec<Vec<f32>> = (0..200)
            .map(|_| {
                let key = indexed.key(rng.random_range(0..keys));
                key.iter().map(|v| v + rng.random_range(-0.1f32..0.1)).collect()
            })
            .collect();
        let recall = indexed.recall(&queries, 16);
        rows.push(row("hnsw", with(indexed)?, Some(index_seconds), Some(recall)));
    }
    Ok(rows)
}

/// Requests that share a prompt, served through the whole engine without
/// and with its prefix cache, in the same run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct PrefixFigures {
    pub requests: usize,
    /// Tokens every request's prompt starts with.
    pub shared: usize,
    /// Tokens of each request's own after the shared ones.
    pub own: usize,
    /// Median seconds to serve all requests, submitted together.
    pub cold_seconds: f64,
    pub cached_seconds: f64,
    /// Share of prompt tokens the cache supplied (over every run, the
    /// warm-up included).
    pub reused: f64,
}

/// Requests served through a whole [`Engine`](hone_engine::engine::Engine) on the
/// checkpoint in `dir` (on `device`, in `dtype`): `requests` prompts of
/// `settings.prompt` shared tokens and `own` tokens each (different per
/// request and per run), `settings.new_tokens` greedy tokens each, all
/// submitted at once as an agent's concurrent episodes are.
#[derive(Debug, Clone, Copy)]
pub struct EngineLoad<'a> {
    pub dir: &'a std::path::Path,
    pub settings: BenchSettings,
    pub requests: usize,
    pub own: usize,
    pub dtype: candle_core::DType,
    pub device: &'a candle_core::Device,
}

impl EngineLoad<'_> {
    /// The engine's defaults on this device and dtype.
    fn options(&self) -> hone_engine::engine::EngineOptions {
        hone_engine::engine::EngineOptions {
            dtype: self.dtype,
            device: self.device.clone(),
            ..hone_engine::engine::EngineOptions::default()
        }
    }
}

/// `served` with the prefix cache off, then on.
pub fn measure_prefix_cache(served: &EngineLoad) -> Result<PrefixFigures> {
    use hone_engine::engine::{EngineOptions, DEFAULT_PREFIX_CACHE_BYTES};
    let options = |prefix_cache_bytes| EngineOptions {
        prefix_cache_bytes,
        ..served.options()
    };
    let (cold_seconds, _) = serve_together(served, options(0))?;
    let (cached_seconds, reused) = serve_together(served, options(DEFAULT_PREFIX_CACHE_BYTES))?;
    Ok(PrefixFigures {
        requests: served.requests,
        shared: served.settings.prompt,
        own: served.own,
        cold_seconds,
        cached_seconds,
        reused,
    })
}

/// The same requests served with each decode step in one part and in
/// `parts` parts on threads of their own, in the same run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct PartsFigures {
    pub requests: usize,
    pub parts: usize,
    /// Median seconds to serve all requests, submitted together.
    pub one_part_seconds: f64,
    pub parts_seconds: f64,
}

/// `served` (prefix cache on) by an engine that decodes each step in one
/// part, then in `parts` ([`hone_engine::engine::EngineOptions::decode_parts`]).
pub fn measure_decode_parts(served: &EngineLoad, parts: usize) -> Result<PartsFigures> {
    let options = |decode_parts| hone_engine::engine::EngineOptions {
        decode_parts,
        ..served.options()
    };
    let (one_part_seconds, _) = serve_together(served, options(1))?;
    let (parts_seconds, _) = serve_together(served, options(parts))?;
    Ok(PartsFigures {
        requests: served.requests,
        parts,
        one_part_seconds,
        parts_seconds,
    })
}

/// Serves `served` on an engine loaded with `options`: the median seconds
/// of `settings.reps` runs after a warm-up, and the share of prompt tokens
/// the prefix cache supplied over all of them.
fn serve_together(served: &EngineLoad, options: hone_engine::engine::EngineOptions) -> Result<(f64, f64)> {
    use hone_engine::engine::{Engine, Event, Request};
    use hone_engine::generate::Sampling;
    let EngineLoad {
        dir,
        settings,
        requests,
        own,
        ..
    } = *served;
    let engine = Engine::load(dir, options)?;
    let vocab = engine.model().config.vocab_size;
    let shared = prompt_ids(settings.prompt, vocab);
    let range = vocab.min(256) as u32;
    let mut run = 0u32;
    let once = || -> Result<f64> {
        run += 1;
        let started = Instant::now();
        let receivers = (0..requests as u32)
            .map(|r| {
                let mut prompt = shared.clone();
                prompt.extend((0..own as u32).map(|i| (run * 7919 + r * 104_729 + i * 13) % range));
                engine.submit(Request {
                    prompt,
                    sampling: Sampling {
                        temperature: 0.0,
                        max_tokens: settings.new_tokens,
                        ..Sampling::default()
                    },
                    n: 1,
                    adapter: None,
                    memory: None,
                    stop: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        for mut rx in receivers {
            while let Some(event) = rx.blocking_recv() {
                match event {
                    Event::Done { .. } => break,
                    Event::Failed(message) => return Err(hone_engine::EngineError::Model(message)),
                    _ => {}
                }
            }
        }
        Ok(started.elapsed().as_secs_f64())
    };
    let seconds = timed(settings.reps, once)?;
    let stats = engine.prefix_stats();
    Ok((seconds, stats.reused_tokens as f64 / stats.prompt_tokens.max(1) as f64))
}
