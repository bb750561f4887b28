//! Publishing and fetching artefacts on a shared directory and on an
//! S3-compatible server (moto's, started per test; skipped with a message
//! where moto is not installed, failed instead under `HONE_REQUIRE_S3=1`).

use hone_artefacts::{local_adapter_name, ArtefactError, Artefacts, Place, MANIFEST};
use hone_config::ArtefactsConfig;
use hone_test_support::LocalS3;
use object_store::ObjectStoreExt;
use std::path::{Path, PathBuf};

/// Where the shared store of a test lives (kept alive for the test).
enum Shared {
    Dir { _root: tempfile::TempDir },
    S3 { _server: LocalS3 },
}

struct Setup {
    shared: Shared,
    config: ArtefactsConfig,
    /// Holds the test's local directories.
    work: tempfile::TempDir,
}

impl Setup {
    fn dir() -> Setup {
        let shared = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let config = plain_config(
            Some(format!("file://{}", shared.path().join("store").display())),
            work.path(),
        );
        Setup {
            shared: Shared::Dir { _root: shared },
            config,
            work,
        }
    }

    fn s3() -> Option<Setup> {
        if !LocalS3::available() {
            assert!(
                std::env::var("HONE_REQUIRE_S3").is_err(),
                "HONE_REQUIRE_S3 is set but moto's S3 server is not installed (pip install 'moto[server]')"
            );
            eprintln!("skipped: moto's S3 server is not installed (pip install 'moto[server]')");
            return None;
        }
        let server = LocalS3::start().unwrap();
        server.create_bucket("artefacts").unwrap();
        let work = tempfile::tempdir().unwrap();
        let config = server.config("artefacts", "hone", &work.path().join("models"));
        Some(Setup {
            shared: Shared::S3 { _server: server },
            config,
            work,
        })
    }

    fn both() -> Vec<Setup> {
        std::iter::once(Setup::dir()).chain(Setup::s3()).collect()
    }

    fn name(&self) -> &'static str {
        match self.shared {
            Shared::Dir { .. } => "dir",
            Shared::S3 { .. } => "s3",
        }
    }

    fn artefacts(&self) -> Artefacts {
        Artefacts::new(&self.config).unwrap()
    }

    /// A fresh directory under the test's work directory.
    fn local(&self, name: &str) -> PathBuf {
        let dir = self.work.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A URL beside the shared store's prefix (same bucket or directory).
    fn url_of(&self, relative: &str) -> String {
        let shared = self.config.url.as_deref().unwrap();
        let base = shared.rsplit_once('/').unwrap().0;
        format!("{base}/{relative}")
    }
}

/// A config for `url` (a directory, or none) caching under `work`.
fn plain_config(url: Option<String>, work: &Path) -> ArtefactsConfig {
    ArtefactsConfig {
        url,
        endpoint: None,
        region: None,
        allow_http: None,
        access_key_id: None,
        secret_access_key: None,
        cache_dir: work.join("models"),
        memory_dir: work.join("memory"),
    }
}

/// An adapter-shaped directory: a config, weights of `bytes` bytes (seeded
/// by `seed`), and a nested file.
fn adapter(dir: &Path, seed: u8, bytes: usize) -> PathBuf {
    std::fs::create_dir_all(dir.join("extra")).unwrap();
    std::fs::write(
        dir.join("adapter_config.json"),
        format!("{{\"r\": 8, \"seed\": {seed}}}"),
    )
    .unwrap();
    let weights: Vec<u8> = (0..bytes)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    std::fs::write(dir.join("adapter_model.safetensors"), weights).unwrap();
    std::fs::write(dir.join("extra/training.json"), "{\"steps\": 3}").unwrap();
    dir.to_path_buf()
}

