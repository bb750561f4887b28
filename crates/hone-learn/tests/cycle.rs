//! Story tests of the learning cycle on the real store and gateway: a cycle
//! that proposes, gates, keeps the front and deploys a canary that is then
//! promoted; a candidate that wins on average but breaks passing cases is
//! pruned; a dominated one is dropped; manual approval and auto rules; a
//! canary whose invalid-tool-call rate jumps online is rolled back, alerted
//! and posted to a webhook; the cases a gate saw flip are mined into the
//! next cycle's sets; with a promotion margin, a canary not shown within
//! it collects until its cap and is rolled back.

use crate::support::{learner, wait_for_split, weather_tools, World};
use axum::routing::post;
use axum::{Json, Router};
use hone_learn::release::deploy::{self, Change};
use hone_learn::watch::Verdict;
use hone_store::{CycleStore, LearnStore};
use hone_types::{AlertAction, CandidateStatus, CycleState, VersionId};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const STORY: &str = r#"
[agents.story.versions.v1]
provider = "up"
model = "weak"
[agents.story.deployment]
champion = "v1"
policy = { type = "auto", min_gain = 0.05, max_cost_ratio = 3.0 }
canary_share = 0.5
canary_episodes = 10
[agents.story.reward]
reference_signal = "gold"
[agents.story.reward.critics.answer]
type = "numeric"
[agents.story.learn]
optimisers = ["model"]
dataset_size = 40
[agents.story.learn.model]
models = [{ provider = "up", model = "good" }, { provider = "up", model = "mixed" }, { provider = "up", model = "pricey" }]
[agents.story.learn.gate]
reruns = 2
[agents.story.learn.monitor]
min_episodes = 10
"#;

/// `n` single-call episodes `What is A+B?` with the gold answer as feedback.
async fn sums(w: &World, agent: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let (a, b) = (10 + i, i % 5 + 1);
        let id = format!("{prefix}-{i}");
        w.ask(agent, &id, &format!("What is {a}+{b}?")).await;
        w.feedback(&id, "gold", json!(a + b)).await;
    }
}

