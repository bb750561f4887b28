//! The running engine: one model, its tokenizer, the resident LoRA adapters,
//! and a scheduler thread that batches every request in flight.
//!
//! Continuous batching: [`Engine::submit`] queues a request and returns a
//! channel of [`Event`]s. The scheduler prefills a new request once (its `n`
//! samples fork the prompt's cache), then advances all live samples of all
//! requests together, one batched decode per token, admitting waiting
//! requests between steps as room frees up (`max_batch` rows). Text is
//! streamed as it becomes final: held back while it ends in an incomplete
//! UTF-8 sequence or in what may be the start of a stop string.
//!
//! Adapters are looked up when a request is submitted and held by it, so
//! loading or unloading one never disturbs requests already running.
//!
//! Prefills start from the longest prefix the [`PrefixCache`] holds for the
//! same adapter, so an agent's system prompt and tool schemas, and the
//! earlier turns of an episode, are computed once rather than per call.

use crate::generate::{self, Finish, Generation, Sampling, Sequence};
use crate::lora::Adapter;
use crate::memory::KnnLm;
use crate::model::Model;
use crate::prefix_cache::{PrefixCache, PrefixStats};
use crate::tokenizer::Tokenizer;
use crate::{EngineError, Result};
use candle_core::{DType, Device};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError, RwLock};
use tokio::sync::mpsc as events;

/// How to load and run a model.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub dtype: DType,
    pub device: Device,
    /// Most samples decoded together in one step.
    pub max_batch: usize,
    /// Where an adapter named in a request but not loaded yet is looked for
    /// (`<adapters_dir>/<name>`), e.g. where the trainer writes them.
    pub adapters_dir: Option<PathBuf>,
    /// Bytes of prompt keys and values kept for reuse by later prompts that
    /// start the same way (0: every prompt is prefilled in full).
    pub prefix_cache_bytes: usize,
    /// Adapters kept loaded at once: past it, loading one unloads the least
    /// recently used adapter that `adapters_dir` can give back on its next
    /// use (one loaded from elsewhere stays until unloaded). 0: no limit.
    pub max_adapters: usize,
    /// Parts each decode step's batch is cut into, each decoded on a thread
    /// of its own ([`generate::step_in_parts`]); default
    /// [`crate::threads::batch_parts`]: the cores when every op runs on one
    /// thread, else 1.
    pub decode_parts: usize,
}

/// [`EngineOptions::max_adapters`] unless configured: a learning cycle
/// loads a new candidate adapter every cycle, and without a limit a
/// long-running gateway would keep every one it ever served.
pub const DEFAULT_MAX_ADAPTERS: usize = 64;

/// [`EngineOptions::prefix_cache_bytes`] unless configured: 128 MiB, some
/// 60,000 prompt tokens of the 0.8M-parameter demo model or 5,000 of
/// Qwen2.5-0.5B in f32.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 128 << 20;

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            dtype: DType::F32,
            device: Device::Cpu,
            max_batch: 16,
            adapters_dir: None,
            prefix_cache_bytes: DEFAULT_PREFIX_CACHE_BYTES,
            max_adapters: DEFAULT_MAX_ADAPTERS,
            decode_parts: crate::threads::batch_parts(),
        }
    }
}

/// One generation request, already tokenised.
#[derive(Debug, Clone)]
pub struct Request {
    pub prompt: Vec<u32>,
    /// `stop_tokens` are added to the model's own end-of-turn tokens.
    pub sampling: Sampling,
    /// Samples of this prompt (OpenAI's `n`).
    pub n: usize,
    /// A resident adapter's name, or `None` for the base model.
    pub adapter: Option<String>,
    /// kNN-LM memory to decode with (its datastore's keys are this model's
    /// hidden states), or `None`.
    pub memory: Option<Arc<KnnLm>>,
    /// Strings that end a sample; they are not part of its text.
    pub stop: Vec<String>,
}

/// What a request's channel receives, per sample `index`.
#[derive(Debug, Clone)]
pub enum Event {
    /// A sampled token (every one, the stop token included).
    Token {
        index: usize,
        token: u32,
        logprob: f32,
        top_logprobs: Vec<(u32, f32)>,
    },
    /// More of the sample's text, now final.
    Text { index: usize, text: String },
    /// The sample ended; `text` is all of it.
    Done {
        index: usize,
        text: String,
        generation: Generation,
    },
    /// The request failed; no more events follow.
    Failed(String),
}