/// Every file under `dir` but the manifest, with its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().unwrap() != MANIFEST {
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                out.push((relative, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Entries left in `dir` whose names say an interrupted fetch.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".fetch-"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_published_adapter_is_fetched_byte_for_byte_by_another_machine() {
    for setup in Setup::both() {
        let trained = adapter(&setup.local("learner/adapters/c1-grpo"), 1, 20 << 20);
        let learner = setup.artefacts();
        let manifest = learner.publish_adapter("c1-grpo", &trained).await.unwrap().unwrap();
        assert_eq!(manifest.files.len(), 3, "{}", setup.name());
        let on_disk: usize = contents(&trained).iter().map(|(_, b)| b.len()).sum();
        assert_eq!(manifest.bytes(), on_disk as u64);
        // Publishing the same bytes again is a no-op with the same manifest.
        let again = learner.publish_adapter("c1-grpo", &trained).await.unwrap().unwrap();
        assert_eq!(again, manifest);

        let replica = setup.artefacts();
        let adapters_dir = setup.local("replica/adapters");
        let fetched = replica.adapter("c1-grpo", &adapters_dir).await.unwrap();
        assert_eq!(fetched, adapters_dir.join("c1-grpo"));
        assert_eq!(contents(&fetched), contents(&trained), "{}", setup.name());
        assert!(leftovers(&adapters_dir).is_empty());

        let listed = replica.published_adapters().await.unwrap();
        assert_eq!(listed.len(), 1, "{}", setup.name());
        assert_eq!(listed[0].name, "c1-grpo");
        assert_eq!(listed[0].manifest.sha256, manifest.sha256);
        assert_eq!(
            replica.published_adapter("c1-grpo").await.unwrap().map(|m| m.sha256),
            Some(manifest.sha256.clone())
        );
        assert!(replica.published_adapter("c2-grpo").await.unwrap().is_none());
    }
}

#[tokio::test]
async fn other_bytes_under_a_published_name_are_refused_and_the_published_ones_kept() {
    for setup in Setup::both() {
        let first = adapter(&setup.local("a/c1-sft"), 1, 4096);
        let artefacts = setup.artefacts();
        let manifest = artefacts.publish_adapter("c1-sft", &first).await.unwrap().unwrap();
        let other = adapter(&setup.local("b/c1-sft"), 2, 4096);
        let refused = artefacts.publish_adapter("c1-sft", &other).await.unwrap_err();
        assert!(
            matches!(refused, ArtefactError::Conflict(_)),
            "{}: {refused}",
            setup.name()
        );
        assert!(refused.to_string().contains("never change"), "{refused}");
        let fetched = artefacts.adapter("c1-sft", &setup.local("replica")).await.unwrap();
        assert_eq!(contents(&fetched), contents(&first));
        assert_eq!(
            artefacts.published_adapter("c1-sft").await.unwrap().unwrap().sha256,
            manifest.sha256
        );
    }
}

#[tokio::test]
async fn a_corrupted_or_half_published_adapter_is_never_served() {
    for setup in Setup::both() {
        let artefacts = setup.artefacts();
        let trained = adapter(&setup.local("learner/c1-dpo"), 3, 8192);
        artefacts.publish_adapter("c1-dpo", &trained).await.unwrap();
        let shared = Place::open(setup.config.url.as_deref().unwrap(), &setup.config, false).unwrap();
        let weights = shared.key("adapters/c1-dpo/adapter_model.safetensors");
        shared.store.put(&weights, vec![7u8; 8192].into()).await.unwrap();
        let replica = setup.local("replica");
        let e = artefacts.adapter("c1-dpo", &replica).await.unwrap_err();
        assert!(matches!(e, ArtefactError::Corrupt(_)), "{}: {e}", setup.name());
        assert!(e.to_string().contains("SHA-256"), "{e}");
        assert!(!replica.join("c1-dpo").exists(), "a corrupt adapter was put in place");
        assert!(leftovers(&replica).is_empty(), "{:?}", leftovers(&replica));

        // Files uploaded but no manifest (a publisher that died half way).
        let half = adapter(&setup.local("learner/c2-dpo"), 4, 100);
        artefacts.publish_adapter("c2-dpo", &half).await.unwrap();
        shared
            .store
            .delete(&shared.key(&format!("adapters/c2-dpo/{MANIFEST}")))
            .await
            .unwrap();
        let e = artefacts.adapter("c2-dpo", &replica).await.unwrap_err();
        assert!(matches!(e, ArtefactError::NotFound(_)), "{}: {e}", setup.name());
        assert!(!replica.join("c2-dpo").exists());
        assert!(artefacts
            .published_adapters()
            .await
            .unwrap()
            .iter()
            .all(|p| p.name != "c2-dpo"));
    }
}

#[tokio::test]
async fn checkpoints_and_adapters_named_by_url_are_fetched_once_into_the_cache() {
    for setup in Setup::both() {
        let artefacts = setup.artefacts();
        // A checkpoint copied up with a plain sync tool: no manifest.
        let checkpoint = adapter(&setup.local("upload/tiny"), 5, 3000);
        let url = setup.url_of("models/tiny");
        let place = Place::open(&url, &setup.config, true).unwrap();
        for (relative, bytes) in contents(&checkpoint) {
            place.store.put(&place.key(&relative), bytes.into()).await.unwrap();
        }
        let local = artefacts.checkpoint(&url).await.unwrap();
        assert_eq!(local, artefacts.checkpoint_dir(&url));
        assert!(local.starts_with(&setup.config.cache_dir), "{}", local.display());
        assert_eq!(contents(&local), contents(&checkpoint), "{}", setup.name());
        // Served from the cache from now on, even with the source gone.
        for (relative, _) in contents(&checkpoint) {
            place.store.delete(&place.key(&relative)).await.unwrap();
        }
        assert_eq!(artefacts.checkpoint(&url).await.unwrap(), local);
        // A plain directory is itself.
        assert_eq!(
            artefacts.checkpoint("/models/qwen").await.unwrap(),
            Path::new("/models/qwen")
        );

        // An adapter by URL (published elsewhere with `push`).
        let trained = adapter(&setup.local("elsewhere/lora"), 6, 500);
        let url = setup.url_of("team-b/lora");
        artefacts.push(&trained, &url).await.unwrap();
        let adapters_dir = setup.local("replica/adapters");
        let fetched = artefacts.adapter(&url, &adapters_dir).await.unwrap();
        assert_eq!(fetched, adapters_dir.join(local_adapter_name(&url)));
        assert!(
            local_adapter_name(&url).starts_with("lora-"),
            "{}",
            local_adapter_name(&url)
        );
        assert_eq!(contents(&fetched), contents(&trained));
        // Nothing at a URL is an error that names it.
        let missing = setup.url_of("models/none");
        let e = artefacts.checkpoint(&missing).await.unwrap_err();
        assert!(e.to_string().contains("models/none"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_requests_for_a_missing_adapter_all_get_it_and_leave_nothing_behind() {
    for setup in Setup::both() {
        let trained = adapter(&setup.local("learner/c9-grpo"), 9, 2 << 20);
        setup.artefacts().publish_adapter("c9-grpo", &trained).await.unwrap();
        let replica = std::sync::Arc::new(setup.artefacts());
        let adapters_dir = setup.local("replica/adapters");
        let asks: Vec<_> = (0..16)
            .map(|_| {
                let replica = replica.clone();
                let dir = adapters_dir.clone();
                async move { replica.adapter("c9-grpo", &dir).await }
            })
            .collect();
        for got in futures::future::join_all(asks).await {
            assert_eq!(got.unwrap(), adapters_dir.join("c9-grpo"));
        }
        assert_eq!(contents(&adapters_dir.join("c9-grpo")), contents(&trained));
        assert!(leftovers(&adapters_dir).is_empty());
        // A name that is not a safe directory name is refused before any request.
        let e = replica.adapter("../c9-grpo", &adapters_dir).await.unwrap_err();
        assert!(e.to_string().contains("not an adapter name"), "{e}");
    }
}

#[tokio::test]
async fn without_a_shared_store_an_adapter_is_only_looked_for_locally() {
    let work = tempfile::tempdir().unwrap();
    let config = plain_config(None, work.path());
    let artefacts = Artefacts::new(&config).unwrap();
    assert!(artefacts.publish_adapter("a1", work.path()).await.unwrap().is_none());
    let local = adapter(&work.path().join("adapters/a1"), 1, 10);
    assert_eq!(
        artefacts.adapter("a1", &work.path().join("adapters")).await.unwrap(),
        local
    );
    let e = artefacts
        .adapter("a2", &work.path().join("adapters"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ArtefactError::NotFound(_)) && e.to_string().contains("[artefacts] url"),
        "{e}"
    );
}

#[tokio::test]
async fn a_published_datastore_is_fetched_by_a_replica_that_lacks_it() {
    for setup in Setup::both() {
        let hash = "ab".repeat(32);
        let learner = setup.artefacts();
        let path = learner.datastore_path(&hash);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, vec![3u8; 5000]).unwrap();
        let manifest = learner.publish_datastore(&hash).await.unwrap().unwrap();
        assert_eq!(manifest.bytes(), 5000);

        let mut elsewhere = setup.config.clone();
        elsewhere.memory_dir = setup.local("replica/memory");
        let replica = Artefacts::new(&elsewhere).unwrap();
        assert!(!replica.datastore_path(&hash).exists());
        let fetched = replica.datastore(&hash).await.unwrap();
        assert_eq!(fetched, elsewhere.memory_dir.join(&hash).join("datastore.safetensors"));
        assert_eq!(std::fs::read(&fetched).unwrap(), vec![3u8; 5000], "{}", setup.name());
        let e = replica.datastore(&"cd".repeat(32)).await.unwrap_err();
        assert!(matches!(e, ArtefactError::NotFound(_)), "{e}");
    }
}