fn version(w: &World, agent: &str, model: &str) -> VersionId {
    let mut spec = w.config.agents[agent].versions["v1"].spec.clone();
    spec.routes[0].model = model.to_owned();
    spec.id()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_proposes_gates_keeps_the_front_deploys_and_promotes() {
    let w = World::start_with(STORY).await;
    sums(&w, "story", "s", 40).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("story", "manual").await.unwrap();
    println!("{}", lines.lock().unwrap().join("\n"));
    assert_eq!(cycle.state, CycleState::Done, "{:#?}", lines.lock().unwrap());

    let (good, mixed, pricey) = (
        version(&w, "story", "good"),
        version(&w, "story", "mixed"),
        version(&w, "story", "pricey"),
    );
    // Optimisers learn from one half of the window's sample, candidates are
    // gated on the other: disjoint, together the whole sample, and the
    // regression set holds nothing trained on and nothing of the target set
    // (whose every instance the gate already compares).
    let ids = |id: &Option<String>| -> std::collections::BTreeSet<String> {
        w.store
            .dataset_items(id.as_deref().unwrap())
            .unwrap()
            .into_iter()
            .map(|i| i.id)
            .collect()
    };
    let (train, target) = (ids(&cycle.detail.train), ids(&cycle.detail.target));
    assert!(train.len() >= 2 && target.len() >= 2, "{train:?} {target:?}");
    assert!(train.is_disjoint(&target));
    assert!(
        train.len() - target.len() <= 1,
        "balanced halves: {} vs {}",
        train.len(),
        target.len()
    );
    if cycle.detail.regression.is_some() {
        let regression = ids(&cycle.detail.regression);
        assert!(
            regression.is_disjoint(&train) && regression.is_disjoint(&target),
            "{regression:?}"
        );
    }
    let candidates = w.store.candidates("story", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 3);
    let find = |id: &VersionId| candidates.iter().find(|c| &c.version_id == id).unwrap();
    let champion = w.config.agents["story"].versions["v1"].id.clone();
    for c in &candidates {
        assert_eq!(c.parent, champion);
        assert_eq!(c.optimiser, "model");
    }
    assert_eq!(find(&good).diff, "model: up/weak → up/good");

    // Better on average (it fixes every even sum) but it breaks sums ending in 3 that passed.
    let m = find(&mixed);
    assert_eq!(m.status, CandidateStatus::Pruned);
    let reason = m.reason.as_deref().unwrap();
    assert!(
        reason.contains("breaks") && reason.contains("previously passing"),
        "{reason}"
    );
    assert!(m.scores.as_ref().unwrap().target_mean.unwrap() > 0.6, "{:?}", m.scores);

    // As good as `good` but dearer: dominated, dropped by the front.
    let p = find(&pricey);
    assert_eq!(p.status, CandidateStatus::Pruned);
    assert!(
        p.reason
            .as_deref()
            .unwrap()
            .starts_with(&format!("dominated by {good}")),
        "{:?}",
        p.reason
    );

    // The auto rule (gain ≥ 0.05, cost ≤ 3×) deployed `good` as the canary.
    assert_eq!(find(&good).status, CandidateStatus::Canary);
    let deployment = w.store.deployment("story").unwrap().unwrap();
    assert_eq!(deployment.canary.as_ref(), Some(&good));
    assert_eq!(deployment.champion, champion);
    wait_for_split(&w, "story", Some(&good)).await;

    // Online: half of new episodes go to the canary; after 10 rewarded canary episodes it is promoted.
    assert_eq!(
        learner.watch(&w.config.agents["story"]).await.unwrap(),
        Verdict::Waiting(0)
    );
    sums(&w, "story", "online", 40).await;
    let verdict = learner.watch(&w.config.agents["story"]).await.unwrap();
    assert!(matches!(verdict, Verdict::Promoted(_)), "{verdict:?}");
    let deployment = w.store.deployment("story").unwrap().unwrap();
    assert_eq!(deployment.champion, good);
    assert_eq!(deployment.previous, vec![champion.clone()]);
    assert_eq!(deployment.canary, None);
    wait_for_split(&w, "story", None).await;
    let e = w.ask("story", "after-promotion", "What is 20+2?").await;
    assert_eq!(e["content"], "The answer is 22.");

    // History tells the whole story, in order.
    let kinds: Vec<String> = w
        .store
        .history("story", 200)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    for kind in [
        "cycle",
        "candidate",
        "evaluation",
        "gate",
        "front",
        "approve",
        "canary",
        "promote",
    ] {
        assert!(kinds.contains(&kind.to_owned()), "no {kind} in {kinds:?}");
    }
    let at = |k: &str| kinds.iter().position(|x| x == k).unwrap();
    assert!(at("candidate") < at("gate") && at("gate") < at("front") && at("front") < at("canary"));
    assert!(at("canary") < at("promote"));

    // `hone rollback` right after: the previous champion is back at once.
    let change = deploy::rollback(w.store.as_ref(), &w.config.agents["story"], "operator", None).unwrap();
    assert!(matches!(change, Change::Applied(_)), "{change:?}");
    assert_eq!(w.store.deployment("story").unwrap().unwrap().champion, champion);
    let status = w.store.candidates("story", None).unwrap();
    assert_eq!(
        status.iter().find(|c| c.version_id == good).unwrap().status,
        CandidateStatus::RolledBack
    );
}

const RULES: &str = r#"
[agents.manual.versions.v1]
provider = "up"
model = "weak"
[agents.manual.deployment]
champion = "v1"
canary_share = 0.1
clear_gain = { above = 0.1, share = 0.4 }
[agents.manual.reward]
reference_signal = "gold"
[agents.manual.reward.critics.answer]
type = "numeric"
[agents.manual.learn]
optimisers = ["model"]
dataset_size = 30
[agents.manual.learn.model]
models = [{ provider = "up", model = "good" }]

[agents.strict.versions.v1]
provider = "up"
model = "weak"
[agents.strict.deployment]
champion = "v1"
policy = { type = "auto", min_gain = 0.05, max_cost_ratio = 1.5 }
[agents.strict.reward]
reference_signal = "gold"
[agents.strict.reward.critics.answer]
type = "numeric"
[agents.strict.learn]
optimisers = ["model"]
dataset_size = 30
[agents.strict.learn.model]
models = [{ provider = "up", model = "good" }]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_approval_and_auto_rules_decide_deployment() {
    let w = World::start_with(RULES).await;
    sums(&w, "manual", "m", 30).await;
    sums(&w, "strict", "t", 30).await;
    let (learner, _) = learner(&w);

    // Manual: the better candidate waits on the front; nothing is deployed until approved.
    let cycle = learner.run_cycle("manual", "manual").await.unwrap();
    let good = version(&w, "manual", "good");
    let c = w.store.candidates("manual", Some(&cycle.id)).unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, CandidateStatus::OnFront);
    assert!(w.store.deployment("manual").unwrap().is_none());
    let history = w.store.history("manual", 100).unwrap();
    assert!(history
        .iter()
        .any(|e| e.summary == format!("{good} awaits approval: hone approve {good}")));
    let change = deploy::start_canary(
        &w.config,
        &w.client(),
        w.store.as_ref(),
        &w.config.agents["manual"],
        &c[0],
        "alice",
    )
    .await
    .unwrap();
    assert!(matches!(change, Change::Applied(_)), "{change:?}");
    let deployment = w.store.deployment("manual").unwrap().unwrap();
    assert_eq!(deployment.canary, Some(good.clone()));
    // `good` solves every sum the champion misses: the gate's interval of
    // its gain starts well above 0.1, so its canary takes the clear share.
    let gain = c[0].scores.as_ref().and_then(|s| s.gate_gain).unwrap();
    assert!(gain.low >= 0.1, "{gain}");
    assert_eq!(deployment.canary_share, 0.4);
    let Change::Applied(line) = &change else { unreachable!() };
    assert!(
        line.contains("canary on 40% of new episodes (a clear gain: the gate's interval starts at"),
        "{line}"
    );
    let approved = w.store.history("manual", 100).unwrap();
    assert!(approved
        .iter()
        .any(|e| e.kind == "approve" && e.summary.contains("approved by alice")));
    // Approving again changes nothing.
    let c = w.store.candidates("manual", Some(&cycle.id)).unwrap();
    let again = deploy::start_canary(
        &w.config,
        &w.client(),
        w.store.as_ref(),
        &w.config.agents["manual"],
        &c[0],
        "alice",
    )
    .await
    .unwrap();
    assert!(matches!(again, Change::AlreadyDone(_)), "{again:?}");
    assert_eq!(w.store.deployment("manual").unwrap().unwrap().revision, 1);

    // Auto, but `good` costs 2× the champion and the rule allows 1.5×: not deployed, and why is recorded.
    let cycle = learner.run_cycle("strict", "manual").await.unwrap();
    assert_eq!(
        cycle.detail.decision.as_deref(),
        Some("auto: no candidate met the rule")
    );
    assert!(w.store.deployment("strict").unwrap().is_none());
    let history = w.store.history("strict", 100).unwrap();
    let refused = history
        .iter()
        .find(|e| e.summary.contains("not auto-deployed"))
        .unwrap();
    assert!(
        refused.summary.contains("cost ratio 2.00 (max 1.5)"),
        "{}",
        refused.summary
    );
}

