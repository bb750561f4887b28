//! `trainer.type = "trl"`: an `sft` cycle on the embedded engine whose
//! adapter TRL trains (SFTTrainer with PEFT, under `accelerate launch`) from
//! the same recorded tokens hone's own trainer reads. Its first step's loss
//! is the negative mean logprob the engine recorded when it sampled those
//! tokens (LoRA starts at zero, so the first step sees the base model):
//! transformers and hone's engine agree on the same weights. The adapter
//! it leaves is PEFT's, loads in hone's engine and is gated like any other.
//! `grpo` trains through TRL's GRPO loss on hone's planned groups with the
//! sampler's logprobs, on two processes, on- and off-policy.
//!
//! Needs a Python with torch, transformers, peft, trl and accelerate:
//! `HONE_TEST_TRL_PYTHON` (the test script installs one); skipped without
//! it unless `HONE_REQUIRE_TRL` is set.

use crate::support::{learner, recorded_passing_train, tiny_checkpoint, Recorded, World};
use hone_learn::search::optimiser::training::{adapter_name, Method};
use hone_store::{CycleStore, LearnStore, Store};
use hone_test_support::TestConfig;
use hone_train::Sequence;
use hone_types::CycleState;

fn python() -> Option<String> {
    match std::env::var("HONE_TEST_TRL_PYTHON") {
        Ok(python) => Some(python),
        Err(_) if std::env::var_os("HONE_REQUIRE_TRL").is_some() => {
            panic!("HONE_REQUIRE_TRL is set but HONE_TEST_TRL_PYTHON names no Python")
        }
        Err(_) => {
            eprintln!(
                "SKIPPED: HONE_TEST_TRL_PYTHON names no Python with torch, transformers, peft, trl and accelerate"
            );
            None
        }
    }
}

/// A world whose agent `agent` runs on a fresh tiny checkpoint (kept in the
/// returned directory), rewarded when its answer matches `pattern`, with
/// `learn` (its `[agents.AGENT.learn…]` tables) and TRL on `python` as its
/// trainer, `trainer` adding to that table.
async fn trl_world(agent: &str, pattern: &str, learn: &str, python: &str, trainer: &str) -> (tempfile::TempDir, World) {
    let model = tiny_checkpoint();
    let config = TestConfig::new()
        .local()
        .local_agent(agent, &model.path().display().to_string(), 6)
        .toml(&format!(
            "[agents.{agent}.reward]\npass_threshold = 0.5\n[agents.{agent}.reward.critics.answer]\ntype = \"regex\"\n\
             pattern = {pattern:?}\n{learn}\n[agents.{agent}.learn.trainer]\ntype = \"trl\"\npython = {python:?}\n{trainer}"
        ))
        .build();
    (model, World::start_with(&config).await)
}

/// `n` single-call episodes of `agent` asking for a number.
async fn ask_numbers(w: &World, agent: &str, n: usize) {
    for i in 0..n {
        w.ask(agent, &format!("{agent}-{i}"), &format!("Say a number, please ({i})"))
            .await;
    }
}

