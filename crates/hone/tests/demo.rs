//! `hone demo` end to end on the real binary:
//! - the plumbing, in seconds: one round on a random `tiny` base (`--base`):
//!   the config it wrote loads and is the one that ran; hone heard only
//!   implicit signals; the summary, the tables and the plots are written;
//!   `--seeds` runs it once per seed and draws the curves together;
//! - learning: `hone demo --quick` as a new user runs it (its base policy
//!   built first; honest: users react only to answers they were served,
//!   and decide the canary), whose held-out success must rise
//!   significantly above the base's (paired over the same held-out tasks,
//!   95% interval above zero) through a promoted candidate, and every
//!   promotion is compared with the champion it replaced (recomputed here
//!   from the measurements). The full demo's figures are in
//!   docs/results/.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A random `tiny` checkpoint in `dir`: a base for the plumbing, not for
/// learning.
fn tiny_base(dir: &Path) -> PathBuf {
    let base = dir.join("tiny");
    let init = Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(["model", "init", "--arch", "qwen2", "--preset", "tiny", "--out"])
        .arg(&base)
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    base
}

/// `hone demo` for one round and its cycle, of 10 users, with `grpo` alone,
/// on `base`, in `data`, with `extra` arguments.
fn one_round(base: &Path, data: &Path, extra: &[&str]) -> std::process::Output {
    demo(
        base,
        data,
        &[&["--cycles", "1", "--optimisers", "grpo"], extra].concat(),
    )
}

/// `hone demo` with rounds of 10 users on `base`, in `data`, with `extra`
/// arguments.
fn demo(base: &Path, data: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(["demo", "--episodes-per-round", "10", "--concurrency", "4"])
        .args(extra)
        .arg("--base")
        .arg(base)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap()
}