const MINED: &str = r#"
[agents.mined.versions.v1]
provider = "up"
model = "weak"
[agents.mined.reward]
reference_signal = "gold"
[agents.mined.reward.critics.answer]
type = "numeric"
[agents.mined.learn]
optimisers = ["model"]
dataset_size = 40
[agents.mined.learn.model]
models = [{ provider = "up", model = "good" }, { provider = "up", model = "mixed" }]
"#;

/// Hard-example mining: the cases the last gate saw flip join the next
/// cycle's sets. The champion (`weak`) fails even sums, which `good` and
/// `mixed` solve: learnable, so they are trained on; it passes sums ending
/// in 3, which `mixed` breaks: fragile, so they are gated on. Neither is in
/// the next target set, and train and gate stay disjoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_cycle_trains_on_the_cases_the_last_gate_saw_flip() {
    let w = World::start_with(MINED).await;
    sums(&w, "mined", "m", 40).await;
    let (learner, lines) = learner(&w);
    let first = learner.run_cycle("mined", "manual").await.unwrap();
    assert_eq!(first.state, CycleState::Done, "{:#?}", lines.lock().unwrap());
    assert_eq!(w.store.candidates("mined", Some(&first.id)).unwrap().len(), 2);
    let ids = |id: &Option<String>| -> std::collections::BTreeSet<String> {
        id.as_deref().map_or_else(Default::default, |id| {
            w.store.dataset_items(id).unwrap().into_iter().map(|i| i.id).collect()
        })
    };
    // `m-i` asked (10 + i) + (i % 5 + 1).
    let sum = |id: &str| {
        let i: usize = id.rsplit('-').next().unwrap().parse().unwrap();
        10 + i + i % 5 + 1
    };
    let gated: std::collections::BTreeSet<String> = ids(&first.detail.target)
        .union(&ids(&first.detail.regression))
        .cloned()
        .collect();
    let learnable: std::collections::BTreeSet<String> = gated.iter().filter(|id| sum(id) % 2 == 0).cloned().collect();
    let fragile: std::collections::BTreeSet<String> = gated.iter().filter(|id| sum(id) % 10 == 3).cloned().collect();
    assert!(!learnable.is_empty() && !fragile.is_empty(), "{gated:?}");

    sums(&w, "mined", "n", 40).await;
    let second = learner.run_cycle("mined", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(second.state, CycleState::Done, "{log}");
    let (train, target, regression) = (
        ids(&second.detail.train),
        ids(&second.detail.target),
        ids(&second.detail.regression),
    );
    assert!(learnable.is_subset(&train), "{learnable:?} not all in {train:?}");
    assert!(fragile.is_subset(&regression), "{fragile:?} not all in {regression:?}");
    assert!(
        target.is_disjoint(&learnable) && target.is_disjoint(&fragile),
        "{target:?}"
    );
    assert!(train.is_disjoint(&target) && train.is_disjoint(&regression) && target.is_disjoint(&regression));
    let said = format!(
        "mined from the gates of {}: {} flipped cases the champion failed (to train on), {} it passed (to gate on)",
        first.id,
        learnable.len(),
        fragile.len()
    );
    assert!(log.contains(&said), "{said}\n{log}");
}

