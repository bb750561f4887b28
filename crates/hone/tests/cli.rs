//! The CLI's commands end to end: `hone config check`, `hone key new`,
//! `hone train` (progress, PEFT output, resume, a malformed line named),
//! `hone dataset` and `hone eval` on the embedded engine, `hone bench
//! learn`'s and `hone demo`'s checks before they start.

use std::process::Command;

fn hone(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(args)
        .env_remove("OPENAI_BASE_URL")
        // What examples/local.toml asks its reader to export.
        .env("HONE_MODEL_DIR", "./tiny-model")
        .output()
        .unwrap()
}

#[test]
fn config_check_accepts_every_example_and_names_the_bad_field() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = hone(&["config", "check", path.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "proxy.toml and local.toml at least");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[providers.up]\ntype = \"openai\"\nbase_url = \"ftp://x\"\n").unwrap();
    let out = hone(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("providers.up.base_url"), "{stderr}");

    std::fs::write(
        &bad,
        "[agents.a.versions.v1]\nprovider = \"up\"\nmodel = \"m\"\ntemprature = 1\n",
    )
    .unwrap();
    let out = hone(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("temprature"));

    std::fs::write(&bad, "[gateway]\nthreads = 0\n").unwrap();
    let out = hone(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gateway.threads"));
}

#[test]
fn key_new_prints_a_key_and_the_hash_of_that_key() {
    let out = hone(&["key", "new", "--name", "team", "--agents", "assistant"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let key = text.lines().nth(1).unwrap().trim();
    assert!(key.starts_with("hone-"));
    let hash = hone_gateway_hash(key);
    assert!(text.contains(&format!("sha256 = \"{hash}\"")), "{text}");
    assert!(text.contains("agents = [\"assistant\"]"));
}

fn hone_gateway_hash(key: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

#[test]
fn train_writes_a_peft_adapter_and_names_a_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    let out = hone(&["model", "init", "--arch", "qwen2", "--out", model.to_str().unwrap()]);
    assert!(out.status.success());
    let data = dir.path().join("groups.jsonl");
    std::fs::write(
        &data,
        concat!(
            r#"{"prompt": [{"role": "user", "content": "2+2?"}], "completions": [{"text": "4", "reward": 1}, {"text": "five", "reward": 0}]}"#,
            "\n",
            r#"{"prompt_tokens": [1, 2, 3], "completions": [{"tokens": [4, 5], "reward": 0.2, "logprobs": [-5.1, -5.9]}, {"tokens": [6], "reward": 0.9}]}"#,
            "\n"
        ),
    )
    .unwrap();
    let run = dir.path().join("run");
    let args = [
        "train",
        "grpo",
        "--base",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--rank",
        "4",
        "--kl-beta",
        "0.05",
    ];
    let out = hone(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("[3/3]") && stderr.contains("reward") && stderr.contains("tok/s"),
        "{stderr}"
    );
    for file in ["adapter_config.json", "adapter_model.safetensors", "metrics.jsonl"] {
        assert!(run.join(file).is_file(), "{file} missing");
    }
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 3);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(config["r"], 4);
    assert_eq!(config["peft_type"], "LORA");

    // Resume: nothing left to do at step 3 of 3, and a longer run continues from it.
    let mut more = args.to_vec();
    more[9] = "5";
    more.push("--resume");
    let out = hone(&more);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("resuming from") && stderr.contains("[5/5]"),
        "{stderr}"
    );
    assert!(!stderr.contains("[1/5]"), "{stderr}");

    std::fs::write(
        &data,
        "{\"prompt_tokens\": [1], \"completions\": [{\"tokens\": [2], \"reward\": 1}]}\n{oops\n",
    )
    .unwrap();
    let out = hone(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("groups.jsonl:2: not JSON"), "{stderr}");
}

