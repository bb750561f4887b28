//! Artefacts: trained LoRA adapters and base checkpoints, addressed by name
//! or URL so that every gateway replica, the learner and a vLLM server
//! beside a replica find the same bytes.
//!
//! - With `[artefacts] url` set (`s3://bucket/prefix`, `file:///shared`),
//!   the learner [publishes](Artefacts::publish_adapter) each adapter it
//!   trains to `<url>/adapters/<name>/` before any version names it, and a
//!   replica that is asked for an adapter it does not hold
//!   [fetches](Artefacts::adapter) it into its own `adapters_dir` on first
//!   use. Without it, adapters live in the `adapters_dir` (one machine, or
//!   a mount every replica shares) and nothing is copied.
//! - A route may also name a checkpoint or adapter by URL
//!   (`model = "s3://models/qwen2.5-0.5b"`); it is fetched once into
//!   `<data_dir>/models/` (adapters: the `adapters_dir`) and served from there.
//!
//! Every artefact carries a manifest (sizes and SHA-256 per file, one
//! content hash), written last when publishing and checked when fetching;
//! fetches land in a fresh directory that is renamed into place, so a
//! crash or a corrupted object never leaves a half or wrong artefact under
//! a name. Published artefacts never change: publishing other bytes under
//! a taken name is refused.

mod error;
mod manifest;
mod place;
mod transfer;

pub use error::{ArtefactError, Result};
pub use manifest::{human_bytes, FileEntry, Manifest, MANIFEST};
pub use place::Place;
pub use transfer::{manifest_of, Unpublished};

use hone_config::{is_adapter_name, is_artefact_url, ArtefactsConfig};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The folder of the shared store adapters are published under.
pub const ADAPTERS: &str = "adapters";
/// The folder of the shared store kNN-LM datastores are published under
/// (`memory/<content hash>/`), and their file inside each.
pub const MEMORY: &str = "memory";
pub const DATASTORE_FILE: &str = "datastore.safetensors";

/// Resolves, fetches and publishes artefacts for one process.
#[derive(Debug)]
pub struct Artefacts {
    config: ArtefactsConfig,
    shared: Option<Place>,
    /// One fetch per local directory at a time; others wait for it.
    fetches: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

/// An adapter as published in the shared store.
#[derive(Debug, Clone)]
pub struct Published {
    pub name: String,
    pub url: String,
    pub manifest: Manifest,
}

impl Artefacts {
    /// Clients for the configured store; nothing is contacted yet.
    pub fn new(config: &ArtefactsConfig) -> Result<Self> {
        let shared = config
            .url
            .as_deref()
            .map(|url| Place::open(url, config, url.starts_with("file://")))
            .transpose()?;
        Ok(Self {
            config: config.clone(),
            shared,
            fetches: Mutex::new(HashMap::new()),
        })
    }

    /// The shared store's URL, when one is configured.
    pub fn shared_url(&self) -> Option<&str> {
        self.shared.as_ref().map(|p| p.url.as_str())
    }

    /// Where adapter `name` is (or would be) published.
    pub fn adapter_url(&self, name: &str) -> Option<String> {
        self.shared.as_ref().map(|p| format!("{}/{ADAPTERS}/{name}", p.url))
    }

    /// Publishes the trained adapter in `dir` as `name`; `None` when no
    /// shared store is configured (the adapter stays where it is).
    pub async fn publish_adapter(&self, name: &str, dir: &Path) -> Result<Option<Manifest>> {
        let Some(shared) = &self.shared else { return Ok(None) };
        check_name(name)?;
        let place = shared.child(&format!("{ADAPTERS}/{name}"));
        let manifest = transfer::upload(dir, &place).await?;
        tracing::info!(
            adapter = name,
            url = %place.url,
            sha256 = manifest.short(),
            "published adapter ({})",
            human_bytes(manifest.bytes())
        );
        Ok(Some(manifest))
    }

