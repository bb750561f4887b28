//! `hone serve`: runs the gateway on its own runtime (one event-loop thread
//! unless `gateway.threads` says more) until Ctrl-C or SIGTERM.

use crate::context::load_config_file;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

pub fn run(
    config: Option<PathBuf>,
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    threads: Option<usize>,
    insecure_open_admin: bool,
) -> Result<ExitCode> {
    let mut config = load_config_file(config.as_deref())?;
    config.gateway.insecure_open_admin |= insecure_open_admin;
    if let Some(listen) = listen {
        config.gateway.listen = listen;
    }
    if let Some(dir) = data_dir {
        config.set_data_dir(dir);
    }
    if let Some(threads) = threads {
        anyhow::ensure!(threads > 0, "--threads must be at least 1");
        config.gateway.threads = threads;
    }
    // One event-loop thread is the cheapest way to serve a proxy (no
    // cross-thread wake-ups per call); more threads are there for hosts
    // where one core is not enough. A PostgreSQL store needs a
    // multi-threaded runtime (a worker waiting on it hands its tasks off),
    // so it gets one even with one worker.
    let runtime = match config.gateway.threads {
        1 if !config.store.shared() => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()?,
    };
    runtime.block_on(async move {
        let address = config.gateway.listen;
        let shutdown = shutdown_signal();
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        let bound = listener.local_addr()?;
        let agents: Vec<_> = config.user_agents().map(|a| a.name.clone()).collect();
        let data_dir = config.gateway.data_dir.clone();
        let gateway = hone_gateway::Gateway::start(config.clone()).context("cannot start the gateway")?;
        // Refused before anything says it serves.
        gateway
            .state()
            .auth
            .check_exposure(bound, config.gateway.insecure_open_admin)
            .map_err(anyhow::Error::msg)?;
        if !bound.ip().is_loopback() {
            if config.gateway.api_keys.is_empty() {
                tracing::warn!(address = %bound, "listening beyond loopback with no API keys: anyone who can reach this address can use the agents and read episodes; add [[gateway.api_keys]] (see `hone key new`)");
            } else {
                tracing::warn!(address = %bound, "listening beyond loopback over plain HTTP: API keys, the admin token and dashboard sessions cross the network readable; put a TLS-terminating proxy in front (it should send X-Forwarded-Proto: https)");
            }
        }
        let dashboard = dashboard(&config, gateway.state(), bound)?;
        let gateway = gateway.with_routes(dashboard);
        tracing::info!(address = %bound, data_dir = %data_dir.display(), agents = ?agents, "hone is serving; point an OpenAI client at http://{bound}/v1, the dashboard is at http://{bound}/ui");
        gateway.serve(listener, shutdown).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The dashboard's routes (`/ui`), over the gateway's store (on SQLite a
/// connection of its own, patient: a page may wait on the recorder's
/// writes), acting through this gateway as `hone approve` would.
fn dashboard(
    config: &hone_config::Config,
    gateway: &hone_gateway::state::AppState,
    bound: SocketAddr,
) -> Result<axum::Router> {
    let store = hone_store::open_beside(&config.store, &gateway.cycles, hone_store::Wait::Patient)
        .context("cannot open the store for the dashboard")?;
    let admin_token = config
        .gateway
        .admin_token_env
        .as_ref()
        .and_then(|name| std::env::var(name).ok())
        .filter(|t| !t.is_empty());
    let client =
        hone_learn::client::GatewayClient::new(format!("http://{bound}"), None, std::time::Duration::from_secs(120))?
            .with_admin_token(admin_token);
    Ok(hone_ui::router(hone_ui::Ui::new(
        std::sync::Arc::new(config.clone()),
        store,
        client,
        gateway.auth.clone(),
    )))
}

/// Resolves on Ctrl-C or SIGTERM. The handlers are installed when this is
/// called, not when first polled: called before the port is bound, a
/// SIGTERM that arrives as soon as the port answers still shuts down
/// cleanly instead of killing the process.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let handlers = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let (mut interrupt, mut terminate) = handlers;
            let interrupt = async {
                match interrupt.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => {
                        let _ = tokio::signal::ctrl_c().await;
                    }
                }
            };
            let terminate = async {
                match terminate.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = interrupt => tracing::info!("interrupt received; shutting down"),
                () = terminate => tracing::info!("terminate received; shutting down"),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("interrupt received; shutting down");
        }
    }
}
