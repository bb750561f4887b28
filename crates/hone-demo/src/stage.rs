//! The demo's servers on loopback: the real gateway serving a config, the
//! environment's agent endpoint (`/run`, `/step`), and the runner that
//! plays tasks through the gateway. Ports are bound first ([`Ports`]) so a
//! config can name the endpoint before the gateway starts on it.

use crate::AGENT;
use anyhow::{Context, Result};
use hone_envs::{Environment, Runner, RunnerConfig, SimulatedUser};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Two free loopback ports: the gateway's and the endpoint's.
pub struct Ports {
    gateway: TcpListener,
    endpoint: TcpListener,
    /// `http://127.0.0.1:PORT` (no `/v1`).
    pub gateway_url: String,
    /// `http://127.0.0.1:PORT` (routes `/run`, `/step`).
    pub endpoint_url: String,
}

impl Ports {
    pub async fn bind() -> Result<Self> {
        let gateway = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = TcpListener::bind("127.0.0.1:0").await?;
        Ok(Self {
            gateway_url: format!("http://{}", gateway.local_addr()?),
            endpoint_url: format!("http://{}", endpoint.local_addr()?),
            gateway,
            endpoint,
        })
    }
}

/// The servers, running until [`Stage::stop`].
pub struct Stage {
    pub runner: Runner,
    pub recorder: Arc<hone_store::Recorder>,
    gateway: Arc<hone_gateway::state::AppState>,
    stop: tokio::sync::watch::Sender<bool>,
    servers: tokio::task::JoinSet<std::io::Result<()>>,
}

impl Stage {
    /// Starts the gateway on `config` (its listen address set to the bound
    /// port) and `environment`'s endpoint; with `user`, the endpoint's runs
    /// get that simulated user's reactions as feedback.
    pub async fn start(
        ports: Ports,
        config: &mut hone_config::Config,
        environment: Arc<dyn Environment>,
        user: Option<SimulatedUser>,
    ) -> Result<Self> {
        config.gateway.listen = ports.gateway.local_addr()?;
        let gateway = hone_gateway::Gateway::start(config.clone()).context("cannot start the gateway")?;
        let state = gateway.state().clone();
        let recorder = state.recorder.clone();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let until_stopped = || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            }
        };
        let mut servers = tokio::task::JoinSet::new();
        servers.spawn(gateway.serve(ports.gateway, until_stopped()));
        let mut runner_config = RunnerConfig::new(ports.gateway_url, AGENT);
        runner_config.timeout = Duration::from_secs(300);
        let runner = Runner::new(environment, runner_config)?;
        let router = match user {
            Some(user) => hone_envs::endpoint::router_with_user(Arc::new(runner.clone()), user),
            None => hone_envs::endpoint::router(Arc::new(runner.clone())),
        };
        servers.spawn(hone_envs::endpoint::serve(ports.endpoint, router, until_stopped()));
        Ok(Self {
            runner,
            recorder,
            gateway: state,
            stop,
            servers,
        })
    }

    /// Has the gateway follow the deployments the learner stored now,
    /// rather than at its next poll (`hone_gateway::DEPLOYMENT_POLL`): a
    /// round that starts right after a cycle deployed a canary sends the
    /// canary its share from its first user on.
    pub fn follow_deployments(&self) -> Result<()> {
        self.gateway
            .refresh_deployments()
            .context("the gateway cannot read the stored deployments")
    }

    /// Stops both servers (the gateway finishes its in-flight calls).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while let Some(joined) = self.servers.join_next().await {
            if let Ok(Err(e)) = joined {
                tracing::warn!(error = %e, "a demo server ended with an error");
            }
        }
    }
}