    /// The manifest of adapter `name` in the shared store, if published.
    pub async fn published_adapter(&self, name: &str) -> Result<Option<Manifest>> {
        let Some(shared) = &self.shared else { return Ok(None) };
        check_name(name)?;
        transfer::published(&shared.child(&format!("{ADAPTERS}/{name}"))).await
    }

    /// Every adapter published in the shared store, by name.
    pub async fn published_adapters(&self) -> Result<Vec<Published>> {
        use futures::StreamExt;
        let Some(shared) = &self.shared else {
            return Ok(Vec::new());
        };
        let root = shared.child(ADAPTERS);
        let listed = root
            .store
            .list_with_delimiter(Some(&root.prefix))
            .await
            .map_err(|e| error::failed(format!("listing {}", root.url), e))?;
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect();
        names.sort();
        let mut found = Vec::new();
        let mut manifests = futures::stream::iter(names.into_iter().map(|name| {
            let place = root.child(&name);
            async move { (name, place.url.clone(), transfer::published(&place).await) }
        }))
        .buffered(8);
        while let Some((name, url, manifest)) = manifests.next().await {
            if let Some(manifest) = manifest? {
                found.push(Published { name, url, manifest });
            }
        }
        Ok(found)
    }

    /// The local directory of `adapter` (a name or a URL) below
    /// `adapters_dir`, fetched first when it is not there: a name from the
    /// shared store, a URL from where it points.
    pub async fn adapter(&self, adapter: &str, adapters_dir: &Path) -> Result<PathBuf> {
        let local = adapters_dir.join(local_adapter_name(adapter));
        if local.join("adapter_config.json").is_file() {
            return Ok(local);
        }
        let place = if is_artefact_url(adapter) {
            Place::open(adapter, &self.config, false)?
        } else {
            check_name(adapter)?;
            let Some(shared) = &self.shared else {
                return Err(ArtefactError::NotFound(format!(
                    "adapter `{adapter}` is not in {} and no shared artefact store is configured ([artefacts] url)",
                    adapters_dir.display()
                )));
            };
            shared.child(&format!("{ADAPTERS}/{adapter}"))
        };
        self.fetch(&place, &local, Unpublished::Refuse, "adapter").await?;
        Ok(local)
    }

    /// The local checkpoint directory `model` names: itself, or for a URL
    /// the cached copy under `<data_dir>/models/`, fetched first when absent.
    pub async fn checkpoint(&self, model: &str) -> Result<PathBuf> {
        if !is_artefact_url(model) {
            return Ok(PathBuf::from(model));
        }
        let local = self.checkpoint_dir(model);
        if local.is_dir() {
            return Ok(local);
        }
        let place = Place::open(model, &self.config, false)?;
        self.fetch(&place, &local, Unpublished::TakeListing, "checkpoint")
            .await?;
        Ok(local)
    }

    /// Where the checkpoint `model` names is read from, without fetching:
    /// the directory itself, or a URL's cached copy.
    pub fn checkpoint_dir(&self, model: &str) -> PathBuf {
        if is_artefact_url(model) {
            self.config.cache_dir.join(cache_name(model))
        } else {
            PathBuf::from(model)
        }
    }

    /// The file of the kNN-LM datastore with content hash `hash` (in its own
    /// directory, `<memory_dir>/<hash>/`, which is what is published).
    pub fn datastore_path(&self, hash: &str) -> PathBuf {
        self.config.memory_dir.join(hash).join(DATASTORE_FILE)
    }

    /// Publishes the datastore `hash` (already written to its path) to the
    /// shared store; `None` without one.
    pub async fn publish_datastore(&self, hash: &str) -> Result<Option<Manifest>> {
        let Some(shared) = &self.shared else { return Ok(None) };
        check_name(hash)?;
        transfer::upload(
            &self.config.memory_dir.join(hash),
            &shared.child(&format!("{MEMORY}/{hash}")),
        )
        .await
        .map(Some)
    }

