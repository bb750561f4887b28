//! `type = "local"`: answers from the embedded engine (`hone-engine`),
//! in-process. The route's `model` is a checkpoint directory and its
//! `adapter` a LoRA adapter; one engine is loaded per directory and shared by
//! every version that names it. Either may be named by URL, and an adapter
//! this replica does not hold is fetched from the shared artefact store
//! (`hone-artefacts`) before the request is queued.
//!
//! The request's messages and tools are rendered through the model's own
//! chat template; Hermes-style `<tool_call>` blocks in the answer become
//! OpenAI `tool_calls` (a malformed one stays in the text and is listed under
//! `malformed_tool_calls`). Every choice carries the sampled `token_ids` and
//! their `token_logprobs`, and the response the `prompt_token_ids`, so the
//! recorded call holds exactly what the trainer needs.

use super::{ChunkStream, Provider, ProviderError, StreamEvent};
use hone_artefacts::{local_adapter_name, Artefacts};
use hone_config::{is_artefact_url, LocalDType, LocalOptions, ProviderConfig};
use hone_engine::engine::{Engine, EngineOptions, Event, Request};
use hone_engine::{Datastore, Generation, KnnLm, Sampling};
use hone_types::call::{MALFORMED_TOOL_CALLS, PROMPT_TOKEN_IDS, TOKEN_IDS, TOKEN_LOGPROBS};
use hone_types::openai::{
    ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse, Choice, ChunkChoice, Content, Delta, Extra,
    FunctionCall, FunctionCallDelta, Message, Role, ToolCall, ToolCallDelta, Usage,
};
use hone_types::{MemoryKind, Route};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Tokens generated when a request sets no limit.
const DEFAULT_MAX_TOKENS: usize = 1024;
const TOOL_OPEN: &str = "<tool_call>";

pub struct LocalProvider {
    name: String,
    options: LocalOptions,
    adapters_dir: PathBuf,
    artefacts: Arc<Artefacts>,
    /// Checkpoint directory (as the route names it) → its engine.
    engines: Mutex<HashMap<String, Arc<Engine>>>,
    /// kNN-LM datastores loaded so far, by content hash.
    datastores: Mutex<HashMap<String, Arc<Datastore>>>,
}

impl LocalProvider {
    pub fn new(config: &ProviderConfig, artefacts: Arc<Artefacts>) -> Result<Self, String> {
        let options = config
            .local
            .clone()
            .ok_or_else(|| format!("provider `{}` has no local settings", config.name))?;
        // Resolved by hone-config (default `<data_dir>/adapters`).
        let adapters_dir = options.adapters_dir.clone();
        Ok(Self {
            name: config.name.clone(),
            options,
            adapters_dir,
            artefacts,
            engines: Mutex::new(HashMap::new()),
            datastores: Mutex::new(HashMap::new()),
        })
    }

    /// Where adapters named by versions are found; `/admin/adapters` loads
    /// only from here (and the data directory).
    pub fn adapters_dir(&self) -> &Path {
        &self.adapters_dir
    }