const TOOLS: &str = r#"
[agents.tools.versions.v1]
provider = "up"
model = "good"
[agents.tools.deployment]
champion = "v1"
policy = { type = "auto", min_gain = 0.0 }
canary_share = 0.5
canary_episodes = 200
[agents.tools.reward]
reference_signal = "gold"
[agents.tools.reward.critics.answer]
type = "numeric"
[agents.tools.learn]
optimisers = ["model"]
dataset_size = 30
[agents.tools.learn.model]
models = [{ provider = "up", model = "sloppy" }]
[agents.tools.learn.monitor]
min_episodes = 10
webhook = "WEBHOOK"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_whose_invalid_tool_calls_jump_is_rolled_back_and_alerted() {
    let posted: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = posted.clone();
    let hook = Router::new().route(
        "/hook",
        post(move |Json(body): Json<Value>| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(body);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, hook).await });

    let w = World::start_with(&TOOLS.replace("WEBHOOK", &hook_url)).await;
    sums(&w, "tools", "s", 30).await;
    let (learner, lines) = learner(&w);
    learner.run_cycle("tools", "manual").await.unwrap();
    // Offline it is as right as the champion and 5× cheaper: it passes the gate and goes live.
    let sloppy = version(&w, "tools", "sloppy");
    let d = w.store.deployment("tools").unwrap().unwrap();
    assert_eq!(d.canary.as_ref(), Some(&sloppy), "{:#?}", lines.lock().unwrap());
    wait_for_split(&w, "tools", Some(&sloppy)).await;

    // Online the traffic uses tools, and the canary calls one that does not exist.
    for i in 0..60 {
        w.call(
            "tools",
            &format!("w-{i}"),
            json!([{"role": "user", "content": format!("What is the weather in city {i}?")}]),
            Some(weather_tools()),
        )
        .await;
    }
    let verdict = learner.watch(&w.config.agents["tools"]).await.unwrap();
    assert!(matches!(verdict, Verdict::RolledBack(_)), "{verdict:?}");
    let d = w.store.deployment("tools").unwrap().unwrap();
    assert_eq!(d.canary, None);
    assert_eq!(d.champion, w.config.agents["tools"].versions["v1"].id);

    let alerts = w.store.alerts(Some("tools"), 10).unwrap();
    assert_eq!(alerts.len(), 1);
    let a = &alerts[0];
    assert_eq!(a.version_id, sloppy);
    assert_eq!(a.firing.metric, "invalid_tool_call");
    assert_eq!(a.firing.canary_rate, 1.0);
    assert_eq!(a.firing.champion_rate, 0.0);
    assert!(
        a.firing.canary_episodes >= 10 && a.firing.champion_episodes >= 10,
        "{a:?}"
    );
    assert!(a.firing.p_value < 0.001);
    assert_eq!(a.action, AlertAction::RolledBack);
    assert!(!a.firing.episodes.is_empty());
    for e in &a.firing.episodes {
        let episode = w.episode(e).await;
        assert!(episode.calls[0].flags.invalid_tool_call);
        assert_eq!(episode.calls[0].version_id, sloppy);
    }
    let hooks = posted.lock().unwrap().clone();
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0]["alert"]["metric"], "invalid_tool_call");
    assert_eq!(hooks[0]["alert"]["version_id"], sloppy.as_str());
    let c = w.store.candidates("tools", None).unwrap();
    assert_eq!(c[0].status, CandidateStatus::RolledBack);
    let history = w.store.history("tools", 100).unwrap();
    assert!(history
        .iter()
        .any(|e| e.kind == "alert" && e.summary.contains("invalid_tool_call")));
    assert!(history.iter().any(|e| e.kind == "rollback"));
    wait_for_split(&w, "tools", None).await;
    let metrics = w
        .http
        .get(format!("{}/metrics", w.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = format!("hone_alerts_total{{agent=\"tools\",version=\"{sloppy}\",metric=\"invalid_tool_call\"}} 1");
    assert!(metrics.contains(&line), "{metrics}");
    assert!(metrics.contains("hone_learn_cycle_step{agent=\"tools\",cycle=\"tools-1\",step=\"done\"} 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_examples_version_shows_the_most_similar_successful_episodes() {
    let w = World::start_with(STORY).await;
    for (i, q) in ["What is 10+4?", "What is 50+7?", "What is 11+4?", "What is 90+9?"]
        .iter()
        .enumerate()
    {
        let id = format!("m-{i}");
        w.ask("story", &id, q).await;
        let (a, b) = q[8..q.len() - 1].split_once('+').unwrap();
        w.feedback(
            &id,
            "gold",
            json!(a.parse::<i64>().unwrap() + b.parse::<i64>().unwrap()),
        )
        .await;
    }
    let (learner, _) = learner(&w);
    let agent = &w.config.agents["story"];
    let rewarder = learner.rewarder(agent).unwrap();
    w.recorder.flush(Duration::from_secs(5)).await.unwrap();
    hone_learn::scoring::reward::reward_pending(w.store.as_ref(), &rewarder, None, None, 1)
        .await
        .unwrap();
    // `weak` gets even sums wrong (10+4): only passing episodes become examples.
    let mut spec = agent.versions["v1"].spec.clone();
    spec.examples = Some(hone_types::ExamplePolicy {
        k: 1,
        min_reward: Some(0.5),
        embeddings: None,
    });
    let id = spec.id();
    hone_store::Store::upsert_versions(
        w.store.as_ref(),
        &[hone_types::VersionRecord {
            id: id.clone(),
            agent: "story".into(),
            label: None,
            spec,
            parent: None,
            created_by: "examples".into(),
            created_at: 1,
        }],
    )
    .unwrap();
    let r = w
        .http
        .post(format!("{}/v1/chat/completions", w.url))
        .header("x-hone-version", id.as_str())
        .json(&json!({"model": "story", "messages": [{"role": "user", "content": "What is 50+1?"}]}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let sent = w.fake.chats().last().unwrap().clone();
    let texts: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    // 50+7 (passed, shares "50") is the nearest success; 10+4 failed, 11+4 and 90+9 share nothing rare.
    assert_eq!(texts, ["What is 50+7?", "The answer is 57.", "What is 50+1?"]);
    // The recorded request is the client's, without the examples.
    w.recorder.flush(Duration::from_secs(5)).await.unwrap();
    let calls = w.store.version_window("story", &id, 0, "", 10).unwrap();
    let episode = w.episode(calls[0].id.as_str()).await;
    assert_eq!(episode.calls[0].request.messages.len(), 1);
}

/// With a shared artefact store, an adapter trained on another machine and
/// published there reaches vLLM: the gateway fetches it into the directory
/// vLLM reads before asking it to load; an adapter only this learner holds
/// is published first; one nowhere to be found refuses the deploy.
#[tokio::test]
async fn a_deploy_to_vllm_fetches_the_published_adapter_into_the_directory_it_reads() {
    let w = World::start_with(&format!("{STORY}\n[artefacts]\nurl = \"file://DATA/shared\"\n")).await;
    let reference = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/reference/adapters/qwen2"
    ));
    let elsewhere = tempfile::tempdir().unwrap();
    let trained = elsewhere.path().join("story-9-grpo");
    std::fs::create_dir_all(&trained).unwrap();
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(reference.join(file), trained.join(file)).unwrap();
    }
    let artefacts = hone_artefacts::Artefacts::new(&w.config.artefacts).unwrap();
    artefacts
        .publish_adapter("story-9-grpo", &trained)
        .await
        .unwrap()
        .unwrap();
    let vllm_dir = w.config.adapters_dir("up");
    assert!(!vllm_dir.join("story-9-grpo").exists());

    let mut spec = w.config.agents["story"].versions["v1"].spec.clone();
    spec.routes[0].adapter = Some("story-9-grpo".into());
    let done = deploy::prepare_adapters(&w.config, &w.client(), &spec).await.unwrap();
    assert_eq!(done, ["adapter story-9-grpo loaded by `up`"]);
    let loads = w.fake.bodies("/v1/load_lora_adapter");
    let path = std::path::PathBuf::from(loads[0]["lora_path"].as_str().unwrap());
    assert_eq!(path, std::path::absolute(vllm_dir.join("story-9-grpo")).unwrap());
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        assert_eq!(
            std::fs::read(path.join(file)).unwrap(),
            std::fs::read(trained.join(file)).unwrap(),
            "{file} as vLLM reads it"
        );
    }

    // Only here: published by the deploy, so every replica can reach it.
    let local_only = vllm_dir.join("story-10-sft");
    std::fs::create_dir_all(&local_only).unwrap();
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(reference.join(file), local_only.join(file)).unwrap();
    }
    spec.routes[0].adapter = Some("story-10-sft".into());
    deploy::prepare_adapters(&w.config, &w.client(), &spec).await.unwrap();
    assert!(artefacts.published_adapter("story-10-sft").await.unwrap().is_some());

    spec.routes[0].adapter = Some("story-11-dpo".into());
    let e = deploy::prepare_adapters(&w.config, &w.client(), &spec)
        .await
        .unwrap_err();
    assert!(
        e.contains("neither published at file://") && e.contains("story-11-dpo"),
        "{e}"
    );
    assert_eq!(
        w.fake.bodies("/v1/load_lora_adapter").len(),
        2,
        "vLLM was asked for a missing adapter"
    );
}

