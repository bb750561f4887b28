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