    /// The engine of `model`, if it is loaded.
    fn loaded(&self, model: &str) -> Option<Arc<Engine>> {
        self.engines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model)
            .cloned()
    }

    /// Makes what `route` names present here: a checkpoint or adapter named
    /// by URL, or an adapter or datastore published to the shared store, is
    /// fetched on first use (once per replica; later calls find it on disk
    /// or loaded).
    pub async fn checkout(&self, route: &Route) -> Result<(), String> {
        let loaded = self.loaded(&route.model);
        if loaded.is_none() && is_artefact_url(&route.model) {
            self.artefacts
                .checkpoint(&route.model)
                .await
                .map_err(|e| format!("provider `{}` cannot fetch checkpoint {}: {e}", self.name, route.model))?;
        }
        if let Some(memory) = &route.memory {
            let held = self
                .datastores
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(&memory.datastore);
            if !held {
                self.artefacts.datastore(&memory.datastore).await.map_err(|e| {
                    format!(
                        "provider `{}` cannot fetch datastore {}: {e}",
                        self.name, memory.datastore
                    )
                })?;
            }
        }
        if let Some(adapter) = &route.adapter {
            let resident = loaded.is_some_and(|engine| engine.has_adapter(&local_adapter_name(adapter)));
            if !resident {
                self.artefacts
                    .adapter(adapter, &self.adapters_dir)
                    .await
                    .map_err(|e| format!("provider `{}` cannot fetch adapter `{adapter}`: {e}", self.name))?;
            }
        }
        Ok(())
    }

    /// The engine serving `model`, loaded on first use (blocking: call it
    /// off the event loop). A checkpoint named by URL must have been
    /// fetched (`checkout`).
    pub fn engine(&self, model: &str) -> Result<Arc<Engine>, String> {
        let mut engines = self.engines.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(engine) = engines.get(model) {
            return Ok(engine.clone());
        }
        let device =
            hone_engine::device::by_name(&self.options.device).map_err(|e| format!("provider `{}`: {e}", self.name))?;
        let dtype = match self.options.dtype {
            LocalDType::F32 => candle_core::DType::F32,
            LocalDType::Bf16 => candle_core::DType::BF16,
            LocalDType::F16 => candle_core::DType::F16,
        };
        let dir = self.artefacts.checkpoint_dir(model);
        if is_artefact_url(model) && !dir.is_dir() {
            return Err(format!(
                "provider `{}`: checkpoint {model} has not been fetched yet",
                self.name
            ));
        }
        let engine = Engine::load(
            &dir,
            EngineOptions {
                dtype,
                device,
                max_batch: self.options.max_batch,
                adapters_dir: Some(self.adapters_dir.clone()),
                prefix_cache_bytes: self
                    .options
                    .prefix_cache_bytes
                    .unwrap_or(hone_engine::engine::DEFAULT_PREFIX_CACHE_BYTES),
                max_adapters: self
                    .options
                    .max_adapters
                    .unwrap_or(hone_engine::engine::DEFAULT_MAX_ADAPTERS),
                ..EngineOptions::default()
            },
        )
        .map_err(|e| format!("provider `{}` cannot load `{model}`: {e}", self.name))?;
        let engine = Arc::new(engine);
        engines.insert(model.to_owned(), engine.clone());
        Ok(engine)
    }

    /// The engines loaded so far, by checkpoint directory.
    pub fn engines(&self) -> Vec<(String, Arc<Engine>)> {
        let engines = self.engines.lock().unwrap_or_else(PoisonError::into_inner);
        let mut list: Vec<_> = engines.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        list.sort_by(|a, b| a.0.cmp(&b.0));
        list
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kNN-LM memory `route` decodes with: its datastore, read from the
    /// memory directory once and kept (blocking on first use).
    fn memory(&self, route: &Route) -> Result<Option<Arc<KnnLm>>, String> {
        let Some(policy) = &route.memory else { return Ok(None) };
        let MemoryKind::KnnLm = policy.kind;
        let loaded = self
            .datastores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&policy.datastore)
            .cloned();
        let datastore = match loaded {
            Some(d) => d,
            None => {
                let path = self.artefacts.datastore_path(&policy.datastore);
                let read = blocking(|| Datastore::load(&path))
                    .map_err(|e| format!("provider `{}` cannot read datastore {}: {e}", self.name, path.display()))?;
                if read.content_hash() != policy.datastore {
                    return Err(format!(
                        "provider `{}`: {} does not hold datastore {} (its content hash differs)",
                        self.name,
                        path.display(),
                        policy.datastore
                    ));
                }
                // Indexed (off the runtime) when it is too large to scan per token.
                let read = Arc::new(blocking(move || read.indexed()));
                self.datastores
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(policy.datastore.clone(), read.clone());
                read
            }
        };
        Ok(Some(Arc::new(KnnLm {
            datastore,
            k: policy.k as usize,
            lambda: policy.lambda,
            temperature: policy.temperature,
            adaptive: policy.adaptive,
        })))
    }

    /// Loads the engine and prepares the request off the event loop.
    async fn submit(
        &self,
        request: &ChatCompletionRequest,
        route: &Route,
    ) -> Result<(Prepared, tokio::sync::mpsc::UnboundedReceiver<Event>), ProviderError> {
        // What the route names not being here is the deployment's fault.
        self.checkout(route).await.map_err(internal)?;
        let loaded = self.loaded(&route.model);
        let engine = match loaded {
            Some(engine) => engine,
            None => blocking(|| self.engine(&route.model)).map_err(internal)?,
        };
        let memory = self.memory(route).map_err(internal)?;
        let prepared = prepare(&engine, request, route, memory)?;
        let rx = engine.submit(prepared.request.clone()).map_err(|e| match e {
            // A missing adapter is the deployment's fault, not the client's.
            hone_engine::EngineError::Adapter(_) => internal(e.to_string()),
            _ => bad_request(e.to_string()),
        })?;
        Ok((prepared, rx))
    }
}

