//! `kill -9` of `hone learn AGENT --once` in each step of the cycle, then a
//! restart: every time exactly one consistent outcome — one finished cycle,
//! each candidate stored once, one version per candidate, the canary
//! deployed exactly once (one revision, one `canary` event). And `hone
//! learn cancel`, which ends an open cycle for good.

use crate::support::{story, Hone};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn learn(dir: &Path, pause_at: Option<&str>) -> std::process::Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hone"));
    command
        .args(["learn", "story", "--once", "--config"])
        .arg(dir.join("hone.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("learn.log"))
                .unwrap(),
        );
    if let Some(step) = pause_at {
        command.env("HONE_LEARN_PAUSE_AT", step);
    }
    command.spawn().unwrap()
}

fn query(db: &Path, sql: &str) -> Vec<Vec<String>> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        Ok((0..n)
            .map(|i| match r.get_ref(i).unwrap() {
                rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                _ => String::new(),
            })
            .collect())
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_every_step_of_a_cycle_then_restart_gives_one_outcome() {
    let upstream = story::upstream().await;

    // Traffic recorded by a real `hone serve`, with gold answers as feedback:
    // 48 episodes, so the gate half of the sample (24) has the power to
    // tell `good` from `weak`.
    let seed = tempfile::tempdir().unwrap();
    let text = story::config(
        &upstream,
        "",
        "policy = { type = \"auto\", min_gain = 0.05, max_cost_ratio = 3.0 }",
    );
    let mut hone = Hone::start_in(seed.path(), &text, &[]);
    story::record(&hone, 48).await;
    hone.wait_caught_up();
    assert!(hone.terminate().success());
    drop(hone);

    let mut outcomes = Vec::new();
    for step in [
        "collect", "reward", "datasets", "propose", "evaluate", "gate", "front", "deploy",
    ] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&seed.path().join("data"), &dir.path().join("data"));
        std::fs::write(dir.path().join("hone.toml"), &text).unwrap();
        let db = dir.path().join("data").join("hone.db");

        let mut paused = learn(dir.path(), Some(step));
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let state = query(&db, "SELECT state FROM cycles WHERE agent = 'story'");
            if state.first().is_some_and(|r| r[0] == step) {
                break;
            }
            if let Ok(Some(status)) = paused.try_wait() {
                panic!(
                    "`hone learn` exited ({status}) before reaching {step}:\n{}",
                    std::fs::read_to_string(dir.path().join("learn.log")).unwrap()
                );
            }
            assert!(Instant::now() < deadline, "never reached {step}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        paused.kill().unwrap(); // SIGKILL
        paused.wait().unwrap();

        let status = learn(dir.path(), None).wait().unwrap();
        let log = std::fs::read_to_string(dir.path().join("learn.log")).unwrap();
        assert!(status.success(), "resume after a kill in {step} failed:\n{log}");
        assert!(log.contains(&format!("resuming cycle story-1 at {step}")), "{log}");

        let cycles = query(&db, "SELECT id, state FROM cycles");
        assert_eq!(
            cycles,
            vec![vec!["story-1".to_owned(), "done".to_owned()]],
            "after {step}"
        );
        let candidates = query(&db, "SELECT version_id, status FROM candidates ORDER BY status");
        assert_eq!(candidates.len(), 2, "after {step}: {candidates:?}");
        let versions = query(&db, "SELECT COUNT(*) FROM versions WHERE agent = 'story'");
        assert_eq!(versions[0][0], "3", "after {step}: the champion and one per candidate");
        let deployments = query(
            &db,
            "SELECT revision, json_extract(record, '$.canary') FROM deployments",
        );
        assert_eq!(deployments.len(), 1, "after {step}: {log}");
        assert_eq!(deployments[0][0], "1", "after {step}: deployed exactly once");
        let canaries = query(&db, "SELECT COUNT(*) FROM history WHERE kind = 'canary'");
        assert_eq!(canaries[0][0], "1", "after {step}");
        let statuses: Vec<&str> = candidates.iter().map(|r| r[1].as_str()).collect();
        assert_eq!(statuses, ["canary", "pruned"], "after {step}");
        outcomes.push((deployments[0][1].clone(), candidates));
    }
    // The same outcome whichever step the crash hit.
    assert!(outcomes.windows(2).all(|w| w[0] == w[1]), "{outcomes:#?}");
}

