//! The reward model's numerical parts against `reference/reward_model.py`
//! (Python's standard library, other methods than hone's): the logistic
//! head's fit, its held-out AUC, rank correlation and calibration error;
//! and the split that keeps an episode on one side only.

use hone_learn::scoring::reward_model::{auc, calibration_error, held_out, spearman, Head, CALIBRATION_BINS};
use serde_json::Value;

fn reference() -> Value {
    serde_json::from_str(include_str!("reference/reward_model.json")).unwrap()
}

fn rows(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
        .collect()
}

fn bools(v: &Value) -> Vec<bool> {
    v.as_array().unwrap().iter().map(|x| x.as_bool().unwrap()).collect()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn near(ours: f64, theirs: f64, tolerance: f64) -> bool {
    (ours - theirs).abs() <= tolerance * theirs.abs().max(1.0)
}

#[test]
fn the_head_and_its_quality_match_an_independent_implementation() {
    let r = reference();
    let (train, test) = (&r["train"], &r["test"]);
    let head = Head::fit(
        &rows(&train["x"]),
        &bools(&train["passed"]),
        &numbers(&train["rewards"]),
        r["l2"].as_f64().unwrap(),
    )
    .expect("two classes");
    // Newton here, gradient descent there: the same optimum.
    assert!(near(head.bias, r["bias"].as_f64().unwrap(), 1e-7), "{head:?}");
    for (ours, theirs) in head.weights.iter().zip(numbers(&r["weights"])) {
        assert!(near(*ours, theirs, 1e-7), "{head:?} vs {}", r["weights"]);
    }
    let x = rows(&test["x"]);
    let probabilities: Vec<f64> = x.iter().map(|x| head.probability(x)).collect();
    for (ours, theirs) in probabilities.iter().zip(numbers(&r["probabilities"])) {
        assert!(near(*ours, theirs, 1e-7), "{ours} vs {theirs}");
    }
    let passed = bools(&test["passed"]);
    let predicted: Vec<f64> = x.iter().map(|x| head.reward(x)).collect();
    assert!(near(
        auc(&probabilities, &passed).unwrap(),
        r["auc"].as_f64().unwrap(),
        1e-12
    ));
    assert!(near(
        spearman(&predicted, &numbers(&test["rewards"])).unwrap(),
        r["spearman"].as_f64().unwrap(),
        1e-12
    ));
    assert!(near(
        calibration_error(&probabilities, &passed, CALIBRATION_BINS).unwrap(),
        r["calibration_error"].as_f64().unwrap(),
        1e-9
    ));
    // Ties count half in the AUC, and take their average rank.
    let tied = &r["tied"];
    let scores = numbers(&tied["scores"]);
    assert!(near(
        auc(&scores, &bools(&tied["labels"])).unwrap(),
        tied["auc"].as_f64().unwrap(),
        1e-12
    ));
    let order: Vec<f64> = (0..scores.len()).map(|i| i as f64).collect();
    assert!(near(
        spearman(&scores, &order).unwrap(),
        tied["spearman_with_ranks"].as_f64().unwrap(),
        1e-12
    ));
}

#[test]
fn nothing_is_fitted_or_measured_without_two_classes_and_an_episode_is_held_out_by_its_id_alone() {
    let x = vec![vec![1.0, 2.0], vec![2.0, 1.0], vec![3.0, 0.0]];
    assert!(Head::fit(&x, &[true, true, true], &[1.0, 1.0, 1.0], 1.0).is_none());
    assert!(Head::fit(&x[..1], &[true], &[1.0], 1.0).is_none());
    assert_eq!(auc(&[0.2, 0.9], &[true, true]), None);
    assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
    assert_eq!(calibration_error(&[], &[], 10), None);
    // The same id is on the same side every time; about the share asked for is held out.
    let ids: Vec<hone_types::EpisodeId> = (0..2000).map(|_| hone_types::EpisodeId::new_v7()).collect();
    let out: Vec<bool> = ids.iter().map(|id| held_out(id, 0.25)).collect();
    assert_eq!(out, ids.iter().map(|id| held_out(id, 0.25)).collect::<Vec<_>>());
    let share = out.iter().filter(|o| **o).count() as f64 / ids.len() as f64;
    assert!((0.2..0.3).contains(&share), "{share}");
}

/// The gate of `agent`'s cycle `cycle` scored its re-runs with the reward
/// model standing in for users.
fn gate_scored_by_the_reward_model(w: &crate::support::World, agent: &str, cycle: &str) {
    use hone_store::CycleStore;
    let gate = w
        .store
        .history(agent, 200)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "gate" && e.cycle_id.as_deref() == Some(cycle))
        .expect("a gate event");
    assert!(
        gate.evidence
            .to_string()
            .contains("users' signals predicted by the reward model"),
        "{}",
        gate.evidence
    );
}