/// Runs blocking work (loading a model, once per directory) from async
/// code: in place on a multi-thread runtime; on a current-thread runtime
/// there is no other worker to hand it to, so it runs right here.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// What a request becomes for the engine, and how to answer it.
struct Prepared {
    request: Request,
    engine: Arc<Engine>,
    model: String,
    tools: bool,
    logprobs: bool,
}

fn internal(message: String) -> ProviderError {
    ProviderError::Status {
        status: 500,
        message,
        retry_after: None,
    }
}

fn bad_request(message: String) -> ProviderError {
    ProviderError::Status {
        status: 400,
        message,
        retry_after: None,
    }
}

/// The prompt's token ids: the conversation and tools rendered through the
/// model's own chat template, then tokenized.
fn prompt_ids(engine: &Engine, request: &ChatCompletionRequest) -> Result<Vec<u32>, ProviderError> {
    let messages: Vec<Value> = request.messages.iter().map(template_message).collect();
    let tools = match &request.tools {
        Some(tools) if offers_tools(request) => {
            Some(serde_json::to_value(tools).map_err(|e| bad_request(e.to_string()))?)
        }
        _ => None,
    };
    let text = engine
        .tokenizer()
        .template
        .render_openai(&messages, tools.as_ref(), true)
        .map_err(|e| bad_request(e.to_string()))?;
    engine.tokenizer().encode(&text).map_err(|e| internal(e.to_string()))
}

/// Whether the model is shown tools (some are given, and `tool_choice` is
/// not `none`).
fn offers_tools(request: &ChatCompletionRequest) -> bool {
    let tool_choice_none = request.tool_choice.as_ref().and_then(Value::as_str) == Some("none");
    request.tools.as_ref().is_some_and(|t| !t.is_empty()) && !tool_choice_none
}

impl LocalProvider {
    /// The request's prompt tokens on `route`'s model, as generation would
    /// count them.
    pub fn count_tokens(&self, request: &ChatCompletionRequest, route: &Route) -> Result<u64, ProviderError> {
        let engine = self.engine(&route.model).map_err(ProviderError::Protocol)?;
        Ok(prompt_ids(&engine, request)?.len() as u64)
    }
}

/// Renders the conversation through the model's chat template and maps the
/// OpenAI sampling parameters.
fn prepare(
    engine: &Arc<Engine>,
    request: &ChatCompletionRequest,
    route: &Route,
    memory: Option<Arc<KnnLm>>,
) -> Result<Prepared, ProviderError> {
    let prompt = prompt_ids(engine, request)?;
    let context = engine.model().config.max_position_embeddings;
    if prompt.len() >= context {
        return Err(bad_request(format!(
            "the prompt is {} tokens; the model's context is {context}",
            prompt.len()
        )));
    }
    let logprobs = request.logprobs == Some(true);
    let seed = match request.seed {
        Some(seed) => seed as u64,
        None => rand::random(),
    };
    let top_k = request
        .extra
        .get("top_k")
        .and_then(Value::as_i64)
        .filter(|k| *k > 0)
        .unwrap_or(0) as usize;
    let max_tokens = request
        .max_completion_tokens
        .or(request.max_tokens)
        .map_or(DEFAULT_MAX_TOKENS, |m| m as usize);
    Ok(Prepared {
        request: Request {
            prompt,
            sampling: Sampling {
                temperature: request.temperature.unwrap_or(1.0),
                top_p: request.top_p.unwrap_or(1.0),
                top_k,
                seed,
                max_tokens,
                stop_tokens: Vec::new(),
                top_logprobs: if logprobs {
                    request.top_logprobs.unwrap_or(0) as usize
                } else {
                    0
                },
            },
            n: request.n.unwrap_or(1).max(1) as usize,
            adapter: route.adapter.as_deref().map(local_adapter_name),
            memory,
            stop: request.stop.as_ref().map(|s| s.to_vec()).unwrap_or_default(),
        },
        engine: engine.clone(),
        model: route.model.clone(),
        tools: offers_tools(request),
        logprobs,
    })
}