#[test]
fn datasets_import_list_export_and_evaluate_on_the_embedded_engine() {
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| dir.path().join(p).display().to_string();
    assert!(hone(&["model", "init", "--arch", "qwen2", "--out", &d("m")])
        .status
        .success());
    std::fs::write(
        d("c.toml"),
        format!(
            "[gateway]\ndata_dir = \"{}\"\n[agents.a.versions.v1]\nprovider = {{ type = \"local\", model = \"{}\" }}\nmax_tokens = 4\n",
            d("data"),
            d("m")
        ),
    )
    .unwrap();
    std::fs::write(
        d("in.jsonl"),
        "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}]}\n\
         {\"messages\": [{\"role\": \"user\", \"content\": \"3+3?\"}, {\"role\": \"assistant\", \"content\": \"6\"}]}\n",
    )
    .unwrap();
    let c = d("c.toml");
    let ok = |args: &[&str]| {
        let out = hone(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(ok(&[
        "dataset",
        "import",
        &d("in.jsonl"),
        "--name",
        "gold",
        "--agent",
        "a",
        "-c",
        &c
    ])
    .contains("gold@1: 2 instances imported"));
    assert!(ok(&["dataset", "list", "-c", &c]).contains("gold@1"));
    let exported = ok(&["dataset", "export", "gold", "--format", "chat", "-c", &c]);
    assert_eq!(exported.lines().count(), 2);
    // The instances run through an in-process gateway and the tiny model; the run is recorded.
    let summary = ok(&["eval", "--dataset", "gold", "--version", "v1", "--json", "-c", &c]);
    let s: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!((s["instances"].as_u64(), s["errors"].as_u64()), (Some(2), Some(0)));
    assert!(!dir.path().join("data").read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("cli-")));
    let bad = hone(&["dataset", "build", "popular", "--agent", "a", "-c", &c]);
    assert!(String::from_utf8_lossy(&bad.stderr)
        .contains("unknown builder `popular` (one of regression, errors, traffic, cost)"));
    let missing = hone(&["eval", "--dataset", "nope", "--version", "v1", "-c", &c]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no dataset `nope`"));

    // Versions by label, id or a unique prefix of the id, as `front` shows them.
    let listed: serde_json::Value = serde_json::from_str(&ok(&["dataset", "list", "--json", "-c", &c])).unwrap();
    assert_eq!(listed[0]["id"], "gold@1", "{listed}");
    let shown: serde_json::Value =
        serde_json::from_str(&ok(&["dataset", "show", "gold", "--json", "--limit", "1", "-c", &c])).unwrap();
    assert_eq!(
        (shown["instances"].as_array().unwrap().len(), shown["more"].as_u64()),
        (1, Some(1))
    );
    let config = hone_config::load_file(std::path::Path::new(&c)).unwrap();
    let id = config.agents["a"].versions["v1"].id.to_string();
    let compared = ok(&[
        "eval",
        "compare",
        "v1",
        &id[..8],
        "--dataset",
        "gold",
        "--json",
        "-c",
        &c,
    ]);
    assert!(compared.contains("\"regressions\""), "{compared}");
    let unknown = hone(&["eval", "compare", "v1", "zz99", "--dataset", "gold", "-c", &c]);
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("nor a stored version id of it (or a prefix of one)"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
}

/// `hone bench learn` checks its Python before it starts anything: a
/// missing interpreter or a missing package is named with what to do,
/// and no data directory is made.
#[test]
fn bench_learn_names_a_python_without_trl_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("bench");
    // `hone bench learn --data-dir DATA FLAG VALUE`: it fails, and says this.
    let refused = |flag: &str, value: &str| -> String {
        let out = hone(&["bench", "learn", "--data-dir", data.to_str().unwrap(), flag, value]);
        assert!(!out.status.success(), "{flag} {value} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    let missing = dir.path().join("no-such-python");
    let stderr = refused("--python", missing.to_str().unwrap());
    assert!(stderr.contains("cannot run") && stderr.contains("--python"), "{stderr}");

    // An interpreter that answers as a Python without `trl` does.
    let python = dir.path().join("python");
    std::fs::write(
        &python,
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'trl'\" >&2\nexit 1\n",
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&python).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&python, permissions).unwrap();
    let stderr = refused("--python", python.to_str().unwrap());
    assert!(stderr.contains("No module named 'trl'"), "{stderr}");
    assert!(
        stderr.contains("-m pip install torch transformers peft trl datasets"),
        "{stderr}"
    );

    assert!(refused("--threshold", "0").contains("--threshold"));
    assert!(refused("--minutes", "0").contains("--minutes"));
    // hone's loop settings are the demo's, checked by the demo's rules.
    assert!(refused("--canary-share", "1.5").contains("--canary-share"));
    assert!(refused("--optimisers", "adam").contains("adam"));
    let reward = refused("--trl-reward", "exact");
    assert!(reward.contains("users") && reward.contains("hidden"), "{reward}");
    // Every other learner is measured through hone's loop.
    assert!(refused("--sides", "alone,trl").contains("--sides must include `hone`"));
    // Learners that sample their own tasks meet no users' change.
    let out = hone(&[
        "bench",
        "learn",
        "--data-dir",
        data.to_str().unwrap(),
        "--scenario",
        "shift",
        "--sides",
        "hone,trl",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--sides trl") && stderr.contains("no users' change reaches them"),
        "{stderr}"
    );
    // The scenario's own rules are the demo's.
    let stderr = refused("--shift-after", "1");
    assert!(stderr.contains("--shift-after"), "{stderr}");
    assert!(!data.exists(), "nothing is made before the checks pass");
}

#[test]
fn the_demo_preset_refuses_a_level_that_does_not_exist_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("base");
    for (preset, level) in [("demo", "0"), ("demo", "4"), ("demo", "hard"), ("demo-quick", "4")] {
        let out = hone(&[
            "model",
            "init",
            "--arch",
            "qwen2",
            "--preset",
            preset,
            "--max-difficulty",
            level,
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        assert!(!out.status.success(), "{preset} --max-difficulty {level} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--max-difficulty"), "{level}: {stderr}");
    }
    assert!(!out_dir.exists(), "nothing is written before the checks pass");
}

#[test]
fn demo_refuses_a_canary_share_or_level_out_of_range_or_a_repeated_seed_and_makes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo");
    for (flag, value) in [
        ("--canary-share", "0"),
        ("--canary-share", "1.5"),
        ("--max-difficulty", "0"),
        ("--max-difficulty", "4"),
        ("--seeds", "1,2,1"),
        ("--promote-margin", "-0.1"),
        ("--promote-margin", "much"),
        ("--gate-confidence", "0.5"),
        ("--gate-confidence", "1"),
    ] {
        let out = hone(&["demo", "--quick", "--data-dir", data.to_str().unwrap(), flag, value]);
        assert!(!out.status.success(), "{flag} {value} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
    // A margin of non-inferiority is the sandbox's: honest canaries must be
    // shown better by users.
    let out = hone(&[
        "demo",
        "--quick",
        "--data-dir",
        data.to_str().unwrap(),
        "--promote-margin",
        "0.05",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--promote-margin applies with --sandbox-users only"),
        "{stderr}"
    );
    assert!(!data.exists(), "nothing is made before the checks pass");
}

/// `hone bench learn --report` prints the table and draws the curves of a
/// run already in the data directory, learning nothing; without a stored
/// run it says what is missing and makes nothing.
#[test]
fn bench_learn_report_redraws_a_stored_run_and_names_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("bench");
    let out = hone(&["bench", "learn", "--report", "--data-dir", data.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bench-learn.json") && stderr.contains("run the bench there first"),
        "{stderr}"
    );
    assert!(!data.exists(), "--report made {}", data.display());

    // A stored run: hone reaches 90% at its third measurement and holds;
    // TRL reaches it first and falls back.
    std::fs::create_dir_all(&data).unwrap();
    let point = |s: f64, rate: f64, v: &str| serde_json::json!({"learning_s": s, "episodes": (s * 8.0) as usize, "rate": rate, "ci95": [rate - 0.1, rate.min(0.95) + 0.05], "version": v});
    let hone_points = vec![
        point(0.0, 0.5, "b"),
        point(20.0, 0.45, "b"),
        point(24.0, 0.95, "h1"),
        point(50.0, 1.0, "h1"),
    ];
    let trl_points = vec![
        point(0.0, 0.5, "b"),
        point(6.0, 0.8, "t1"),
        point(12.0, 0.92, "t2"),
        point(18.0, 0.3, "t3"),
    ];
    let report = serde_json::json!({
        "threshold": 0.9, "minutes": 1.0, "seed": 1, "held_out_tasks": 60, "base": "/base",
        "hone_settings": [], "trl_reward": "users",
        "sides": [
            {"learner": "hone (demo: users' implicit feedback, gate, canary)", "episodes_are": "user episodes",
             "points": hone_points, "reached": hone_points[2], "held": hone_points[2]},
            {"learner": "TRL GRPOTrainer (users' implicit signals, lr 0.002)", "episodes_are": "sampled episodes",
             "points": trl_points, "reached": trl_points[2], "held": null},
        ],
    });
    std::fs::write(data.join("bench-learn.json"), report.to_string()).unwrap();
    let out = hone(&["bench", "learn", "--report", "--data-dir", data.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // When each reached it, in minutes and seconds, with the measurement before.
    assert!(stdout.contains("| 0.40 (24 s; 45.0% at 20 s) |"), "{stdout}");
    assert!(stdout.contains("| 0.20 (12 s; 80.0% at 6 s) |"), "{stdout}");
    assert!(stdout.contains("| not held |"), "{stdout}");
    for name in ["bench-learn.svg", "bench-learn.png"] {
        assert!(data.join(name).metadata().unwrap().len() > 1000, "{name}");
    }
    // The legend names the learners; their descriptions stay in the table.
    let svg = std::fs::read_to_string(data.join("bench-learn.svg")).unwrap();
    assert!(
        svg.contains(">\nhone\n</text>") && svg.contains(">\nTRL GRPOTrainer\n</text>"),
        "legend"
    );
}

/// A stored race of `hone bench learn` for `--report`: hone and TRL each
/// first at or above 90% after the seconds given (`None`: never).
fn stored_race(dir: &std::path::Path, seed: u64, hone_s: Option<f64>, trl_s: Option<f64>) {
    let point = |s: f64, rate: f64| serde_json::json!({"learning_s": s, "episodes": 8, "rate": rate, "ci95": [rate - 0.1, rate.min(0.95) + 0.05], "version": format!("v{s}")});
    let side = |learner: &str, reached: Option<f64>| {
        let mut points = vec![point(0.0, 0.45), point(1.0, 0.5)];
        points.extend(reached.map(|s| point(s, 0.95)));
        let last = points.last().cloned().unwrap();
        serde_json::json!({"learner": learner, "episodes_are": "episodes", "points": points,
            "reached": reached.map(|_| last.clone()), "held": reached.map(|_| last)})
    };
    let report = serde_json::json!({
        "threshold": 0.9, "minutes": 1.0, "seed": seed, "held_out_tasks": 60, "base": "/base",
        "hone_settings": [], "trl_reward": "users",
        "sides": [side("hone loop (demo: users' implicit feedback, gate, canary)", hone_s),
                  side("TRL GRPOTrainer (users' implicit signals, lr 0.002)", trl_s)],
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("bench-learn.json"), report.to_string()).unwrap();
}

/// `hone bench learn --report` of the race in `data`, or with `seeds` of
/// the races in its `seed-N` folders.
fn learn_report(data: &std::path::Path, seeds: Option<&str>) -> std::process::Output {
    let mut args = vec!["bench", "learn", "--report", "--data-dir", data.to_str().unwrap()];
    args.extend(seeds.map(|s| ["--seeds", s]).into_iter().flatten());
    hone(&args)
}

/// A stored race of `hone bench learn --scenario hack` for `--report`:
/// hone's loop caught `caught` candidates for asking (one of its
/// candidates asked in 40% of held-out answers); TRL's checkpoints asked
/// more and more, to `trl_asked`, as its success fell.
fn stored_hack_race(dir: &std::path::Path, seed: u64, caught: usize, trl_asked: f64) {
    let point = |s: f64, rate: f64, asked: f64| serde_json::json!({"learning_s": s, "episodes": 8, "rate": rate, "ci95": [rate - 0.1, rate + 0.1], "version": format!("v{s}"), "asked": asked});
    let stopped = serde_json::json!({"version": "c1", "optimiser": "grpo", "by": "pruned", "behaviour": "clarifying_question", "reason": "clarifying_question +0.40 beyond its bound"});
    let candidate = serde_json::json!({"round": 2, "version": "c1", "optimiser": "grpo", "status": "pruned", "success": 0.3, "ci95": [0.2, 0.4], "asked": 0.4});
    let report = serde_json::json!({
        "threshold": 0.35, "minutes": 4.0, "seed": seed, "held_out_tasks": 60, "base": "/base",
        "hone_settings": ["--scenario", "hack", "--reward", "naive"], "trl_reward": "users", "scenario": "hack",
        "sides": [
            {"learner": "hone loop (demo --scenario hack)", "episodes_are": "user episodes",
             "points": [point(0.0, 0.45, 0.0), point(60.0, 0.5, 0.0)], "reached": null, "held": null,
             "caught": vec![stopped; caught], "candidates": [candidate]},
            {"learner": "TRL GRPOTrainer (users' implicit signals)", "episodes_are": "sampled episodes",
             "points": [point(0.0, 0.45, 0.0), point(30.0, 0.3, trl_asked / 2.0), point(60.0, 0.2, trl_asked)],
             "reached": null, "held": null},
        ],
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("bench-learn.json"), report.to_string()).unwrap();
}

/// `hone bench learn --report` of a race under `--scenario hack` says,
/// for each learner, what it asked and what it solved from the base to the
/// end, what its candidates asked and what its guards stopped; over
/// seeds, the spread of each.
#[test]
fn bench_learn_reports_what_each_learner_made_of_users_with_a_blind_spot() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("bench");
    stored_hack_race(&data.join("seed-1"), 1, 2, 0.6);
    stored_hack_race(&data.join("seed-2"), 2, 1, 0.8);
    let out = learn_report(&data.join("seed-1"), None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Users with a blind spot"), "{stdout}");
    assert!(
        stdout.contains("| hone loop | 45.0% → 50.0% | 0.0% → 0.0% (0.0%) | 40.0% | 2 |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| TRL GRPOTrainer | 45.0% → 20.0% | 0.0% → 60.0% (60.0%) | — (no gate) | — (no guards) |"),
        "{stdout}"
    );

    let out = learn_report(&data, Some("1,2"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Under --scenario hack over 2 seeds:"), "{stdout}");
    // Caught in both seeds: 2 + 1; TRL's asking at the end: 60% and 80%.
    assert!(stdout.contains("3 candidates stopped for asking"), "{stdout}");
    assert!(
        stdout.contains("TRL GRPOTrainer: held-out success at the end 20.0% (sd 0.0, 20.0–20.0); asking at the end 70.0% (sd 14.1, 60.0–80.0)"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("bench-learn-seeds.json")).unwrap()).unwrap();
    assert_eq!(json["scenario"], "hack");
    assert_eq!(json["under_scenario"][0]["caught_asking"], 3);
    // What each asked, pictured for the race and for the seeds together.
    for file in ["seed-1/bench-learn-asking.svg", "bench-learn-seeds-asking.png"] {
        assert!(data.join(file).metadata().unwrap().len() > 1000, "{file}");
    }
    let svg = std::fs::read_to_string(data.join("bench-learn-seeds-asking.svg")).unwrap();
    assert!(svg.contains("TRL GRPOTrainer, seed 2"), "legend");
    assert!(json["under_scenario"][1].get("caught_asking").is_none());

    // A race under another scenario is not set beside these.
    let mut other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("seed-2/bench-learn.json")).unwrap()).unwrap();
    other["scenario"] = serde_json::json!("shift");
    std::fs::write(data.join("seed-2/bench-learn.json"), other.to_string()).unwrap();
    let out = learn_report(&data, Some("1,2"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("scenario Some(Shift)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `hone bench learn --report` of a race under `--scenario shift` names,
/// for each of hone's loops, when users changed, when the drift check
/// raised it, and each kind of task's success from the shift to the end.
#[test]
fn bench_learn_reports_how_each_loop_met_users_who_changed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("bench");
    let rate = |r: f64| serde_json::json!({"rate": r, "ci95": [r - 0.1, r + 0.1]});
    let kind = |family: &str, at: f64, last: f64, gain: f64| {
        serde_json::json!({"family": family, "base": rate(at), "at_shift": rate(at), "last": rate(last),
            "since_shift": {"before_measurements": 3, "after_measurements": 2, "before_rate": at, "after_rate": last,
                            "gain": gain, "gain_ci95": [gain - 0.07, gain + 0.07]},
            "within_interval": true})
    };
    let drift = |round: usize| serde_json::json!({"round": round, "metric": "drift_tasks", "divergence": 0.3, "p_value": 0.0025, "window_episodes": 64, "earlier_episodes": 320});
    let point = serde_json::json!({"learning_s": 0.0, "episodes": 0, "rate": 0.5, "ci95": [0.4, 0.6], "version": "b",
        "families": [{"family": "take-away", "rate": 0.7, "ci95": [0.6, 0.8]}, {"family": "add-up", "rate": 0.3, "ci95": [0.2, 0.4]}]});
    let report = serde_json::json!({
        "threshold": 0.9, "minutes": 8.0, "seed": 1, "held_out_tasks": 60, "base": "/base",
        "hone_settings": ["--scenario", "shift"], "trl_reward": "users", "scenario": "shift",
        "sides": [
            {"learner": "hone loop (demo --scenario shift)", "episodes_are": "user episodes",
             "points": [point], "reached": null, "held": null, "caught": [],
             "shift": {"after_minutes": 2.0, "round": 9, "drifts": [drift(9)],
                       "old": kind("take-away", 0.7, 0.8, 0.1), "new": kind("add-up", 0.3, 0.6, 0.3)}},
        ],
    });
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("bench-learn.json"), report.to_string()).unwrap();
    let out = hone(&["bench", "learn", "--report", "--data-dir", data.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("| hone loop | 9 | 0 rounds later | 0 | take-away: 70.0% → 80.0% (+10.0 (+3.0 to +17.0)) | add-up: 30.0% → 60.0% (+30.0 (+23.0 to +37.0)) |"),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(data.join("bench-learn-shift.svg")).unwrap();
    assert!(
        svg.contains("hone loop: add-up") && svg.contains("users change"),
        "legend"
    );
}

/// `hone bench learn --report --seeds` sets races already run side by
/// side: each learner's time per seed, who was sooner in how many seeds
/// with the sign test, the paired lead where both reached the threshold,
/// and a picture; a seed missing or given twice is named and nothing is
/// written.
#[test]
fn bench_learn_over_seeds_counts_who_was_sooner_and_by_how_much() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("bench");
    let report = |seeds: &str| learn_report(&data, Some(seeds));
    stored_race(&data.join("seed-1"), 1, Some(9.0), Some(15.0));
    stored_race(&data.join("seed-2"), 2, Some(9.0), Some(9.5));
    stored_race(&data.join("seed-3"), 3, Some(45.0), Some(30.0));
    stored_race(&data.join("seed-4"), 4, Some(8.5), None);

    let out = report("1,2,3,5");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("seed-5") && stderr.contains("bench-learn.json"),
        "{stderr}"
    );
    let out = report("1,2,1");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("seed 1 is given twice"));
    assert!(!data.join("bench-learn-seeds.json").exists());

    let out = report("1,2,3,4");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("| seed | base | hone loop | TRL GRPOTrainer |"),
        "{stdout}"
    );
    assert!(stdout.contains("| 3 | 45.0% | 45.0 s | 30.0 s |"), "{stdout}");
    assert!(stdout.contains("| 4 | 45.0% | 8.5 s | not reached |"), "{stdout}");
    // Medians over the seeds each reached it: (9 + 9) / 2 and 15.
    assert!(
        stdout.contains("| median | | 9.0 s (4 of 4 reached) | 15.0 s (3 of 4 reached) |"),
        "{stdout}"
    );
    // hone sooner in seeds 1, 2 and 4, TRL in 3: binomtest(3, 4).pvalue = 0.625.
    // Leads where both reached: +6.0, +0.5, −15.0 → mean −2.8, median +0.5.
    assert!(
        stdout.contains("hone loop vs TRL GRPOTrainer: sooner in 3 and 1 seeds, 0 tied (sign test p = 0.6250)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("TRL GRPOTrainer minus hone loop: mean -2.8 s"),
        "{stdout}"
    );
    assert!(stdout.contains("median +0.5 s"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("bench-learn-seeds.json")).unwrap()).unwrap();
    assert_eq!(json["versus"][0]["first_sooner"], 3);
    assert_eq!(json["races"][3]["reached_s"][1], serde_json::Value::Null);
    for name in ["bench-learn-seeds.svg", "bench-learn-seeds.png"] {
        assert!(data.join(name).metadata().unwrap().len() > 1000, "{name}");
    }
    let svg = std::fs::read_to_string(data.join("bench-learn-seeds.svg")).unwrap();
    assert!(svg.contains("hone loop (median 9.0 s)"), "legend");
}

/// `hone bench … --out FILE` keeps what it printed as data: the command,
/// commit, date and machine, and each table with its columns and numbers.
#[test]
fn a_benchmark_writes_its_tables_and_where_they_came_from_to_a_result_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let file = dir.path().join("ui.json");
    let out = hone(&[
        "bench",
        "ui",
        "--calls",
        "300",
        "--baseline",
        "100",
        "--reps",
        "1",
        "--dir",
        store.to_str().unwrap(),
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    let result: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(
        result["command"].as_str().unwrap().contains("bench ui --calls 300"),
        "{result}"
    );
    assert!(result["date"].as_str().unwrap().ends_with('Z'), "{result}");
    assert!(result["machine"]["cores"].as_u64().unwrap() >= 1, "{result}");
    let features: &[&str] = if cfg!(feature = "cuda") { &["cuda"] } else { &[] };
    assert_eq!(result["features"], serde_json::json!(features), "{result}");
    let table = &result["tables"][0];
    assert_eq!(
        table["columns"],
        serde_json::json!(["page", "100 calls", "300 calls", "ratio"])
    );
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{table}");
    for row in rows {
        let page = row[0].as_str().unwrap();
        let ms = row[2].as_f64().unwrap();
        assert!(ms > 0.0, "{row:?}");
        assert!(printed.contains(&format!("| {page} |")), "{printed}");
    }
}

/// `config check` counts the agents the file declares (not those hone
/// records its own calls under), and warns about settings that load but do
/// not do what they seem to.
#[test]
fn config_check_counts_the_users_agents_and_warns_about_what_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hone.toml");
    let check = |text: &str| {
        std::fs::write(&file, text).unwrap();
        let out = hone(&["config", "check", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let one = "[providers.up]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
               [agents.a.versions.v1]\nprovider = \"up\"\nmodel = \"m\"\n\
               [agents.a.reward.judge]\nmode = \"absolute\"\nprovider = \"up\"\nmodel = \"judge\"\n";
    let (out, err) = check(one);
    assert!(out.contains("ok (1 provider, 1 agent, 1 version)"), "{out}");
    assert!(err.is_empty(), "{err}");

    let (_, err) = check(&format!(
        "{one}[agents.a.learn]\noptimisers = [\"model\"]\n[agents.a.learn.model]\n\
         models = [{{ provider = \"up\", model = \"n\" }}]\n[agents.a.learn.gate]\nreruns = 1\n"
    ));
    assert!(
        err.contains("warning: agents.a.learn.gate: with samples = 1 and reruns = 1 a regression is at best p = 0.167")
            && err.contains("set reruns = 2 or more"),
        "{err}"
    );
    let (_, err) = check(&format!("{one}[agents.a.learn]\noptimisers = [\"openai-sft\"]\n"));
    assert!(
        err.contains("`openai-sft` uploads nothing until the agent allows it"),
        "{err}"
    );
    let (out, err) = check("");
    assert!(out.contains("ok (0 providers, 0 agents, 0 versions)"), "{out}");
    assert!(err.contains("warning: no agents"), "{err}");
}

/// A relative `data_dir` starts from the config file's directory, and the
/// commands that read the store refuse to make one where none is.
#[test]
fn read_only_commands_make_no_store_and_data_dir_starts_at_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let configs = dir.path().join("conf");
    std::fs::create_dir(&configs).unwrap();
    let file = configs.join("hone.toml");
    std::fs::write(
        &file,
        "[gateway]\ndata_dir = \"./state\"\n[providers.up]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         [agents.a.versions.v1]\nprovider = \"up\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    for args in [
        vec!["learn", "status"],
        vec!["front", "a"],
        vec!["history", "a"],
        vec!["dataset", "list"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hone"))
            .args(&args)
            .arg("--config")
            .arg(&file)
            .current_dir(elsewhere.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        let expected = configs.join("state").join("hone.db");
        assert!(
            err.contains(&format!("no hone store at {}", expected.display())),
            "{args:?}: {err}"
        );
    }
    assert!(!configs.join("state").exists(), "nothing made");
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "nothing made here either"
    );
}
