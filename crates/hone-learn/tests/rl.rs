//! The `grpo` optimiser inside a real cycle on the embedded engine: the
//! champion (a random tiny Qwen2 served by the gateway's local provider) is
//! rolled out on the cycle's train half, a regex critic is the reward source
//! of the rollouts, and the trainer gets the calls' exact token ids with the
//! sampler's logprobs: its importance ratios leave 1 and clipping acts,
//! which re-rendered text without logprobs can never do (ratio ≡ 1).
//! `sft` and `dpo` train on recorded tokens too; `grpo` on production
//! episodes corrects those other weights served and drops stale ones, and
//! trains on the gateway's shadow samples, scored alike with the served answer. And weight candidates
//! build on the champion's adapter, so gains accumulate across cycles.

use crate::support::{learner, recorded_passing_train, tiny_checkpoint, Recorded, World};
use hone_learn::search::optimiser::training::{adapter_name, Method};
use hone_store::{CycleStore, LearnStore, Store};
use hone_test_support::TestConfig;
use hone_types::CycleState;
use serde_json::Value;

/// The tables of an agent `agent` whose champion `v1` runs on the checkpoint
/// in `model` through the embedded engine (temperature 1, six tokens).
fn local_agent(config: TestConfig, agent: &str, model: &std::path::Path) -> TestConfig {
    config.local_agent(agent, &model.display().to_string(), 6)
}

/// Agent `pub`'s reward and a one-step `sft` learner.
const PUB_SFT: &str =
    "[agents.pub.reward]\npass_threshold = 0.5\n[agents.pub.reward.critics.answer]\ntype = \"regex\"\n\
     pattern = \".*\"\n[agents.pub.learn]\noptimisers = [\"sft\"]\ndataset_size = 8\n\
     [agents.pub.learn.sft]\nsteps = 1\nlr = 0.01\nrank = 4\nmin_examples = 1";

/// A tiny checkpoint, and a world whose agent `agent` runs on it, with the
/// rest of its config (reward and learn tables) in `rest`.
async fn tiny_world(agent: &str, rest: &str) -> (tempfile::TempDir, World) {
    let model = tiny_checkpoint();
    let config = local_agent(TestConfig::new().local(), agent, model.path())
        .toml(rest)
        .build();
    let w = World::start_with(&config).await;
    (model, w)
}

/// `n` episodes asking for a number, then one cycle, which must finish with
/// one candidate by `optimiser`; the cycle and its log.
async fn one_cycle(w: &World, agent: &str, optimiser: &str, n: usize) -> (hone_types::CycleInfo, String) {
    for i in 0..n {
        w.ask(agent, &format!("{agent}-{i}"), &format!("Say a number, please ({i})"))
            .await;
    }
    let (learner, lines) = learner(w);
    let cycle = learner.run_cycle(agent, "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    let candidates = w.store.candidates(agent, Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{log}");
    assert_eq!(candidates[0].optimiser, optimiser);
    (cycle, log)
}

/// The reward and learn tables of an agent whose one optimiser learns from
/// rollouts of the champion, scored by a regex critic on the answer.
fn rollout_learner(agent: &str, pattern: &str, optimiser: &str, steps: usize) -> String {
    format!(
        "[agents.{agent}.reward]\npass_threshold = 0.5\n[agents.{agent}.reward.critics.answer]\ntype = \"regex\"\n\
         pattern = {pattern:?}\n[agents.{agent}.learn]\noptimisers = [{optimiser:?}]\ndataset_size = 16\n\
         [agents.{agent}.learn.{optimiser}]\nsteps = {steps}\nlr = 0.05\nrank = 4\ngroup_size = 4\nmin_examples = 2\n"
    )
}

/// The first step that trained on anything (a GRPO batch whose groups all
/// tie is dropped: no tokens, no update, so the policy is still the one
/// that sampled).
fn first_trained(steps: &[Value]) -> &Value {
    steps
        .iter()
        .find(|s| s["tokens"].as_u64() > Some(0))
        .expect("no step trained")
}