/// One cycle of `agent`, which must end done; the cycle and its log.
async fn one_cycle(
    learner: &hone_learn::cycle::Learner,
    lines: &Lines,
    agent: &str,
) -> (hone_types::CycleInfo, String) {
    let cycle = learner.run_cycle(agent, "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
    (cycle, log)
}

type Lines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trl_trains_an_sft_adapter_from_the_recorded_tokens_that_hones_engine_serves() {
    let Some(python) = python() else { return };
    let learn = "[agents.trl.learn]\noptimisers = [\"sft\"]\ndataset_size = 8\n\
                 [agents.trl.learn.sft]\nsteps = 2\nlr = 0.01\nrank = 4\nmin_examples = 1";
    let (_model, w) = trl_world("trl", ".*", learn, &python, "").await;
    ask_numbers(&w, "trl", 8).await;
    let (learner, lines) = learner(&w);
    let (cycle, log) = one_cycle(&learner, &lines, "trl").await;
    let candidates = w.store.candidates("trl", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{log}");
    assert_eq!(candidates[0].optimiser, "sft");
    assert!(
        candidates[0].scores.is_some(),
        "the gate ran the candidate on the engine: {log}"
    );

    // The recorded tokens of the chosen train episodes: one batch of four
    // holds all of them.
    let Recorded {
        chosen,
        logprob_sum,
        scored,
        ..
    } = recorded_passing_train(&w, &cycle);
    assert!(chosen > 0 && chosen <= 4, "{chosen} chosen\n{log}");
    let adapter = w.config.adapters_dir("local").join(adapter_name(&cycle, Method::Sft));
    let metrics = std::fs::read_to_string(adapter.join("metrics.jsonl")).unwrap();
    let steps: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(steps.len(), 2, "{metrics}");
    let expected = -logprob_sum / scored as f64;
    let loss = steps[0]["loss"].as_f64().unwrap();
    println!("TRL's first loss {loss:.6}, the engine's recorded {expected:.6}, over {scored} tokens");
    assert!(
        (loss - expected).abs() < 1e-3,
        "TRL's first loss {loss} vs the engine's recorded {expected}\n{metrics}"
    );
    // Two steps at lr 0.01 moved the adapter off the base.
    assert!(steps[1]["kl"].as_f64().unwrap() > 0.0, "{metrics}");
    let training = candidates[0].training.as_ref().unwrap();
    assert_eq!(training.steps, 2);

    // PEFT's layout, which hone's engine reads.
    let loaded =
        hone_engine::lora::Adapter::load(&adapter, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    assert_eq!(loaded.layers.len(), 2 * 7, "every projection of both layers");
    assert!(!adapter.join("trl.jsonl").exists(), "scratch files cleared");
    // The version names the adapter's bytes, not only its name.
    let version = w.store.version(&candidates[0].version_id).unwrap().unwrap();
    assert_eq!(
        version.spec.routes[0].adapter_sha256.as_deref(),
        Some(hone_artefacts::manifest_of(&adapter).unwrap().sha256.as_str())
    );
}

/// The summed logprob of each sequence's scored tokens on `model`, with the
/// adapter in `adapter` or without one, as hone's trainer computes them.
fn scored_logprobs(model: &std::path::Path, adapter: Option<&std::path::Path>, sequences: &[Sequence]) -> Vec<f64> {
    let base = hone_engine::Model::load(model, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    let lora = adapter.map(|dir| hone_train::LoraParams::load(&base, dir).unwrap());
    sequences
        .iter()
        .map(|s| {
            let packed = hone_train::Packed::new(&base, &[s]).unwrap();
            let lps = hone_train::policy::logprobs(&base, lora.as_ref(), &packed).unwrap();
            lps.iter().map(|l| f64::from(*l)).sum()
        })
        .collect()
}

/// `groups = "production"` GRPO trained by TRL's GRPOTrainer on hone's
/// plan, under `accelerate launch --num_processes 2` on the CPU (gloo, the
/// code path a GPU cluster takes): the served episodes with their users'
/// rewards, the sampler's logprobs as recorded, nothing generated by TRL.
/// The first step's importance ratio is 1 (torch's logprobs of the recorded
/// tokens are the engine's own); the adapter, loaded by hone, raised the
/// rewarded answers against the unrewarded; and once another version is
/// champion, the same kind of episodes train off-policy through TRL's
/// truncated importance weights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trl_trains_grpo_on_production_groups_with_the_samplers_logprobs_across_two_processes() {
    let Some(python) = python() else { return };
    let learn = "[agents.rl.learn]\noptimisers = [\"grpo\"]\ndataset_size = 16\nflipped_cycles = 0\n\
                 [agents.rl.learn.grpo]\nsteps = 4\nlr = 0.02\nrank = 4\nmin_examples = 2\ngroups = \"production\"";
    let (model, w) = trl_world("rl", "[a-z]", learn, &python, "num_processes = 2\n").await;
    let traffic = |prefix: &'static str| {
        let w = &w;
        async move {
            for i in 0..16 {
                w.ask(
                    "rl",
                    &format!("rl-{prefix}-{i}"),
                    &format!("Say a word, please ({prefix} {i})"),
                )
                .await;
            }
            w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
        }
    };
    traffic("a").await;
    let (learner, lines) = learner(&w);
    let (cycle, log) = one_cycle(&learner, &lines, "rl").await;
    assert!(log.contains("rl: grpo: 8 production episodes"), "{log}");
    let candidates = w.store.candidates("rl", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{log}");
    assert!(candidates[0].scores.is_some(), "the gate ran the candidate: {log}");

    let adapter = w.config.adapters_dir("local").join(adapter_name(&cycle, Method::Grpo));
    let metrics = std::fs::read_to_string(adapter.join("metrics.jsonl")).unwrap();
    let steps: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(steps.len(), 4, "{metrics}");
    let ratio = |s: &serde_json::Value| s["extra"]["ratio"].as_f64().unwrap_or(f64::NAN);
    println!(
        "TRL GRPO step ratios: {:?}",
        steps.iter().map(ratio).collect::<Vec<_>>()
    );
    assert!((ratio(&steps[0]) - 1.0).abs() < 1e-3, "{metrics}");
    assert!(
        steps.iter().all(|s| s["reward"].is_number()),
        "hone's planned rewards: {metrics}"
    );
    assert!(steps[0]["extra"].get("is_weight").is_none(), "on-policy: {metrics}");

    // What the adapter changed, measured by hone on the recorded tokens:
    // the answers users rewarded rose against those they did not (at a
    // modest lr: four steps of Adam at 0.05 on eight answers overshot now
    // and then, on two processes, and undid it).
    let train = w.store.dataset_items(cycle.detail.train.as_deref().unwrap()).unwrap();
    let (mut rewarded, mut unrewarded) = (Vec::new(), Vec::new());
    for item in &train {
        let episode = w.store.episode(item.episode_id.as_ref().unwrap()).unwrap().unwrap();
        for call in &episode.calls {
            let t = call.sampled_tokens().expect("the engine records token ids");
            let sequence = Sequence::prompt_completion(&t.prompt, &t.completion);
            if item.reward.is_some_and(|r| r >= 0.5) {
                rewarded.push(sequence);
            } else {
                unrewarded.push(sequence);
            }
        }
    }
    assert!(
        !rewarded.is_empty() && !unrewarded.is_empty(),
        "both kinds in the train half: {log}"
    );
    let rise = |sequences: &[Sequence]| {
        let before = scored_logprobs(model.path(), None, sequences);
        let after = scored_logprobs(model.path(), Some(&adapter), sequences);
        before.iter().zip(&after).map(|(b, a)| a - b).sum::<f64>() / sequences.len() as f64
    };
    let (up, down) = (rise(&rewarded), rise(&unrewarded));
    println!("mean logprob change: rewarded {up:+.4}, unrewarded {down:+.4}");
    assert!(up > down, "rewarded {up} vs unrewarded {down}");

    // New traffic served by v1; the candidate becomes the champion, so
    // these episodes are another policy's: corrected, not taken as its own.
    traffic("b").await;
    let spec = &w.config.agents["rl"];
    let (mut deployment, revision) = hone_learn::release::deploy::current(&*w.store, spec).unwrap();
    deployment.previous.push(deployment.champion.clone());
    deployment.champion = candidates[0].version_id.clone();
    assert!(w
        .store
        .change_deployment(&deployment, revision, &[], &[], None, 1)
        .unwrap());
    let (cycle, log) = one_cycle(&learner, &lines, "rl").await;
    assert!(log.contains("(8 served by other weights"), "{log}");
    let adapter = w.config.adapters_dir("local").join(adapter_name(&cycle, Method::Grpo));
    let metrics = std::fs::read_to_string(adapter.join("metrics.jsonl")).unwrap();
    let steps: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // Against the starting policy (the champion's adapter) the ratio is 1;
    // the tokens are weighted by min(π_start / π_sampler, 2).
    assert!((ratio(&steps[0]) - 1.0).abs() < 1e-3, "{metrics}");
    let weight = steps[0]["extra"]["is_weight"].as_f64().unwrap();
    assert!(
        weight > 0.0 && weight <= 2.0 && (weight - 1.0).abs() > 1e-4,
        "{metrics}"
    );
}

/// Stops every process whose command line names `path` (the TRL job of one
/// adapter: accelerate's launcher and its workers), as they stop when the
/// `hone learn` that started them dies.
fn stop_processes_naming(path: &std::path::Path) -> usize {
    let needle = path.display().to_string();
    let mut stopped = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if pid != std::process::id() && String::from_utf8_lossy(&cmdline).contains(&needle) {
            let killed = std::process::Command::new("sh")
                .args(["-c", &format!("kill -9 {pid}")])
                .status();
            stopped += usize::from(killed.is_ok_and(|s| s.success()));
        }
    }
    stopped
}

/// A TRL job cut off mid-training (as when `hone learn` dies: its job stops
/// itself) resumes from TRL's latest checkpoint when the cycle is resumed:
/// no step trained twice, none left out, the adapter finished and gated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trl_job_cut_off_mid_training_resumes_from_its_checkpoint_with_the_cycle() {
    let Some(python) = python() else { return };
    let steps = 60;
    let learn = format!(
        "[agents.re.learn]\noptimisers = [\"sft\"]\ndataset_size = 8\n\
         [agents.re.learn.sft]\nsteps = {steps}\nlr = 0.001\nrank = 4\nmin_examples = 1"
    );
    let (_model, w) = trl_world("re", ".*", &learn, &python, "").await;
    let w = std::sync::Arc::new(w);
    ask_numbers(&w, "re", 8).await;
    w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
    let adapters = w.config.adapters_dir("local");
    let first = {
        let w = w.clone();
        tokio::spawn(async move {
            let (learner, _) = learner(&w);
            learner.run_cycle("re", "manual").await
        })
    };
    // Wait for TRL's first checkpoint, then cut the job off.
    let partial = loop {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!first.is_finished(), "the cycle ended before a checkpoint was seen");
        let found = std::fs::read_dir(&adapters).ok().and_then(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "partial") && p.join("checkpoints").is_dir())
        });
        if let Some(p) = found {
            // A checkpoint written whole (TRL writes its state last).
            let whole = std::fs::read_dir(p.join("checkpoints")).unwrap().flatten().any(|e| {
                std::fs::read(e.path().join("trainer_state.json"))
                    .is_ok_and(|b| serde_json::from_slice::<serde_json::Value>(&b).is_ok())
            });
            if whole {
                break p;
            }
        }
    };
    first.abort();
    assert!(stop_processes_naming(&partial) > 0, "no TRL process found");
    let _ = first.await;
    let cut_at = std::fs::read_to_string(partial.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert!(cut_at < steps, "cut off after {cut_at} of {steps} steps");

    // `hone learn` again: the open cycle resumes and so does its TRL job.
    let (learner, lines) = learner(&w);
    let (cycle, log) = one_cycle(&learner, &lines, "re").await;
    assert!(log.contains("resuming cycle"), "{log}");
    assert!(log.contains("TRL: resuming from step"), "{log}");
    let listing: Vec<_> = std::fs::read_dir(&adapters)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let metrics = std::fs::read_to_string(adapters.join(adapter_name(&cycle, Method::Sft)).join("metrics.jsonl"))
        .unwrap_or_else(|e| panic!("{e}: {listing:?}\n{log}"));
    let trained: Vec<u64> = metrics
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        trained,
        (1..=steps as u64).collect::<Vec<_>>(),
        "each step once, in order"
    );
    let candidates = w.store.candidates("re", Some(&cycle.id)).unwrap();
    assert!(candidates[0].scores.is_some(), "gated: {log}");
}

