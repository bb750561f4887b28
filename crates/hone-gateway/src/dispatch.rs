//! Sends a request along a version's routes: retries with exponential
//! back-off (and `Retry-After`) on 429/5xx/connection errors/time-outs, then
//! falls back to the next route. Every try is noted as an [`Attempt`].

use crate::harness;
use crate::providers::{AnyProvider, ChunkStream, ProviderError};
use hone_config::ProviderConfig;
use hone_types::openai::{ChatCompletionRequest, ChatCompletionResponse, Message};
use hone_types::{Attempt, Route, VersionSpec};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest wait between tries, whatever `Retry-After` says.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// A provider with the settings that govern retrying it.
pub struct ProviderEntry {
    pub provider: AnyProvider,
    pub config: ProviderConfig,
}

pub type Providers = HashMap<String, Arc<ProviderEntry>>;

/// What answered.
pub struct Answered<T> {
    pub route: Route,
    pub value: T,
}

fn backoff(config: &ProviderConfig, retry: u32, error: &ProviderError) -> Duration {
    if let ProviderError::Status {
        retry_after: Some(wait),
        ..
    } = error
    {
        return (*wait).min(MAX_BACKOFF);
    }
    let base = config.backoff.saturating_mul(2u32.saturating_pow(retry));
    // Up to 25% jitter so that retrying clients do not march in step.
    let jitter = base.mul_f64(rand::random::<f64>() * 0.25);
    (base + jitter).min(MAX_BACKOFF)
}

/// Tries `call` until it succeeds, fails for good, or the provider's
/// `max_retries` are spent, waiting [`backoff`] between tries; `tried`
/// hears of every try and how long it took (ms). Chat calls (through
/// [`with_fallback`]) and embeddings retry alike.
pub(crate) async fn with_retries<T, F, Fut>(
    config: &ProviderConfig,
    mut call: F,
    mut tried: impl FnMut(&Result<T, ProviderError>, f64),
) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut retry = 0;
    loop {
        let started = Instant::now();
        let result = call().await;
        tried(&result, started.elapsed().as_secs_f64() * 1000.0);
        match result {
            Err(error) if error.is_retryable() && retry < config.max_retries => {
                tracing::warn!(provider = %config.name, retry, error = %error, "upstream attempt failed; retrying");
                tokio::time::sleep(backoff(config, retry, &error)).await;
                retry += 1;
            }
            other => return other,
        }
    }
}

async fn with_fallback<T, F, Fut>(
    providers: &Providers,
    version: &VersionSpec,
    request: &ChatCompletionRequest,
    examples: &[Message],
    attempts: &mut Vec<Attempt>,
    mut call: F,
) -> Result<Answered<T>, ProviderError>
where
    F: FnMut(Arc<ProviderEntry>, ChatCompletionRequest, Route) -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut last_error = ProviderError::Protocol("the version has no routes".into());
    for route in &version.routes {
        let Some(entry) = providers.get(&route.provider) else {
            last_error = ProviderError::Protocol(format!("provider `{}` is not configured", route.provider));
            continue;
        };
        let upstream = harness::apply(request, version, route, examples);
        let result = with_retries(
            &entry.config,
            || call(entry.clone(), upstream.clone(), route.clone()),
            |result, duration_ms| {
                attempts.push(Attempt {
                    provider: route.provider.clone(),
                    model: route.model.clone(),
                    status: match result {
                        Ok(_) => Some(200),
                        Err(error) => error.status(),
                    },
                    error: result.as_ref().err().map(ToString::to_string),
                    duration_ms,
                });
            },
        )
        .await;
        match result {
            Ok(value) => {
                return Ok(Answered {
                    route: route.clone(),
                    value,
                })
            }
            Err(error) => {
                tracing::warn!(provider = %route.provider, model = %route.model, error = %error, "upstream failed");
                let fall_back = error.allows_fallback();
                last_error = error;
                if !fall_back {
                    return Err(last_error);
                }
            }
        }
    }
    Err(last_error)
}

pub async fn complete(
    providers: &Providers,
    version: &VersionSpec,
    request: &ChatCompletionRequest,
    examples: &[Message],
    attempts: &mut Vec<Attempt>,
) -> Result<Answered<ChatCompletionResponse>, ProviderError> {
    with_fallback(
        providers,
        version,
        request,
        examples,
        attempts,
        |entry, upstream, route| async move { entry.provider.complete(&upstream, &route).await },
    )
    .await
}

pub async fn stream(
    providers: &Providers,
    version: &VersionSpec,
    request: &ChatCompletionRequest,
    examples: &[Message],
    attempts: &mut Vec<Attempt>,
) -> Result<Answered<ChunkStream>, ProviderError> {
    with_fallback(
        providers,
        version,
        request,
        examples,
        attempts,
        |entry, upstream, route| async move { entry.provider.stream(&upstream, &route).await },
    )
    .await
}
