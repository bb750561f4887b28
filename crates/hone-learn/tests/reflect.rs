//! Story tests of the reflective optimisers on the real gateway and store,
//! in front of a fake hosted model whose accuracy depends on the rules its
//! system prompt states, and a fake reflection model that proposes rules
//! from the failures it is shown (both speak the chat-completions wire
//! format). A rewrite that adds the missing rule passes the gate; one that
//! adds a harmful rule is pruned with the regression named; the playbook
//! grows by deltas and retires a harmful lesson; a tool's description is
//! rewritten where its calls go wrong; budgets stop proposals.

use crate::support::{learner, wait_for_split, World};
use hone_learn::watch::Verdict;
use hone_store::{CycleStore, Store};
use hone_types::{CandidateStatus, CycleState, EpisodeQuery};
use serde_json::json;

/// An agent `NAME` on the rule-following model whose `prompt` optimiser
/// asks the reflection model `REFLECTOR`.
const PROMPT_AGENT: &str = r#"
[agents.NAME.versions.v1]
provider = "up"
model = "ruled"
system = "You are a calculator. Answer as: The answer is N."
[agents.NAME.reward]
reference_signal = "gold"
[agents.NAME.reward.critics.answer]
type = "numeric"
[agents.NAME.learn]
optimisers = ["prompt"]
dataset_size = 40
[agents.NAME.learn.prompt]
reflector = { provider = "up", model = "REFLECTOR" }
candidates = 1
merge = false
"#;

fn prompt_agent(name: &str, reflector: &str) -> String {
    PROMPT_AGENT.replace("NAME", name).replace("REFLECTOR", reflector)
}