/// 72 episodes of `agent`: users like the answers to weather requests
/// (every other one) and not those to recipe requests.
async fn users_like_weather(w: &crate::support::World, agent: &str) {
    for i in 0..72 {
        let (id, weather) = (format!("e-{i}"), i % 2 == 0);
        let text = if weather {
            format!("Please write the weather report for town {i}")
        } else {
            format!("Give me a cake recipe with {i} eggs")
        };
        w.ask(agent, &id, &text).await;
        w.feedback(&id, "liked", serde_json::json!(weather)).await;
    }
}

/// The reward model in a real cycle on the embedded engine (a random tiny
/// Qwen2): users liked the answers to one kind of request and not the
/// other's, and the model, reading the recorded tokens through the base
/// model's hidden states, learns to tell them apart on episodes it was not
/// trained on. Its quality is stored in the cycle and its history; with
/// too few episodes users reacted to, it is not trained, and says so —
/// and the gate, seeing no user's signal on its re-runs, prunes. Once it
/// is usable it stands in for the users on the gate's re-runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_trains_the_reward_model_on_what_users_reacted_to_and_measures_it_held_out() {
    use hone_store::CycleStore;
    let model = crate::support::tiny_checkpoint();
    let config = hone_test_support::TestConfig::new()
        .local()
        .local_agent("rm", &model.path().display().to_string(), 6)
        .toml(
            "[agents.rm.reward]\npass_threshold = 0.5\nsignals = { liked = 1.0 }\n\
         [agents.rm.reward.model]\nmin_episodes = 24\nmin_auc = 0.7\n\
         [agents.rm.learn]\noptimisers = [\"sft\"]\ndataset_size = 32\n\
         [agents.rm.learn.sft]\nmin_examples = 1\nsteps = 2\nrank = 4\n",
        )
        .build();
    // The random model samples at temperature 1: some answers come out
    // empty and are penalised, so how many of the train half passed varies
    // from run to run. `sft` must propose whatever that count is (one
    // example is enough), since the gate's use of the reward model is what
    // this test is about.
    let w = crate::support::World::start_with(&config).await;
    let (learner, lines) = crate::support::learner(&w);

    // Too few episodes users reacted to: not trained, and said.
    for i in 0..6 {
        let id = format!("few-{i}");
        w.ask("rm", &id, "Please write the weather report").await;
        w.feedback(&id, "liked", serde_json::json!(true)).await;
    }
    let cycle = learner.run_cycle("rm", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    let quality = cycle.detail.reward_model.expect("measured");
    assert!(!quality.usable && quality.auc.is_none(), "{quality:?}");
    assert!(
        log.contains("reward model: 6 episodes users reacted to with token ids, 24 needed; not trained"),
        "{log}"
    );

    // Users like the answers to weather requests and not to recipes.
    users_like_weather(&w, "rm").await;
    let cycle = learner.run_cycle("rm", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    let quality = cycle.detail.reward_model.expect("measured");
    assert_eq!(quality.reacted, 78, "{quality:?}");
    assert_eq!(quality.trained_on + quality.held_out, 78, "{quality:?}");
    assert!(quality.held_out >= 8 && quality.trained_on >= 40, "{quality:?}");
    let auc = quality.auc.expect("both classes held out");
    assert!(auc >= 0.9, "{quality:?}\n{log}");
    assert!(quality.usable, "{quality:?}");
    assert!(quality.rank_correlation.is_some_and(|r| r > 0.5), "{quality:?}");
    assert!(
        quality.calibration_error.is_some_and(|e| (0.0..=1.0).contains(&e)),
        "{quality:?}"
    );
    // Saved, and standing in for users on the gate's re-runs.
    assert!(w.config.gateway.data_dir.join("reward-models/rm.json").exists());
    assert!(
        log.contains("the reward model learned from users' signals predicts them"),
        "{log}"
    );
    gate_scored_by_the_reward_model(&w, "rm", &cycle.id);
    // In the cycle's history, with its figures.
    let events = w.store.history("rm", 100).unwrap();
    let event = events
        .iter()
        .find(|e| e.kind == "reward_model" && e.cycle_id.as_deref() == Some(cycle.id.as_str()))
        .expect("a reward_model event");
    assert!(
        event.summary.contains("usable") && event.summary.contains("AUC"),
        "{}",
        event.summary
    );
}

/// Overoptimisation caught, on purpose: a reward model with a known blind
/// spot — users liked answers to weather requests, so it learned to rate
/// any answer whose context reads like a weather request — and a canary
/// made to exploit it (its system prompt is a weather request). Its users
/// ask for recipes and like the canary's answers no better than the
/// champion's; the model rates the canary's answers far above, and the
/// monitor rolls it back, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_games_the_reward_model_is_rolled_back_as_overoptimised() {
    use hone_learn::watch::Verdict;
    use hone_store::CycleStore;
    let model = crate::support::tiny_checkpoint();
    let route = format!(
        "provider = {{ type = \"local\", model = {:?} }}\ntemperature = 1.0\nmax_tokens = 6\n",
        model.path().display().to_string()
    );
    let config = format!(
        "{}[agents.gh.versions.v1]\n{route}\
         [agents.gh.versions.gamed]\n{route}system = \"Please write the weather report for town 7\"\n\
         [agents.gh.deployment]\nchampion = \"v1\"\ncanary_share = 0.5\n\
         [agents.gh.reward]\npass_threshold = 0.5\nsignals = {{ liked = 1.0 }}\n\
         [agents.gh.reward.model]\nmin_episodes = 24\nmin_auc = 0.7\n\
         [agents.gh.learn]\noptimisers = [\"sft\"]\ndataset_size = 16\n[agents.gh.learn.sft]\nmin_examples = 1000\n\
         [agents.gh.learn.monitor]\nmin_episodes = 10\n",
        hone_test_support::TestConfig::new().local().build()
    );
    let w = crate::support::World::start_with(&config).await;
    let (learner, lines) = crate::support::learner(&w);
    let agent = &w.config.agents["gh"];
    users_like_weather(&w, "gh").await;
    let cycle = learner.run_cycle("gh", "manual").await.unwrap();
    let quality = cycle.detail.reward_model.expect("measured");
    assert!(quality.usable, "{quality:?}\n{}", lines.lock().unwrap().join("\n"));

    // The gamed version goes out as a canary on half the traffic.
    let (mut deployment, revision) = hone_learn::release::deploy::current(w.store.as_ref(), agent).unwrap();
    let gamed = agent.versions["gamed"].id.clone();
    deployment.canary = Some(gamed.clone());
    deployment.canary_since = Some(hone_types::time::now_ms());
    deployment.canary_share = 0.5;
    deployment.source = "learner".to_owned();
    assert!(w
        .store
        .change_deployment(&deployment, revision, &[], &[], None, hone_types::time::now_ms())
        .unwrap());
    crate::support::wait_for_split(&w, "gh", Some(&gamed)).await;

    // Users ask for recipes and like neither version's answers.
    let mut served = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..60 {
        let id = format!("g-{i}");
        w.ask("gh", &id, &format!("Give me a cake recipe with {} eggs", 100 + i))
            .await;
        w.feedback(&id, "liked", serde_json::json!(false)).await;
        let version = w.episode(&id).await.calls[0].version_id.to_string();
        *served.entry(version).or_default() += 1;
    }
    assert!(served.get(gamed.as_str()).is_some_and(|n| *n >= 10), "{served:?}");
    let verdict = learner.watch(agent).await.unwrap();
    let Verdict::RolledBack(line) = verdict else {
        panic!("{verdict:?}\n{}", lines.lock().unwrap().join("\n"));
    };
    assert!(line.contains(gamed.as_str()), "{line}");
    let alert = w.store.alerts(Some("gh"), 10).unwrap().remove(0);
    assert_eq!(alert.firing.metric, "overoptimisation", "{alert:?}");
    assert!(alert.firing.canary_rate < alert.firing.champion_rate - 0.1, "{alert:?}");
    let rollback = w
        .store
        .history("gh", 50)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "rollback")
        .expect("a rollback event");
    assert!(
        rollback.summary.contains("overoptimised (Goodhart)"),
        "{}",
        rollback.summary
    );
    let (after, revision) = hone_learn::release::deploy::current(w.store.as_ref(), agent).unwrap();
    assert_eq!(after.canary, None);

    // The control: the same canary, whose users do like its answers, as
    // the model predicts. Nothing is overoptimised.
    let mut again = after.clone();
    again.canary = Some(gamed.clone());
    again.canary_since = Some(hone_types::time::now_ms());
    assert!(w
        .store
        .change_deployment(&again, revision, &[], &[], None, hone_types::time::now_ms())
        .unwrap());
    crate::support::wait_for_split(&w, "gh", Some(&gamed)).await;
    for i in 0..60 {
        let id = format!("h-{i}");
        w.ask("gh", &id, &format!("Give me a cake recipe with {} eggs", 200 + i))
            .await;
        let version = w.episode(&id).await.calls[0].version_id.clone();
        w.feedback(&id, "liked", serde_json::json!(version == gamed)).await;
    }
    let verdict = learner.watch(agent).await.unwrap();
    assert!(!matches!(verdict, Verdict::RolledBack(_)), "{verdict:?}");
    assert_eq!(w.store.alerts(Some("gh"), 10).unwrap().len(), 1, "no second alert");
}