#[tokio::test]
async fn a_deploy_asks_vllm_to_load_the_adapter_and_is_refused_when_it_cannot() {
    let w = World::start_with(STORY).await;
    let agent = &w.config.agents["story"];
    let mut ok = agent.versions["v1"].spec.clone();
    ok.routes[0].adapter = Some("story-7-sft".into());
    let done = deploy::prepare_adapters(&w.config, &w.client(), &ok).await.unwrap();
    assert_eq!(done, ["adapter story-7-sft loaded by `up`"]);
    let loads = w.fake.bodies("/v1/load_lora_adapter");
    assert_eq!(loads[0]["lora_name"], "story-7-sft");
    assert!(loads[0]["lora_path"]
        .as_str()
        .unwrap()
        .ends_with("/adapters/story-7-sft"));

    let mut broken = ok.clone();
    broken.routes[0].adapter = Some("broken-1".into());
    let e = deploy::prepare_adapters(&w.config, &w.client(), &broken)
        .await
        .unwrap_err();
    assert!(
        e.contains("refused to load adapter `broken-1`") && e.contains("adapter not found"),
        "{e}"
    );

    // A candidate naming that adapter is not deployed, and the reason is kept.
    let id = broken.id();
    let now = 5;
    w.store
        .start_cycle("story", "manual", now)
        .map(|c| assert_eq!(c.id, "story-1"))
        .unwrap();
    let candidate = hone_types::Candidate {
        cycle_id: "story-1".into(),
        agent: "story".into(),
        version_id: id.clone(),
        parent: agent.versions["v1"].id.clone(),
        optimiser: "sft".into(),
        diff: "adapter".into(),
        status: CandidateStatus::OnFront,
        reason: None,
        scores: None,
        training: None,
        spend: None,
        created_at: now,
        updated_at: now,
    };
    let record = hone_types::VersionRecord {
        id: id.clone(),
        agent: "story".into(),
        label: None,
        spec: broken,
        parent: None,
        created_by: "sft".into(),
        created_at: now,
    };
    w.store
        .add_candidates(&[record], std::slice::from_ref(&candidate), &[])
        .unwrap();
    let change = deploy::start_canary(&w.config, &w.client(), w.store.as_ref(), agent, &candidate, "alice")
        .await
        .unwrap();
    assert!(
        matches!(&change, Change::Refused(s) if s.starts_with("deploy refused")),
        "{change:?}"
    );
    assert!(w.store.deployment("story").unwrap().is_none());
    let c = &w.store.candidates("story", None).unwrap()[0];
    assert!(c.reason.as_deref().unwrap().contains("adapter not found"));
}

