//! hone's dashboard, served by `hone serve` at `/ui`: what each agent
//! learned, why, and what shipped. Pages are rendered on the server with
//! minijinja templates (`templates/`, built into the binary) and charts are
//! SVG drawn by plotters (`charts.rs`); no JavaScript is needed and no Node
//! runs anywhere. Everything is read through the store traits
//! (`CycleStore` and the traits under it), so the dashboard works unchanged
//! on every store backend. The **Approve** and **Roll back** buttons call
//! the same `hone_learn::release::deploy` functions as `hone approve` and
//! `hone rollback`.
//!
//! Pages: agents, an agent, episodes, an episode, cycles, datasets,
//! evaluation runs and paired comparisons. One file per page under
//! `pages/`; `auth.rs` decides who sees what: the admin token sees every
//! agent, a data-plane key only its own (see there).

mod auth;
mod charts;
mod error;
mod pages;
mod render;

use axum::routing::{get, post};
use axum::Router;
use hone_config::Config;
use hone_learn::client::GatewayClient;
use hone_store::CycleStore;
use std::sync::Arc;

pub use auth::Viewer;
pub use charts::{without_gaps, PALETTE};
pub use error::UiError;

/// What the pages read and act through.
pub struct Ui {
    pub config: Arc<Config>,
    pub store: Arc<dyn CycleStore>,
    /// The gateway serving this dashboard, for deploy actions that load
    /// adapters (vLLM candidates), as `hone approve` does.
    pub gateway: GatewayClient,
    /// The gateway's credentials: who may sign in, and to which agents.
    pub auth: Arc<hone_gateway::auth::Auth>,
    sessions: auth::Sessions,
}

impl Ui {
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn CycleStore>,
        gateway: GatewayClient,
        auth: Arc<hone_gateway::auth::Auth>,
    ) -> Self {
        Self {
            config,
            store,
            gateway,
            auth,
            sessions: auth::Sessions::default(),
        }
    }
}

/// The `/ui` routes.
pub fn router(ui: Ui) -> Router {
    let ui = Arc::new(ui);
    let pages = Router::new()
        .route("/ui", get(pages::overview::show))
        .route("/ui/agents/{agent}", get(pages::agent::show))
        .route("/ui/agents/{agent}/approve", post(pages::agent::approve))
        .route(
            "/ui/agents/{agent}/rollback",
            get(pages::agent::confirm_rollback).post(pages::agent::rollback),
        )
        .route("/ui/episodes", get(pages::episodes::list))
        .route("/ui/episodes/{id}", get(pages::episode::show))
        .route("/ui/cycles", get(pages::cycles::list))
        .route("/ui/cycles/{id}", get(pages::cycles::show))
        .route("/ui/datasets", get(pages::datasets::list))
        .route("/ui/datasets/{id}", get(pages::datasets::show))
        .route("/ui/evals", get(pages::evals::list))
        .route("/ui/evals/compare", get(pages::evals::compare))
        .route("/ui/evals/{id}", get(pages::evals::show))
        .route("/ui/logout", post(auth::logout))
        .route_layer(axum::middleware::from_fn_with_state(ui.clone(), auth::require));
    Router::new()
        .route("/ui/login", get(auth::login_form).post(auth::login))
        .merge(pages)
        .layer(axum::middleware::from_fn(auth::secure_headers))
        .with_state(ui)
}

/// Runs a page's store reads off the event loop, for `viewer`, and renders
/// the result.
pub(crate) async fn blocking<T: Send + 'static>(
    ui: &Arc<Ui>,
    viewer: Viewer,
    work: impl FnOnce(&Ui, &Viewer) -> Result<T, UiError> + Send + 'static,
) -> Result<T, UiError> {
    let ui = ui.clone();
    tokio::task::spawn_blocking(move || work(&ui, &viewer))
        .await
        .map_err(|e| UiError::internal(format!("the page's task failed: {e}")))?
}
