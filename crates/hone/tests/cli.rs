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