/// One message as chat templates expect it: text content, tool-call
/// arguments as objects (what `transformers` passes to templates).
fn template_message(message: &Message) -> Value {
    let role = match message.role {
        Role::System | Role::Developer => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool | Role::Function => "tool",
    };
    let mut out = json!({"role": role, "content": message.content.as_ref().map(Content::text)});
    if let Some(calls) = &message.tool_calls {
        out["tool_calls"] = calls
            .iter()
            .map(|call| {
                json!({"id": call.id, "type": "function",
                       "function": {"name": call.function.name, "arguments": call.function.arguments}})
            })
            .collect();
    }
    if let Some(id) = &message.tool_call_id {
        out["tool_call_id"] = json!(id);
    }
    if let Some(name) = &message.name {
        out["name"] = json!(name);
    }
    out
}

fn completion_id() -> String {
    format!("chatcmpl-{:016x}", rand::random::<u64>())
}

fn now_s() -> i64 {
    hone_types::time::now_ms() / 1000
}

/// The OpenAI `logprobs` object for generated tokens.
fn logprobs_json(engine: &Engine, tokens: &[u32], logprobs: &[f32], top: &[Vec<(u32, f32)>]) -> Value {
    let entry = |token: u32, logprob: f32| {
        let bytes = engine.tokenizer().token_bytes(token);
        json!({"token": String::from_utf8_lossy(&bytes), "logprob": logprob, "bytes": bytes})
    };
    let content: Vec<Value> = tokens
        .iter()
        .zip(logprobs)
        .enumerate()
        .map(|(k, (token, logprob))| {
            let mut item = entry(*token, *logprob);
            item["top_logprobs"] = top
                .get(k)
                .map(|alternatives| alternatives.iter().map(|(t, l)| entry(*t, *l)).collect())
                .unwrap_or_else(|| json!([]));
            item
        })
        .collect();
    json!({"content": content})
}

/// What hone records with every choice: the sampled tokens and their logprobs.
fn token_extra(generation: &Generation) -> Extra {
    let mut extra = Extra::new();
    extra.insert(TOKEN_IDS.into(), json!(generation.tokens));
    extra.insert(TOKEN_LOGPROBS.into(), json!(generation.logprobs));
    extra
}

/// The choice a model's generated `text` makes (no logprobs, no token ids):
/// with tools offered, its Hermes `<tool_call>` blocks become tool calls
/// (finish reason `tool_calls`) and the blocks that could not be read are
/// listed under [`MALFORMED_TOOL_CALLS`]; otherwise the text is the answer
/// and `finish` the reason. The engine's answers are read here, and so are
/// turns another sampler wrote (TRL's in `hone bench learn`).
pub fn text_choice(index: u32, text: String, tools: bool, finish: &str) -> Choice {
    let (content, calls, malformed) = if tools {
        let parsed = hone_types::tool_calls::parse(&text);
        (parsed.content, tool_calls(&parsed.tool_calls), parsed.malformed)
    } else {
        (text, Vec::new(), Vec::new())
    };
    let mut extra = Extra::new();
    if !malformed.is_empty() {
        extra.insert(MALFORMED_TOOL_CALLS.into(), json!(malformed));
    }
    Choice {
        index,
        finish_reason: Some(if calls.is_empty() { finish } else { "tool_calls" }.into()),
        message: Message::answer(content, calls, None),
        logprobs: None,
        extra,
    }
}

