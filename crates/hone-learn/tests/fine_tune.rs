//! `openai-sft` and `openai-dpo` against the fake upstream's fine-tuning API
//! (OpenAI's wire format: multipart files, jobs with `method`, events,
//! cancel). The fake's `ft:` model answers every sum right where the base
//! (`weak`) gets the even ones wrong, unless the agent is named to regress.

use crate::support::{learner, wait_for_split, World};
use hone_learn::cycle::watch::Verdict;
use hone_store::{CycleStore, Store};
use hone_test_support::fine_tuning::JobScript;
use hone_types::{CandidateStatus, CycleState};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// An agent on `weak` with `openai-sft` (`learn` adds to its learn table,
/// `sft` to the optimiser's).
fn agent(name: &str, learn: &str, sft: &str) -> String {
    format!(
        r#"
[agents.{name}]
[agents.{name}.versions.v1]
provider = "up"
model = "weak"
system = "You add numbers."
[agents.{name}.deployment]
champion = "v1"
policy = {{ type = "auto", min_gain = 0.05, max_cost_ratio = 3.0 }}
canary_share = 0.5
canary_episodes = 10
[agents.{name}.reward]
reference_signal = "gold"
[agents.{name}.reward.critics.answer]
type = "numeric"
[agents.{name}.learn]
optimisers = ["openai-sft"]
dataset_size = 40
{learn}
[agents.{name}.learn.upload]
redact = ["email"]
[agents.{name}.learn.openai-sft]
n_epochs = 2
min_examples = 4
usd_per_mtok = 3.0
poll_seconds = 0.05
{sft}
[agents.{name}.learn.gate]
reruns = 2
[agents.{name}.learn.monitor]
min_episodes = 10
"#
    )
}

/// `n` sums asked by a customer whose e-mail is in the system message, each
/// with its gold answer.
async fn sums(w: &World, agent: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let (a, b) = (10 + i, i % 5 + 1);
        let id = format!("{prefix}-{i}");
        let messages = json!([
            {"role": "system", "content": format!("Customer: user{i}@example.com")},
            {"role": "user", "content": format!("What is {a}+{b}?")},
        ]);
        w.call(agent, &id, messages, None).await;
        w.feedback(&id, "gold", json!(a + b)).await;
    }
}

/// The sum `What is A+B?` asks for.
fn sum_asked(question: &Value) -> i64 {
    let question = question.as_str().unwrap();
    let (a, b) = question["What is ".len()..question.len() - 1].split_once('+').unwrap();
    a.parse::<i64>().unwrap() + b.parse::<i64>().unwrap()
}

/// The one job's request and its training file, after a cycle.
fn the_job(w: &World, log: &str) -> (Value, hone_test_support::fine_tuning::UploadedFile) {
    let ft = w.fake.fine_tuning();
    assert_eq!(ft.jobs.len(), 1, "{log}");
    let job = ft.jobs.values().next().unwrap().request.clone();
    let training = ft.files[job["training_file"].as_str().unwrap()].clone();
    (job, training)
}

