//! hone's HTTP edge: the OpenAI-compatible API, feedback, episodes, admin and
//! operations routes; providers; harness application; routing between
//! versions; and the glue that records every call through the recorder.
//!
//! [`Gateway::start`] builds everything from a validated config and
//! [`Gateway::serve`] runs it until shutdown, then drains in-flight calls and
//! the recorder so that nothing accepted is lost.

pub mod auth;
pub mod dispatch;
pub mod doors;
pub mod error;
pub mod examples;
pub use hone_types::harness;
pub mod metrics;
pub mod providers;
pub mod routes;
pub mod routing;
pub mod server;
pub mod sse;
pub mod state;
pub mod traces;

use hone_config::Config;
use state::{AppState, StartError};
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// A started gateway: store open, recorder running, not yet listening.
pub struct Gateway {
    state: Arc<AppState>,
    /// More routes served by the same process (the dashboard at `/ui`).
    extra: Option<axum::Router>,
}

impl Gateway {
    pub fn start(config: Config) -> Result<Self, StartError> {
        Ok(Self {
            state: AppState::start(config)?,
            extra: None,
        })
    }

    /// Serves `routes` beside the gateway's own (they must not overlap).
    pub fn with_routes(mut self, routes: axum::Router) -> Self {
        self.extra = Some(routes);
        self
    }

    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Serves on `listener` until `shutdown` resolves, then stops accepting,
    /// lets in-flight requests and background call tasks finish and drains
    /// the recorder — all within `gateway.shutdown_grace`. Whatever is still
    /// running then was never acknowledged; what was acknowledged is in the
    /// journal and reaches the store at the next start.
    pub async fn serve(
        mut self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let gateway = &self.state.config.gateway;
        self.state
            .auth
            .check_exposure(listener.local_addr()?, gateway.insecure_open_admin)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e))?;
        let limits = server::ServeLimits::from_config(gateway);
        tracing::info!(
            max_connections = limits.max_connections,
            header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
            "serving"
        );
        let app = match self.extra.take() {
            Some(extra) => routes::router(self.state.clone()).merge(extra),
            None => routes::router(self.state.clone()),
        };
        #[allow(clippy::disallowed_methods, reason = "aborted below when serving stops")]
        let refresher = tokio::spawn(follow_deployments(self.state.clone()));
        let connections = tokio_util::task::TaskTracker::new();
        server::serve(listener, app, limits, connections.clone(), shutdown).await;
        refresher.abort();
        tracing::info!("no longer accepting; finishing in-flight calls");
        let state = self.state.clone();
        let drained = tokio::time::timeout(gateway.shutdown_grace, async move {
            connections.close();
            connections.wait().await;
            state.tasks.close();
            state.tasks.wait().await;
            state.recorder.shutdown().await;
        })
        .await;
        match drained {
            Ok(()) => tracing::info!("recorder drained; bye"),
            Err(_) => tracing::error!(
                grace_ms = gateway.shutdown_grace.as_millis() as u64,
                calls = self.state.tasks.len(),
                "shutdown grace over: calls still in flight are abandoned (none was acknowledged); the journal keeps every acknowledged call for the next start"
            ),
        }
        Ok(())
    }
}

/// How often a gateway re-reads the deployments the learner stores (several
/// gateways over one store all follow them).
pub const DEPLOYMENT_POLL: std::time::Duration = std::time::Duration::from_millis(500);

async fn follow_deployments(state: Arc<AppState>) {
    let mut tick = tokio::time::interval(DEPLOYMENT_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let s = state.clone();
        match tokio::task::spawn_blocking(move || s.refresh_deployments()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot read deployments; keeping the current splits"),
            Err(e) => tracing::warn!(error = %e, "deployment refresh task failed"),
        }
    }
}
