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
    // where one core is not enough.
    let runtime = match config.gateway.threads {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()?,
    };
    runtime.block_on(async move {
        let address = config.gateway.listen;
        if !address.ip().is_loopback() && config.gateway.api_keys.is_empty() {
            tracing::warn!(%address, "listening beyond loopback with no API keys: anyone who can reach this address can use the agents and read episodes; add [[gateway.api_keys]] (see `hone key new`)");
        }
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address}"))?;
        let bound = listener.local_addr()?;
        let agents: Vec<_> = config.agents.keys().cloned().collect();
        let data_dir = config.gateway.data_dir.clone();
        let gateway = hone_gateway::Gateway::start(config).context("cannot start the gateway")?;
        tracing::info!(address = %bound, data_dir = %data_dir.display(), agents = ?agents, "hone is serving; point an OpenAI client at http://{bound}/v1");
        gateway.serve(listener, shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => tracing::info!("interrupt received; shutting down"),
        () = terminate => tracing::info!("terminate received; shutting down"),
    }
}
