//! Several `hone serve` replicas on one PostgreSQL database: they
//! follow the deployment the learner stores, route an episode to the same
//! version whichever replica it reaches, take feedback for each other's
//! episodes, and — under load, through `kill -9` of a replica, a database
//! restart and a 30-second database outage — lose no call whose response
//! was delivered. Also: `hone store migrate` moves a served SQLite store to
//! PostgreSQL and a replica serves it from there.

use crate::support::{chat, client, config, hone_cli, FakeUpstream, Hone};
use hone_store::{CycleStore, Store};
use hone_types::{Deployment, VersionId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A fresh database on the test run's server (or a private one); `None`
/// where PostgreSQL is not installed and not required.
fn database(dir: &std::path::Path) -> Option<hone_test_support::TestDatabase> {
    let db = hone_test_support::test_database(dir).unwrap();
    if db.is_none() {
        eprintln!("SKIPPED: PostgreSQL is not installed here (Debian's `postgresql`)");
    }
    db
}

fn on_postgres(url: &str, rest: &str) -> String {
    format!("store = {{ type = \"postgres\", url = \"{url}\", pool = 4 }}\n{rest}")
}

fn version_labelled(store: &dyn Store, label: &str) -> VersionId {
    store
        .versions(Some("assistant"))
        .unwrap()
        .into_iter()
        .find(|v| v.label.as_deref() == Some(label))
        .unwrap_or_else(|| panic!("no version labelled {label}: {:?}", store.versions(None).unwrap()))
        .id
}

async fn canary_of(hone: &Hone) -> Option<String> {
    let list = crate::support::get_json(&hone.url("/admin/deployments")).await;
    let split = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["agent"] == "assistant")
        .unwrap()["split"]
        .clone();
    split
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["role"] == "canary")
        .map(|s| s["version"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_follow_deployments_route_episodes_alike_and_take_each_others_feedback() {
    let dir = tempfile::tempdir().unwrap();
    let Some(db) = database(&dir.path().join("pg")) else {
        return;
    };
    let upstream = FakeUpstream::start().await;
    let text = on_postgres(
        &db.url,
        &format!(
            "{}\n[agents.assistant.versions.v2]\nprovider = \"up\"\nmodel = \"fake-model\"\nsystem = \"You are kind.\"\n[agents.assistant.deployment]\nchampion = \"v1\"\n",
            config(&upstream)
        ),
    );
    let a = Hone::start(&text);
    let b = Hone::start(&text);
    let http = client();

    // The learner (here: the store, as the learner writes it) puts v2 on a
    // 50% canary; both replicas pick it up.
    let store = hone_test_support::connect(&db.url, 2).unwrap();
    // Listening comes before the gateway has stored its versions: wait
    // until both serve.
    a.wait_caught_up();
    b.wait_caught_up();
    let (v1, v2) = (version_labelled(&store, "v1"), version_labelled(&store, "v2"));
    let canary = Deployment {
        agent: "assistant".into(),
        champion: v1.clone(),
        canary: Some(v2.clone()),
        canary_share: 0.5,
        canary_since: Some(hone_types::time::now_ms()),
        previous: vec![],
        revision: 0,
        source: "learner".into(),
        updated_at: 0,
    };
    assert!(store
        .change_deployment(&canary, None, &[], &[], None, hone_types::time::now_ms())
        .unwrap());
    for replica in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while canary_of(replica).await.as_deref() != Some(v2.as_str()) {
            assert!(Instant::now() < deadline, "a replica never followed the deployment");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // The same episode lands on the same version on either replica.
    let mut versions = HashMap::new();
    for i in 0..24 {
        let episode = format!("ticket-{i}");
        let mut seen = Vec::new();
        for replica in [&a, &b, &a] {
            let response = http
                .post(replica.url("/v1/chat/completions"))
                .header("X-Hone-Episode", &episode)
                .json(&chat("assistant", &format!("question {i}")))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            seen.push(response.headers()["x-hone-version"].to_str().unwrap().to_owned());
        }
        assert!(
            seen.iter().all(|v| *v == seen[0]),
            "episode {episode} split across versions: {seen:?}"
        );
        versions.insert(episode, seen[0].clone());
    }
    let on_v2 = versions.values().filter(|v| **v == v2.as_str()).count();
    assert!((4..=20).contains(&on_v2), "a 50% canary got {on_v2} of 24 episodes");

    // Feedback sent to the other replica, right after the answer, reaches
    // the episode; it is visible through either replica.
    let response = http
        .post(a.url("/v1/chat/completions"))
        .json(&chat("assistant", "fresh question"))
        .send()
        .await
        .unwrap();
    let call = response.headers()["x-hone-call"].to_str().unwrap().to_owned();
    let episode = response.headers()["x-hone-episode"].to_str().unwrap().to_owned();
    let feedback = http
        .post(b.url("/v1/feedback"))
        .json(&serde_json::json!({"call_id": call, "name": "rating", "value": 0.9}))
        .send()
        .await
        .unwrap();
    assert_eq!(feedback.status(), 200, "{}", feedback.text().await.unwrap());
    let shown = crate::support::get_json(&a.url(&format!("/v1/episodes/{episode}"))).await;
    assert_eq!(shown["signals"][0]["name"], "rating", "{shown}");
    // An episode that exists nowhere is still refused, after the wait.
    let missing = http
        .post(b.url("/v1/feedback"))
        .json(&serde_json::json!({"episode_id": "never-served", "name": "resolved", "value": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_delivered_call_is_lost_through_a_replica_kill_a_database_restart_and_a_30_s_outage() {
    let dir = tempfile::tempdir().unwrap();
    // Its own server: this test stops and restarts it.
    let mut server = match hone_store::LocalPostgres::create(&dir.path().join("pg")) {
        Ok(server) => server,
        Err(hone_store::LocalPostgresError::NotInstalled) if std::env::var_os("HONE_REQUIRE_POSTGRES").is_none() => {
            eprintln!("SKIPPED: PostgreSQL is not installed here (Debian's `postgresql`)");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let url = server.create_database("hone").unwrap();
    let upstream = FakeUpstream::start().await;
    let text = on_postgres(&url, &config(&upstream));
    let replicas = [Hone::start(&text), Hone::start(&text)];
    let urls: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(
        replicas.iter().map(|r| r.url("/v1/chat/completions")).collect(),
    ));
    let mut replicas = replicas;
    let delivered = Arc::new(Mutex::new(HashSet::<String>::new()));
    let refused = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for worker in 0..8 {
        let (urls, delivered, refused, stop) = (urls.clone(), delivered.clone(), refused.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let url = urls.lock().unwrap()[(worker + i) % 2].clone();
                let Ok(response) = http
                    .post(&url)
                    .json(&chat("assistant", &format!("w{worker} c{i}")))
                    .send()
                    .await
                else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                if response.status() != 200 {
                    *refused.lock().unwrap() += 1;
                    continue;
                }
                let call = response.headers()["x-hone-call"].to_str().unwrap().to_owned();
                if response.text().await.is_ok() {
                    delivered.lock().unwrap().insert(call);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    let count = |d: &Arc<Mutex<HashSet<String>>>| d.lock().unwrap().len();
    let began = Instant::now();
    let say = |what: &str| eprintln!("[{:5.1}s] {what}", began.elapsed().as_secs_f64());
    let pause = |ms| tokio::time::sleep(Duration::from_millis(ms));

    pause(1500).await;
    // 1. kill -9 a replica under load, start it again on its data directory.
    say("kill -9 replica 0");
    replicas[0].kill9();
    let killed_at = count(&delivered);
    pause(500).await;
    say("restart replica 0");
    replicas[0].restart();
    urls.lock().unwrap()[0] = replicas[0].url("/v1/chat/completions");
    pause(1500).await;
    // 2. Restart the database.
    say("restart the database");
    server.stop();
    server.start().unwrap();
    say("database back");
    let restarted_at = count(&delivered);
    pause(1500).await;
    // 3. Stop the database for 30 seconds; the replicas keep answering.
    say("stop the database for 30 s");
    server.stop();
    let outage_from = count(&delivered);
    pause(
        std::env::var("HONE_TEST_OUTAGE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30_000),
    )
    .await;
    let outage_to = count(&delivered);
    say("start the database");
    server.start().unwrap();
    pause(1500).await;
    say("stop the load");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    say("wait for the replicas' journals");
    for replica in &replicas {
        replica.wait_caught_up();
    }
    say("count");

    let delivered = delivered.lock().unwrap().clone();
    let store = hone_test_support::connect(&url, 2).unwrap();
    let missing: Vec<_> = delivered
        .iter()
        .filter(|id| store.call(hone_types::CallId::parse(id).unwrap()).unwrap().is_none())
        .collect();
    let stored = store.call_count().unwrap();
    eprintln!(
        "replicas: {} calls delivered ({} before the kill, {} by the restart, {} during the 30 s outage), {} refused, {} in the store, {} missing",
        delivered.len(),
        killed_at,
        restarted_at,
        outage_to - outage_from,
        refused.lock().unwrap(),
        stored,
        missing.len()
    );
    assert!(
        outage_to - outage_from > 100,
        "the replicas must keep answering while the database is down"
    );
    assert!(
        missing.is_empty(),
        "{} of {} delivered calls are missing: {:?}",
        missing.len(),
        delivered.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(stored >= delivered.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hone_store_migrate_moves_a_served_sqlite_store_to_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let Some(db) = database(&dir.path().join("pg")) else {
        return;
    };
    let upstream = FakeUpstream::start().await;
    let mut sqlite = Hone::start(&config(&upstream));
    let http = client();
    let mut calls = Vec::new();
    for i in 0..5 {
        let response = http
            .post(sqlite.url("/v1/chat/completions"))
            .json(&chat("assistant", &format!("q{i}")))
            .send()
            .await
            .unwrap();
        calls.push(response.headers()["x-hone-call"].to_str().unwrap().to_owned());
    }
    let feedback = http
        .post(sqlite.url("/v1/feedback"))
        .json(&serde_json::json!({"call_id": calls[0], "name": "rating", "value": 0.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(feedback.status(), 200);
    sqlite.wait_caught_up();
    assert!(sqlite.terminate().success());

    let migrate = |to: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hone"))
            .args(["store", "migrate", "--from"])
            .arg(format!("sqlite://{}", sqlite.db_path().display()))
            .args(["--to", to])
            .output()
            .unwrap()
    };
    let out = migrate(&db.url);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("every count and content hash matches"), "{stderr}");
    let calls_row = stdout.lines().find(|l| l.starts_with("calls")).unwrap();
    assert_eq!(
        calls_row.split_whitespace().take(3).collect::<Vec<_>>(),
        ["calls", "5", "5"]
    );
    // A second run refuses the now non-empty target and changes nothing.
    let again = migrate(&db.url);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));

    // A replica on PostgreSQL serves the migrated episodes.
    let pg = Hone::start(&on_postgres(&db.url, &config(&upstream)));
    let episodes = crate::support::get_json(&pg.url("/v1/episodes?limit=10")).await;
    assert_eq!(episodes["data"].as_array().unwrap().len(), 5, "{episodes}");
    let store = hone_test_support::connect(&db.url, 2).unwrap();
    for call in &calls {
        assert!(store.call(hone_types::CallId::parse(call).unwrap()).unwrap().is_some());
    }
}

/// The S3-compatible server of a test; `None` where moto is not installed
/// and `HONE_REQUIRE_S3` is not set.
fn object_storage() -> Option<hone_test_support::LocalS3> {
    if !hone_test_support::LocalS3::available() {
        assert!(
            std::env::var("HONE_REQUIRE_S3").is_err(),
            "HONE_REQUIRE_S3 is set but moto's S3 server is not installed (pip install 'moto[server]')"
        );
        eprintln!("SKIPPED: moto's S3 server is not installed (pip install 'moto[server]')");
        return None;
    }
    Some(hone_test_support::LocalS3::start().unwrap())
}

/// The first token's logprob of a seeded answer of `replica`, and the
/// version that answered.
async fn first_logprob(replica: &Hone) -> (f64, String) {
    let response = client()
        .post(replica.url("/v1/chat/completions"))
        .json(&serde_json::json!({
            "model": "assistant", "seed": 5, "max_tokens": 4,
            "messages": [{"role": "user", "content": "hello there"}]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", replica.log());
    let version = response.headers()["x-hone-version"].to_str().unwrap().to_owned();
    let body: serde_json::Value = response.json().await.unwrap();
    (body["choices"][0]["token_logprobs"][0].as_f64().unwrap(), version)
}

/// The base checkpoint and the adapters live in object
/// storage (S3's wire format, moto's server). Two replicas with their own
/// data directories fetch the checkpoint a version names by URL at start;
/// when the learner deploys a version naming an adapter published there,
/// each replica fetches it on first use — byte for byte — and both answer
/// alike, differently from the base. `hone artefacts` pushes, lists and
/// pulls (for a vLLM host) the same store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_serves_the_adapter_a_deployed_version_names_from_object_storage() {
    let dir = tempfile::tempdir().unwrap();
    let Some(db) = database(&dir.path().join("pg")) else {
        return;
    };
    let Some(s3) = object_storage() else {
        return;
    };
    s3.create_bucket("hone").unwrap();
    let artefacts = s3.toml("hone", "prod");
    let cli_config = dir.path().join("cli.toml");
    std::fs::write(&cli_config, &artefacts).unwrap();
    let cli = cli_config.to_str().unwrap();

    // A checkpoint and an adapter trained elsewhere, pushed with the CLI.
    let model = dir.path().join("model");
    let model_dir = model.to_str().unwrap();
    hone_cli(&[
        "model", "init", "--arch", "qwen2", "--preset", "tiny", "--seed", "3", "--out", model_dir,
    ]);
    let pushed = hone_cli(&[
        "artefacts",
        "push",
        model_dir,
        "--to",
        "s3://hone/models/tiny",
        "-c",
        cli,
    ]);
    assert!(pushed.starts_with("s3://hone/models/tiny\tsha256 "), "{pushed}");
    let reference = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/reference/adapters/qwen2"
    ));
    let pushed = hone_cli(&[
        "artefacts",
        "push",
        reference.to_str().unwrap(),
        "--name",
        "tuned",
        "-c",
        cli,
    ]);
    assert!(pushed.starts_with("s3://hone/prod/adapters/tuned\tsha256 "), "{pushed}");
    let listed = hone_cli(&["artefacts", "list", "-c", cli]);
    assert!(listed.lines().any(|l| l.starts_with("tuned ")), "{listed}");

    let text = on_postgres(
        &db.url,
        &format!(
            "{artefacts}[providers.local]\ntype = \"local\"\n\
             [agents.assistant.versions.v1]\nprovider = {{ type = \"local\", model = \"s3://hone/models/tiny\" }}\n\
             temperature = 1.0\n[agents.assistant.deployment]\nchampion = \"v1\"\n"
        ),
    );
    let a = Hone::start(&text);
    let b = Hone::start(&text);
    a.wait_caught_up();
    b.wait_caught_up();
    let (base_a, _) = first_logprob(&a).await;
    let (base_b, _) = first_logprob(&b).await;
    assert_eq!(base_a, base_b, "two replicas of one checkpoint answer alike");
    for replica in [&a, &b] {
        let cached: Vec<_> = std::fs::read_dir(replica.dir.join("data/models")).unwrap().collect();
        assert_eq!(cached.len(), 1, "each replica keeps its own copy of the checkpoint");
        assert!(!replica.dir.join("data/adapters/tuned").exists());
    }

    // The learner deploys a version naming the published adapter.
    let store = hone_test_support::connect(&db.url, 2).unwrap();
    let v1 = version_labelled(&store, "v1");
    let mut spec = store.version(&v1).unwrap().unwrap().spec;
    spec.routes[0].adapter = Some("tuned".into());
    let v2 = spec.id();
    store
        .upsert_versions(&[hone_types::VersionRecord {
            id: v2.clone(),
            agent: "assistant".into(),
            label: None,
            spec,
            parent: Some(v1.clone()),
            created_by: "sft".into(),
            created_at: hone_types::time::now_ms(),
        }])
        .unwrap();
    let promoted = Deployment {
        agent: "assistant".into(),
        champion: v2.clone(),
        canary: None,
        canary_share: 0.0,
        canary_since: None,
        previous: vec![v1.clone()],
        revision: 0,
        source: "learner".into(),
        updated_at: 0,
    };
    assert!(store
        .change_deployment(&promoted, None, &[], &[], None, hone_types::time::now_ms())
        .unwrap());
    let mut tuned = Vec::new();
    for replica in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (logprob, version) = first_logprob(replica).await;
            if version == v2.as_str() {
                tuned.push(logprob);
                break;
            }
            assert!(Instant::now() < deadline, "a replica never served the deployed version");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for file in ["adapter_config.json", "adapter_model.safetensors"] {
            assert_eq!(
                std::fs::read(replica.dir.join("data/adapters/tuned").join(file)).unwrap(),
                std::fs::read(reference.join(file)).unwrap(),
                "{file} as the replica fetched it"
            );
        }
        let loaded = crate::support::get_json(&replica.url("/admin/adapters")).await;
        assert_eq!(loaded["data"][0]["name"], "tuned", "{loaded}");
    }
    assert_eq!(tuned[0], tuned[1], "both replicas apply the same adapter");
    assert_ne!(tuned[0], base_a, "the adapter changes the distribution");

    // A vLLM host without a gateway pulls the same bytes.
    let pulled = dir.path().join("vllm-adapters/tuned");
    hone_cli(&[
        "artefacts",
        "pull",
        "tuned",
        "--to",
        pulled.to_str().unwrap(),
        "-c",
        cli,
    ]);
    assert_eq!(
        std::fs::read(pulled.join("adapter_model.safetensors")).unwrap(),
        std::fs::read(reference.join("adapter_model.safetensors")).unwrap()
    );
}