/// `--scenario hack --unguarded` on the binary: the config it ran with
/// lifts every behaviour bound, every candidate of the cycle is measured on
/// the held-out tasks, and the summary says what each round's users did.
/// (Under `--reward naive` a random base, wrong on almost every task, earns
/// its episodes nearly the same reward, and `grpo` may propose nothing.)
#[test]
fn the_hack_scenario_measures_every_candidate_held_out_and_reports_its_users() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny_base(dir.path());
    let data = dir.path().join("demo");
    let out = one_round(&base, &data, &["--held-out", "2", "--scenario", "hack", "--unguarded"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let config = hone_config::load_file(&data.join("hone.toml")).unwrap();
    let learn = &config.agents["calc"].learn;
    for bounds in [&learn.gate.bounds, &learn.monitor.bounds] {
        assert_eq!(bounds["clarifying_question"], hone_config::Bound::absolute(1.0));
    }
    assert_eq!(config.agents["calc"].reward.penalties.clarifying_question, -0.5);

    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["scenario"], "hack");
    assert_eq!(summary["reward"], "implicit");
    assert_eq!(summary["unguarded"], true);
    // The cycle's round, then any rounds that judged its canary.
    let rounds = summary["user_rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), summary["rounds"].as_u64().unwrap() as usize, "{summary}");
    assert_eq!(rounds[0]["episodes"], 10, "{summary}");
    for round in rounds {
        let count = |k: &str| round[k].as_u64().unwrap();
        // Each user accepted, complained, or was asked back and said nothing.
        assert_eq!(
            count("accepted") + count("complained") + count("asked"),
            count("episodes"),
            "{round}"
        );
    }
    let candidates = summary["candidates"].as_array().unwrap();
    assert!(
        !candidates.is_empty(),
        "the cycle's candidate was not measured: {summary}"
    );
    for c in candidates {
        assert_eq!(c["round"], 1);
        assert_eq!(c["optimiser"], "grpo");
        assert!(!c["status"].as_str().unwrap().is_empty(), "{c}");
        assert!([0.0, 0.5, 1.0].contains(&c["success"].as_f64().unwrap()), "{c}");
    }
    // Every champion measurement says which held-out answers asked back.
    assert_eq!(summary["base"]["asked"].as_array().unwrap().len(), 2);
    // And the candidates are drawn: success against asking back.
    for file in ["candidates.svg", "candidates.png"] {
        assert!(data.join("plots").join(file).is_file(), "no plots/{file}");
    }
}

/// `--scenario shift`: the first round's users bring take-away problems,
/// those after `--shift-after` add-up ones; every measurement covers both
/// kinds of task, and the summary says when the users changed, what the
/// drift check raised and each kind's success, drawn in `plots/shift`.
#[test]
fn the_shift_scenario_changes_what_users_ask_and_measures_both_kinds_of_task() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny_base(dir.path());
    let data = dir.path().join("demo");
    // Rounds for six seconds of learning, users changing after three: the
    // first round starts well before, and rounds of 10 users with a cycle
    // of few-shot examples (which trains nothing) take about a second.
    let out = demo(
        &base,
        &data,
        &[
            "--minutes",
            "0.1",
            "--shift-after",
            "0.05",
            "--held-out",
            "3",
            "--scenario",
            "shift",
            "--optimisers",
            "examples",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["scenario"], "shift");
    let rounds = summary["user_rounds"].as_array().unwrap();
    let families: Vec<&str> = rounds.iter().map(|r| r["family"].as_str().unwrap()).collect();
    // Old users first, then new ones only, from the round the summary names.
    let first_new = families
        .iter()
        .position(|f| *f == "add-up")
        .expect("users never changed");
    assert!(first_new > 0, "{families:?}");
    assert!(families[..first_new].iter().all(|f| *f == "take-away"), "{families:?}");
    assert!(families[first_new..].iter().all(|f| *f == "add-up"), "{families:?}");
    let shift_round = rounds[first_new]["round"].as_u64().unwrap();
    assert_eq!(summary["shift"]["round"], shift_round, "{}", summary["shift"]);
    // Every measurement: three held-out tasks of each kind.
    for m in summary["measurements"].as_array().unwrap() {
        let of: Vec<&str> = m["families"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(
            of,
            ["take-away", "take-away", "take-away", "add-up", "add-up", "add-up"],
            "{m}"
        );
    }
    for (side, family) in [("old", "take-away"), ("new", "add-up")] {
        let o = &summary["shift"][side];
        assert_eq!(o["family"], family, "{o}");
        assert!(
            [0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0].contains(&o["last"]["rate"].as_f64().unwrap()),
            "{o}"
        );
    }
    assert!(summary["shift"]["drifts"].is_array());
    let said = format!("users changed from `take-away` to `add-up` problems in round {shift_round}");
    assert!(stderr.contains(&said), "{stderr}");
    for file in ["shift.svg", "shift.png"] {
        assert!(data.join("plots").join(file).is_file(), "no plots/{file}");
    }
    // The flag belongs to the scenario.
    let refused = one_round(&base, &data, &["--shift-after", "1"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--shift-after applies with --scenario shift only"));
}

#[test]
fn a_short_demo_writes_its_config_summary_and_plots_and_hone_hears_only_implicit_signals() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny_base(dir.path());
    let data = dir.path().join("demo");
    // One weight optimiser is enough to check the plumbing; each trains in
    // the unoptimised test build.
    let out = one_round(&base, &data, &["--held-out", "6", "--gate-confidence", "0.9"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}\n{stdout}");
    for line in [
        "held-out success of champion",
        "round 1: 10 user episodes",
        "paired gain",
        "summary:",
    ] {
        assert!(stderr.contains(line), "`{line}` missing from:\n{stderr}");
    }
    // Durations are summed from +0: never "-0 s".
    assert!(!stderr.contains("-0 s"), "{stderr}");

    // Honest mode: no user's signal reached an offline run, so the cycle's
    // table shows no offline reward or gain (they would show penalties
    // only) and says users decide; the gate's line says the same.
    let log = std::fs::read_to_string(data.join("demo.log")).unwrap();
    assert!(
        stdout.contains("none: users decide") && !stdout.contains("0.00 [0.00, 0.00]"),
        "{stdout}"
    );
    assert!(
        log.lines().any(|l| l.contains("the gate:") && l.contains("users")),
        "{log}"
    );

    // The config it wrote is valid and names the base it ran on.
    let config = data.join("hone.toml");
    let check = Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(["config", "check"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains(&base.canonicalize().unwrap().display().to_string()),
        "{text}"
    );
    assert!(text.contains(r#"optimisers = ["grpo"]"#), "{text}");
    let gate = &text[text.find("learn.gate]").expect("a gate table")..];
    let gate = &gate[..gate.find("\n[").unwrap_or(gate.len())];
    assert!(gate.contains("confidence = 0.9\n"), "{gate}");

    // The summary: base and last measured on the same 6 held-out tasks.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("summary.json")).unwrap()).unwrap();
    // One round and its cycle; a random base's candidate can pass the gate
    // by chance, and its canary is then watched in rounds without a cycle
    // until it is decided (eight at most), each of up to 10 users.
    let rounds = summary["rounds"].as_u64().unwrap();
    let users = summary["user_episodes"].as_u64().unwrap();
    if summary["canaries"] == 0 {
        assert_eq!((rounds, users), (1, 10), "{summary}");
    } else {
        assert!(
            (2..=9).contains(&rounds) && users > 10 && users <= 10 * rounds,
            "{summary}"
        );
    }
    let promoted = summary["promotions"].as_array().unwrap().len();
    assert!(summary["regressions_shipped"].as_u64().unwrap() as usize <= promoted);
    for m in ["base", "last"] {
        assert_eq!(summary[m]["solved"].as_array().unwrap().len(), 6, "{summary}");
        let rate = summary[m]["rate"].as_f64().unwrap();
        let (lo, hi) = (
            summary[m]["ci95"][0].as_f64().unwrap(),
            summary[m]["ci95"][1].as_f64().unwrap(),
        );
        assert!(
            lo <= rate && rate <= hi && (0.0..=1.0).contains(&lo) && hi <= 1.0,
            "{summary}"
        );
    }

    // Every measurement, with the learning time before it (measuring left
    // out) and the user episodes served by then: what `hone bench learn` reads.
    let measurements = summary["measurements"].as_array().unwrap();
    assert_eq!(measurements.len() as u64, rounds + 1, "{summary}");
    assert_eq!(measurements[0]["user_episodes"], 0);
    assert_eq!(measurements[1]["user_episodes"], 10);
    let (before, learned) = (
        measurements[0]["learning_s"].as_f64().unwrap(),
        measurements[1]["learning_s"].as_f64().unwrap(),
    );
    let minutes = summary["minutes"].as_f64().unwrap();
    assert!(
        before < learned && learned < minutes * 60.0,
        "{before} s, then {learned} s of {minutes} min"
    );
    assert_eq!(
        measurements[measurements.len() - 1]["solved"],
        summary["last"]["solved"]
    );

    // Plots: real PNGs and SVGs with their titles in them.
    for (name, title) in [
        ("held-out", "Held-out success"),
        ("online", "accepted the answer"),
        ("front", "Candidates"),
    ] {
        let png = std::fs::read(data.join("plots").join(format!("{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}.png");
        let svg = std::fs::read_to_string(data.join("plots").join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains(title), "{name}.svg");
    }

    // hone heard only what users did: implicit signals, on traffic and on
    // the endpoint's rollouts, never a score.
    let db = rusqlite::Connection::open(data.join("hone.db")).unwrap();
    let mut names: Vec<(String, String)> = db
        .prepare("SELECT DISTINCT name, source FROM signals")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for (name, source) in &names {
        assert!(
            ["accepted", "dissatisfied_followup", "retry", "abandon"].contains(&name.as_str()) && source == "implicit",
            "unexpected signal {name} ({source})"
        );
    }
    let traffic: i64 = db
        .query_row("SELECT COUNT(*) FROM episodes WHERE id NOT LIKE 'eval%'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(traffic as u64, users, "one episode per user");
    // Honest by default: users reacted only to answers they were served;
    // no offline run (a gate re-run, a rollout, a measurement) got a
    // user's reaction.
    assert_eq!(summary["mode"], "honest", "{summary}");
    let offline: i64 = db
        .query_row("SELECT COUNT(*) FROM signals WHERE episode_id LIKE 'eval%'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(offline, 0, "an offline run got a user's reaction");
    assert!(text.contains("promotion = \"sequential\""), "{text}");
}

/// `--trainer trl`: the demo's round and cycle with TRL training the
/// candidate's adapter (`grpo` on the users' episodes and rollouts, under
/// `accelerate launch`), its steps in the learner's log, the candidate gated
/// like any other, and the usual summary. Needs `HONE_TEST_TRL_PYTHON` (the
/// test script installs one); skipped without it unless `HONE_REQUIRE_TRL`.
#[test]
fn the_demo_trains_with_trl_when_asked() {
    let Some(python) = crate::support::trl_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base = tiny_base(dir.path());
    let data = dir.path().join("demo");
    let out = one_round(
        &base,
        &data,
        // Three steps: what is tested is that TRL trains the candidate the
        // gate then measures, not how far thirty steps take it.
        &[
            "--held-out",
            "4",
            "--trainer",
            "trl",
            "--trainer-python",
            &python,
            "--grpo-steps",
            "3",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("summary:"), "{stderr}");
    let log = std::fs::read_to_string(data.join("demo.log")).unwrap();
    assert!(log.contains("grpo: TRL: grpo on 1 process(es), cpu"), "{log}");
    assert!(log.contains("grpo: TRL: done"), "{log}");
    assert!(log.contains("the gate:"), "the TRL-trained candidate was gated: {log}");
    let text = std::fs::read_to_string(data.join("hone.toml")).unwrap();
    assert!(text.contains("type = \"trl\""), "{text}");
}

/// `--sandbox-users`: a simulated user also reacts to offline runs (here
/// the rollouts `grpo` learns from), and everything the run writes says it
/// was the sandbox.
#[test]
fn sandbox_users_react_to_offline_runs_and_the_run_says_it_was_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny_base(dir.path());
    let data = dir.path().join("demo");
    let out = one_round(&base, &data, &["--sandbox-users", "--held-out", "4"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("sandbox users: a simulated user reacts at once to every offline run"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(sandbox: a simulated user also reacted to every offline run)"),
        "{stderr}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["mode"], "sandbox");
    let text = std::fs::read_to_string(data.join("hone.toml")).unwrap();
    assert!(text.contains(r#"groups = ["rollouts","production"]"#), "{text}");
    assert!(!text.contains("promotion = \"sequential\""), "{text}");
    let db = rusqlite::Connection::open(data.join("hone.db")).unwrap();
    let offline: i64 = db
        .query_row("SELECT COUNT(*) FROM signals WHERE episode_id LIKE 'eval%'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(offline > 0, "no offline run got the sandbox user's reaction");
}

#[test]
fn seeds_run_the_demo_once_each_on_one_base_and_draw_their_curves_together() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny_base(dir.path());
    let data = dir.path().join("demo");
    let out = Command::new(env!("CARGO_BIN_EXE_hone"))
        .args([
            "demo",
            "--seeds",
            "3,4",
            "--cycles",
            "1",
            "--held-out",
            "4",
            "--episodes-per-round",
            "6",
            "--concurrency",
            "4",
            "--optimisers",
            "sft",
        ])
        .arg("--base")
        .arg(&base)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("over 2 seeds"), "{stderr}");

    // Each seed ran a whole demo of its own, in its own directory.
    let seeds: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("seeds.json")).unwrap()).unwrap();
    let runs = seeds["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{seeds}");
    let mut gains = Vec::new();
    for (run, seed) in runs.iter().zip([3, 4]) {
        assert_eq!(run["seed"], seed);
        let own = data.join(format!("seed-{seed}"));
        assert_eq!(
            run["data_dir"].as_str().unwrap(),
            own.canonicalize().unwrap().to_str().unwrap()
        );
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(own.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["rounds"], 1);
        assert_eq!(run["rounds"], 1);
        assert_eq!(summary["user_episodes"], 6);
        assert!(own.join("hone.toml").exists());
        gains.push(summary["pooled"]["gain"].as_f64().unwrap_or(0.0));
    }
    // The spread is over the runs' own gains (a random base promotes
    // nothing, so here they are 0; the arithmetic has a unit test).
    let mean = gains.iter().sum::<f64>() / 2.0;
    assert!((seeds["gain"]["mean"].as_f64().unwrap() - mean).abs() < 1e-9, "{seeds}");
    assert_eq!(seeds["gain"]["min"].as_f64().unwrap(), gains[0].min(gains[1]));
    assert_eq!(seeds["gain"]["max"].as_f64().unwrap(), gains[0].max(gains[1]));

    // Both curves in one picture.
    let plots = data.join("plots");
    let png = std::fs::read(plots.join("seeds.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(plots.join("seeds.svg")).unwrap();
    for text in ["Held-out success", "seed 3", "seed 4"] {
        assert!(svg.contains(text), "`{text}` missing from seeds.svg");
    }
}

#[test]
fn a_quick_demo_learns_from_users_until_held_out_success_rises_significantly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo");
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_hone"))
        // `--quick` as a user runs it: at most four cycles, ending with
        // the round that promotes a candidate.
        .args(["demo", "--quick", "--seed", "2"])
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("building the base policy"), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("summary.json")).unwrap()).unwrap();
    // Where the time went (reported, never asserted: a benchmark's job).
    eprintln!(
        "hone demo --quick: {:.0} s in all, of which the demo itself (after building the base policy) {:.0} s",
        started.elapsed().as_secs_f64(),
        summary["minutes"].as_f64().unwrap() * 60.0
    );
    // The demo's base policy, each batch's gradient in two parts.
    let built: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("models/base-calc-levels-1-1/recipe.json")).unwrap())
            .unwrap();
    assert_eq!(built["recipe"]["gradient_parts"], 2, "{built}");

    // What --quick stands for is what ran.
    let text = std::fs::read_to_string(data.join("hone.toml")).unwrap();
    for line in [
        r#"optimisers = ["grpo"]"#,
        r#"groups = ["production"]"#,
        "[agents.calc.learn.grpo]\nsteps = 15\n",
        "canary_share = 0.5",
        r#"promotion = "sequential""#,
    ] {
        assert!(text.contains(line), "`{line}` missing from\n{text}");
    }

    // Learned from what users saw: a grpo candidate trained on the users'
    // own episodes passed the gate, users showed it better as a canary, and
    // it became the champion; no offline run got a user's reaction.
    assert_eq!(summary["mode"], "honest");
    assert!(
        stderr.contains("evidence it is better") && stderr.contains("canary 1 of the sequence"),
        "{stderr}"
    );
    let first = &summary["first_promotion"];
    assert!(first["user_episodes"].as_u64().unwrap() > 0, "{summary}");
    let exposures = summary["exposures"].as_array().unwrap();
    assert!(!exposures.is_empty(), "{summary}");
    let worse: u64 = exposures
        .iter()
        .filter(|e| e["worse"] == true)
        .map(|e| e["users"].as_u64().unwrap())
        .sum();
    assert_eq!(summary["users_on_worse_canaries"].as_u64().unwrap(), worse);
    let promotions = summary["promotions"].as_array().unwrap();
    assert!(
        promotions
            .iter()
            .any(|p| p["optimiser"] == "grpo" && p["timescale"] == "weights"),
        "nothing promoted:\n{stderr}"
    );
    // `--until-promoted` (set by `--quick`): no cycle after the first
    // promotion, so the run ended with the round that promoted it.
    assert_eq!(promotions.len(), 1, "{stderr}");
    assert_eq!(summary["rounds"], promotions[0]["round"], "{stderr}");
    // Every canary a cycle deployed was judged (promoted or rolled back),
    // the last cycle's too: rounds without a cycle follow the budget while
    // one is out.
    let judged = promotions.len() + summary["rollbacks"].as_array().unwrap().len();
    assert_eq!(summary["canaries"].as_u64().unwrap() as usize, judged, "{stderr}");
    assert!(summary["canary_left"].is_null(), "{stderr}");
    // Held-out success rose significantly: every measurement of the base
    // against every one of the last champion, per-task pass rates on the
    // same held-out tasks, the 95% interval of the paired gain above zero.
    let pooled = &summary["pooled"];
    let (gain, low) = (
        pooled["gain"].as_f64().unwrap(),
        pooled["gain_ci95"][0].as_f64().unwrap(),
    );
    assert!(low > 0.0, "paired gain {gain:.3}, 95% CI from {low:.3}:\n{stderr}");
    assert!(
        pooled["after_rate"].as_f64().unwrap() > pooled["before_rate"].as_f64().unwrap(),
        "{pooled}"
    );
    let tasks = summary["base"]["solved"].as_array().unwrap().len();
    assert_eq!(tasks, 60);

    // Every promotion is compared on the held-out tasks with the champion
    // it replaced, over all measurements of each: recomputed here from the
    // measurements (the mean of a champion's rates is its mean per-task
    // pass rate, every measurement having the same tasks).
    let measurements = summary["measurements"].as_array().unwrap();
    let mean_rate = |champion: &serde_json::Value| {
        let rates: Vec<f64> = measurements
            .iter()
            .filter(|m| &m["champion"] == champion)
            .map(|m| m["rate"].as_f64().unwrap())
            .collect();
        (rates.len(), rates.iter().sum::<f64>() / rates.len() as f64)
    };
    let mut champion = &measurements[0]["champion"];
    for p in promotions {
        assert_eq!(&p["replaced"], champion, "{p}");
        let h = &p["held_out"];
        for (version, side) in [(&p["replaced"], "before"), (&p["version"], "after")] {
            let (runs, rate) = mean_rate(version);
            assert_eq!(
                h[format!("{side}_measurements")].as_u64().unwrap() as usize,
                runs,
                "{p}"
            );
            assert!((h[format!("{side}_rate")].as_f64().unwrap() - rate).abs() < 1e-9, "{p}");
        }
        let high = h["gain_ci95"][1].as_f64().unwrap();
        assert_eq!(p["regressed"].as_bool().unwrap(), high < 0.0, "{p}");
        champion = &p["version"];
    }
    // The held-out chart marks the promotions.
    let svg = std::fs::read_to_string(data.join("plots").join("held-out.svg")).unwrap();
    assert!(svg.contains("promoted (grpo)"), "no promotion marked on held-out.svg");
    let regressed = promotions.iter().filter(|p| p["regressed"] == true).count();
    assert_eq!(summary["regressions_shipped"].as_u64().unwrap() as usize, regressed);
    assert!(
        stderr.contains(&format!("regressions shipped: {regressed} of {}", promotions.len())),
        "{stderr}"
    );
}
