//! `POST /v1/chat/completions`, hone's own format: requests are run as
//! sent, chunks an OpenAI-format upstream streams are forwarded byte for
//! byte (the final usage chunk only to clients that asked for it), and the
//! stream ends with `[DONE]` once the call is durable.

use super::{encode, sse_frame, Door, Encoder, Incoming};
use crate::error::ApiError;
use crate::providers::StreamEvent;
use crate::state::AppState;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::future::BoxFuture;
use hone_types::call::Door as DoorRecord;
use hone_types::openai::ChatCompletionRequest;
use hone_types::{CallId, CallRecord};

pub struct ChatDoor;

impl Door for ChatDoor {
    fn name(&self) -> &'static str {
        "chat_completions"
    }

    fn parse<'a>(&'a self, _state: &'a AppState, body: &'a [u8]) -> BoxFuture<'a, Result<Incoming, ApiError>> {
        Box::pin(async move {
            let request = ChatCompletionRequest::from_json(body)
                .map_err(|e| ApiError::invalid("invalid_request", e.message).with_param(e.param))?;
            Ok(Incoming {
                request,
                episode: None,
                door: DoorRecord::ChatCompletions,
            })
        })
    }

    fn answer(&self, call: &CallRecord) -> Result<Bytes, ApiError> {
        encode(&call.response)
    }

    fn encoder(&self, _call: CallId, request: &ChatCompletionRequest, _door: &DoorRecord) -> Box<dyn Encoder> {
        Box::new(ChatEncoder {
            wants_usage: request.wants_stream_usage(),
        })
    }

    fn error(&self, error: ApiError) -> Response {
        error.into_response()
    }
}

struct ChatEncoder {
    wants_usage: bool,
}

impl Encoder for ChatEncoder {
    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        let chunk = &event.chunk;
        if chunk.choices.is_empty() && chunk.usage.is_some() && !self.wants_usage {
            return Vec::new();
        }
        vec![match &event.raw {
            Some(raw) => sse_frame(None, raw),
            None => sse_frame(None, &serde_json::to_vec(chunk).unwrap_or_default()),
        }]
    }

    fn done(&mut self, _call: &CallRecord) -> Vec<Bytes> {
        vec![Bytes::from_static(b"data: [DONE]\n\n")]
    }

    fn error(&mut self, error: &ApiError) -> Bytes {
        sse_frame(None, &serde_json::to_vec(&error.body()).unwrap_or_default())
    }
}