/// A resident adapter, as listed by [`Engine::adapters`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct AdapterInfo {
    pub name: String,
    pub path: String,
    pub rank: usize,
    pub alpha: f64,
    pub target_modules: Vec<String>,
}

struct Resident {
    adapter: Arc<Adapter>,
    path: PathBuf,
    /// The engine's use count when it was last loaded or asked for.
    last_used: AtomicU64,
}

/// A loaded model served to any number of concurrent requests.
pub struct Engine {
    model: Arc<Model>,
    tokenizer: Arc<Tokenizer>,
    dir: PathBuf,
    stop_tokens: Vec<u32>,
    max_batch: usize,
    adapters_dir: Option<PathBuf>,
    adapters: RwLock<BTreeMap<String, Resident>>,
    max_adapters: usize,
    /// Counts adapter loads and uses, to find the least recently used.
    adapter_uses: AtomicU64,
    jobs: mpsc::Sender<Job>,
    prefixes: Arc<Mutex<PrefixCache>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Engine {
    /// Loads the checkpoint in `dir` and starts the scheduler thread.
    pub fn load(dir: &Path, options: EngineOptions) -> Result<Self> {
        let started = std::time::Instant::now();
        let model = Arc::new(Model::load(dir, options.dtype, &options.device)?);
        let tokenizer = Arc::new(Tokenizer::load(dir)?);
        let mut stop_tokens = model.config.eos_token_ids.clone();
        stop_tokens.extend(generation_config_eos(dir)?);
        if let Some(eos) = tokenizer
            .template
            .eos_token
            .as_deref()
            .and_then(|t| tokenizer.token_id(t))
        {
            stop_tokens.push(eos);
        }
        stop_tokens.sort_unstable();
        stop_tokens.dedup();
        if stop_tokens.is_empty() {
            tracing::warn!(dir = %dir.display(), "the model names no end-of-sequence token; samples end at max_tokens or a stop string");
        }
        let (jobs, queue) = mpsc::channel();
        let prefixes = Arc::new(Mutex::new(PrefixCache::new(options.prefix_cache_bytes)));
        let scheduler = Scheduler {
            model: model.clone(),
            tokenizer: tokenizer.clone(),
            max_batch: options.max_batch.max(1),
            decode_parts: options.decode_parts.max(1),
            queue,
            prefixes: prefixes.clone(),
        };
        std::thread::Builder::new()
            .name("hone-engine".into())
            .spawn(move || scheduler.run())
            .map_err(|e| EngineError::Model(format!("cannot start the scheduler thread: {e}")))?;
        tracing::info!(
            dir = %dir.display(),
            arch = ?model.config.arch,
            layers = model.config.num_hidden_layers,
            dtype = ?options.dtype,
            seconds = started.elapsed().as_secs_f64(),
            "model loaded"
        );
        Ok(Self {
            model,
            tokenizer,
            dir: dir.to_path_buf(),
            stop_tokens,
            max_batch: options.max_batch.max(1),
            adapters_dir: options.adapters_dir,
            adapters: RwLock::new(BTreeMap::new()),
            max_adapters: options.max_adapters,
            adapter_uses: AtomicU64::new(0),
            jobs,
            prefixes,
        })
    }

    /// What the prefix cache has served so far.
    pub fn prefix_stats(&self) -> PrefixStats {
        self.prefixes.lock().unwrap_or_else(PoisonError::into_inner).stats()
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The tokens that end a turn.
    pub fn stop_tokens(&self) -> &[u32] {
        &self.stop_tokens
    }

    /// Loads (or replaces) adapter `name` from a PEFT directory. Requests
    /// already running keep the adapter they started with.
    pub fn load_adapter(&self, name: &str, dir: &Path) -> Result<AdapterInfo> {
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(EngineError::Adapter(format!(
                "`{name}` is not a valid adapter name (no slashes, not empty, not starting with a dot)"
            )));
        }
        let adapter = Adapter::load(dir, self.model.dtype(), self.model.device())?;
        self.model.check_adapter(&adapter)?;
        let info = info(name, dir, &adapter);
        let mut adapters = self.adapters.write().unwrap_or_else(PoisonError::into_inner);
        let previous = adapters.insert(
            name.to_string(),
            Resident {
                adapter: Arc::new(adapter),
                path: dir.to_path_buf(),
                last_used: AtomicU64::new(self.next_use()),
            },
        );
        tracing::info!(adapter = name, path = %dir.display(), replaced = previous.is_some(), "adapter loaded");
        self.evict(&mut adapters, name);
        Ok(info)
    }

    fn next_use(&self) -> u64 {
        self.adapter_uses.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Past [`EngineOptions::max_adapters`], unloads the least recently
    /// used adapters that `adapters_dir` holds under their own name (so the
    /// next request naming one loads it again), never `keep`. Requests
    /// already using one finish with it.
    fn evict(&self, adapters: &mut BTreeMap<String, Resident>, keep: &str) {
        if self.max_adapters == 0 {
            return;
        }
        let reloadable = |name: &str, resident: &Resident| {
            self.adapters_dir
                .as_ref()
                .is_some_and(|root| resident.path == root.join(name))
        };
        while adapters.len() > self.max_adapters {
            let oldest = adapters
                .iter()
                .filter(|(name, resident)| name.as_str() != keep && reloadable(name, resident))
                .min_by_key(|(_, resident)| resident.last_used.load(Ordering::Relaxed))
                .map(|(name, _)| name.clone());
            let Some(name) = oldest else { break };
            adapters.remove(&name);
            tracing::info!(adapter = %name, limit = self.max_adapters, "adapter unloaded (least recently used)");
        }
    }

    /// Unloads adapter `name`; `false` if it was not resident. Requests
    /// already using it finish with it.
    pub fn unload_adapter(&self, name: &str) -> bool {
        let removed = self
            .adapters
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
            .is_some();
        if removed {
            tracing::info!(adapter = name, "adapter unloaded");
        }
        removed
    }

    pub fn adapters(&self) -> Vec<AdapterInfo> {
        self.adapters
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, r)| info(name, &r.path, &r.adapter))
            .collect()
    }