    /// The local file of datastore `hash`, fetched from the shared store
    /// first when this machine does not hold it.
    pub async fn datastore(&self, hash: &str) -> Result<PathBuf> {
        check_name(hash)?;
        let path = self.datastore_path(hash);
        if path.is_file() {
            return Ok(path);
        }
        let Some(shared) = &self.shared else {
            return Err(ArtefactError::NotFound(format!(
                "datastore {hash} is not in {} and no shared artefact store is configured ([artefacts] url)",
                self.config.memory_dir.display()
            )));
        };
        let place = shared.child(&format!("{MEMORY}/{hash}"));
        self.fetch(
            &place,
            &self.config.memory_dir.join(hash),
            Unpublished::Refuse,
            "datastore",
        )
        .await?;
        Ok(path)
    }

    /// Copies the directory `dir` to `url` (any artefact URL), manifest last.
    pub async fn push(&self, dir: &Path, url: &str) -> Result<Manifest> {
        transfer::upload(dir, &Place::open(url, &self.config, true)?).await
    }

    /// Fetches `url` into the new directory `into`.
    pub async fn pull(&self, url: &str, into: &Path) -> Result<Manifest> {
        let place = Place::open(url, &self.config, false)?;
        self.fetch(&place, into, Unpublished::TakeListing, "artefact").await
    }

    /// One fetch of `place` into `local` at a time in this process; a
    /// caller that waited finds the directory there and returns at once.
    async fn fetch(&self, place: &Place, local: &Path, unpublished: Unpublished, what: &str) -> Result<Manifest> {
        let gate = self
            .fetches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(local.to_path_buf())
            .or_default()
            .clone();
        let _turn = gate.lock().await;
        if local.is_dir() {
            return Ok(Manifest::new(Vec::new()));
        }
        if let Some(parent) = local.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| error::failed(format!("creating {}", parent.display()), e))?;
        }
        tracing::info!(url = %place.url, into = %local.display(), "fetching {what}");
        let started = std::time::Instant::now();
        let manifest = transfer::download(place, local, unpublished).await?;
        tracing::info!(
            url = %place.url,
            sha256 = manifest.short(),
            "fetched {what}: {} files, {} in {:.1} s",
            manifest.files.len(),
            human_bytes(manifest.bytes()),
            started.elapsed().as_secs_f64()
        );
        Ok(manifest)
    }
}

/// [`Artefacts::checkpoint`] for synchronous code (a process starting up),
/// inside a runtime or not: on a thread of its own with its own runtime
/// and clients.
pub fn checkpoint_blocking(config: &ArtefactsConfig, model: &str) -> Result<PathBuf> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| error::failed("starting a runtime to fetch with", e))?;
                let artefacts = Artefacts::new(config)?;
                runtime.block_on(artefacts.checkpoint(model))
            })
            .join()
            .unwrap_or_else(|_| {
                Err(error::failed(
                    format!("fetching {model}"),
                    "the fetching thread panicked",
                ))
            })
    })
}

/// The name an adapter is loaded under by the engine and kept under in the
/// `adapters_dir`: a name is itself; a URL becomes its last segment and a
/// hash of the whole URL (`lora-3f9a0c12d4e5`), a safe directory name.
pub fn local_adapter_name(adapter: &str) -> String {
    if is_artefact_url(adapter) {
        cache_name(adapter)
    } else {
        adapter.to_owned()
    }
}

/// `<last segment>-<12 hex digits of SHA-256(url)>`, safe as a file name.
fn cache_name(url: &str) -> String {
    let last: String = url
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let last = last.trim_start_matches('.');
    let digest = hex::encode(Sha256::digest(url.as_bytes()));
    let short = &digest[..12];
    if last.is_empty() {
        short.to_owned()
    } else {
        format!("{}-{short}", &last[..last.len().min(48)])
    }
}

fn check_name(name: &str) -> Result<()> {
    if is_adapter_name(name) {
        Ok(())
    } else {
        Err(ArtefactError::Failed(format!(
            "`{name}` is not an adapter name (letters, digits and `-_.`, not starting with `.`)"
        )))
    }
}