fn hone_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(args)
        .arg("--config")
        .arg(dir.join("hone.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .output()
        .unwrap()
}

/// `hone learn cancel AGENT` ends the open cycle `failed` with the reason,
/// says so in `hone learn status`, refuses when there is nothing to
/// cancel, and the next `hone learn` starts a fresh cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learn_cancel_ends_the_open_cycle_and_the_next_run_starts_afresh() {
    let upstream = story::upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let text = story::config(&upstream, "", "policy = { type = \"manual\" }");
    let mut hone = Hone::start_in(dir.path(), &text, &[]);
    story::record(&hone, 12).await;
    hone.wait_caught_up();
    assert!(hone.terminate().success());
    drop(hone);
    std::fs::write(dir.path().join("hone.toml"), &text).unwrap();
    let db = dir.path().join("data").join("hone.db");

    let mut paused = learn(dir.path(), Some("propose"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while query(&db, "SELECT state FROM cycles WHERE agent = 'story'")
        .first()
        .map(|r| r[0].as_str())
        != Some("propose")
    {
        assert!(Instant::now() < deadline, "never reached propose");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled = hone_in(dir.path(), &["learn", "cancel", "story"]);
    let out = String::from_utf8_lossy(&cancelled.stdout);
    assert!(
        cancelled.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&cancelled.stderr)
    );
    assert!(out.contains("cancelled cycle story-1 of story at propose"), "{out}");
    paused.kill().unwrap();
    paused.wait().unwrap();

    let status = hone_in(dir.path(), &["learn", "status", "story"]);
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(table.contains("failed: cancelled by the operator"), "{table}");
    let again = hone_in(dir.path(), &["learn", "cancel", "story"]);
    assert!(!again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("agent `story` has no open cycle to cancel"), "{said}");
    let unknown = hone_in(dir.path(), &["learn", "cancel", "nobody"]);
    assert!(!unknown.status.success());

    let next = learn(dir.path(), None).wait().unwrap();
    let log = std::fs::read_to_string(dir.path().join("learn.log")).unwrap();
    assert!(next.success(), "{log}");
    assert!(log.contains("cycle story-2 started"), "{log}");
    let cycles = query(&db, "SELECT id, state FROM cycles ORDER BY id");
    assert_eq!(
        cycles,
        vec![
            vec!["story-1".to_owned(), "failed".to_owned()],
            vec!["story-2".to_owned(), "done".to_owned()]
        ]
    );
}

/// After a cycle: `hone front` shows the front and says what it leaves
/// out, `--all` the pruned with why, `--diff` the whole change, `--json`
/// every field; `hone learn status --json` the cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_and_learn_status_show_a_cycle_as_tables_and_json() {
    let upstream = story::upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let text = story::config(&upstream, "", "");
    let mut hone = Hone::start_in(dir.path(), &text, &[]);
    story::record(&hone, 48).await;
    hone.wait_caught_up();
    assert!(hone.terminate().success());
    drop(hone);
    std::fs::write(dir.path().join("hone.toml"), &text).unwrap();
    assert!(learn(dir.path(), None).wait().unwrap().success());
    let stdout = |args: &[&str]| {
        let out = hone_in(dir.path(), args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    let front = stdout(&["front", "story"]);
    assert!(
        front.contains("front of `story`") && front.contains("on_front"),
        "{front}"
    );
    assert!(!front.contains("pruned\u{20}"), "{front}");
    assert!(front.contains("1 more candidates off the front"), "{front}");
    let all = stdout(&["front", "story", "--all"]);
    assert!(all.contains("REASON") && all.contains("pruned"), "{all}");
    let diff = stdout(&["front", "story", "--diff"]);
    assert!(diff.contains("model: up/weak → up/good"), "{diff}");

    let json: serde_json::Value = serde_json::from_str(&stdout(&["front", "story", "--all", "--json"])).unwrap();
    assert_eq!(json["agent"], "story");
    let candidates = json["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 2, "{json}");
    for c in candidates {
        assert!(
            c["version_id"].is_string() && c["diff"].is_string() && c["role"].is_string(),
            "{c}"
        );
        assert!(c["scores"]["target_pass_rate"].is_number(), "{c}");
    }
    assert!(candidates
        .iter()
        .any(|c| c["status"] == "pruned" && c["reason"].is_string()));

    let status: serde_json::Value = serde_json::from_str(&stdout(&["learn", "status", "--json"])).unwrap();
    let agents = status.as_array().unwrap();
    assert_eq!(agents.len(), 1, "{status}");
    assert_eq!(agents[0]["agent"], "story");
    assert_eq!(agents[0]["cycle"]["id"], "story-1");
    assert_eq!(agents[0]["cycle"]["step"], "done");
    assert_eq!(agents[0]["cycle"]["candidates"]["pruned"], 1, "{status}");
}
