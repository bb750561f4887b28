//! The doors a call comes in by: OpenAI's chat completions, OpenAI's
//! Responses API and Anthropic's Messages API. Each door reads its own wire
//! format into the one chat-completions request hone runs, records and
//! learns from, and writes the answer (whole or streamed) and every error
//! back in its own format. Everything between — versions, routing,
//! providers, memory, the recorder — is the same call pipeline
//! (`routes::call`), whichever door a client used.

mod chat;
mod messages;
mod responses;

pub use chat::ChatDoor;
pub use messages::MessagesDoor;
pub use responses::{response_id, ResponsesDoor};
pub(crate) use responses::{response_object, stored as stored_response};

use crate::error::ApiError;
use crate::providers::StreamEvent;
use crate::state::AppState;
use axum::response::Response;
use bytes::Bytes;
use futures::future::BoxFuture;
use hone_types::call::Door as DoorRecord;
use hone_types::openai::ChatCompletionRequest;
use hone_types::{CallId, CallRecord, EpisodeId};

/// A client's request, read by its door.
pub struct Incoming {
    pub request: ChatCompletionRequest,
    /// The episode the request continues, when its own format says so (a
    /// Responses `previous_response_id`); `X-Hone-Episode` still wins.
    pub episode: Option<EpisodeId>,
    pub door: DoorRecord,
}

/// One API's wire format around the call pipeline.
pub trait Door: Send + Sync {
    /// The API's name in spans and logs (`chat_completions`, `responses`, `messages`).
    fn name(&self) -> &'static str;

    /// Reads a request body. May read the store (a chained response).
    fn parse<'a>(&'a self, state: &'a AppState, body: &'a [u8]) -> BoxFuture<'a, Result<Incoming, ApiError>>;

    /// The client's non-streamed answer to a recorded call that succeeded.
    fn answer(&self, call: &CallRecord) -> Result<Bytes, ApiError>;

    /// A fresh encoder for one streamed answer.
    fn encoder(&self, call: CallId, request: &ChatCompletionRequest, door: &DoorRecord) -> Box<dyn Encoder>;

    /// An error as this API writes them.
    fn error(&self, error: ApiError) -> Response;
}

/// Turns one streamed call, event by event, into the door's SSE frames.
pub trait Encoder: Send {
    /// Frames for one upstream event (none is fine).
    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes>;

    /// The frames that end a stream whose call succeeded and is durable.
    fn done(&mut self, call: &CallRecord) -> Vec<Bytes>;

    /// The frame that ends a stream that failed.
    fn error(&mut self, error: &ApiError) -> Bytes;
}

/// `"stream": null`, as some SDKs send an unset flag, read as `false` (the
/// chat door's typed request reads it so too).
pub(crate) fn false_if_null<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(<Option<bool> as serde::Deserialize>::deserialize(deserializer)?.unwrap_or(false))
}

/// `data: <json>\n\n`, with an `event:` line when the format names its events.
pub(crate) fn sse_frame(event: Option<&str>, json: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(json.len() + 32);
    if let Some(name) = event {
        frame.extend_from_slice(b"event: ");
        frame.extend_from_slice(name.as_bytes());
        frame.push(b'\n');
    }
    frame.extend_from_slice(b"data: ");
    frame.extend_from_slice(json);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// A JSON body, or the internal error that it could not be encoded.
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Result<Bytes, ApiError> {
    serde_json::to_vec(value).map(Bytes::from).map_err(|e| {
        ApiError::new(
            crate::error::ErrorKind::Internal,
            "encode_failed",
            format!("cannot encode the response: {e}"),
        )
    })
}

/// Sets on a chat request (as JSON) the settings a door's request gave
/// (`None` stays unset), and for a stream asks for the usage chunk, which
/// every door's answer reports.
pub(crate) fn set_settings(chat: &mut serde_json::Value, fields: Vec<(&str, Option<serde_json::Value>)>, stream: bool) {
    for (key, value) in fields {
        if let Some(value) = value {
            chat[key] = value;
        }
    }
    if stream {
        chat["stream"] = serde_json::json!(true);
        chat["stream_options"] = serde_json::json!({"include_usage": true});
    }
}

/// The chat request a door built, read and checked as one sent to
/// `/v1/chat/completions` would be.
pub(crate) fn chat_request(chat: serde_json::Value) -> Result<ChatCompletionRequest, hone_types::openai::RequestError> {
    let request: ChatCompletionRequest =
        serde_json::from_value(chat).map_err(|e| hone_types::openai::RequestError {
            param: None,
            message: format!("invalid request: {e}"),
        })?;
    request.validate()?;
    Ok(request)
}
