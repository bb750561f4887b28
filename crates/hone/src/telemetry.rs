//! hone's own spans over OTLP/HTTP (protobuf), configured the way every
//! OpenTelemetry SDK is: `OTEL_EXPORTER_OTLP_ENDPOINT` (a collector's base
//! URL; spans go to `/v1/traces` under it) or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL), with
//! `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_SERVICE_NAME` (default `hone`).
//! Unset: nothing is exported and nothing is started.
//!
//! Each call is a `chat <agent>` span with the GenAI attributes (model,
//! provider, token usage) and hone's own (episode, call, version, door,
//! outcome, cost). The batch exporter runs on its own thread, so its HTTP
//! client is the blocking one of the reqwest hone already uses.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::registry::LookupSpan;

/// Flushes and stops the exporter when dropped (at the end of `main`).
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "spans could not all be exported at exit");
        }
    }
}

/// The blocking reqwest client as the exporter's HTTP client.
#[derive(Debug)]
struct BlockingClient(reqwest::blocking::Client);

#[async_trait::async_trait]
impl HttpClient for BlockingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let response = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()?;
        let mut answer = Response::builder().status(response.status());
        for (name, value) in response.headers() {
            answer = answer.header(name, value);
        }
        Ok(answer.body(response.bytes()?)?)
    }
}

/// Whether the standard variables ask for span export.
fn configured() -> bool {
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()))
}

/// The layer that exports hone's spans, when configured.
pub fn otlp_layer<S>() -> Result<Option<(impl tracing_subscriber::Layer<S>, Telemetry)>, String>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    if !configured() {
        return Ok(None);
    }
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the OTLP HTTP client: {e}"))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(BlockingClient(client))
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()
        .map_err(|e| format!("cannot export spans over OTLP: {e}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "hone".to_owned());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("hone"));
    Ok(Some((layer, Telemetry { provider })))
}