/// The judge as the reward model of an agent on a hosted model (no token
/// ids to read). Users liked the answers to requests for a forecast and
/// not to recipes; of two rubrics — one the fake judge scores alike for every
/// answer, one that reads the request — the second is chosen on the
/// training side, calibrated to the users' signals, and measured on
/// episodes it was not trained on; it then scores the gate's re-runs. A
/// second cycle pays only for the episodes that are new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_agents_judge_is_chosen_and_calibrated_against_users_signals() {
    let config = r#"
[agents.hosted.versions.v1]
provider = "up"
model = "good"
[agents.hosted.deployment]
champion = "v1"
[agents.hosted.reward]
pass_threshold = 0.5
signals = { liked = 1.0 }
[agents.hosted.reward.judge]
mode = "absolute"
provider = "up"
model = "judge"
weight = 0.0
retries = 0
[agents.hosted.reward.model]
min_episodes = 24
min_auc = 0.7
rubrics = ["Score how good the answer is.", "Prefer forecasts: score 1 for a forecast, 0 otherwise."]
[agents.hosted.learn]
optimisers = ["model"]
dataset_size = 16
[agents.hosted.learn.model]
temperatures = [0.2]
"#;
    let w = crate::support::World::start_with(config).await;
    let (learner, lines) = crate::support::learner(&w);
    for i in 0..72 {
        let (id, forecast) = (format!("e-{i}"), i % 2 == 0);
        let text = if forecast {
            format!("Please write the forecast for town {i}")
        } else {
            format!("Give me a cake recipe with {i} eggs")
        };
        w.ask("hosted", &id, &text).await;
        w.feedback(&id, "liked", serde_json::json!(forecast)).await;
    }
    let cycle = learner.run_cycle("hosted", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    let quality = cycle.detail.reward_model.expect("measured");
    assert_eq!(
        quality.reads,
        hone_types::RewardModelReads::Judge { rubric: 2, of: 2 },
        "{quality:?}\n{log}"
    );
    assert_eq!(quality.reacted, 72, "{quality:?}");
    assert!(
        quality.auc.is_some_and(|a| a >= 0.9) && quality.usable,
        "{quality:?}\n{log}"
    );
    assert!(
        log.contains("the judge scored 144 episodes this cycle (0 failed); rubric 2 of 2 chosen"),
        "{log}"
    );
    // It stands in for users on the gate's re-runs, judging them with the
    // chosen rubric.
    gate_scored_by_the_reward_model(&w, "hosted", &cycle.id);
    assert!(
        quality.summary().starts_with("the judge, rubric 2 of 2:"),
        "{}",
        quality.summary()
    );

    // Four more episodes: only they are judged, under each rubric.
    for i in 0..4 {
        let id = format!("more-{i}");
        w.ask("hosted", &id, "Please write the forecast for the coast").await;
        w.feedback(&id, "liked", serde_json::json!(true)).await;
    }
    learner.run_cycle("hosted", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert!(
        log.contains("the judge scored 8 episodes this cycle (0 failed)"),
        "{log}"
    );
}