    /// Whether adapter `name` is loaded.
    pub fn has_adapter(&self, name: &str) -> bool {
        self.adapters
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(name)
    }

    /// The resident adapter `name`, loading it from `adapters_dir` on first use.
    pub fn adapter(&self, name: &str) -> Result<Arc<Adapter>> {
        if let Some(resident) = self.adapters.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            resident.last_used.store(self.next_use(), Ordering::Relaxed);
            return Ok(resident.adapter.clone());
        }
        match &self.adapters_dir {
            Some(root) if root.join(name).join("adapter_config.json").is_file() => {
                self.load_adapter(name, &root.join(name))?;
                self.adapter(name)
            }
            _ => Err(EngineError::Adapter(format!("adapter `{name}` is not loaded"))),
        }
    }

    /// Queues a request; its events arrive on the returned channel. Dropping
    /// the receiver cancels the request at the next step.
    pub fn submit(&self, request: Request) -> Result<events::UnboundedReceiver<Event>> {
        let context = self.model.config.max_position_embeddings;
        if request.prompt.is_empty() {
            return Err(EngineError::Model("the prompt is empty".into()));
        }
        if request.prompt.len() >= context {
            return Err(EngineError::Model(format!(
                "the prompt has {} tokens; the model's context is {context}",
                request.prompt.len()
            )));
        }
        if request.n == 0 || request.n > self.max_batch {
            return Err(EngineError::Model(format!(
                "n must be between 1 and {} (the engine's max_batch)",
                self.max_batch
            )));
        }
        let vocab = self.model.config.vocab_size;
        if let Some(bad) = request.prompt.iter().find(|t| **t as usize >= vocab) {
            return Err(EngineError::Model(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let adapter = request.adapter.as_deref().map(|name| self.adapter(name)).transpose()?;
        if let Some(memory) = &request.memory {
            let hidden = self.model.config.hidden_size;
            if memory.datastore.dim() != hidden {
                return Err(EngineError::Model(format!(
                    "the datastore's keys have {} entries; this model's hidden states {hidden}",
                    memory.datastore.dim()
                )));
            }
        }
        let mut sampling = request.sampling;
        sampling.max_tokens = sampling.max_tokens.min(context - request.prompt.len());
        sampling.stop_tokens.extend(&self.stop_tokens);
        let (tx, rx) = events::unbounded_channel();
        let job = Job {
            prompt: request.prompt,
            sampling: Arc::new(sampling),
            n: request.n,
            stop: request.stop.into_iter().filter(|s| !s.is_empty()).collect(),
            adapter,
            memory: request.memory,
            tx,
        };
        self.jobs
            .send(job)
            .map_err(|_| EngineError::Model("the engine's scheduler has stopped".into()))?;
        Ok(rx)
    }

    /// Submits and waits for every sample (for callers outside an async runtime).
    pub fn generate_blocking(&self, request: Request) -> Result<Vec<(String, Generation)>> {
        let n = request.n;
        let mut rx = self.submit(request)?;
        let mut done: Vec<Option<(String, Generation)>> = vec![None; n];
        while let Some(event) = rx.blocking_recv() {
            match event {
                Event::Done {
                    index,
                    text,
                    generation,
                } => {
                    done[index] = Some((text, generation));
                    if done.iter().all(Option::is_some) {
                        break;
                    }
                }
                Event::Failed(message) => return Err(EngineError::Model(message)),
                Event::Token { .. } | Event::Text { .. } => {}
            }
        }
        done.into_iter()
            .map(|d| d.ok_or_else(|| EngineError::Model("the engine stopped mid-request".into())))
            .collect()
    }
}

fn info(name: &str, path: &Path, adapter: &Adapter) -> AdapterInfo {
    AdapterInfo {
        name: name.to_string(),
        path: path.display().to_string(),
        rank: adapter.config.r,
        alpha: adapter.config.lora_alpha,
        target_modules: adapter.config.target_modules.clone(),
    }
}

/// `eos_token_id` of `generation_config.json`, where instruct checkpoints
/// put their end-of-turn tokens.
fn generation_config_eos(dir: &Path) -> Result<Vec<u32>> {
    let path = dir.join("generation_config.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(Vec::new());
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| EngineError::Model(format!("{}: {e}", path.display())))?;
    Ok(crate::config::token_ids(&json["eos_token_id"]))
}

/// A queued request.
struct Job {
    prompt: Vec<u32>,
    sampling: Arc<Sampling>,
    n: usize,
    stop: Vec<String>,
    adapter: Option<Arc<Adapter>>,
    memory: Option<Arc<KnnLm>>,
    tx: events::UnboundedSender<Event>,
}

/// One sample in the running batch, with its streaming state.
struct Live {
    sequence: Sequence,
    index: usize,
    tx: events::UnboundedSender<Event>,
    stop: Arc<Vec<String>>,
    /// Tokens already sent as events.
    reported: usize,
    /// The sample's text so far (cut at a stop string once one matched).
    text: String,
    /// Bytes of `text` already sent.
    sent: usize,
}

struct Scheduler {
    model: Arc<Model>,
    tokenizer: Arc<Tokenizer>,
    max_batch: usize,
    decode_parts: usize,
    queue: mpsc::Receiver<Job>,
    prefixes: Arc<Mutex<PrefixCache>>,
}

impl Scheduler {
    fn run(self) {
        let mut waiting: VecDeque<Job> = VecDeque::new();
        let mut live: Vec<Live> = Vec::new();
        loop {
            if live.is_empty() && waiting.is_empty() {
                match self.queue.recv() {
                    Ok(job) => waiting.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = self.queue.try_recv() {
                waiting.push_back(job);
            }
            self.admit(&mut waiting, &mut live);
            if live.is_empty() {
                continue;
            }
            let result = {
                let mut batch: Vec<&mut Sequence> = live.iter_mut().map(|l| &mut l.sequence).collect();
                generate::step_in_parts(&self.model, &mut batch, self.decode_parts)
            };
            if let Err(e) = result {
                tracing::error!(error = %e, "a decode step failed; failing the requests in it");
                for l in live.drain(..) {
                    let _ = l.tx.send(Event::Failed(e.to_string()));
                }
                continue;
            }
            live = live.into_iter().filter_map(|l| self.report(l)).collect();
        }
    }

    /// Prefills waiting requests while their samples fit in the batch (a
    /// request larger than the free room waits; one is always admitted into
    /// an empty batch).
    fn admit(&self, waiting: &mut VecDeque<Job>, live: &mut Vec<Live>) {
        while let Some(job) = waiting.pop_front() {
            if !live.is_empty() && live.len() + job.n > self.max_batch {
                waiting.push_front(job);
                return;
            }
            if job.tx.is_closed() {
                continue;
            }
            match self.prefill(&job) {
                Ok(sequences) => {
                    let stop = Arc::new(job.stop);
                    for (index, sequence) in sequences.into_iter().enumerate() {
                        let sample = Live {
                            sequence,
                            index,
                            tx: job.tx.clone(),
                            stop: stop.clone(),
                            reported: 0,
                            text: String::new(),
                            sent: 0,
                        };
                        live.extend(self.report(sample));
                    }
                }
                Err(e) => {
                    let _ = job.tx.send(Event::Failed(e.to_string()));
                }
            }
        }
    }

    /// Starts a job's samples from the longest cached prefix of its prompt,
    /// and keeps the prompt's keys and values for later prompts.
    fn prefill(&self, job: &Job) -> Result<Vec<Sequence>> {
        let mut prefixes = self.prefixes.lock().unwrap_or_else(PoisonError::into_inner);
        let cache = prefixes.lookup(&job.prompt, &job.adapter)?;
        let sequences = generate::start(
            &self.model,
            &job.prompt,
            cache,
            job.adapter.clone(),
            job.memory.clone(),
            job.sampling.clone(),
            job.n,
        )?;
        if let Some(first) = sequences.first() {
            prefixes.insert(&job.prompt, &job.adapter, &first.cache)?;
        }
        Ok(sequences)
    }

    /// Sends a sample's new tokens and final text; returns it unless it ended.
    fn report(&self, mut l: Live) -> Option<Live> {
        let s = &mut l.sequence;
        for k in l.reported..s.tokens.len() {
            let _ = l.tx.send(Event::Token {
                index: l.index,
                token: s.tokens[k],
                logprob: s.logprobs[k],
                top_logprobs: s.top_logprobs.get(k).cloned().unwrap_or_default(),
            });
        }
        l.reported = s.tokens.len();
        // The text leaves out a final stop token.
        let visible = match s.finish {
            Some(Finish::Stop) => &s.tokens[..s.tokens.len() - 1],
            _ => &s.tokens[..],
        };
        let mut text = match self.tokenizer.decode(visible) {
            Ok(text) => text,
            Err(e) => {
                let _ = l.tx.send(Event::Failed(e.to_string()));
                return None;
            }
        };
        if let Some(cut) = first_stop(&text, &l.stop, l.sent) {
            text.truncate(cut);
            s.stop(Finish::Stop);
        }
        let finished = s.finish.is_some();
        let ready = if finished {
            text.len()
        } else {
            stable_prefix(&text, &l.stop)
        };
        if ready > l.sent {
            let _ = l.tx.send(Event::Text {
                index: l.index,
                text: text[l.sent..ready].to_string(),
            });
            l.sent = ready;
        }
        l.text = text;
        if finished {
            let _ = l.tx.send(Event::Done {
                index: l.index,
                text: std::mem::take(&mut l.text),
                generation: l.sequence.into_generation(),
            });
            return None;
        }
        if l.tx.is_closed() {
            return None; // the client went away
        }
        Some(l)
    }
}

/// Where the earliest stop string starts, searching only text that has not
/// been sent (a match cannot lie entirely in text already sent).
fn first_stop(text: &str, stops: &[String], sent: usize) -> Option<usize> {
    stops
        .iter()
        .filter_map(|stop| {
            let from = floor_char_boundary(text, sent.saturating_sub(stop.len()));
            text[from..].find(stop.as_str()).map(|i| from + i)
        })
        .min()
}

/// How much of `text` can be sent: all but a trailing replacement character
/// (an incomplete UTF-8 sequence) and a tail that may begin a stop string.
fn stable_prefix(text: &str, stops: &[String]) -> usize {
    let mut end = text.trim_end_matches('\u{FFFD}').len();
    for stop in stops {
        // Longest proper prefix first.
        let prefixes: Vec<usize> = stop.char_indices().skip(1).map(|(k, _)| k).collect();
        for k in prefixes.into_iter().rev() {
            if text[..end].ends_with(&stop[..k]) {
                end = end.min(text[..end].len() - k);
                break;
            }
        }
    }
    end
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_may_start_a_stop_string_is_held_back() {
        let stops = vec!["STOP".to_string()];
        assert_eq!(stable_prefix("hello ST", &stops), 6);
        assert_eq!(stable_prefix("hello", &stops), 5);
        assert_eq!(
            stable_prefix("xaba", &["abab".to_string()]),
            1,
            "the longest possible start"
        );
        assert_eq!(stable_prefix("abc\u{FFFD}", &[]), 3);
        assert_eq!(first_stop("say STOP now", &stops, 0), Some(4));
        assert_eq!(
            first_stop("say STOP now", &stops, 6),
            Some(4),
            "a match straddling sent text"
        );
        assert_eq!(first_stop("say nothing", &stops, 0), None);
    }
}