/// `dpo` on TRL's DPOTrainer from pairs of the champion's rollouts (the
/// tokens as sampled): a fresh adapter is the reference, so the first loss
/// is ln 2 exactly; training opens the margin between chosen and rejected;
/// hone's engine loads the adapter. The rollouts, and so the pairs, differ
/// from run to run, and a handful of pairs trained for many epochs
/// overfits: at 12 steps (six epochs of eight pairs) some runs' gradient
/// norms grew tenfold after step 8 and the late margins closed again,
/// while the candidate still passed the gate. Eight steps at 0.02 stop
/// before that (eight of eight runs, two at a time, late margins 0.13–0.31).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trl_trains_dpo_on_pairs_of_the_champions_rollouts() {
    let Some(python) = python() else { return };
    let learn = "[agents.pref.learn]\noptimisers = [\"dpo\"]\ndataset_size = 16\n\
                 [agents.pref.learn.dpo]\nsteps = 8\nlr = 0.02\nrank = 4\ngroup_size = 4\nmin_examples = 2";
    let (_model, w) = trl_world("pref", "[a-z]", learn, &python, "").await;
    ask_numbers(&w, "pref", 16).await;
    let (learner, lines) = learner(&w);
    let (cycle, log) = one_cycle(&learner, &lines, "pref").await;
    let candidates = w.store.candidates("pref", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{log}");
    assert!(candidates[0].scores.is_some(), "the gate ran the candidate: {log}");
    assert!(
        log.contains("pref: dpo: step 8/8"),
        "TRL's steps in the cycle's log: {log}"
    );

    let adapter = w.config.adapters_dir("local").join(adapter_name(&cycle, Method::Dpo));
    let metrics = std::fs::read_to_string(adapter.join("metrics.jsonl")).unwrap();
    let steps: Vec<serde_json::Value> = metrics.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(steps.len(), 8, "{metrics}");
    let first = steps[0]["loss"].as_f64().unwrap();
    assert!((first - std::f64::consts::LN_2).abs() < 1e-3, "{metrics}");
    let margins: Vec<f64> = steps
        .iter()
        .map(|s| s["extra"]["rewards/margins"].as_f64().unwrap())
        .collect();
    let late = margins[4..].iter().sum::<f64>() / 4.0;
    println!("TRL DPO margins: {margins:?}");
    assert!(late > 0.0, "training opened no margin\n{metrics}\n{log}");
    assert!(steps[7]["kl"].as_f64().unwrap() > 0.0, "{metrics}");
    hone_engine::lora::Adapter::load(&adapter, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
}

/// What TRL is given is what hone renders: conversations (system, tools,
/// tool calls and their results, with and without the generation prompt)
/// rendered by hone's chat template and tokenizer are token for token what
/// transformers' `apply_chat_template` makes of the same checkpoint — the
/// loading code users' Qwen2 and Llama checkpoints go through.
#[test]
fn hones_chat_rendering_is_the_tokenizers_own() {
    let Some(python) = python() else { return };
    let model = tiny_checkpoint();
    let tokenizer = hone_engine::Tokenizer::load(model.path()).unwrap();
    let tools = serde_json::json!([{"type": "function", "function": {"name": "weather",
        "description": "Weather in a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let cases = serde_json::json!([
        {"messages": [{"role": "user", "content": "Say a number, please"}], "generation": true},
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Say a number"},
                      {"role": "assistant", "content": "7"}], "generation": false},
        {"messages": [{"role": "user", "content": "Weather in Oslo?"},
                      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                          "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "rain, 4 °C"},
                      {"role": "assistant", "content": "Rain, 4 °C."}],
         "tools": tools, "generation": false},
    ]);
    let mut expected = Vec::new();
    let mut given = Vec::new();
    for case in cases.as_array().unwrap() {
        let messages = case["messages"].as_array().unwrap();
        let tools = case.get("tools");
        let text = tokenizer
            .template
            .render_openai(messages, tools, case["generation"].as_bool().unwrap())
            .unwrap();
        expected.push(tokenizer.encode(&text).unwrap());
        // Hugging Face templates take tool-call arguments as objects, as
        // hone hands them to its own.
        let mut messages = messages.clone();
        messages
            .iter_mut()
            .for_each(hone_engine::tokenizer::arguments_as_objects);
        given.push(serde_json::json!({"messages": messages, "tools": tools, "generation": case["generation"]}));
    }
    let script = "import json, sys\nfrom transformers import AutoTokenizer\n\
        t = AutoTokenizer.from_pretrained(sys.argv[1])\nout = []\n\
        for c in json.load(sys.stdin):\n\
        \x20   ids = t.apply_chat_template(c['messages'], tools=c.get('tools'), tokenize=True, add_generation_prompt=c['generation'])\n\
        \x20   out.append(list(ids['input_ids'] if hasattr(ids, 'keys') else ids))\n\
        print(json.dumps(out))\n";
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .arg(model.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::Value::Array(given).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let theirs: Vec<Vec<u32>> = serde_json::from_slice(&out.stdout).unwrap();
    for (i, (ours, theirs)) in expected.iter().zip(&theirs).enumerate() {
        assert_eq!(ours, theirs, "conversation {i}: hone's tokens vs apply_chat_template's");
    }
    assert_eq!(theirs.len(), 3);
}

/// `hone learn cancel` while TRL trains: every process of the job stops
/// itself (the script's watchdog sees hone's stop file), the cycle ends
/// cancelled, and no adapter is left or proposed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_cycle_stops_its_trl_job() {
    let Some(python) = python() else { return };
    let steps = 20_000;
    let learn = format!(
        "[agents.halt.learn]\noptimisers = [\"sft\"]\ndataset_size = 8\n\
         [agents.halt.learn.sft]\nsteps = {steps}\nlr = 0.001\nrank = 4\nmin_examples = 1"
    );
    let (_model, w) = trl_world("halt", ".*", &learn, &python, "").await;
    let w = std::sync::Arc::new(w);
    ask_numbers(&w, "halt", 8).await;
    w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
    let adapters = w.config.adapters_dir("local");
    let (learner, lines) = learner(&w);
    let running = tokio::spawn(async move { learner.run_cycle("halt", "manual").await });
    // Wait for TRL's first step.
    let partial = loop {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!running.is_finished(), "the cycle ended before TRL trained a step");
        let found = std::fs::read_dir(&adapters).ok().and_then(|entries| {
            entries.flatten().map(|e| e.path()).find(|p| {
                p.extension().is_some_and(|x| x == "partial")
                    && std::fs::read_to_string(p.join("metrics.jsonl")).is_ok_and(|m| m.lines().count() > 0)
            })
        });
        if let Some(p) = found {
            break p;
        }
    };
    hone_learn::cycle::cancel::cancel(w.store.as_ref(), "halt")
        .unwrap()
        .expect("an open cycle");
    let cycle = tokio::time::timeout(std::time::Duration::from_secs(120), running)
        .await
        .expect("the cycle stops")
        .unwrap()
        .unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Failed, "{log}");
    assert_eq!(cycle.error.as_deref(), Some(hone_learn::cycle::cancel::CANCELLED));
    assert!(
        log.contains("TRL training stopped") && log.contains("hone asked it to stop"),
        "{log}"
    );
    assert_eq!(stop_processes_naming(&partial), 0, "a TRL process outlived the cycle");
    let trained = std::fs::read_to_string(partial.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert!(trained < steps, "{trained} of {steps} steps\n{log}");
    assert!(!adapters.join(adapter_name(&cycle, Method::Sft)).exists());
    assert!(w.store.candidates("halt", Some(&cycle.id)).unwrap().is_empty());
}