/// `n` episodes with their gold answers: every `plus_every`-th asks a sum
/// whose answer is no multiple of ten, the others a difference (or, with
/// `times`, a product) that is one.
async fn traffic(w: &World, agent: &str, prefix: &str, n: usize, plus_every: usize, times: bool) {
    for i in 0..n {
        let (question, gold) = if i % plus_every == 0 {
            let (a, b) = (11 + i as i64, if (13 + i) % 10 == 0 { 3 } else { 2 });
            (format!("What is {a}+{b}?"), a + b)
        } else if times {
            let (a, b) = (10 * (i as i64 % 4 + 1), i as i64 % 3 + 2);
            (format!("What is {a}*{b}?"), a * b)
        } else {
            let (a, b) = (10 * (i as i64 % 7 + 5), 10 * (i as i64 % 3 + 1));
            (format!("What is {a}-{b}?"), a - b)
        };
        let id = format!("{prefix}-{i}");
        w.ask(agent, &id, &question).await;
        w.feedback(&id, "gold", json!(gold)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_that_adds_the_missing_rule_passes_and_one_that_adds_a_harmful_rule_is_pruned() {
    let agents = prompt_agent("rules", "reflector") + &prompt_agent("reckless", "reckless");
    let w = World::start_with(&agents).await;
    traffic(&w, "rules", "r", 40, 4, false).await;
    traffic(&w, "reckless", "k", 40, 4, false).await;
    let (learner, lines) = learner(&w);

    let cycle = learner.run_cycle("rules", "manual").await.unwrap();
    println!("{}", lines.lock().unwrap().join("\n"));
    assert_eq!(cycle.state, CycleState::Done, "{:?}", cycle.detail);
    let candidates = w.store.candidates("rules", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{candidates:#?}");
    let good = &candidates[0];
    assert_eq!(good.optimiser, "prompt");
    assert_eq!(good.status, CandidateStatus::OnFront, "{:?}", good.reason);
    // The diff is a unified diff of the prompt text, then the diagnosis.
    assert!(
        good.diff.contains(
            "--- champion\n+++ candidate\n@@ -1 +1,2 @@\n+A-B means subtract B from A.\n You are a calculator. Answer as: The answer is N."
        ),
        "{}",
        good.diff
    );
    assert!(
        good.diff.contains("reflected on 8 episodes from the champion's prompt"),
        "{}",
        good.diff
    );
    let scores = good.scores.as_ref().unwrap();
    assert_eq!(scores.target_pass_rate, 1.0, "{scores:?}");

    // The reflector was shown real evidence: failures with the critic's
    // finding and the user's gold answer, and its calls were recorded and metered.
    let shown = w.upstream.reflector_prompts.lock().unwrap()[0].clone();
    assert!(shown.contains("outcome=\"failed\""), "{shown}");
    assert!(shown.contains("user feedback gold = "), "{shown}");
    assert!(shown.contains("critic answer: "), "{shown}");
    assert!(shown.contains("<current_prompt>\nYou are a calculator."), "{shown}");
    let spend = good.spend.unwrap();
    // The fake answers every call with 11 prompt and 7 completion tokens.
    assert_eq!((spend.calls, spend.tokens), (1, 18));
    assert!(
        (spend.cost_usd - (11.0 * 3.0 + 7.0 * 15.0) / 1e6).abs() < 1e-12,
        "{spend:?}"
    );
    assert_eq!(cycle.detail.spend["prompt"], spend);
    w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
    let recorded = w
        .store
        .episodes(&EpisodeQuery {
            agents: Some(vec!["hone-reflector".into()]),
            limit: 10,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        recorded.episodes.len(),
        1,
        "the reflection call is an episode of `hone-reflector`"
    );

    // The reckless reflector fixes the differences but rounds every answer:
    // better on average, yet it breaks the sums that passed.
    let cycle = learner.run_cycle("reckless", "manual").await.unwrap();
    let candidates = w.store.candidates("reckless", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1);
    let bad = &candidates[0];
    assert!(
        bad.diff.contains("+Round every answer to the nearest ten."),
        "{}",
        bad.diff
    );
    assert_eq!(bad.status, CandidateStatus::Pruned);
    let reason = bad.reason.as_deref().unwrap();
    assert!(
        reason.contains("breaks") && reason.contains("previously passing"),
        "{reason}"
    );
}

const PLAYBOOK: &str = r#"
[agents.lessons.versions.v1]
provider = "up"
model = "ruled"
system = "You are a calculator. Answer as: The answer is N."
playbook = ["Round every answer to the nearest ten."]
[agents.lessons.deployment]
champion = "v1"
policy = { type = "auto", min_gain = 0.05 }
canary_share = 0.5
canary_episodes = 10
[agents.lessons.reward]
reference_signal = "gold"
[agents.lessons.reward.critics.answer]
type = "numeric"
[agents.lessons.learn]
optimisers = ["playbook"]
dataset_size = 40
[agents.lessons.learn.playbook]
reflector = { provider = "up", model = "reflector" }
[agents.lessons.learn.monitor]
min_episodes = 10
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playbook_retires_a_harmful_lesson_and_grows_by_deltas() {
    let w = World::start_with(PLAYBOOK).await;
    traffic(&w, "lessons", "a", 40, 2, false).await;
    let (learner, lines) = learner(&w);
    let agent = &w.config.agents["lessons"];

    // Cycle 1: the seeded rounding lesson hurts; the reflector tags it
    // harmful and retires it, and adds the subtraction rule (twice, in
    // other words: the curator keeps one).
    let cycle = learner.run_cycle("lessons", "manual").await.unwrap();
    println!("{}", lines.lock().unwrap().join("\n"));
    let candidates = w.store.candidates("lessons", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{candidates:#?}");
    let first = &candidates[0];
    assert_eq!(first.optimiser, "playbook");
    assert_eq!(first.status, CandidateStatus::Canary, "{:?}", first.reason);
    let version = w.store.version(&first.version_id).unwrap().unwrap();
    let lessons: Vec<(&str, &str)> = version
        .spec
        .playbook
        .iter()
        .map(|l| (l.id.as_str(), l.text.as_str()))
        .collect();
    assert_eq!(lessons, [("L2", "A-B means subtract B from A.")]);
    assert!(!version.spec.playbook[0].sources.is_empty());
    assert_eq!(version.spec.playbook[0].helpful, 1, "the repeated add counted for it");
    assert!(
        first.diff.contains("playbook: 1 → 1 lessons (+L2 −L1)"),
        "{}",
        first.diff
    );
    assert!(
        first
            .diff
            .contains("\n− L1 retired: rounding breaks exact answers (helpful 0, harmful"),
        "{}",
        first.diff
    );
    assert!(
        first.diff.contains("\n+ L2 \"A-B means subtract B from A.\" (from a-"),
        "{}",
        first.diff
    );
    assert!(first.diff.contains("\n= L2 already says"), "{}", first.diff);

    // Online, the canary is better; it is promoted.
    wait_for_split(&w, "lessons", Some(&first.version_id)).await;
    traffic(&w, "lessons", "online", 40, 2, false).await;
    let verdict = learner.watch(agent).await.unwrap();
    assert!(matches!(verdict, Verdict::Promoted(_)), "{verdict:?}");

    // Cycle 2: products appear; the playbook grows by one lesson and keeps
    // the one that helped, with its count.
    traffic(&w, "lessons", "b", 40, 2, true).await;
    let cycle = learner.run_cycle("lessons", "manual").await.unwrap();
    println!("{}", lines.lock().unwrap().join("\n"));
    let candidates = w.store.candidates("lessons", Some(&cycle.id)).unwrap();
    assert_eq!(
        candidates.len(),
        1,
        "{:?}",
        w.upstream.reflector_prompts.lock().unwrap().last()
    );
    let second = &candidates[0];
    assert_eq!(second.parent, first.version_id);
    let version = w.store.version(&second.version_id).unwrap().unwrap();
    let ids: Vec<&str> = version.spec.playbook.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["L2", "L3"], "{:?}", version.spec.playbook);
    assert_eq!(version.spec.playbook[1].text, "A*B means multiply A by B.");
    assert!(version.spec.playbook[0].helpful > 1, "{:?}", version.spec.playbook[0]);
    assert!(second.diff.contains("(+L3 −none)"), "{}", second.diff);

    // History tells which lessons each version added or retired, and on what episodes.
    let history: Vec<String> = w
        .store
        .history("lessons", 200)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "candidate")
        .map(|e| e.summary)
        .collect();
    assert!(
        history
            .iter()
            .any(|m| m.contains("+ L3 \"A*B means multiply A by B.\" (from b-")),
        "{history:#?}"
    );
    assert!(history.iter().any(|m| m.contains("− L1 retired")), "{history:#?}");
}

const TOOLS: &str = r#"
[agents.tooly.versions.v1]
provider = "up"
model = "tooly"
tools = [{ type = "function", function = { name = "convert", description = "Convert a distance.", parameters = { type = "object", properties = { amount = { type = "number" }, unit = { type = "string" } }, required = ["amount", "unit"] } } }]
[agents.tooly.reward]
signals = { resolved = { weight = 1.0, default = 1.0 } }
[agents.tooly.learn]
optimisers = ["tools"]
dataset_size = 20
[agents.tooly.learn.tools]
reflector = { provider = "up", model = "reflector" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_whose_calls_break_its_schema_gets_a_clearer_description() {
    let w = World::start_with(TOOLS).await;
    // The client offers its own (vaguer) copy of the tool; the version's wins.
    let client_tools = json!([{"type": "function", "function": {"name": "convert", "description": "convert"}}]);
    for i in 0..20 {
        let id = format!("t-{i}");
        let m = w
            .call(
                "tooly",
                &id,
                json!([{"role": "user", "content": format!("Convert {} km to miles", 5 + i)}]),
                Some(client_tools.clone()),
            )
            .await;
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            json!({"amount": format!("{} km", 5 + i), "unit": "km"}).to_string()
        );
    }
    let e = w.episode("t-0").await;
    assert!(
        e.calls[0].flags.invalid_tool_call,
        "checked against the version's schema"
    );

    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("tooly", "manual").await.unwrap();
    println!("{}", lines.lock().unwrap().join("\n"));
    let candidates = w.store.candidates("tooly", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{candidates:#?}");
    let c = &candidates[0];
    assert_eq!(c.optimiser, "tools");
    assert!(
        c.diff.starts_with("tools: 1 → 1 owned\n--- champion\n+++ candidate"),
        "{}",
        c.diff
    );
    assert!(
        c.diff.contains("-      \"description\": \"Convert a distance.\","),
        "{}",
        c.diff
    );
    assert!(
        c.diff
            .contains("+      \"description\": \"Convert a distance. `amount` is a plain number"),
        "{}",
        c.diff
    );
    assert!(
        c.diff.contains("`convert`: 10 invalid calls, 0 failed episodes"),
        "{}",
        c.diff
    );
    assert_eq!(c.status, CandidateStatus::OnFront, "{:?}", c.reason);
    let scores = c.scores.as_ref().unwrap();
    assert_eq!(scores.target_pass_rate, 1.0, "{scores:?}");
}

const FRUGAL: &str = r#"
[agents.frugal.versions.v1]
provider = "up"
model = "ruled"
[agents.frugal.reward]
reference_signal = "gold"
[agents.frugal.reward.critics.answer]
type = "numeric"
[agents.frugal.learn]
optimisers = ["prompt", "playbook"]
dataset_size = 40
budget = { calls = 2 }
[agents.frugal.learn.prompt]
reflector = { provider = "up", model = "reflector" }
candidates = 4
budget = { calls = 1 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_stop_proposals() {
    let w = World::start_with(FRUGAL).await;
    traffic(&w, "frugal", "f", 40, 2, true).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("frugal", "manual").await.unwrap();
    let said = lines.lock().unwrap().join("\n");
    println!("{said}");
    // `prompt` may make one call of its four rewrites; `playbook` (sharing
    // the reflector) gets the cycle's second and last call.
    assert!(
        said.contains("prompt: the prompt optimiser's budget is spent (1 of 1 calls); no more rewrites this cycle"),
        "{said}"
    );
    assert_eq!(cycle.detail.spend["prompt"].calls, 1);
    assert_eq!(cycle.detail.spend["playbook"].calls, 1);
    assert_eq!(w.upstream.reflector_prompts.lock().unwrap().len(), 2);
    let events: Vec<String> = w
        .store
        .history("frugal", 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "budget")
        .map(|e| e.summary)
        .collect();
    assert!(
        events
            .iter()
            .any(|m| m.starts_with("prompt spent 1 call, 18 tokens, $")),
        "{events:?}"
    );

    // A second cycle over the same window's budget: a cycle-wide cap of 2
    // leaves nothing after `prompt` spends both; `playbook` does not run.
    let tight = FRUGAL
        .replace("budget = { calls = 1 }", "budget = { calls = 2 }")
        .replace("frugal", "tight");
    let w = World::start_with(&tight).await;
    traffic(&w, "tight", "t", 40, 2, true).await;
    let (tight_learner, lines) = crate::support::learner(&w);
    let cycle = tight_learner.run_cycle("tight", "manual").await.unwrap();
    let said = lines.lock().unwrap().join("\n");
    assert!(
        said.contains("playbook not run: the cycle's budget is spent (2 of 2 calls)"),
        "{said}"
    );
    assert_eq!(cycle.detail.spend["prompt"].calls, 2);
    assert!(!cycle.detail.spend.contains_key("playbook"));
}

const POOL: &str = r#"
[agents.gepa.versions.v1]
provider = "up"
model = "ruled"
system = "You are a calculator. Answer as: The answer is N."
[agents.gepa.deployment]
champion = "v1"
policy = { type = "auto", min_gain = 0.05 }
canary_share = 0.5
canary_episodes = 10
[agents.gepa.reward]
reference_signal = "gold"
[agents.gepa.reward.critics.answer]
type = "numeric"
[agents.gepa.learn]
optimisers = ["prompt"]
dataset_size = 45
[agents.gepa.learn.prompt]
reflector = { provider = "up", model = "reflector" }
candidates = 2
minibatch = 1
[agents.gepa.learn.monitor]
min_episodes = 10
"#;

/// Sums, differences and products in turn, with their gold answers.
async fn three_ops(w: &World, agent: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let (a, b) = (20 + i as i64, i as i64 % 5 + 2);
        let (question, gold) = match i % 3 {
            0 => (format!("What is {a}+{b}?"), a + b),
            1 => (format!("What is {a}-{b}?"), a - b),
            _ => (format!("What is {a}*{b}?"), a * b),
        };
        let id = format!("{prefix}-{i}");
        w.ask(agent, &id, &question).await;
        w.feedback(&id, "gold", json!(gold)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_prompt_that_won_elsewhere_is_merged_into_the_next_champion() {
    let w = World::start_with(POOL).await;
    three_ops(&w, "gepa", "p", 45).await;
    let (learner, lines) = learner(&w);
    let agent = &w.config.agents["gepa"];

    // Cycle 1: two rewrites from one failure each — one learns to subtract,
    // the other to multiply. Each wins on its own instances; the better one
    // goes live.
    let cycle = learner.run_cycle("gepa", "manual").await.unwrap();
    println!("{}", lines.lock().unwrap().join("\n"));
    let first = w.store.candidates("gepa", Some(&cycle.id)).unwrap();
    let system = |c: &hone_types::Candidate| w.store.version(&c.version_id).unwrap().unwrap().spec.system.unwrap();
    let subtract = first
        .iter()
        .find(|c| system(c).contains("subtract"))
        .expect("a subtracting rewrite");
    let multiply = first
        .iter()
        .find(|c| system(c).contains("multiply"))
        .expect("a multiplying rewrite");
    assert!(!system(subtract).contains("multiply") && !system(multiply).contains("subtract"));
    let (live, other) = if subtract.status == CandidateStatus::Canary {
        (subtract, multiply)
    } else {
        (multiply, subtract)
    };
    assert_eq!(live.status, CandidateStatus::Canary, "{first:#?}");
    // Worse on average, so off the reward/cost front — but the per-instance
    // pool keeps it for what it alone got right.
    assert_eq!(other.status, CandidateStatus::Pruned, "{first:#?}");
    assert!(
        other.reason.as_deref().unwrap().starts_with("dominated by"),
        "{:?}",
        other.reason
    );
    wait_for_split(&w, "gepa", Some(&live.version_id)).await;
    three_ops(&w, "gepa", "online", 45).await;
    let verdict = learner.watch(agent).await.unwrap();
    assert!(matches!(verdict, Verdict::Promoted(_)), "{verdict:?}");

    // Cycle 2: the other rewrite is in the Pareto pool (it won instances the
    // new champion still fails); a three-way merge keeps both rules.
    three_ops(&w, "gepa", "q", 45).await;
    let cycle = learner.run_cycle("gepa", "manual").await.unwrap();
    println!("{}", lines.lock().unwrap().join("\n"));
    let second = w.store.candidates("gepa", Some(&cycle.id)).unwrap();
    let merged = second
        .iter()
        .find(|c| c.diff.contains(&format!("merges pool prompt {}", other.version_id)))
        .unwrap_or_else(|| panic!("no merge among {second:#?}"));
    let text = system(merged);
    assert_eq!(
        text,
        "A-B means subtract B from A.\nYou are a calculator. Answer as: The answer is N.\nA*B means multiply A by B."
    );
    assert!(merged.spend.is_none(), "a merge calls no model");
    assert_eq!(
        merged.scores.as_ref().unwrap().target_pass_rate,
        1.0,
        "{:?}",
        merged.reason
    );
}
