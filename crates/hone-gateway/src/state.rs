//! The gateway's shared state, built once at start-up from the validated
//! config: routes per agent (their splits follow the deployments the learner
//! stores), providers, the store, the recorder, metrics and the task tracker
//! that shutdown waits on.

use crate::auth::Auth;
use crate::dispatch::{ProviderEntry, Providers};
use crate::error::{ApiError, ErrorKind};
use crate::metrics::Metrics;
use crate::providers::AnyProvider;
use crate::routing::{AgentRoutes, Split};
use hone_config::Config;
use hone_store::{CycleStore, Recorder, RecorderOptions, Store, StoreError};
use hone_types::{VersionId, VersionRecord, VersionSpec};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::task::TaskTracker;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot start the recorder (journal directory {path}): {source}")]
    Recorder { path: String, source: std::io::Error },
    #[error("{0}")]
    Provider(String),
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
}

pub struct AppState {
    pub config: Arc<Config>,
    pub auth: Arc<Auth>,
    pub agents: HashMap<String, AgentRoutes>,
    pub providers: Providers,
    pub store: Arc<dyn Store>,
    pub recorder: Arc<Recorder>,
    pub metrics: Metrics,
    /// Background work (recording after a disconnect, streams) that shutdown waits for.
    pub tasks: TaskTracker,
    /// Unix seconds when the gateway started (`created` in `/v1/models`).
    pub started_at: i64,
    /// The same store, seen as the learner's (deployments live there).
    pub cycles: Arc<dyn CycleStore>,
    /// Adapters and checkpoints fetched by name or URL (`hone-artefacts`).
    pub artefacts: Arc<hone_artefacts::Artefacts>,
    /// Successful episodes retrieved as few-shot examples.
    pub examples: crate::examples::ExampleIndex,
    /// Versions registered for calls seen in OpenTelemetry traces.
    pub observed_versions: std::sync::Mutex<std::collections::HashSet<VersionId>>,
}

impl AppState {
    /// The configured `local` providers (embedded engines), by name.
    pub fn local_providers(&self) -> Vec<&crate::providers::LocalProvider> {
        let mut found: Vec<_> = self
            .providers
            .values()
            .filter_map(|entry| match &entry.provider {
                AnyProvider::Local(local) => Some(local),
                _ => None,
            })
            .collect();
        found.sort_by_key(|l| l.name().to_owned());
        found
    }

    /// Opens the store, records the declared versions, and starts the recorder.
    pub fn start(config: Config) -> Result<Arc<Self>, StartError> {
        // Calls wait on its writes: short waits, the recorder spools instead.
        let cycles = hone_store::open(&config.store, hone_store::Wait::Recording)?;
        let store: Arc<dyn Store> = cycles.clone();
        let now = hone_types::time::now_ms();
        let declared: Vec<VersionRecord> = config
            .agents
            .values()
            .flat_map(|agent| agent.versions.values())
            .map(|v| VersionRecord {
                id: v.id.clone(),
                agent: v.spec.agent.clone(),
                label: Some(v.label.clone()),
                spec: v.spec.clone(),
                parent: None,
                created_by: "config".to_owned(),
                created_at: now,
            })
            .collect();
        if let Err(e) = store.upsert_versions(&declared) {
            // A locked database: serve anyway (calls spool to the journal, as
            // at run time) and store the declared versions once it is free.
            tracing::warn!(error = %e, "cannot store the configured versions yet; retrying in the background");
            let store = store.clone();
            std::thread::Builder::new()
                .name("hone-versions".into())
                .spawn(move || loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                    if store.upsert_versions(&declared).is_ok() {
                        tracing::info!("configured versions stored");
                        break;
                    }
                })
                .map_err(StartError::Thread)?;
        }

        let artefacts = Arc::new(
            hone_artefacts::Artefacts::new(&config.artefacts).map_err(|e| StartError::Provider(e.to_string()))?,
        );
        let mut providers = Providers::new();
        for (name, provider) in &config.providers {
            let entry = ProviderEntry {
                provider: AnyProvider::from_config(provider, &artefacts).map_err(StartError::Provider)?,
                config: provider.clone(),
            };
            providers.insert(name.clone(), Arc::new(entry));
        }

        let mut agents = HashMap::new();
        for (name, agent) in &config.agents {
            let mut versions = HashMap::new();
            // Earlier versions stay servable (pinned by id) while their providers exist.
            for stored in store.versions(Some(name))? {
                if stored.spec.routes.iter().all(|r| providers.contains_key(&r.provider)) {
                    versions.insert(stored.id, Arc::new(stored.spec));
                }
            }
            for v in agent.versions.values() {
                versions.insert(v.id.clone(), Arc::new(v.spec.clone()));
            }
            // Validation guarantees the labels exist; a miss is still an error, not a panic.
            let id_of = |label: &str| -> Result<VersionId, StartError> {
                agent.versions.get(label).map(|v| v.id.clone()).ok_or_else(|| {
                    StartError::Provider(format!("agent `{name}`: deployment names unknown version `{label}`"))
                })
            };
            let canaries = agent
                .deployment
                .canaries
                .iter()
                .map(|(label, share)| Ok((id_of(label)?, *share)))
                .collect::<Result<_, StartError>>()?;
            agents.insert(
                name.clone(),
                AgentRoutes::new(
                    name.clone(),
                    agent.versions.iter().map(|(l, v)| (l.clone(), v.id.clone())).collect(),
                    versions,
                    Split {
                        champion: id_of(&agent.deployment.champion)?,
                        canaries,
                        revision: None,
                    },
                ),
            );
        }