const LATE: &str = r#"
[agents.late.versions.v1]
provider = "up"
model = "weak"
[agents.late.reward]
reference_signal = "gold"
signals = { kept = 1.0 }
[agents.late.reward.critics.answer]
type = "numeric"
[agents.late.learn]
optimisers = ["model"]
dataset_size = 30
[agents.late.learn.model]
models = [{ provider = "up", model = "good" }]
[agents.late.deployment]
champion = "v1"
policy = { type = "manual" }
canary_share = 0.5
canary_episodes = 200
[agents.late.learn.monitor]
min_episodes = 1000
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_after_the_canarys_first_poll_is_counted() {
    let w = World::start_with(LATE).await;
    sums(&w, "late", "m", 30).await;
    let (learner, _) = learner(&w);
    let agent = &w.config.agents["late"];
    let cycle = learner.run_cycle("late", "manual").await.unwrap();
    let candidate = w.store.candidates("late", Some(&cycle.id)).unwrap().remove(0);
    let change = deploy::start_canary(&w.config, &w.client(), w.store.as_ref(), agent, &candidate, "alice")
        .await
        .unwrap();
    assert!(matches!(change, Change::Applied(_)), "{change:?}");
    let canary = candidate.version_id;
    wait_for_split(&w, "late", Some(&canary)).await;

    // Online episodes, no feedback yet; the first poll scores them but
    // counts none online: their users may still react (silence is not a zero).
    for i in 0..12 {
        w.ask("late", &format!("online-{i}"), &format!("What is {}+1?", 10 + i))
            .await;
    }
    assert_eq!(learner.watch(agent).await.unwrap(), Verdict::Waiting(0));
    let spec = learner.rewarder(agent).unwrap().spec_version.clone();
    let since = w.store.deployment("late").unwrap().unwrap().canary_since.unwrap();
    let window = || w.store.version_window("late", &canary, since, &spec, 100).unwrap();
    let first = window();
    assert!(!first.is_empty());
    let before: Vec<f64> = first.iter().map(|e| e.reward.unwrap()).collect();

    // The user keeps every canary answer, after that poll.
    for e in &first {
        w.feedback(e.id.as_str(), "kept", json!(1.0)).await;
    }
    // Heard, they count.
    assert_eq!(
        learner.watch(agent).await.unwrap(),
        Verdict::Waiting(first.len() as u64)
    );
    let after = window();
    assert_eq!(after.len(), first.len());
    for (e, was) in after.iter().zip(&before) {
        // The monitors' window sees the new value: the signal adds its weight.
        assert!(
            (e.reward.unwrap() - (was + 1.0)).abs() < 1e-9,
            "{} → {:?}",
            was,
            e.reward
        );
        let record = w.learn_store().reward(&e.id, &spec).unwrap().unwrap();
        let kept = record.components.iter().find(|c| c.name == "kept").unwrap();
        assert!(!kept.defaulted && kept.value == 1.0, "{kept:?}");
        assert_eq!(record.signals_seen, 1);
    }
}