fn lines_of(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervised_job_s_model_is_gated_canaried_and_promoted() {
    // Fine-tuned models of `weak` cost twice what it does.
    let priced = "[providers.up.prices.\"ft:weak\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n";
    let w = World::start_with(&format!("{}{priced}", agent("tuned", "allow_upload = true", ""))).await;
    sums(&w, "tuned", "s", 40).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("tuned", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");

    // The uploaded files, line by line in OpenAI's chat format, redacted.
    let (training, validation, job) = {
        let ft = w.fake.fine_tuning();
        assert_eq!(ft.jobs.len(), 1, "{log}");
        let job = ft.jobs.values().next().unwrap().request.clone();
        let file = |key: &str| ft.files[job[key].as_str().unwrap()].clone();
        (file("training_file"), file("validation_file"), job)
    };
    assert_eq!(training.purpose, "fine-tune");
    let rows = lines_of(&training.bytes);
    assert!(rows.len() >= 4, "{log}");
    for row in rows.iter().chain(lines_of(&validation.bytes).iter()) {
        // As the model was served: the champion's system prompt first.
        let messages = row["messages"].as_array().unwrap();
        assert_eq!(messages[0]["role"], "system");
        assert_eq!(messages[0]["content"], "You add numbers.", "{row}");
        assert_eq!(messages[1]["content"], "Customer: [REDACTED]", "{row}");
        assert_eq!(messages[2]["role"], "user");
        let last = messages.last().unwrap();
        assert_eq!(last["role"], "assistant");
        // Only the passing answers (odd sums) are trained on.
        let sum = sum_asked(&messages[2]["content"]);
        assert_eq!(last["content"], format!("The answer is {sum}."), "{row}");
        assert_eq!(sum % 2, 1);
        assert!(!row.to_string().contains("@example.com"));
    }
    assert_eq!(job["model"], "weak");
    assert_eq!(job["suffix"], "hone-tuned-1");
    assert_eq!(
        job["method"],
        json!({"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 2}}})
    );
    assert_eq!(job["metadata"]["hone_cycle"], "tuned-1");

    // The candidate: the job's model on the same provider, its spend, the
    // file's hash in the history.
    let candidates = w.store.candidates("tuned", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{log}");
    let candidate = &candidates[0];
    assert_eq!(candidate.optimiser, "openai-sft");
    assert_eq!(candidate.status, CandidateStatus::Canary, "{log}");
    let version = w.store.version(&candidate.version_id).unwrap().unwrap();
    let model = version.spec.routes[0].model.clone();
    assert!(model.starts_with("ft:weak:hone-test:hone-tuned-1:"), "{model}");
    assert_eq!(version.spec.routes[0].provider, "up");
    let trained = w
        .fake
        .fine_tuning()
        .jobs
        .values()
        .next()
        .unwrap()
        .trained_tokens
        .unwrap();
    let spend = candidate.spend.unwrap();
    assert_eq!(spend.tokens, trained);
    assert!((spend.cost_usd - trained as f64 * 3.0 / 1e6).abs() < 1e-12);
    // Its calls are priced as `ft:weak`'s: twice the champion's.
    let scores = candidate.scores.as_ref().unwrap();
    assert!(scores.mean_cost_usd > 0.0, "{scores:?}");
    assert!(!log.contains("no price for"), "{log}");
    let history = w.store.history("tuned", 200).unwrap();
    let created = history
        .iter()
        .find(|e| e.kind == "fine_tune")
        .expect("a fine_tune event");
    assert_eq!(
        created.evidence["training_sha256"],
        hex::encode(Sha256::digest(&training.bytes))
    );
    assert!(
        history
            .iter()
            .any(|e| e.kind == "train" && e.summary.contains("The job has successfully completed")),
        "the job's events are the cycle's history"
    );

    // Online, then promoted.
    wait_for_split(&w, "tuned", Some(&candidate.version_id)).await;
    sums(&w, "tuned", "online", 40).await;
    let verdict = learner.watch(&w.config.agents["tuned"]).await.unwrap();
    assert!(matches!(verdict, Verdict::Promoted(_)), "{verdict:?}");
    assert_eq!(
        w.store.deployment("tuned").unwrap().unwrap().champion,
        candidate.version_id
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_allow_upload_nothing_leaves_the_machine() {
    let w = World::start_with(&agent("private", "", "")).await;
    sums(&w, "private", "s", 20).await;
    w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
    assert!(w.get("/v1/episodes/s-1").await["reward"].is_null(), "not scored yet");
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("private", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    // The API shows the reward the cycle gave (an odd sum: `weak` is right).
    let shown = w.get("/v1/episodes/s-1").await;
    assert_eq!(shown["reward"]["passed"], true, "{shown}");
    assert!(shown["reward"]["value"].as_f64().unwrap() >= 1.0, "{shown}");
    assert!(
        log.contains("does not allow its episodes to leave the machine"),
        "{log}"
    );
    let ft = w.fake.fine_tuning();
    assert!(ft.files.is_empty() && ft.jobs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_over_budget_is_never_created() {
    let w = World::start_with(&agent("thrifty", "allow_upload = true", "budget = { usd = 0.0001 }")).await;
    sums(&w, "thrifty", "s", 40).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("thrifty", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    assert!(log.contains("over the openai-sft optimiser's budget"), "{log}");
    assert!(w.fake.fine_tuning().files.is_empty(), "nothing uploaded");
    let history = w.store.history("thrifty", 100).unwrap();
    assert!(history
        .iter()
        .any(|e| e.kind == "budget" && e.summary.contains("estimated at")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_ends_the_optimiser_with_the_host_s_reason() {
    let w = World::start_with(&agent("refused", "allow_upload = true", "")).await;
    w.fake.fine_tuning().script = JobScript::Fail("The training file has 3 examples with no assistant message".into());
    sums(&w, "refused", "s", 40).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("refused", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    assert!(
        log.contains("optimiser openai-sft failed: the fine-tuning job failed: The training file has 3 examples with no assistant message (invalid_training_file)"),
        "{log}"
    );
    assert!(w.store.candidates("refused", Some(&cycle.id)).unwrap().is_empty());
}

/// `hone learn` dies while the job runs: the resumed cycle follows the same
/// job (its id is in the cycle's history), and a cancelled cycle cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_cycle_follows_its_job_and_a_cancelled_one_cancels_it() {
    let w = std::sync::Arc::new(World::start_with(&agent("long", "allow_upload = true", "")).await);
    w.fake.fine_tuning().script = JobScript::Hang;
    sums(&w, "long", "s", 40).await;
    let start = |w: &std::sync::Arc<World>| {
        let w = w.clone();
        tokio::spawn(async move {
            let (learner, lines) = learner(&w);
            let cycle = learner.run_cycle("long", "manual").await;
            let log = lines.lock().unwrap().join("\n");
            (cycle, log)
        })
    };
    let running_job = |w: &World| w.fake.fine_tuning().jobs.values().any(|j| j.status == "running");
    let first = start(&w);
    while !running_job(&w) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    first.abort();
    let _ = first.await;

    let second = start(&w);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(w.fake.fine_tuning().jobs.len(), 1, "no second job");
    hone_learn::cycle::cancel::cancel(w.store.as_ref(), "long")
        .unwrap()
        .unwrap();
    let (cycle, log) = tokio::time::timeout(std::time::Duration::from_secs(30), second)
        .await
        .unwrap()
        .unwrap();
    let cycle = cycle.unwrap();
    assert_eq!(cycle.state, CycleState::Failed, "{log}");
    assert!(log.contains("resuming job ftjob-"), "{log}");
    let ft = w.fake.fine_tuning();
    assert_eq!(ft.jobs.len(), 1);
    assert_eq!(ft.jobs.values().next().unwrap().status, "cancelled", "{log}");
}

/// `openai-dpo`: the champion (right and wrong by turns) rolled out on the
/// train half, its right answer preferred over its wrong one, uploaded in
/// OpenAI's preference format with the job's beta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preference_job_uploads_pairs_of_the_champion_s_rollouts() {
    let config = agent("prefer", "allow_upload = true", "")
        .replace("model = \"weak\"", "model = \"coin\"")
        .replace("optimisers = [\"openai-sft\"]", "optimisers = [\"openai-dpo\"]")
        .replace(
            "[agents.prefer.learn.openai-sft]",
            // Four rollouts a task: the coin model's answers then differ
            // on ~7 tasks in 8, so the train half always holds enough pairs
            // (with two, 4 pairs of 20 tasks left it short now and then).
            "[agents.prefer.learn.openai-dpo]\nbeta = 0.2\ngroup_size = 4",
        );
    let w = World::start_with(&config).await;
    sums(&w, "prefer", "s", 40).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("prefer", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    let (job, training) = the_job(&w, &log);
    assert_eq!(
        job["method"],
        json!({"type": "dpo", "dpo": {"hyperparameters": {"n_epochs": 2, "beta": 0.2}}})
    );
    let rows = lines_of(&training.bytes);
    assert!(rows.len() >= 4, "{log}");
    for row in &rows {
        let messages = row["input"]["messages"].as_array().unwrap();
        assert_eq!(messages[0]["content"], "You add numbers.");
        assert_eq!(messages[1]["content"], "Customer: [REDACTED]", "{row}");
        let sum = sum_asked(&messages[2]["content"]);
        assert_eq!(row["preferred_output"][0]["role"], "assistant");
        assert_eq!(row["preferred_output"][0]["content"], format!("The answer is {sum}."));
        assert_eq!(row["non_preferred_output"][0]["content"], "The answer is 0.");
    }
    assert_eq!(w.store.candidates("prefer", Some(&cycle.id)).unwrap().len(), 1, "{log}");
}

/// A job whose model answers worse than the champion is pruned at the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_model_regresses_is_pruned() {
    let w = World::start_with(&agent("regress", "allow_upload = true", "")).await;
    sums(&w, "regress", "s", 40).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("regress", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    let candidates = w.store.candidates("regress", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{log}");
    assert_eq!(candidates[0].status, CandidateStatus::Pruned, "{log}");
    assert!(log.contains("no price for `ft:weak:"), "{log}");
    let deployment = w.store.deployment("regress").unwrap();
    assert!(deployment.is_none_or(|d| d.canary.is_none()), "{log}");
}

/// `require_signals`: only episodes a user signalled so are uploaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upload_filter_holds_back_episodes_without_the_required_signal() {
    let config = agent("picky", "allow_upload = true", "").replace(
        "redact = [\"email\"]",
        "redact = [\"email\"]\nrequire_signals = [\"thumbs_up\"]",
    );
    let w = World::start_with(&config).await;
    sums(&w, "picky", "s", 40).await;
    // Thumbs up on the episodes whose sum is 30 or more, only.
    let mut liked = std::collections::BTreeSet::new();
    for i in 0..40usize {
        let sum = 10 + i + i % 5 + 1;
        if sum >= 30 {
            w.feedback(&format!("s-{i}"), "thumbs_up", json!(true)).await;
            liked.insert(sum as i64);
        }
    }
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("picky", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    let ft = w.fake.fine_tuning();
    let uploaded: Vec<Value> = ft.files.values().flat_map(|f| lines_of(&f.bytes)).collect();
    assert!(!uploaded.is_empty(), "{log}");
    for row in &uploaded {
        let sum = sum_asked(&row["messages"][2]["content"]);
        assert!(liked.contains(&sum), "{sum} was uploaded without a thumbs up");
    }
    assert!(log.contains("held back by the upload filter"), "{log}");
}

/// `openai-rft`: prompts with their references, and the numeric critic as
/// the host's python grader; the job's model is gated like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reinforcement_job_is_graded_by_the_reward_spec_s_critics() {
    let config = agent("reason", "allow_upload = true", "")
        .replace("optimisers = [\"openai-sft\"]", "optimisers = [\"openai-rft\"]")
        .replace(
            "[agents.reason.learn.openai-sft]",
            "[agents.reason.learn.openai-rft]\nreasoning_effort = \"low\"",
        );
    let w = World::start_with(&config).await;
    sums(&w, "reason", "s", 40).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("reason", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    let (job, training) = the_job(&w, &log);
    let method = &job["method"];
    assert_eq!(method["type"], "reinforcement");
    assert_eq!(method["reinforcement"]["hyperparameters"]["reasoning_effort"], "low");
    let grader = &method["reinforcement"]["grader"];
    assert_eq!(grader["type"], "python", "{grader}");
    assert!(grader["source"].as_str().unwrap().contains("def grade(sample, item)"));
    assert!(
        log.contains("leaves out what it cannot express: the penalties"),
        "{log}"
    );
    // Every prompt, passing or not, with its reference; no answer.
    let rows = lines_of(&training.bytes);
    assert!(rows.len() >= 8, "{log}");
    for row in &rows {
        let messages = row["messages"].as_array().unwrap();
        assert_eq!(messages.last().unwrap()["role"], "user");
        let sum = sum_asked(&messages[2]["content"]);
        let reference: f64 = row["reference_answer"].as_str().unwrap().parse().unwrap();
        assert_eq!(reference, sum as f64, "{row}");
    }
    let even = |r: &Value| r["reference_answer"].as_str().unwrap().parse::<f64>().unwrap() % 2.0 == 0.0;
    assert!(rows.iter().any(even), "failed prompts are graded too");
    let candidates = w.store.candidates("reason", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{log}");
    assert!(candidates[0].scores.is_some(), "gated: {log}");
}

/// The python graders check what hone's critics check: the same answers
/// and references, scored by both (python3 runs the host's side).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_python_grader_scores_as_its_critic_does() {
    use hone_config::{CriticKind, CriticSpec};
    use hone_learn::scoring::critics::{from_spec, CriticInput};
    use hone_learn::search::optimiser::fine_tune::grader::python_source;
    let w = World::start().await;
    w.ask("calc", "template", "What is 2+2?").await;
    let template = w.episode("template").await;
    let answers = [
        "The answer is 42.",
        "42",
        "It is 1,042 or -3.5 maybe",
        "  the ANSWER   is 42. ",
        "none",
        "-.5",
        "1.2.3 then 7",
        "42.4",
    ];
    let references = [json!(42), json!("The answer is 42."), json!("-3.5"), json!("1042")];
    let kinds = [
        CriticKind::Numeric { tolerance: 0.0 },
        CriticKind::Numeric { tolerance: 0.5 },
        CriticKind::Exact { case_sensitive: false },
        CriticKind::Exact { case_sensitive: true },
        CriticKind::Regex {
            pattern: r"^\s*The answer is \d+\.$".into(),
        },
    ];
    let python = std::env::var("HONE_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    for kind in kinds {
        let critic = from_spec(&CriticSpec {
            name: "c".into(),
            weight: 1.0,
            kind: kind.clone(),
        })
        .unwrap();
        let (source, _) = python_source(&kind).unwrap();
        let mut cases = Vec::new();
        let mut expected = Vec::new();
        for answer in answers {
            for reference in &references {
                let mut episode = template.clone();
                let call = episode.calls.last_mut().unwrap();
                call.response.as_mut().unwrap().choices[0].message.content =
                    Some(hone_types::openai::Content::Text(answer.to_owned()));
                let score = critic
                    .score(CriticInput {
                        episode: &episode,
                        reference: Some(reference),
                    })
                    .map(|s| s.score)
                    .unwrap_or(0.0);
                let reference_answer = hone_learn::episode::reference_text(reference).unwrap();
                cases.push(json!({"sample": {"output_text": answer}, "item": {"reference_answer": reference_answer}}));
                expected.push(score);
            }
        }
        let script = format!(
            "{source}\nimport json, sys\nfor case in json.load(sys.stdin):\n    print(float(grade(case['sample'], case['item'])))\n"
        );
        let mut child = std::process::Command::new(&python)
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the host's graders");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(json!(cases).to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{kind:?}");
        let got: Vec<f64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        for ((case, want), have) in cases.iter().zip(&expected).zip(&got) {
            assert_eq!(want, have, "{kind:?} on {case}");
        }
        assert_eq!(got.len(), expected.len());
        assert!(
            expected.contains(&1.0) && expected.contains(&0.0),
            "{kind:?}: the cases pass and fail"
        );
    }
}

/// `upload.redact_command`: every row passes through the user's program
/// before it leaves; a program that fails uploads nothing and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redaction_program_sees_every_row_before_upload() {
    let scrub = "import sys, json\nfor line in sys.stdin:\n    print(json.dumps(json.loads(line)).replace('You add numbers.', '[POLICY]'))";
    let config = agent("scrubbed", "allow_upload = true", "").replace(
        "redact = [\"email\"]",
        &format!("redact = [\"email\"]\nredact_command = [\"python3\", \"-c\", {scrub:?}]"),
    );
    let w = World::start_with(&config).await;
    sums(&w, "scrubbed", "s", 40).await;
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("scrubbed", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    let (_, training) = the_job(&w, &log);
    for row in lines_of(&training.bytes) {
        assert_eq!(row["messages"][0]["content"], "[POLICY]", "{row}");
        assert_eq!(
            row["messages"][1]["content"], "Customer: [REDACTED]",
            "the detectors ran first"
        );
    }

    let failing = agent("refusing", "allow_upload = true", "").replace(
        "redact = [\"email\"]",
        "redact = [\"email\"]\nredact_command = [\"python3\", \"-c\", \"import sys; sys.exit('no key for the vault')\"]",
    );
    let w = World::start_with(&failing).await;
    sums(&w, "refusing", "s", 40).await;
    let (refusing, lines) = crate::support::learner(&w);
    refusing.run_cycle("refusing", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert!(
        log.contains("the redaction program (upload.redact_command)") && log.contains("no key for the vault"),
        "{log}"
    );
    assert!(w.fake.fine_tuning().files.is_empty(), "nothing uploaded");
}