fn tool_calls(parsed: &[hone_types::tool_calls::ParsedToolCall]) -> Vec<ToolCall> {
    parsed
        .iter()
        .map(|call| ToolCall {
            id: format!("call_{:016x}", rand::random::<u64>()),
            kind: "function".into(),
            function: FunctionCall {
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
        })
        .collect()
}

impl Provider for LocalProvider {
    async fn complete(
        &self,
        request: &ChatCompletionRequest,
        route: &Route,
    ) -> Result<ChatCompletionResponse, ProviderError> {
        let (prepared, mut rx) = self.submit(request, route).await?;
        let n = prepared.request.n;
        let mut done: Vec<Option<(String, Generation)>> = vec![None; n];
        while let Some(event) = rx.recv().await {
            match event {
                Event::Done {
                    index,
                    text,
                    generation,
                } => done[index] = Some((text, generation)),
                Event::Failed(message) => return Err(internal(message)),
                Event::Token { .. } | Event::Text { .. } => {}
            }
            if done.iter().all(Option::is_some) {
                break;
            }
        }
        let mut choices = Vec::with_capacity(n);
        let mut completion_tokens = 0;
        let mut cached_tokens = 0;
        for (index, slot) in done.into_iter().enumerate() {
            let (text, generation) = slot.ok_or_else(|| internal("the engine stopped mid-request".into()))?;
            completion_tokens += generation.tokens.len() as u64;
            cached_tokens = generation.cached_prompt_tokens as u64;
            let mut choice = text_choice(index as u32, text, prepared.tools, generation.finish.as_str());
            choice.logprobs = Some(if prepared.logprobs {
                logprobs_json(
                    &prepared.engine,
                    &generation.tokens,
                    &generation.logprobs,
                    &generation.top_logprobs,
                )
            } else {
                Value::Null
            });
            choice.extra.extend(token_extra(&generation));
            choices.push(choice);
        }
        let prompt_tokens = prepared.request.prompt.len() as u64;
        let mut extra = Extra::new();
        extra.insert(PROMPT_TOKEN_IDS.into(), json!(prepared.request.prompt));
        Ok(ChatCompletionResponse {
            id: completion_id(),
            object: "chat.completion".into(),
            created: now_s(),
            model: prepared.model,
            choices,
            usage: Some(usage(prompt_tokens, cached_tokens, completion_tokens)),
            extra,
        })
    }

    async fn stream(&self, request: &ChatCompletionRequest, route: &Route) -> Result<ChunkStream, ProviderError> {
        let (prepared, rx) = self.submit(request, route).await?;
        Ok(Box::pin(stream_chunks(prepared, rx)))
    }
}

/// A request's usage; `cached_tokens` of its prompt tokens were reused from
/// the engine's prefix cache (reported as OpenAI reports its prompt cache).
fn usage(prompt_tokens: u64, cached_tokens: u64, completion_tokens: u64) -> Usage {
    let mut usage = Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        extra: Extra::new(),
    };
    if cached_tokens > 0 {
        usage.set_cached_prompt_tokens(cached_tokens);
    }
    usage
}

/// Per-sample streaming state.
#[derive(Default)]
struct StreamedChoice {
    /// Logprob entries of tokens not yet attached to a chunk.
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    top: Vec<Vec<(u32, f32)>>,
    /// Text held back because it is, or may begin, a tool call.
    held: String,
    holding: bool,
}

impl StreamedChoice {
    /// The part of `text` that can be streamed as content now.
    fn pass(&mut self, text: &str, tools: bool) -> String {
        if !tools {
            return text.to_owned();
        }
        self.held.push_str(text);
        if self.holding {
            return String::new();
        }
        if let Some(at) = self.held.find(TOOL_OPEN) {
            self.holding = true;
            return self.held.drain(..at).collect();
        }
        // Keep a tail that may be the start of `<tool_call>`.
        let keep = (1..TOOL_OPEN.len())
            .rev()
            .find(|k| self.held.ends_with(&TOOL_OPEN[..*k]))
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        self.held.drain(..cut).collect()
    }
}

