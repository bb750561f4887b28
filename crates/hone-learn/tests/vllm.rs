//! A provider declared `engine = "vllm"` is asked for vLLM's exact tokens
//! (`return_token_ids`, `logprobs`), and the episodes it serves record the
//! prompt's and the answer's token ids with the sampler's logprobs, as the
//! embedded engine's do — streamed or not — so they feed GRPO and its
//! off-policy correction. Another OpenAI-compatible provider is asked for
//! nothing of the kind.

use crate::support::World;
use serde_json::{json, Value};

const SERVED: &str = r#"
[providers.vllm]
type = "openai"
base_url = "UPSTREAM"
engine = "vllm"
max_retries = 0
[agents.served.versions.v1]
provider = "vllm"
model = "good"
"#;

/// The recorded tokens of the one call of `episode`.
async fn tokens(w: &World, episode: &str) -> hone_types::call::SampledTokens {
    w.episode(episode).await.calls[0]
        .sampled_tokens()
        .expect("the vLLM call recorded its token ids and logprobs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vllm_provider_records_exact_tokens_and_logprobs_streamed_or_not() {
    let w = World::start_with(SERVED).await;
    w.ask("served", "vllm-plain", "Say a word, please").await;
    let sent: Vec<Value> = w.fake.chats();
    let last = sent.last().unwrap();
    assert_eq!(last["return_token_ids"], true, "{last}");
    assert_eq!(last["logprobs"], true, "{last}");
    let plain = tokens(&w, "vllm-plain").await;
    assert_eq!(
        plain.prompt,
        vec![1, 2, 3, 4],
        "one id a word of the prompt, as the fake vLLM gives"
    );
    assert!(!plain.completion.is_empty());
    assert_eq!(plain.logprobs.len(), plain.completion.len());
    assert!(plain.logprobs.iter().all(|l| *l < 0.0), "{plain:?}");

    // Streamed: the prompt's ids come in the first chunk, the answer's a
    // chunk at a time, with a logprob each.
    let streamed = w
        .http
        .post(format!("{}/v1/chat/completions", w.url))
        .header("x-hone-episode", "vllm-stream")
        .json(&json!({"model": "served", "stream": true,
            "messages": [{"role": "user", "content": "Say a word, please"}]}))
        .send()
        .await
        .unwrap();
    assert!(streamed.status().is_success());
    let body = streamed.text().await.unwrap();
    assert!(body.contains("[DONE]"), "{body}");
    let stream = tokens(&w, "vllm-stream").await;
    assert_eq!(stream.prompt, plain.prompt);
    assert_eq!(
        stream.completion.len(),
        plain.completion.len(),
        "{stream:?} vs {plain:?}"
    );
    assert_eq!(stream.logprobs, plain.logprobs);

    // A provider not declared vLLM is asked for nothing more than its client asked.
    w.ask("calc", "plain-openai", "What is 2 + 2?").await;
    let last = w.fake.chats().last().cloned().unwrap();
    assert!(last.get("return_token_ids").is_none(), "{last}");
}

/// RL on an agent vLLM serves: the champion is vLLM serving a checkpoint
/// directory (`vllm serve /path`, which names the model by the path), so
/// `grpo` trains on its production episodes' recorded tokens from those
/// weights, vLLM is asked to load the adapter before the gate runs the
/// candidate there, and the candidate names the adapter by its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpo_trains_on_episodes_vllm_served_and_vllm_loads_the_adapter_before_the_gate() {
    let model = crate::support::tiny_checkpoint();
    let config = format!(
        "[providers.vllm]\ntype = \"openai\"\nbase_url = \"UPSTREAM\"\nengine = \"vllm\"\nmax_retries = 0\n\
         [agents.vl.versions.v1]\nprovider = \"vllm\"\nmodel = {:?}\n\
         [agents.vl.reward]\npass_threshold = 0.5\n[agents.vl.reward.critics.answer]\ntype = \"regex\"\npattern = \"stars\"\n\
         [agents.vl.learn]\noptimisers = [\"grpo\"]\ndataset_size = 16\nflipped_cycles = 0\n\
         [agents.vl.learn.grpo]\nsteps = 2\nlr = 0.01\nrank = 4\nmin_examples = 2\ngroups = \"production\"\n",
        model.path().display().to_string()
    );
    let w = World::start_with(&config).await;
    for i in 0..16 {
        // Half the users ask for JSON (the answer the critic rewards).
        let ask = if i % 2 == 0 { "Give me json" } else { "Say hi" };
        w.ask("vl", &format!("vl-{i}"), &format!("{ask} ({i})")).await;
    }
    w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
    let (learner, lines) = crate::support::learner(&w);
    let cycle = learner.run_cycle("vl", "manual").await.unwrap();
    let log = lines.lock().unwrap().join("\n");
    assert_eq!(cycle.state, hone_types::CycleState::Done, "{log}");
    assert!(log.contains("vl: grpo: 8 production episodes"), "{log}");
    assert!(
        log.contains(", 0 without token ids"),
        "vLLM's tokens were recorded: {log}"
    );

    let adapter = hone_learn::search::optimiser::training::adapter_name(
        &cycle,
        hone_learn::search::optimiser::training::Method::Grpo,
    );
    let loads = w.fake.bodies("/v1/load_lora_adapter");
    assert!(
        loads.iter().any(|l| l["lora_name"] == adapter.as_str()),
        "{loads:?}\n{log}"
    );
    assert!(log.contains(&format!("adapter {adapter} loaded by `vllm`")), "{log}");
    let candidates = hone_store::CycleStore::candidates(&*w.store, "vl", Some(&cycle.id)).unwrap();
    assert_eq!(candidates.len(), 1, "{log}");
    assert!(candidates[0].scores.is_some(), "the gate ran the candidate: {log}");
    assert!(
        w.fake.chats().iter().any(|c| c["model"] == adapter.as_str()),
        "the gate asked vLLM for the adapter by name"
    );
    let version = hone_store::Store::version(&*w.store, &candidates[0].version_id)
        .unwrap()
        .unwrap();
    assert!(version.spec.routes[0].adapter_sha256.is_some());
}