/// The trainer's metrics of `adapter`, one JSON object per step, and the text.
fn trainer_steps(w: &World, adapter: &str) -> (Vec<Value>, String) {
    let path = w.config.adapters_dir("local").join(adapter).join("metrics.jsonl");
    let metrics = std::fs::read_to_string(path).unwrap();
    let steps = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (steps, metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpo_in_a_cycle_trains_on_recorded_tokens_and_sampler_logprobs_of_the_train_half() {
    let (_model, w) = tiny_world("rl", &rollout_learner("rl", "[0-9]", "grpo", 12)).await;
    let (cycle, log) = one_cycle(&w, "rl", "grpo", 16).await;

    // The rollouts ran on the train half only.
    let train: Vec<String> = w
        .store
        .dataset_items(cycle.detail.train.as_deref().unwrap())
        .unwrap()
        .into_iter()
        .map(|i| i.input.as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(log.contains(&format!("on {} tasks", train.len())), "{log}");

    // What the trainer saw, step by step.
    let (steps, metrics) = trainer_steps(&w, &adapter_name(&cycle, Method::Grpo));
    assert_eq!(steps.len(), 12, "{metrics}");
    let extra = |s: &Value, k: &str| s["extra"][k].as_f64().unwrap_or(f64::NAN);
    // On the first step that trains (a batch whose groups all tie is
    // dropped and moves nothing) the policy is the sampler: the ratio
    // against the recorded logprobs is 1 up to the engine's and the
    // trainer's rounding.
    assert!((extra(first_trained(&steps), "ratio") - 1.0).abs() < 1e-3, "{metrics}");
    // Later the policy has moved: ratios leave 1 and the clip acts.
    assert!(
        steps.iter().any(|s| (extra(s, "ratio") - 1.0).abs() > 1e-3),
        "ratios never left 1: behaviour logprobs did not reach the trainer\n{metrics}"
    );
    assert!(
        steps.iter().any(|s| extra(s, "clip_fraction") > 0.0),
        "no token was ever clipped\n{metrics}"
    );
}

const ACCUMULATE: &str = r#"
[agents.acc.reward]
reference_signal = "gold"
[agents.acc.learn]
optimisers = ["sft"]
dataset_size = 24
[agents.acc.learn.sft]
steps = 6
lr = 0.05
rank = 4
min_examples = 2
[agents.acc.learn.replay]
ewc = 1.0
"#;

fn adapter_of(w: &World, version: &hone_types::VersionId) -> Option<String> {
    let record = Store::version(&*w.store, version).unwrap().unwrap();
    record.spec.routes[0].adapter.clone()
}

/// The first and the last step's loss of the adapter a cycle trained.
fn losses(w: &World, adapter: &str) -> (f64, f64) {
    let (steps, _) = trainer_steps(w, adapter);
    let loss = |step: Option<&Value>| step.unwrap()["loss"].as_f64().unwrap();
    (loss(steps.first()), loss(steps.last()))
}

/// Gains accumulate across cycles: once a weight candidate is the champion,
/// the next cycle's candidate is trained on from the champion's adapter,
/// not from a fresh one — its first step starts where the champion's
/// training ended on the same kind of data, not at a fresh adapter's loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_trains_on_from_the_champions_adapter() {
    let (_model, w) = tiny_world("acc", ACCUMULATE).await;
    let sums = |prefix: &'static str| {
        let w = &w;
        async move {
            for i in 0..24 {
                let id = format!("{prefix}-{i}");
                w.ask("acc", &id, &format!("What is {}+{}?", 10 + i, i % 5 + 1)).await;
                w.feedback(
                    &id,
                    "gold",
                    serde_json::json!(format!("The answer is {}.", 11 + i + i % 5)),
                )
                .await;
            }
        }
    };
    sums("a").await;
    let (learner, lines) = learner(&w);
    let first = learner.run_cycle("acc", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    let c1 = w.store.candidates("acc", Some(&first.id)).unwrap();
    assert_eq!(c1.len(), 1, "{log}");
    let adapter1 = adapter_name(&first, Method::Sft);
    assert_eq!(adapter_of(&w, &c1[0].version_id), Some(adapter1.clone()));

    // Make the candidate the champion, as a promotion would.
    let agent = &w.config.agents["acc"];
    let (mut deployment, revision) = hone_learn::release::deploy::current(&*w.store, agent).unwrap();
    deployment.previous.push(deployment.champion.clone());
    deployment.champion = c1[0].version_id.clone();
    assert!(w
        .store
        .change_deployment(&deployment, revision, &[], &[], None, 1)
        .unwrap());

    sums("b").await;
    let second = learner.run_cycle("acc", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    let c2 = w.store.candidates("acc", Some(&second.id)).unwrap();
    assert_eq!(c2.len(), 1, "{log}");
    let adapter2 = adapter_name(&second, Method::Sft);
    assert_eq!(adapter_of(&w, &c2[0].version_id), Some(adapter2.clone()));
    assert_eq!(c2[0].parent, c1[0].version_id);
    // Cycle 2 replays cycle 1's successes, none it gates on.
    let gated: std::collections::HashSet<_> = [&second.detail.target, &second.detail.regression]
        .into_iter()
        .flatten()
        .flat_map(|d| w.store.dataset_items(d).unwrap())
        .filter_map(|i| i.episode_id)
        .collect();
    let spec = w.config.agents["acc"].reward.version();
    let earlier = (0..24)
        .map(|i| hone_types::EpisodeId::parse(&format!("a-{i}")).unwrap())
        .filter(|id| !gated.contains(id))
        .filter(|id| w.learn_store().reward(id, &spec).unwrap().is_some_and(|r| r.passed))
        .count();
    assert!(earlier > 0 && earlier < 24, "{gated:?}");
    assert!(
        log.contains(&format!(
            "acc: replay: {earlier} earlier successful episodes ({earlier} calls)"
        )),
        "{log}"
    );
    let (steps, metrics) = trainer_steps(&w, &adapter2);
    assert!(
        steps.iter().all(|s| s["extra"]["replay_nll"].as_f64().unwrap() > 0.0),
        "{metrics}"
    );
    // `ewc` anchors the adapter where the cycle started: no penalty at the
    // first step, a positive one once it has moved.
    assert_eq!(steps[0]["extra"]["ewc"].as_f64(), Some(0.0), "{metrics}");
    assert!(
        steps.last().unwrap()["extra"]["ewc"].as_f64().unwrap() > 0.0,
        "{metrics}"
    );
    let (first_steps, _) = trainer_steps(&w, &adapter1);
    assert!(
        first_steps[0]["extra"].get("ewc").is_none(),
        "nothing to replay, no EWC"
    );
    // Each candidate says how far its adapter is from the base.
    let training = |c: &hone_types::Candidate| c.training.clone().unwrap();
    assert_eq!(training(&c1[0]).steps, 6);
    assert_eq!(training(&c1[0]).replayed, 0);
    assert_eq!(training(&c2[0]).replayed, earlier as u64);
    assert!(training(&c2[0]).kl_to_base > 0.0, "{:?}", c2[0].training);
    assert!(c2[0].diff.contains("KL to base"), "{}", c2[0].diff);

    let ((fresh, trained), (continued, _)) = (losses(&w, &adapter1), losses(&w, &adapter2));
    assert!(
        fresh - trained > 0.1,
        "cycle 1's training moved the loss: {fresh} → {trained}"
    );
    assert!(
        (continued - trained).abs() < (fresh - continued).abs() / 4.0,
        "cycle 2 started at loss {continued}, not where the champion's adapter ended ({trained}) \
         but nearer a fresh adapter's {fresh}: it did not build on the champion's adapter\n{log}"
    );
}

/// The `dpo` optimiser inside a real cycle: on-policy pairs from the
/// champion's rollouts on the train half (best over worst by the reward
/// spec), given to the trainer as the sampled token ids, anchored by the
/// chosen episodes that passed; at its first step the policy is the
/// reference, so the DPO loss is exactly ln 2, and training then opens a
/// margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dpo_in_a_cycle_trains_on_pairs_of_sampled_tokens_from_the_train_half() {
    // A lowercase letter in six random tokens: about an even chance, so
    // most groups hold both a pass and a fail.
    let (_model, w) = tiny_world("pref", &rollout_learner("pref", "[a-z]", "dpo", 24)).await;
    let (cycle, log) = one_cycle(&w, "pref", "dpo", 16).await;

    let train = w.store.dataset_items(cycle.detail.train.as_deref().unwrap()).unwrap();
    assert!(
        log.contains(&format!(
            "dpo: rolling out the champion 4 times on {} tasks",
            train.len()
        )),
        "{log}"
    );
    let pairs = log
        .lines()
        .find_map(|l| l.split(" from the train half, ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(pairs > 0, "no on-policy pair\n{log}");
    // The chosen episodes that passed anchor the pairs (RPO's likelihood
    // term): trained as supervised rows beside them from the first step,
    // though this first cycle has no earlier success to replay.
    let anchors = log
        .lines()
        .find_map(|l| {
            l.split("; ")
                .nth(1)?
                .strip_suffix(" chosen episodes that passed anchor them")
        })
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        anchors > 0 && anchors <= pairs,
        "{anchors} anchors for {pairs} pairs\n{log}"
    );

    let (steps, metrics) = trainer_steps(&w, &adapter_name(&cycle, Method::Dpo));
    assert_eq!(steps.len(), 24, "{metrics}");
    assert!(
        steps
            .iter()
            .all(|s| s["extra"]["replay_nll"].as_f64().is_some_and(|n| n > 0.0)),
        "a step without the anchors' likelihood\n{metrics}"
    );
    let ln2 = std::f64::consts::LN_2;
    assert!((steps[0]["loss"].as_f64().unwrap() - ln2).abs() < 1e-3, "{metrics}");
    // Each step sees a different batch of pairs, so one step's margin is
    // noisy; over the last third of training it is clearly open.
    let margins: Vec<f64> = steps.iter().map(|s| s["extra"]["margin"].as_f64().unwrap()).collect();
    let late = margins[16..].iter().sum::<f64>() / 8.0;
    assert!(
        late > 0.0,
        "training opened no margin between chosen and rejected\n{metrics}"
    );
}

/// `sft` trains on what the engine sampled, not on re-rendered text: its
/// first loss (a fresh adapter is the base, the sampler at temperature 1)
/// is the mean of minus the recorded logprobs of the chosen episodes'
/// calls, over exactly their recorded prompt and completion tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sft_in_a_cycle_trains_on_the_recorded_tokens_of_chosen_episodes() {
    let rest = "[agents.sft.reward]\npass_threshold = 0.5\n[agents.sft.reward.critics.answer]\ntype = \"regex\"\n\
                pattern = \".*\"\n[agents.sft.learn]\noptimisers = [\"sft\"]\ndataset_size = 8\n\
                [agents.sft.learn.sft]\nsteps = 1\nlr = 0.01\nrank = 4\nmin_examples = 1\n";
    let (_model, w) = tiny_world("sft", rest).await;
    let (cycle, log) = one_cycle(&w, "sft", "sft", 8).await;

    let Recorded {
        chosen,
        logprob_sum,
        scored,
        tokens,
    } = recorded_passing_train(&w, &cycle);
    assert!(chosen > 0 && chosen <= 4, "{chosen} chosen\n{log}");
    let (steps, metrics) = trainer_steps(&w, &adapter_name(&cycle, Method::Sft));
    assert_eq!(steps.len(), 1, "{metrics}");
    // One batch of four holds every chosen call: the whole of what was sampled.
    assert_eq!(
        steps[0]["tokens"].as_u64().unwrap() as usize,
        tokens,
        "{chosen} chosen: {metrics}\n{log}"
    );
    let expected = -logprob_sum / scored as f64;
    let loss = steps[0]["loss"].as_f64().unwrap();
    assert!(
        (loss - expected).abs() < 1e-3,
        "loss {loss} vs recorded {expected}\n{metrics}"
    );
}

/// Two deployments with stores of their own share one artefact store (or
/// a store is made afresh beside an old one): both count their cycles from
/// 1, and the second's first cycle trains its own adapter instead of taking
/// the first's, published under the same cycle id, for one it trained
/// before a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_store_sharing_the_artefacts_trains_its_own_adapters() {
    let model = tiny_checkpoint();
    let shared = tempfile::tempdir().unwrap();
    let config = local_agent(TestConfig::new().local(), "pub", model.path())
        .toml(PUB_SFT)
        .toml(&format!(
            "[artefacts]\nurl = {:?}",
            format!("file://{}", shared.path().display())
        ))
        .build();
    let first = World::start_with(&config).await;
    let (cycle1, _) = one_cycle(&first, "pub", "sft", 8).await;
    // The second deployment starts its cycle 1 a moment later.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let second = World::start_with(&config).await;
    let (cycle2, log) = one_cycle(&second, "pub", "sft", 8).await;
    assert_eq!(cycle1.id, cycle2.id, "both stores count from 1");
    let (name1, name2) = (adapter_name(&cycle1, Method::Sft), adapter_name(&cycle2, Method::Sft));
    assert!(!log.contains("published earlier"), "{log}");
    assert!(log.contains(&format!("sft: training adapter {name2}")), "{log}");
    assert_ne!(name1, name2);
    let candidate = &second.store.candidates("pub", Some(&cycle2.id)).unwrap()[0];
    assert_eq!(adapter_of(&second, &candidate.version_id), Some(name2.clone()));
    let artefacts = hone_artefacts::Artefacts::new(&second.config.artefacts).unwrap();
    for name in [&name1, &name2] {
        assert!(artefacts.published_adapter(name).await.unwrap().is_some(), "{name}");
    }
}

/// With a shared artefact store the adapter a cycle trains is published
/// there before any candidate names it, byte for byte; the champion's base
/// checkpoint, named by URL, is fetched into the cache by the gateway and
/// trained on by the learner from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trained_adapter_is_published_before_a_candidate_names_it() {
    let model = tiny_checkpoint();
    let url = format!("file://{}", model.path().display());
    let config = TestConfig::new()
        .local()
        .local_agent("pub", &url, 6)
        .toml(PUB_SFT)
        .toml("[artefacts]\nurl = \"file://DATA/shared\"")
        .build();
    let w = World::start_with(&config).await;
    let cached: Vec<_> = std::fs::read_dir(&w.config.artefacts.cache_dir).unwrap().collect();
    assert_eq!(cached.len(), 1, "the gateway fetched the base checkpoint once");
    let (cycle, log) = one_cycle(&w, "pub", "sft", 8).await;
    let name = adapter_name(&cycle, Method::Sft);
    assert!(
        log.contains(&format!("sft: adapter {name} published to file://")),
        "{log}"
    );
    let candidate = &w.store.candidates("pub", Some(&cycle.id)).unwrap()[0];
    assert_eq!(adapter_of(&w, &candidate.version_id), Some(name.clone()));

    let artefacts = hone_artefacts::Artefacts::new(&w.config.artefacts).unwrap();
    let published = artefacts.published_adapter(&name).await.unwrap().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let pulled = elsewhere.path().join(&name);
    let manifest = artefacts
        .pull(&artefacts.adapter_url(&name).unwrap(), &pulled)
        .await
        .unwrap();
    assert_eq!(manifest.sha256, published.sha256);
    let trained = w.config.adapters_dir("local").join(&name);
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        assert_eq!(
            std::fs::read(pulled.join(file)).unwrap(),
            std::fs::read(trained.join(file)).unwrap(),
            "{file}"
        );
    }
}