const DRIFT: &str = r#"
[agents.drift.versions.v1]
provider = "up"
model = "weak"
[agents.drift.reward]
reference_signal = "gold"
[agents.drift.reward.critics.answer]
type = "numeric"
[agents.drift.learn]
optimisers = ["model"]
dataset_size = 20
[agents.drift.learn.model]
models = [{ provider = "up", model = "good" }]
"#;

/// Sums, then a window of a new kind of task: the second cycle raises a
/// drift alert naming the rising words, and samples that window only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_task_mix_in_the_window_is_raised_as_drift_and_weighted() {
    let w = World::start_with(DRIFT).await;
    let (learner, lines) = learner(&w);
    sums(&w, "drift", "s", 30).await;
    learner.run_cycle("drift", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert!(!log.contains("DRIFT"), "the first cycle has nothing before it\n{log}");

    // More sums: the same mix, no drift.
    sums(&w, "drift", "t", 30).await;
    learner.run_cycle("drift", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert!(!log.contains("DRIFT"), "{log}");
    assert!(w.store.alerts(Some("drift"), 10).unwrap().is_empty());

    for i in 0..30 {
        w.ask(
            "drift",
            &format!("fr-{i}"),
            &format!("Translate 'bonjour {i}' to English, please"),
        )
        .await;
    }
    let cycle = learner.run_cycle("drift", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    let alerts = w.store.alerts(Some("drift"), 10).unwrap();
    let alert = alerts.iter().find(|a| a.firing.metric == "drift_task_mix").expect(&log);
    assert_eq!(alert.firing.canary_episodes, 30);
    assert_eq!(alert.firing.champion_episodes, 60);
    assert!(
        alert.firing.canary_rate > 0.3 && alert.firing.p_value < 0.01,
        "{alert:?}"
    );
    assert!(alert.firing.episodes.iter().all(|e| e.starts_with("fr-")), "{alert:?}");
    assert!(log.contains("rising words: ") && log.contains("translate"), "{log}");
    let history = w.store.history("drift", 50).unwrap();
    assert!(history
        .iter()
        .any(|e| e.kind == "alert" && e.summary.starts_with("DRIFT drift: drift_task_mix")));
    // The cycle's traffic sample is the new window only.
    let train = w.store.dataset_items(cycle.detail.train.as_deref().unwrap()).unwrap();
    let target = w.store.dataset_items(cycle.detail.target.as_deref().unwrap()).unwrap();
    assert!(
        train.iter().chain(&target).all(|i| i.id.starts_with("fr-")),
        "{:?}",
        train.iter().chain(&target).map(|i| &i.id).collect::<Vec<_>>()
    );
}

const MARGIN: &str = r#"
[agents.margin.versions.v1]
provider = "up"
model = "weak"
[agents.margin.deployment]
champion = "v1"
policy = { type = "auto", min_gain = 0.05, max_cost_ratio = 3.0 }
canary_share = 0.5
canary_episodes = 10
promote_margin = 0.05
canary_max_episodes = 16
[agents.margin.reward]
reference_signal = "gold"
[agents.margin.reward.critics.answer]
type = "numeric"
[agents.margin.learn]
optimisers = ["model"]
dataset_size = 40
[agents.margin.learn.model]
models = [{ provider = "up", model = "good" }]
[agents.margin.learn.monitor]
min_episodes = 1000
"#;

/// Online sums until `canary` has served `target` of them since `*index`;
/// the users' gold answer agrees with every other canary answer (so the
/// canary is right half the time online, level with the weak champion)
/// and with the right sum for the champion's.
async fn level_traffic(w: &World, canary: &VersionId, index: &mut usize, served: &mut usize, target: usize) {
    while *served < target {
        let (a, b) = (10 + *index, *index % 5 + 1);
        let id = format!("level-{index}");
        w.ask("margin", &id, &format!("What is {a}+{b}?")).await;
        let on_canary = &w.episode(&id).await.calls[0].version_id == canary;
        let gold = if on_canary && *served % 2 == 1 {
            a + b + 1
        } else {
            a + b
        };
        w.feedback(&id, "gold", json!(gold)).await;
        *served += usize::from(on_canary);
        *index += 1;
    }
}

/// With `promote_margin`, a canary that is level with its champion online
/// but too noisy to be shown within the margin is not promoted at
/// `canary_episodes` (the default rule would promote it): it keeps
/// collecting, and at `canary_max_episodes` it is rolled back, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_promotion_margin_a_canary_not_shown_within_it_collects_then_is_rolled_back() {
    let w = World::start_with(MARGIN).await;
    sums(&w, "margin", "s", 40).await;
    let (learner, lines) = learner(&w);
    learner.run_cycle("margin", "manual").await.unwrap();
    let agent = &w.config.agents["margin"];
    let good = version(&w, "margin", "good");
    let d = w.store.deployment("margin").unwrap().unwrap();
    assert_eq!(d.canary.as_ref(), Some(&good), "{:#?}", lines.lock().unwrap());
    wait_for_split(&w, "margin", Some(&good)).await;

    let (mut index, mut served) = (0, 0);
    level_traffic(&w, &good, &mut index, &mut served, 12).await;
    assert_eq!(learner.watch(agent).await.unwrap(), Verdict::Waiting(12));
    assert_eq!(
        w.store.deployment("margin").unwrap().unwrap().canary.as_ref(),
        Some(&good)
    );

    level_traffic(&w, &good, &mut index, &mut served, 16).await;
    let verdict = learner.watch(agent).await.unwrap();
    let Verdict::RolledBack(why) = &verdict else {
        panic!("{verdict:?}")
    };
    assert!(
        why.contains("not shown within 0.05 of the champion after 16 episodes")
            && why.contains("online reward 0.500 over 16 episodes"),
        "{why}"
    );
    let d = w.store.deployment("margin").unwrap().unwrap();
    assert_eq!((d.canary, &d.champion), (None, &agent.versions["v1"].id));
    let c = w.store.candidates("margin", None).unwrap();
    let candidate = c.iter().find(|c| c.version_id == good).unwrap();
    assert_eq!(candidate.status, CandidateStatus::RolledBack);
    assert!(w
        .store
        .history("margin", 100)
        .unwrap()
        .iter()
        .any(|e| e.kind == "rollback" && e.summary.contains("not shown within 0.05")));
}

/// An agent whose cycles run `model` (offering `offered`) and `examples`,
/// one a cycle, with manual approval so cycles follow each other.
fn taking_turns(agent: &str, offered: &str) -> String {
    format!(
        r#"
[agents.{agent}.versions.v1]
provider = "up"
model = "weak"
[agents.{agent}.reward]
reference_signal = "gold"
[agents.{agent}.reward.critics.answer]
type = "numeric"
[agents.{agent}.learn]
optimisers = ["model", "examples"]
optimisers_per_cycle = 1
dataset_size = 30
[agents.{agent}.learn.model]
models = [{{ provider = "up", model = "{offered}" }}]
"#
    )
}

/// The optimisers of each cycle's candidates.
fn proposers(w: &World, agent: &str, cycle: &str) -> std::collections::BTreeSet<String> {
    w.store
        .candidates(agent, Some(cycle))
        .unwrap()
        .into_iter()
        .map(|c| c.optimiser)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_optimiser_a_cycle_they_take_turns_and_one_with_nothing_passes_its_turn() {
    let config = taking_turns("turns", "good") + &taking_turns("pass", "weak");
    let w = World::start_with(&config).await;
    let (learner, lines) = learner(&w);
    // Manual approval: candidates wait on the front, so cycles follow each other.
    sums(&w, "turns", "a", 30).await;
    let first = learner.run_cycle("turns", "manual").await.unwrap();
    sums(&w, "turns", "b", 30).await;
    let second = learner.run_cycle("turns", "manual").await.unwrap();
    let said = lines.lock().unwrap().join("\n");
    assert_eq!(proposers(&w, "turns", &first.id), ["model".to_owned()].into(), "{said}");
    assert_eq!(
        proposers(&w, "turns", &second.id),
        ["examples".to_owned()].into(),
        "{said}"
    );
    for first in ["model", "examples"] {
        let line = format!("optimisers take turns, 1 a cycle: this cycle from {first}");
        assert!(said.contains(&line), "`{line}` missing from\n{said}");
    }

    // `model` here offers only the champion's own model: nothing new, so
    // its turn passes to `examples` within the same cycle.
    sums(&w, "pass", "c", 30).await;
    let cycle = learner.run_cycle("pass", "manual").await.unwrap();
    let said = lines.lock().unwrap().join("\n");
    assert_eq!(
        proposers(&w, "pass", &cycle.id),
        ["examples".to_owned()].into(),
        "{said}"
    );
    assert!(
        said.contains("model proposed nothing new; its turn passes on"),
        "{said}"
    );
}
