//! hone's HTTP edge: the OpenAI-compatible API, feedback, episodes, admin and
//! operations routes; providers; harness application; routing between
//! versions; and the glue that records every call through the recorder.
//!
//! [`Gateway::start`] builds everything from a validated config and
//! [`Gateway::serve`] runs it until shutdown, then drains in-flight calls and
//! the recorder so that nothing accepted is lost.

pub mod auth;
pub mod behaviour;
pub mod dispatch;
pub mod error;
pub mod harness;
pub mod memory;
pub mod metrics;
pub mod providers;
pub mod routes;
pub mod routing;
pub mod sse;
pub mod state;

use axum::serve::ListenerExt;
use hone_config::Config;
use state::{AppState, StartError};
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// A started gateway: store open, recorder running, not yet listening.
pub struct Gateway {
    state: Arc<AppState>,
}

impl Gateway {
    pub fn start(config: Config) -> Result<Self, StartError> {
        Ok(Self {
            state: AppState::start(config)?,
        })
    }

    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Serves on `listener` until `shutdown` resolves, then stops accepting,
    /// lets in-flight requests finish, waits for background call tasks and
    /// drains the recorder.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        // TCP_NODELAY: without it a response written in two pieces waits for
        // the client's delayed ACK (~40 ms).
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!(error = %e, "cannot set TCP_NODELAY");
            }
        });
        let app = routes::router(self.state.clone());
        let refresher = tokio::spawn(follow_deployments(self.state.clone()));
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
        refresher.abort();
        tracing::info!("no longer accepting; finishing in-flight calls");
        self.state.tasks.close();
        self.state.tasks.wait().await;
        self.state.recorder.shutdown().await;
        tracing::info!("recorder drained; bye");
        served
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