/// The `memory` optimiser in a real cycle: a kNN-LM datastore of exactly
/// the train half's successful episodes — every completion token of their
/// recorded calls, none from the half the candidate is gated on — and the
/// champion decoding with it, evaluated through the gateway by the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_in_a_cycle_builds_a_datastore_of_the_train_halfs_successes_only() {
    // Users resolve every other episode: exactly half pass, whatever the
    // tiny model says, so the train half holds passing and failing ones.
    let rest = "[agents.mem.reward]\npass_threshold = 0.5\nsignals = { resolved = 1.0 }\n\
                [agents.mem.learn]\noptimisers = [\"memory\"]\ndataset_size = 16\n\
                [agents.mem.learn.memory]\nk = [4]\nlambda = [0.5]\n";
    let (_model, w) = tiny_world("mem", rest).await;
    let episodes = |range: std::ops::Range<usize>| {
        let w = &w;
        async move {
            for i in range {
                let id = format!("mem-{i}");
                w.ask("mem", &id, &format!("Say a number, please ({i})")).await;
                w.feedback(&id, "resolved", serde_json::json!(i % 2 == 0)).await;
            }
        }
    };
    episodes(0..16).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("mem", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    let train = w.store.dataset_items(cycle.detail.train.as_deref().unwrap()).unwrap();
    let passed: Vec<_> = train.iter().filter(|i| i.reward.is_some_and(|r| r >= 0.5)).collect();
    assert!(
        !passed.is_empty() && passed.len() < train.len(),
        "{} of {} passed\n{log}",
        passed.len(),
        train.len()
    );
    let completion_tokens = |id: &hone_types::EpisodeId| -> usize {
        let episode = w.store.episode(id).unwrap().unwrap();
        episode
            .calls
            .iter()
            .map(|c| c.sampled_tokens().unwrap().completion.len())
            .sum()
    };
    let tokens: usize = passed
        .iter()
        .map(|i| completion_tokens(i.episode_id.as_ref().unwrap()))
        .sum();
    assert!(
        log.contains(&format!(
            ": {} calls of {} train episodes added",
            passed.len(),
            passed.len()
        )),
        "{log}"
    );
    let candidate = &w.store.candidates("mem", Some(&cycle.id)).unwrap()[0];
    let spec = w.store.version(&candidate.version_id).unwrap().unwrap().spec;
    let memory = spec.routes[0].memory.clone().unwrap();
    assert_eq!((memory.k, memory.lambda), (4, 0.5));
    let datastore = hone_engine::Datastore::load(
        &w.config
            .artefacts
            .memory_dir
            .join(&memory.datastore)
            .join("datastore.safetensors"),
    )
    .unwrap();
    assert_eq!(datastore.content_hash(), memory.datastore);
    assert_eq!(
        datastore.len(),
        tokens,
        "every completion token of the train successes, nothing else"
    );
    assert!(candidate.diff.contains("memory: none → knn-lm"), "{}", candidate.diff);
    assert!(
        candidate.scores.is_some(),
        "the gate evaluated the candidate through the gateway\n{log}"
    );

    // Promoted, its memory grows: the next cycle extends the champion's
    // datastore with the new train successes it does not hold yet.
    let agent = &w.config.agents["mem"];
    let (mut deployment, revision) = hone_learn::release::deploy::current(&*w.store, agent).unwrap();
    deployment.previous.push(deployment.champion.clone());
    deployment.champion = candidate.version_id.clone();
    assert!(w
        .store
        .change_deployment(&deployment, revision, &[], &[], None, 1)
        .unwrap());
    episodes(16..32).await;
    let second = learner.run_cycle("mem", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    let held = |hash: &str| -> Vec<String> {
        let path = w.config.artefacts.memory_dir.join(hash).join("held.json");
        let held: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        held["episodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_owned())
            .collect()
    };
    let before = held(&memory.datastore);
    let grown = w.store.candidates("mem", Some(&second.id)).unwrap();
    assert_eq!(grown.len(), 1, "{log}");
    let grown_memory = w.store.version(&grown[0].version_id).unwrap().unwrap().spec.routes[0]
        .memory
        .clone()
        .unwrap();
    assert!(
        log.contains(&format!("extending the champion's {}", &memory.datastore[..12])),
        "{log}"
    );
    let after = held(&grown_memory.datastore);
    assert!(
        before.iter().all(|e| after.contains(e)),
        "the earlier episodes are kept"
    );
    let added: Vec<&String> = after.iter().filter(|e| !before.contains(e)).collect();
    assert!(!added.is_empty(), "{log}");
    let added_tokens: usize = added
        .iter()
        .map(|id| completion_tokens(&hone_types::EpisodeId::parse(id).unwrap()))
        .sum();
    let grown_store = hone_engine::Datastore::load(
        &w.config
            .artefacts
            .memory_dir
            .join(&grown_memory.datastore)
            .join("datastore.safetensors"),
    )
    .unwrap();
    assert_eq!(
        grown_store.len(),
        datastore.len() + added_tokens,
        "old pairs kept, new ones added once"
    );
}

/// `groups = "production"`: GRPO on the train half's production episodes
/// with their own rewards, no rollout. Served by the champion they are on
/// its policy (ratio 1 on the first step); once another version is the
/// champion, the same kind of episodes are corrected with truncated
/// importance weights, or dropped as stale past `max_staleness`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpo_on_production_episodes_corrects_stale_ones_and_drops_older() {
    let table = |agent: &str, staleness: u32| {
        format!(
            "[agents.{agent}.reward]\npass_threshold = 0.5\n[agents.{agent}.reward.critics.answer]\ntype = \"regex\"\n\
             pattern = \"[a-z]\"\n[agents.{agent}.learn]\noptimisers = [\"grpo\"]\ndataset_size = 16\n\
             flipped_cycles = 0\n\
             [agents.{agent}.learn.grpo]\nsteps = 4\nlr = 0.05\nrank = 4\nmin_examples = 2\ngroups = \"production\"\n\
             max_staleness = {staleness}\n"
        )
    };
    // Both agents on the same tiny model; no flipped cases mined in, so
    // the second cycle trains on its own window's episodes alone.
    let model = tiny_checkpoint();
    let config = TestConfig::new().local();
    let config = local_agent(config, "prod", model.path()).toml(&table("prod", 2));
    let config = local_agent(config, "strict", model.path())
        .toml(&table("strict", 0))
        .build();
    let w = World::start_with(&config).await;
    let (learner, lines) = learner(&w);
    let traffic = |agent: &'static str, prefix: &'static str| {
        let w = &w;
        async move {
            for i in 0..16 {
                w.ask(
                    agent,
                    &format!("{agent}-{prefix}-{i}"),
                    &format!("Say a word, please ({prefix} {i})"),
                )
                .await;
            }
        }
    };

    // Cycle 1: episodes the champion served, trained on as they were sampled.
    let mut adapters = Vec::new();
    for agent in ["prod", "strict"] {
        traffic(agent, "a").await;
        let cycle = learner.run_cycle(agent, "manual").await.unwrap();
        let log = lines.lock().unwrap().join("\n");
        assert!(!log.contains("rolling out"), "production groups need no rollout\n{log}");
        assert!(log.contains(&format!("{agent}: grpo: 8 production episodes")), "{log}");
        let (steps, metrics) = trainer_steps(&w, &adapter_name(&cycle, Method::Grpo));
        assert!(
            (first_trained(&steps)["extra"]["ratio"].as_f64().unwrap() - 1.0).abs() < 1e-3,
            "{metrics}"
        );
        assert!(steps[0]["extra"].get("is_weight").is_none(), "on-policy: {metrics}");
        assert!(steps.iter().all(|s| s["reward"].is_number()), "{metrics}");
        let candidate = w.store.candidates(agent, Some(&cycle.id)).unwrap().remove(0);
        adapters.push(candidate.version_id);
    }

    // New traffic still served by v1; then the candidate becomes the champion.
    for (agent, candidate) in ["prod", "strict"].into_iter().zip(adapters) {
        traffic(agent, "b").await;
        w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
        let spec = &w.config.agents[agent];
        let (mut deployment, revision) = hone_learn::release::deploy::current(&*w.store, spec).unwrap();
        deployment.previous.push(deployment.champion.clone());
        deployment.champion = candidate;
        assert!(w
            .store
            .change_deployment(&deployment, revision, &[], &[], None, 1)
            .unwrap());
    }

    // One promotion back, other weights: corrected against the new champion.
    let cycle = learner.run_cycle("prod", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert!(
        log.contains("prod: grpo: 8 production episodes as single-answer groups (8 served by other weights"),
        "{log}"
    );
    let (steps, metrics) = trainer_steps(&w, &adapter_name(&cycle, Method::Grpo));
    assert!(
        (first_trained(&steps)["extra"]["ratio"].as_f64().unwrap() - 1.0).abs() < 1e-3,
        "{metrics}"
    );
    let weight = first_trained(&steps)["extra"]["is_weight"].as_f64().unwrap();
    assert!(weight > 0.0 && weight <= 2.0, "{metrics}");

    // `max_staleness = 0`: the same episodes are left out, nothing is trained.
    let cycle = learner.run_cycle("strict", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert!(log.contains("strict: grpo: 0 production episodes"), "{log}");
    assert!(log.contains("left out: 8 stale"), "{log}");
    assert!(
        w.store.candidates("strict", Some(&cycle.id)).unwrap().is_empty(),
        "{log}"
    );
}

/// Shadow groups: for live requests the gateway samples more answers from
/// the same prompt that the client never sees and records them with the
/// call (not as calls); the reward step scores them alike with the served
/// answer (critics, no user signal); `groups = "shadow"` trains GRPO on
/// those groups, on the tokens as sampled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_samples_are_hidden_from_the_client_scored_alike_and_trained_on() {
    let rest = "[agents.sh.reward]\npass_threshold = 0.5\n[agents.sh.reward.critics.answer]\ntype = \"regex\"\n\
                pattern = \"[a-z]\"\n[agents.sh.learn]\noptimisers = [\"grpo\"]\ndataset_size = 16\n\
                [agents.sh.learn.shadow]\nshare = 1.0\nn = 16\n\
                [agents.sh.learn.grpo]\nsteps = 4\nlr = 0.05\nrank = 4\nmin_examples = 2\ngroups = \"shadow\"\n";
    let (_model, w) = tiny_world("sh", rest).await;
    let r = w
        .chat(
            "sh-first",
            &serde_json::json!({"model": "sh", "messages": [{"role": "user", "content": "Say a word"}]}),
        )
        .await;
    assert_eq!(
        r["choices"].as_array().unwrap().len(),
        1,
        "the client sees one answer: {r}"
    );
    let served_tokens = r["choices"][0]["token_ids"].as_array().unwrap().len() as u64;
    assert_eq!(r["usage"]["completion_tokens"].as_u64().unwrap(), served_tokens, "{r}");
    assert!(r.get("shadow").is_none(), "{r}");

    // Recorded with the call, visible in the episode API, not a call of its own.
    let episode = w.get("/v1/episodes/sh-first").await;
    let calls = episode["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{episode}");
    // 16 asked, but the engine's batch (16) holds 15 beside the served answer.
    let shadow = calls[0]["shadow"].as_array().unwrap();
    assert_eq!(shadow.len(), 15, "{episode}");
    assert!(shadow
        .iter()
        .all(|c| c["token_ids"].as_array().is_some_and(|t| !t.is_empty())));
    assert_eq!(episode["call_count"].as_u64().unwrap_or(1), 1);

    let (cycle, log) = one_cycle(&w, "sh", "grpo", 15).await;
    // Scored alike: the served answer first, by the same critic.
    let spec = hone_learn::scoring::reward::Rewarder::new("sh", &w.config.agents["sh"].reward, None)
        .unwrap()
        .spec_version
        .clone();
    let first = hone_types::EpisodeId::parse("sh-first").unwrap();
    let reward = w.learn_store().reward(&first, &spec).unwrap().unwrap();
    assert_eq!(reward.shadows.len(), 1);
    assert_eq!(reward.shadows[0].values.len(), 16);
    let detail = w.episode("sh-first").await;
    let answers: Vec<String> = std::iter::once(&detail.calls[0].response.as_ref().unwrap().choices[0])
        .chain(&detail.calls[0].shadow)
        .map(|c| c.message.text())
        .collect();
    for (answer, value) in answers.iter().zip(&reward.shadows[0].values) {
        let has_letter = answer.chars().any(|c| c.is_ascii_lowercase());
        assert_eq!(*value >= 0.5, has_letter, "{answer:?} scored {value}");
    }
    assert!(log.contains("sh: grpo: 8 shadow groups"), "{log}");
    assert!(!log.contains("rolling out"), "{log}");
    let (steps, metrics) = trainer_steps(&w, &adapter_name(&cycle, Method::Grpo));
    assert!(
        (first_trained(&steps)["extra"]["ratio"].as_f64().unwrap() - 1.0).abs() < 1e-3,
        "{metrics}"
    );
}

/// A streamed request is shadow-sampled too: the client's stream carries
/// answer 0 only (every chunk, and a usage of that answer's tokens alone),
/// the call records the other answers whole, and what the client read is
/// what was recorded as served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_request_is_shadow_sampled_and_the_client_sees_one_answer() {
    let rest = "[agents.ss.learn.shadow]\nshare = 1.0\nn = 3\n";
    let (_model, w) = tiny_world("ss", rest).await;
    let body = serde_json::json!({
        "model": "ss", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Say a word"}],
    });
    let r = w
        .http
        .post(format!("{}/v1/chat/completions", w.url))
        .header("x-hone-episode", "ss-streamed")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let text = r.text().await.unwrap();
    let frames: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(frames.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    let indices: Vec<u64> = chunks
        .iter()
        .flat_map(|c| {
            c["choices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["index"].as_u64().unwrap())
        })
        .collect();
    assert!(!indices.is_empty() && indices.iter().all(|&i| i == 0), "{text}");
    let streamed: String = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap().iter())
        .filter_map(|x| x["delta"]["content"].as_str())
        .collect();
    let usage = chunks
        .iter()
        .find_map(|c| c.get("usage").filter(|u| !u.is_null()))
        .unwrap();

    let detail = w.episode("ss-streamed").await;
    assert_eq!(detail.calls.len(), 1);
    let call = &detail.calls[0];
    let served = &call.response.as_ref().unwrap().choices;
    assert_eq!(served.len(), 1, "the record's response is the served answer");
    assert_eq!(served[0].message.text(), streamed);
    let served_tokens = served[0].extra["token_ids"].as_array().unwrap().len() as u64;
    assert_eq!(usage["completion_tokens"].as_u64().unwrap(), served_tokens, "{usage}");
    assert_eq!(call.shadow.len(), 3);
    for sample in &call.shadow {
        assert!(
            sample.extra["token_ids"].as_array().is_some_and(|t| !t.is_empty()),
            "{sample:?}"
        );
        assert!(
            sample.finish_reason.is_some(),
            "a shadow sample is recorded whole: {sample:?}"
        );
    }
}

/// A relative judge as the reward source of GRPO rollouts ranks each
/// task's group at once (RULER), not each rollout alone (a group of one
/// cannot be ranked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_judge_ranks_each_task_s_rollouts_together() {
    let rest = "[agents.rj.reward.judge]\nmode = \"relative\"\nprovider = \"up\"\nmodel = \"judge\"\n\
                [agents.rj.learn]\noptimisers = [\"grpo\"]\ndataset_size = 8\n\
                [agents.rj.learn.grpo]\nsteps = 2\nlr = 0.01\nrank = 4\ngroup_size = 3\nmin_examples = 1\n";
    let (_model, w) = tiny_world("rj", rest).await;
    let (_, log) = one_cycle(&w, "rj", "grpo", 8).await;
    let prompts = w.upstream.judge_prompts.lock().unwrap().clone();
    let ranked: Vec<usize> = prompts.iter().map(|p| p.matches("<trajectory id=").count()).collect();
    assert!(
        ranked.contains(&3),
        "no prompt ranked a group of 3 rollouts: {ranked:?}\n{log}"
    );
}

/// `drop_from_training` leaves episodes showing a behaviour out of every
/// source of training data (here `truncated`, which six-token answers
/// mostly are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn episodes_showing_a_dropped_behaviour_are_left_out_of_training() {
    let rest = "[agents.dr.reward]\npass_threshold = 0.5\n[agents.dr.reward.critics.answer]\ntype = \"regex\"\n\
                pattern = \"[a-z]\"\n[agents.dr.learn]\noptimisers = [\"grpo\"]\ndataset_size = 16\n\
                drop_from_training = [\"truncated\"]\n[agents.dr.learn.grpo]\nsteps = 1\nlr = 0.01\nrank = 4\n\
                group_size = 2\nmin_examples = 1\ngroups = [\"rollouts\", \"production\"]\n";
    let (_model, w) = tiny_world("dr", rest).await;
    for i in 0..16 {
        w.ask("dr", &format!("dr-{i}"), &format!("Say a word ({i})")).await;
    }
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("dr", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    let train = w.store.dataset_items(cycle.detail.train.as_deref().unwrap()).unwrap();
    let mut truncated = 0;
    for item in &train {
        let episode = w.store.episode(item.episode_id.as_ref().unwrap()).unwrap().unwrap();
        truncated += usize::from(episode.calls.iter().any(|c| c.flags.truncated));
    }
    assert!(truncated > 0, "{log}");
    assert!(log.contains(&format!("{truncated} by drop_from_training")), "{log}");
    assert!(
        log.contains("rollouts left out of training (drop_from_training: truncated)"),
        "{log}"
    );
}

/// `hone learn cancel` while a weight optimiser trains: the cycle ends
/// cancelled, the trainer stops at its next step (long before its last),
/// leaves no adapter and proposes nothing; its progress up to then is in
/// the cycle's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_cycle_stops_its_training_at_the_next_step() {
    let steps = 100_000;
    let rest = format!(
        "[agents.stop.reward]\npass_threshold = 0.5\n[agents.stop.reward.critics.answer]\ntype = \"regex\"\n\
         pattern = \".*\"\n[agents.stop.learn]\noptimisers = [\"sft\"]\ndataset_size = 8\n\
         [agents.stop.learn.sft]\nsteps = {steps}\nlr = 0.001\nrank = 4\nmin_examples = 1\n"
    );
    let (_model, w) = tiny_world("stop", &rest).await;
    for i in 0..8 {
        w.ask("stop", &format!("stop-{i}"), &format!("Say a number, please ({i})"))
            .await;
    }
    let w = std::sync::Arc::new(w);
    let (learner, lines) = learner(&w);
    let running = tokio::spawn(async move { learner.run_cycle("stop", "manual").await });
    let adapters = w.config.adapters_dir("local");
    let metrics = loop {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!running.is_finished(), "the cycle ended before training began");
        let found = std::fs::read_dir(&adapters).ok().and_then(|entries| {
            entries
                .flatten()
                .map(|e| e.path().join("metrics.jsonl"))
                .find(|m| std::fs::read_to_string(m).is_ok_and(|s| s.lines().count() > 1))
        });
        if let Some(m) = found {
            break m;
        }
    };
    let cancelled = hone_learn::cycle::cancel::cancel(w.store.as_ref(), "stop")
        .unwrap()
        .expect("an open cycle");
    assert_eq!(cancelled.state, CycleState::Propose);
    let cycle = tokio::time::timeout(std::time::Duration::from_secs(60), running)
        .await
        .expect("the cycle stops within a minute")
        .unwrap()
        .unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Failed, "{log}");
    assert_eq!(
        cycle.error.as_deref(),
        Some(hone_learn::cycle::cancel::CANCELLED),
        "{log}"
    );
    assert!(log.contains("training stopped"), "{log}");
    assert!(log.contains("was cancelled"), "{log}");
    let trained = std::fs::read_to_string(&metrics).unwrap().lines().count();
    assert!(trained < steps, "{trained} of {steps} steps");
    assert!(
        !adapters.join(adapter_name(&cycle, Method::Sft)).exists(),
        "no adapter from a cancelled cycle"
    );
    assert!(w.store.candidates("stop", Some(&cycle.id)).unwrap().is_empty());
    let history = w.store.history("stop", 100).unwrap();
    let of_cycle = |kind: &str| {
        history
            .iter()
            .filter(|e| e.kind == kind && e.cycle_id.as_deref() == Some(cycle.id.as_str()))
            .map(|e| e.summary.clone())
            .collect::<Vec<_>>()
    };
    let progress = of_cycle("train");
    assert!(progress.iter().any(|s| s.starts_with("sft: step 1/")), "{progress:?}");
    assert!(
        of_cycle("cycle").iter().any(|s| s.contains("cancelled at propose")),
        "{history:?}"
    );
    // Nothing left to cancel.
    assert!(hone_learn::cycle::cancel::cancel(w.store.as_ref(), "stop")
        .unwrap()
        .is_none());
}

/// An agent endpoint that refuses connections: the rollouts' failure is what
/// the optimiser reports (in the log and the cycle's history), not a reward
/// spec with nothing to read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_through_an_endpoint_that_is_down_say_so() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = unused.local_addr().unwrap().port();
    drop(unused);
    let rest = rollout_learner("down", ".*", "grpo", 1).replace(
        "dataset_size = 16\n",
        &format!("dataset_size = 16\nendpoint = \"http://127.0.0.1:{port}/run\"\n"),
    );
    let (_model, w) = tiny_world("down", &rest).await;
    for i in 0..8 {
        w.ask("down", &format!("down-{i}"), &format!("Say a number, please ({i})"))
            .await;
    }
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("down", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert!(log.contains("every rollout of the champion failed"), "{log}");
    assert!(!log.contains("no reward source"), "{log}");
    let history = w.store.history("down", 100).unwrap();
    assert!(
        history.iter().any(|e| e.kind == "optimiser"
            && e.cycle_id.as_deref() == Some(cycle.id.as_str())
            && e.summary.contains("every rollout of the champion failed")),
        "{history:?}"
    );
}