fn stream_chunks(
    prepared: Prepared,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
) -> impl futures::Stream<Item = Result<StreamEvent, ProviderError>> + Send {
    async_stream::stream! {
        let id = completion_id();
        let created = now_s();
        let n = prepared.request.n;
        let chunk = |choices: Vec<ChunkChoice>, usage: Option<Usage>, extra: Extra| StreamEvent {
            chunk: ChatCompletionChunk {
                id: id.clone(),
                object: "chat.completion.chunk".into(),
                created,
                model: prepared.model.clone(),
                choices,
                usage,
                extra,
            },
            raw: None,
        };
        let delta_choice = |index: usize, delta: Delta, finish: Option<String>, logprobs: Option<Value>, extra: Extra| ChunkChoice {
            index: index as u32,
            delta,
            finish_reason: finish,
            logprobs,
            extra,
        };
        let mut prompt_extra = Extra::new();
        prompt_extra.insert(PROMPT_TOKEN_IDS.into(), json!(prepared.request.prompt));
        let opening = (0..n)
            .map(|i| delta_choice(i, Delta { role: Some(Role::Assistant), content: Some(String::new()), ..Delta::default() }, None, None, Extra::new()))
            .collect();
        yield Ok(chunk(opening, None, prompt_extra));
        let mut states: Vec<StreamedChoice> = (0..n).map(|_| StreamedChoice::default()).collect();
        let mut finished = 0;
        let mut completion_tokens = 0u64;
        let mut cached_tokens = 0u64;
        while let Some(event) = rx.recv().await {
            match event {
                Event::Token { index, token, logprob, top_logprobs } => {
                    let s = &mut states[index];
                    s.tokens.push(token);
                    s.logprobs.push(logprob);
                    s.top.push(top_logprobs);
                }
                Event::Text { index, text } => {
                    let s = &mut states[index];
                    let content = s.pass(&text, prepared.tools);
                    if content.is_empty() {
                        continue;
                    }
                    let logprobs = prepared.logprobs.then(|| logprobs_json(&prepared.engine, &s.tokens, &s.logprobs, &s.top));
                    s.tokens.clear();
                    s.logprobs.clear();
                    s.top.clear();
                    let delta = Delta { content: Some(content), ..Delta::default() };
                    yield Ok(chunk(vec![delta_choice(index, delta, None, logprobs, Extra::new())], None, Extra::new()));
                }
                Event::Done { index, generation, .. } => {
                    completion_tokens += generation.tokens.len() as u64;
                    cached_tokens = generation.cached_prompt_tokens as u64;
                    let s = &mut states[index];
                    let held = std::mem::take(&mut s.held);
                    let mut choice = text_choice(index as u32, held, prepared.tools, generation.finish.as_str());
                    let calls = choice.message.tool_calls().to_vec();
                    let content = choice.message.text();
                    let logprobs = (prepared.logprobs && !s.tokens.is_empty())
                        .then(|| logprobs_json(&prepared.engine, &s.tokens, &s.logprobs, &s.top));
                    let finish = choice.finish_reason.take().unwrap_or_default();
                    let delta = Delta {
                        content: (!content.is_empty()).then_some(content),
                        tool_calls: (!calls.is_empty()).then(|| {
                            calls
                                .into_iter()
                                .enumerate()
                                .map(|(i, call)| ToolCallDelta {
                                    index: i as u32,
                                    id: Some(call.id),
                                    kind: Some(call.kind),
                                    function: Some(FunctionCallDelta {
                                        name: Some(call.function.name),
                                        arguments: Some(call.function.arguments),
                                    }),
                                })
                                .collect()
                        }),
                        ..Delta::default()
                    };
                    let mut extra = choice.extra;
                    extra.extend(token_extra(&generation));
                    yield Ok(chunk(vec![delta_choice(index, delta, Some(finish), logprobs, extra)], None, Extra::new()));
                    finished += 1;
                    if finished == n {
                        break;
                    }
                }
                Event::Failed(message) => {
                    yield Err(internal(message));
                    return;
                }
            }
        }
        if finished < n {
            yield Err(internal("the engine stopped mid-request".into()));
            return;
        }
        let prompt_tokens = prepared.request.prompt.len() as u64;
        yield Ok(chunk(Vec::new(), Some(usage(prompt_tokens, cached_tokens, completion_tokens)), Extra::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_text_is_held_from_the_first_tool_call_on() {
        let mut s = StreamedChoice::default();
        assert_eq!(s.pass("Let me look", true), "Let me look");
        assert_eq!(s.pass(" <tool", true), " ", "a possible `<tool_call>` start waits");
        assert_eq!(s.pass("_call>{\"name\"", true), "");
        assert_eq!(s.pass(": \"x\"}</tool_call>", true), "");
        assert_eq!(s.held, "<tool_call>{\"name\": \"x\"}</tool_call>");
        let mut plain = StreamedChoice::default();
        assert_eq!(plain.pass("a <", true), "a ");
        assert_eq!(plain.pass("b> c", true), "<b> c", "not a tool call after all");
        assert_eq!(
            StreamedChoice::default().pass("<tool", false),
            "<tool",
            "no tools, no holding"
        );
    }
}