        // Local models named by the config load now, so a bad path stops
        // the start with its reason instead of failing the first call.
        for route in config
            .agents
            .values()
            .flat_map(|a| a.versions.values())
            .flat_map(|v| &v.spec.routes)
        {
            if let Some(AnyProvider::Local(local)) = providers.get(&route.provider).map(|e| &e.provider) {
                if hone_config::is_artefact_url(&route.model) {
                    hone_artefacts::checkpoint_blocking(&config.artefacts, &route.model)
                        .map_err(|e| StartError::Provider(format!("cannot fetch checkpoint {}: {e}", route.model)))?;
                }
                let engine = local.engine(&route.model).map_err(StartError::Provider)?;
                if let Some(adapter) = &route.adapter {
                    // Not here yet (published elsewhere, or named by URL): fetched on first use.
                    let name = hone_artefacts::local_adapter_name(adapter);
                    if let Err(e) = engine.adapter(&name) {
                        // The trainer may not have written it yet; calls fail until it exists.
                        tracing::warn!(provider = %route.provider, adapter = %adapter, error = %e, "adapter not available yet");
                    }
                }
            }
        }

        let journal_dir = config.gateway.data_dir.join("journal");
        let recorder = Recorder::start(
            store.clone(),
            RecorderOptions {
                journal_dir: journal_dir.clone(),
                max_batch: config.recorder.max_batch,
                store_retry: config.recorder.store_retry,
                full_sync: config.store.synchronous == hone_config::Synchronous::Full,
            },
        )
        .map_err(|source| StartError::Recorder {
            path: journal_dir.display().to_string(),
            source,
        })?;

        let examples = crate::examples::ExampleIndex::new(&config);
        let state = Self {
            auth: Arc::new(Auth::from_config(&config)),
            config: Arc::new(config),
            agents,
            providers,
            store,
            recorder: Arc::new(recorder),
            metrics: Metrics::default(),
            tasks: TaskTracker::new(),
            started_at: now / 1000,
            cycles,
            artefacts,
            examples,
            observed_versions: Default::default(),
        };
        state.refresh_deployments()?;
        Ok(Arc::new(state))
    }

    /// Applies the deployments the learner stored (a canary, a promotion, a
    /// rollback) to routing. Until the learner first changes an agent's
    /// deployment, the config's `[deployment]` stands.
    pub fn refresh_deployments(&self) -> Result<(), StoreError> {
        for stored in self.cycles.deployments()? {
            let Some(routes) = self.agents.get(&stored.agent) else {
                continue;
            };
            if stored.source == "config" || routes.split().revision == Some(stored.revision) {
                continue;
            }
            let wanted = std::iter::once(&stored.champion).chain(stored.canary.as_ref());
            for id in wanted {
                if self.servable(routes, id)?.is_none() {
                    tracing::error!(agent = %stored.agent, version = %id, "deployment names a version that cannot be served; keeping the current split");
                    return Ok(());
                }
            }
            let split = Split {
                champion: stored.champion.clone(),
                canaries: stored.canary.iter().map(|c| (c.clone(), stored.canary_share)).collect(),
                revision: Some(stored.revision),
            };
            tracing::info!(agent = %stored.agent, champion = %split.champion, canary = ?stored.canary, revision = stored.revision, "deployment changed");
            routes.set_split(split);
        }
        Ok(())
    }

    /// A version of the agent, looked up in the store when it was created
    /// after start (a candidate); `None` when unknown or its providers are not
    /// configured here.
    pub fn servable(&self, routes: &AgentRoutes, id: &VersionId) -> Result<Option<Arc<VersionSpec>>, StoreError> {
        if let Some(spec) = routes.spec(id) {
            return Ok(Some(spec));
        }
        let Some(record) = self.store.version(id)? else {
            return Ok(None);
        };
        if record.agent != routes.name
            || !record
                .spec
                .routes
                .iter()
                .all(|r| self.providers.contains_key(&r.provider))
        {
            return Ok(None);
        }
        let spec = Arc::new(record.spec);
        routes.add_version(id.clone(), spec.clone());
        Ok(Some(spec))
    }

    /// Waits until every call recorded so far is in the store, so that a
    /// read or a feedback lookup sees calls whose responses were delivered.
    /// `required`: a timeout is an error (503) rather than a stale read.
    pub async fn caught_up(&self, required: bool) -> Result<(), ApiError> {
        let limit = std::time::Duration::from_secs(if required { 5 } else { 1 });
        match self.recorder.flush(limit).await {
            Ok(()) => Ok(()),
            Err(e) if required => Err(ApiError::new(
                ErrorKind::Unavailable,
                "store_behind",
                format!(
                "recorded calls are not in the database yet, so this cannot be checked now; try again shortly ({e})"
            ),
            )),
            Err(e) => {
                tracing::debug!(error = %e, "reading before the store caught up with the journal");
                Ok(())
            }
        }
    }
}
