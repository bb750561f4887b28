//! Any OpenAI-compatible upstream: OpenAI, vLLM, SGLang, Ollama, llama.cpp.
//! Requests pass through as JSON with only `model` changed; streams pass
//! through byte for byte (each chunk is also parsed for the recorder). A
//! route's LoRA adapter is asked for by name, as vLLM serves them; also
//! embeddings (episodic memory) and vLLM's runtime adapter loading. A
//! provider declared `engine = "vllm"` is also asked for every answer's
//! token ids and logprobs (`return_token_ids`, `logprobs`), which the
//! recorder keeps, so vLLM's episodes train as the embedded engine's do.

use super::{
    http_client, read_answer, send_stream, sse_events, status_error, transport_error, ChunkStream, Provider,
    ProviderError, StreamEvent,
};
use futures::StreamExt;
use hone_config::{HttpEngine, ProviderConfig};
use hone_types::openai::{ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse, StreamOptions};
use hone_types::Route;
use std::time::Duration;

pub struct OpenAiProvider {
    client: reqwest::Client,
    url: String,
    base_url: String,
    api_key: Option<String>,
    timeout: Duration,
    /// vLLM: ask for exact tokens.
    exact_tokens: bool,
}

impl OpenAiProvider {
    pub fn new(config: &ProviderConfig, api_key: Option<String>) -> Result<Self, String> {
        Ok(Self {
            client: http_client(config)?,
            url: format!("{}/chat/completions", config.base_url),
            base_url: config.base_url.clone(),
            api_key,
            timeout: config.timeout,
            exact_tokens: config.engine == Some(HttpEngine::Vllm),
        })
    }

    fn post(&self, body: Vec<u8>) -> reqwest::RequestBuilder {
        self.post_to(&self.url, body)
    }

    fn post_to(&self, url: &str, body: Vec<u8>) -> reqwest::RequestBuilder {
        let builder = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        match &self.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }
}

impl OpenAiProvider {
    /// POSTs JSON to `{base_url}{path}`; the body of a successful answer.
    pub(crate) async fn post_json(&self, path: &str, body: serde_json::Value) -> Result<bytes::Bytes, ProviderError> {
        let response = self
            .post_to(&format!("{}{path}", self.base_url), body.to_string().into_bytes())
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| transport_error(e, self.timeout))?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        read_answer(response, self.timeout).await
    }

    /// `POST /embeddings`: one vector per input, in input order.
    pub async fn embed(&self, model: &str, inputs: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        #[derive(serde::Deserialize)]
        struct Item {
            index: usize,
            embedding: Vec<f32>,
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            data: Vec<Item>,
        }
        let body = self
            .post_json("/embeddings", serde_json::json!({"model": model, "input": inputs}))
            .await?;
        let mut answer: Answer = serde_json::from_slice(&body)
            .map_err(|e| ProviderError::Protocol(format!("not an embeddings list: {e}")))?;
        answer.data.sort_by_key(|i| i.index);
        if answer.data.len() != inputs.len() {
            return Err(ProviderError::Protocol(format!(
                "asked for {} embeddings, got {}",
                inputs.len(),
                answer.data.len()
            )));
        }
        Ok(answer.data.into_iter().map(|i| i.embedding).collect())
    }

    /// `POST /load_lora_adapter` (vLLM's runtime LoRA loading): serves the
    /// adapter at `path` under the model name `name`.
    pub async fn load_lora_adapter(&self, name: &str, path: &str) -> Result<(), ProviderError> {
        self.post_json(
            "/load_lora_adapter",
            serde_json::json!({"lora_name": name, "lora_path": path}),
        )
        .await
        .map(|_| ())
    }
}

/// The request as sent upstream: a route with a LoRA adapter asks for the
/// adapter by name (how vLLM serves adapters loaded at runtime); with
/// `exact_tokens`, vLLM is asked for the prompt's and each answer's token
/// ids and the answer's logprobs (which the client then sees too, as it
/// sees the embedded engine's). Anthropic's extended-thinking setting
/// (`thinking`, from the Messages door) is left out: no OpenAI-compatible
/// server takes it.
fn encode_for(request: &ChatCompletionRequest, route: &Route, exact_tokens: bool) -> Result<Vec<u8>, ProviderError> {
    if route.adapter.is_none() && !exact_tokens && !request.extra.contains_key(super::ANTHROPIC_THINKING) {
        return encode(request);
    }
    let mut upstream = request.clone();
    if let Some(adapter) = &route.adapter {
        upstream.model.clone_from(adapter);
    }
    upstream.extra.remove(super::ANTHROPIC_THINKING);
    if exact_tokens {
        upstream
            .extra
            .insert(RETURN_TOKEN_IDS.into(), serde_json::Value::Bool(true));
        upstream.logprobs = Some(true);
    }
    encode(&upstream)
}

/// vLLM's request field for token ids in the answer.
const RETURN_TOKEN_IDS: &str = "return_token_ids";

fn encode(request: &ChatCompletionRequest) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(request).map_err(|e| ProviderError::Protocol(format!("cannot encode the request: {e}")))
}

impl Provider for OpenAiProvider {
    async fn complete(
        &self,
        request: &ChatCompletionRequest,
        route: &Route,
    ) -> Result<ChatCompletionResponse, ProviderError> {
        let response = self
            .post(encode_for(request, route, self.exact_tokens)?)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| transport_error(e, self.timeout))?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        let body = read_answer(response, self.timeout).await?;
        serde_json::from_slice(&body).map_err(|e| ProviderError::Protocol(format!("not a chat.completion: {e}")))
    }

    async fn stream(&self, request: &ChatCompletionRequest, route: &Route) -> Result<ChunkStream, ProviderError> {
        // Always ask for usage so the call can be priced; the gateway drops the
        // usage chunk again when the client did not ask for it.
        let mut upstream = request.clone();
        upstream.stream = Some(true);
        let options = upstream.stream_options.get_or_insert_with(|| StreamOptions {
            include_usage: None,
            extra: Default::default(),
        });
        options.include_usage = Some(true);
        let deadline = tokio::time::Instant::now() + self.timeout;
        let response = send_stream(
            self.post(encode_for(&upstream, route, self.exact_tokens)?),
            deadline,
            self.timeout,
        )
        .await?;
        let events = sse_events(response, deadline, self.timeout);
        let stream = async_stream::stream! {
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) if &event.data[..] == b"[DONE]" => return,
                    Ok(event) => yield parse_chunk(event.data),
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                }
            }
        };
        Ok(Box::pin(stream))
    }
}

/// Parses one `data:` payload; an `{"error":…}` event becomes an error.
fn parse_chunk(data: bytes::Bytes) -> Result<StreamEvent, ProviderError> {
    match serde_json::from_slice::<ChatCompletionChunk>(&data) {
        Ok(chunk) => Ok(StreamEvent { chunk, raw: Some(data) }),
        Err(e) => {
            let value: Option<serde_json::Value> = serde_json::from_slice(&data).ok();
            match value.as_ref().and_then(|v| v.get("error")) {
                Some(error) => Err(ProviderError::Status {
                    status: error
                        .get("code")
                        .and_then(|c| c.as_u64())
                        .and_then(|c| u16::try_from(c).ok())
                        .unwrap_or(502),
                    message: error
                        .get("message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("stream error")
                        .to_owned(),
                    retry_after: None,
                }),
                None => Err(ProviderError::Protocol(format!("not a chat.completion.chunk: {e}"))),
            }
        }
    }
}
