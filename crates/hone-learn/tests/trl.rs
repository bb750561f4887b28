//! `trainer.type = "trl"`: an `sft` cycle on the embedded engine whose
//! adapter TRL trains (SFTTrainer with PEFT, under `accelerate launch`) from
//! the same recorded tokens hone's own trainer reads. Its first step's loss
//! is the negative mean logprob the engine recorded when it sampled those
//! tokens (LoRA starts at zero, so the first step sees the base model):
//! transformers and hone's engine agree on the same weights. The adapter
//! it leaves is PEFT's, loads in hone's engine and is gated like any other.
//!
//! Needs a Python with torch, transformers, peft, trl and accelerate:
//! `HONE_TEST_TRL_PYTHON` (the test script installs one); skipped without
//! it unless `HONE_REQUIRE_TRL` is set.

use crate::support::{learner, recorded_passing_train, tiny_checkpoint, Recorded, World};
use hone_learn::search::optimiser::training::{adapter_name, Method};
use hone_store::CycleStore;
use hone_test_support::TestConfig;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trl_trains_an_sft_adapter_from_the_recorded_tokens_that_hones_engine_serves() {
    let Some(python) = python() else { return };
    let model = tiny_checkpoint();
    let config = TestConfig::new()
        .local()
        .local_agent("trl", &model.path().display().to_string(), 6)
        .toml(&format!(
            "[agents.trl.reward]\npass_threshold = 0.5\n[agents.trl.reward.critics.answer]\ntype = \"regex\"\n\
             pattern = \".*\"\n[agents.trl.learn]\noptimisers = [\"sft\"]\ndataset_size = 8\n\
             [agents.trl.learn.sft]\nsteps = 2\nlr = 0.01\nrank = 4\nmin_examples = 1\n\
             [agents.trl.learn.trainer]\ntype = \"trl\"\npython = {python:?}\n"
        ))
        .build();
    let w = World::start_with(&config).await;
    for i in 0..8 {
        w.ask("trl", &format!("trl-{i}"), &format!("Say a number, please ({i})"))
            .await;
    }
    let (learner, lines) = learner(&w);
    let cycle = learner.run_cycle("trl", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, CycleState::Done, "{log}");
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
}
