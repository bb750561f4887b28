//! The `local` provider end to end: `hone model init` writes a tiny Qwen2
//! checkpoint, `hone serve` runs `examples/local.toml` on it, and calls go
//! through the real HTTP server into the embedded engine — recorded with
//! their token ids and logprobs; adapters come and go through the admin API.

use crate::support::{client, get_json, hone_cli, Hone};
use futures::StreamExt;
use serde_json::{json, Value};
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// A tiny checkpoint, the reference adapter under `data/adapters/tuned`,
/// and hone serving `examples/local.toml` plus an agent that uses the adapter.
fn start() -> Hone {
    let dir = tempfile::tempdir().unwrap().keep();
    let model = dir.join("model");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_hone"))
        .args([
            "model", "init", "--arch", "qwen2", "--preset", "tiny", "--seed", "3", "--out",
        ])
        .arg(&model)
        .status()
        .unwrap();
    assert!(status.success());
    let adapter = dir.join("data/adapters/tuned");
    std::fs::create_dir_all(&adapter).unwrap();
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(
            repo().join("tests/reference/adapters/qwen2").join(file),
            adapter.join(file),
        )
        .unwrap();
    }
    let mut config = std::fs::read_to_string(repo().join("examples/local.toml")).unwrap();
    config.push_str(
        "\n[agents.tuned.versions.v1]\nprovider = { type = \"local\", model = \"${HONE_MODEL_DIR}\", adapter = \"tuned\" }\n",
    );
    Hone::start_in(&dir, &config, &[("HONE_MODEL_DIR", model.to_str().unwrap())])
}

async fn post(hone: &Hone, body: Value) -> (u16, Value, String) {
    let response = client()
        .post(hone.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let episode = response
        .headers()
        .get("x-hone-episode")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, response.json().await.unwrap(), episode)
}

/// The dashboard's page of `episode`.
async fn episode_page(hone: &Hone, episode: &str) -> String {
    hone.text(&format!("/ui/episodes/{episode}")).await
}

fn ask(agent: &str, seed: u64) -> Value {
    json!({"model": agent, "seed": seed, "messages": [{"role": "user", "content": "hello there"}]})
}

#[tokio::test]
async fn the_local_provider_answers_streams_and_records_token_ids_and_logprobs() {
    let hone = start();
    let (status, first, episode) = post(&hone, ask("assistant", 7)).await;
    assert_eq!(status, 200, "{first}");
    let choice = &first["choices"][0];
    let ids = choice["token_ids"].as_array().unwrap();
    let logprobs = choice["token_logprobs"].as_array().unwrap();
    assert!(!ids.is_empty() && ids.len() == logprobs.len());
    assert!(logprobs.iter().all(|l| l.as_f64().unwrap() <= 0.0));
    assert_eq!(first["usage"]["completion_tokens"], ids.len());
    let prompt = first["prompt_token_ids"].as_array().unwrap();
    assert_eq!(first["usage"]["prompt_tokens"], prompt.len());
    // The tiny tokenizer maps bytes to ids 0–255: the prompt is the chat template's text.
    let prompt_text: String = prompt
        .iter()
        .map(|t| t.as_u64().unwrap())
        .filter(|t| *t < 256)
        .map(|t| t as u8 as char)
        .collect();
    assert!(prompt_text.contains("user\nhello there"), "{prompt_text}");

    let (_, again, _) = post(&hone, ask("assistant", 7)).await;
    assert_eq!(
        again["choices"][0]["token_ids"], choice["token_ids"],
        "same seed, same answer"
    );
    // The first prefill was cold; the same prompt again reuses all of it but
    // the last token from the engine's prefix cache, reported as OpenAI
    // reports its prompt cache.
    assert_eq!(first["usage"].get("prompt_tokens_details"), None);
    let reused = prompt.len() - 1;
    assert_eq!(again["usage"]["prompt_tokens_details"]["cached_tokens"], reused);

    // The recorded call carries the tokens and logprobs.
    hone.wait_caught_up();
    let recorded: Value = get_json(&hone.url(&format!("/v1/episodes/{episode}"))).await;
    let call = &recorded["calls"][0];
    assert_eq!(call["provider"], "local");
    assert_eq!(call["response"]["choices"][0]["token_ids"], choice["token_ids"]);
    assert_eq!(
        call["response"]["choices"][0]["token_logprobs"],
        choice["token_logprobs"]
    );

    // Streaming: the same seed gives the same text, token by token.
    let mut streamed = ask("assistant", 7);
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let response = client()
        .post(hone.url("/v1/chat/completions"))
        .json(&streamed)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = String::new();
    let mut chunks = response.bytes_stream();
    while let Some(bytes) = chunks.next().await {
        body.push_str(&String::from_utf8_lossy(&bytes.unwrap()));
    }
    let events: Vec<Value> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(body.trim_end().ends_with("data: [DONE]"));
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, choice["message"]["content"].as_str().unwrap_or_default());
    assert!(events.len() > 3, "streamed in pieces");
    let last = events
        .iter()
        .rev()
        .find(|e| !e["choices"].as_array().unwrap().is_empty())
        .unwrap();
    assert_eq!(last["choices"][0]["token_ids"], choice["token_ids"]);
    assert_eq!(events.last().unwrap()["usage"]["completion_tokens"], ids.len());
    assert_eq!(
        events.last().unwrap()["usage"]["prompt_tokens_details"]["cached_tokens"],
        reused
    );
    let metrics = hone.metrics().await;
    let counter = |name: &str| -> u64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{provider=\"local\"")))
            .unwrap_or_else(|| panic!("{name} missing from {metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(counter("hone_engine_prompt_tokens_total"), 3 * prompt.len() as u64);
    assert_eq!(counter("hone_engine_prefix_cache_tokens_total"), 2 * reused as u64);
}

/// `examples/local.toml` sets `temperature = 0.7` and `max_tokens = 512`
/// on its version: defaults, which a client asking for greedy decoding and
/// 12 tokens overrides.
#[tokio::test]
async fn the_clients_own_sampling_settings_win_over_the_versions_defaults() {
    let hone = start();
    let greedy = |seed: u64| {
        let mut body = ask("assistant", seed);
        body["temperature"] = json!(0);
        body["max_tokens"] = json!(12);
        body["logprobs"] = json!(true);
        body["top_logprobs"] = json!(5);
        body
    };
    let (status, first, _) = post(&hone, greedy(1)).await;
    assert_eq!(status, 200, "{first}");
    let tokens = first["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(!tokens.is_empty() && tokens.len() <= 12, "{} tokens", tokens.len());
    assert!(first["usage"]["completion_tokens"].as_u64().unwrap() <= 12);
    for (i, entry) in tokens.iter().enumerate() {
        let best = entry["top_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["logprob"].as_f64().unwrap())
            .fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(entry["logprob"].as_f64().unwrap(), best, "token {i} is the argmax");
    }
    let (_, second, _) = post(&hone, greedy(99)).await;
    assert_eq!(
        second["choices"][0]["token_ids"], first["choices"][0]["token_ids"],
        "greedy decoding does not depend on the seed"
    );

    // Without the client's settings the version's defaults apply: sampled at
    // 0.7, so some token is not the argmax.
    let mut sampled = ask("assistant", 1);
    sampled["logprobs"] = json!(true);
    sampled["top_logprobs"] = json!(5);
    let (_, body, _) = post(&hone, sampled).await;
    let content = body["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(content.len() > 12, "the version's 512-token ceiling, not 12");
    assert!(content.iter().any(|entry| {
        let best = entry["top_logprobs"][0]["logprob"].as_f64().unwrap();
        entry["logprob"].as_f64().unwrap() < best
    }));
}

#[tokio::test]
async fn n_samples_logprobs_tools_and_bad_requests() {
    let hone = start();
    let mut many = ask("assistant", 1);
    many["n"] = json!(3);
    many["logprobs"] = json!(true);
    many["top_logprobs"] = json!(2);
    let (status, body, episode) = post(&hone, many).await;
    assert_eq!(status, 200, "{body}");
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    // The dashboard's transcript shows the served answer's token logprobs.
    hone.wait_caught_up();
    let transcript = episode_page(&hone, &episode).await;
    let shown = transcript.matches("class=\"token\"").count();
    assert_eq!(
        shown,
        choices[0]["logprobs"]["content"].as_array().unwrap().len(),
        "one token per sampled token"
    );
    // Without logprobs asked for, the engine's recorded ids and logprobs.
    let (status, plain, episode) = post(&hone, ask("assistant", 2)).await;
    assert_eq!(status, 200, "{plain}");
    hone.wait_caught_up();
    let transcript = episode_page(&hone, &episode).await;
    assert_eq!(
        transcript.matches("class=\"token\"").count(),
        plain["choices"][0]["token_ids"].as_array().unwrap().len(),
        "the recorded tokens, by id"
    );
    for choice in choices {
        let content = choice["logprobs"]["content"].as_array().unwrap();
        assert_eq!(content.len(), choice["token_ids"].as_array().unwrap().len());
        for (entry, logprob) in content.iter().zip(choice["token_logprobs"].as_array().unwrap()) {
            assert_eq!(&entry["logprob"], logprob);
            assert_eq!(entry["top_logprobs"].as_array().unwrap().len(), 2);
        }
    }
    // Byte tokens report their byte.
    let first = &choices[0];
    for (entry, id) in first["logprobs"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .zip(first["token_ids"].as_array().unwrap())
    {
        if id.as_u64().unwrap() < 256 {
            assert_eq!(entry["bytes"], json!([id]));
        }
    }

    // Tools are rendered into the prompt through the model's chat template.
    let mut tools = ask("assistant", 2);
    tools["tools"] = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let (status, body, _) = post(&hone, tools).await;
    assert_eq!(status, 200, "{body}");
    let prompt: String = body["prompt_token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_u64().filter(|t| *t < 256).map(|t| t as u8 as char))
        .collect();
    assert!(
        prompt.contains("<tools>") && prompt.contains("\"name\": \"get_weather\""),
        "{prompt}"
    );

    let mut too_many = ask("assistant", 1);
    too_many["n"] = json!(100);
    let (status, body, _) = post(&hone, too_many).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("n must be"),
        "{body}"
    );
}

#[tokio::test]
async fn adapters_are_served_listed_loaded_and_unloaded_at_run_time() {
    let hone = start();
    let admin = |path: &str| hone.url(path);
    // The config's `tuned` version loaded its adapter from data/adapters at start.
    let list: Value = get_json(&admin("/admin/adapters")).await;
    assert_eq!(list["data"][0]["name"], "tuned");
    assert_eq!(list["data"][0]["rank"], 4);

    let (_, base, _) = post(&hone, ask("assistant", 5)).await;
    let (status, tuned, _) = post(&hone, ask("tuned", 5)).await;
    assert_eq!(status, 200, "{tuned}");
    assert_ne!(
        base["choices"][0]["token_logprobs"][0], tuned["choices"][0]["token_logprobs"][0],
        "the adapter changes the distribution"
    );

    let load_adapter = |body: String| async {
        let response = client().post(admin("/admin/adapters")).body(body).send().await.unwrap();
        (response.status().as_u16(), response.json::<Value>().await.unwrap())
    };
    // Adapters load from the adapter directory (a relative path is taken there).
    let extra = hone.dir.join("data/adapters/extra");
    std::fs::create_dir_all(&extra).unwrap();
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(
            repo().join("tests/reference/adapters/qwen2").join(file),
            extra.join(file),
        )
        .unwrap();
    }
    let load = json!({"name": "extra", "path": "extra"});
    let (status, loaded) = load_adapter(load.to_string()).await;
    assert_eq!(status, 200, "{loaded}");
    assert_eq!(loaded["name"], "extra");
    let list: Value = get_json(&admin("/admin/adapters")).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2);

    let delete = client().delete(admin("/admin/adapters/extra")).send().await.unwrap();
    assert_eq!(delete.status(), 200);
    let again = client().delete(admin("/admin/adapters/extra")).send().await.unwrap();
    assert_eq!(again.status(), 404);
    let body: Value = again.json().await.unwrap();
    assert_eq!(body["error"]["code"], "adapter_not_found");

    let missing = json!({"name": "x", "path": "nonexistent"});
    let (status, body) = load_adapter(missing.to_string()).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "adapter_not_found", "{body}");
    let (status, body) = load_adapter("{not json".into()).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_json");
    let list: Value = get_json(&admin("/admin/adapters")).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "failed loads change nothing");
}

#[tokio::test]
async fn finding_8_adapter_paths_are_confined_and_errors_never_echo_files() {
    let hone = start();
    let load = |path: String| {
        let url = hone.url("/admin/adapters");
        async move {
            let response = client()
                .post(url)
                .json(&json!({"name": "probe", "path": path}))
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    // A secret outside the adapter directories, and an adapter directory
    // inside them whose config is a symlink to it.
    let secret = hone.dir.join("secret.json");
    std::fs::write(&secret, r#"{"r": "TOP-SECRET-VALUE"}"#).unwrap();
    let sneaky = hone.dir.join("data/adapters/sneaky");
    std::fs::create_dir_all(&sneaky).unwrap();
    std::os::unix::fs::symlink(&secret, sneaky.join("adapter_config.json")).unwrap();
    let reference = repo().join("tests/reference/adapters/qwen2");
    let (_, outside_existing) = load(reference.display().to_string()).await;
    let (_, outside_missing) = load("/nonexistent/adapter".into()).await;
    assert_eq!(
        outside_existing, outside_missing,
        "the answer tells whether a path outside exists"
    );
    for path in [
        reference.display().to_string(),
        "/etc".into(),
        "../../secret.json".into(),
        hone.dir.display().to_string(),
        "sneaky".into(),
    ] {
        let (status, body) = load(path.clone()).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains("adapter_path_not_allowed"), "{path}: {body}");
        assert!(!body.contains("TOP-SECRET"), "{path}: {body}");
    }
    let list: Value = get_json(&hone.url("/admin/adapters")).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "nothing was loaded");
}

/// kNN-LM memory end to end: an episode served by the embedded engine and
/// rewarded becomes a kNN-LM datastore (`hone memory build`); a version
/// that decodes with it (`memory = { type = "knn-lm", … }`) answers the same
/// prompt greedily with the remembered tokens — which the same model
/// without memory does not — and reports the mixture's logprobs.
#[tokio::test]
async fn a_remembered_episode_is_recalled_by_a_version_with_knn_lm_memory() {
    let dir = tempfile::tempdir().unwrap().keep();
    let model = dir.join("model");
    hone_cli(&[
        "model",
        "init",
        "--arch",
        "qwen2",
        "--preset",
        "tiny",
        "--seed",
        "3",
        "--out",
        model.to_str().unwrap(),
    ]);
    let base = format!(
        "[agents.mem.versions.v1]\nprovider = {{ type = \"local\", model = {:?} }}\n\
         [agents.mem.reward]\npass_threshold = 0.5\n[agents.mem.reward.critics.any]\ntype = \"regex\"\npattern = \".\"\n",
        model.display().to_string()
    );
    let mut hone = Hone::start_in(&dir, &base, &[]);
    let question = json!({"model": "mem", "seed": 11, "temperature": 1.0, "max_tokens": 12,
        "messages": [{"role": "user", "content": "what is the code?"}]});
    let (status, served, _) = post(&hone, question.clone()).await;
    assert_eq!(status, 200, "{served}");
    let remembered = served["choices"][0]["token_ids"].clone();
    hone.wait_caught_up();

    let config = dir.join("hone.toml");
    let data = dir.join("data");
    let (config, data) = (config.to_str().unwrap(), data.to_str().unwrap());
    hone_cli(&["rewards", "recompute", "mem", "-c", config, "--data-dir", data]);
    let hash = hone_cli(&["memory", "build", "--agent", "mem", "-c", config, "--data-dir", data]);
    let hash = hash.trim();
    assert_eq!(hash.len(), 64, "{hash}");
    assert!(dir.join(format!("data/memory/{hash}/datastore.safetensors")).is_file());

    std::fs::write(
        config,
        format!(
            "{base}[agents.mem.versions.v2]\nprovider = {{ type = \"local\", model = {:?} }}\n\
             memory = {{ type = \"knn-lm\", datastore = \"{hash}\", k = 8, lambda = 0.5, temperature = 0.1 }}\n\
             [agents.mem.deployment]\nchampion = \"v1\"\n",
            model.display().to_string()
        ),
    )
    .unwrap();
    hone.restart();
    let greedy = |version: &str| {
        let mut body = question.clone();
        body["temperature"] = json!(0.0);
        body["model"] = json!("mem");
        let hone = &hone;
        let version = version.to_owned();
        async move {
            let response = client()
                .post(hone.url("/v1/chat/completions"))
                .header("x-hone-version", version)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let without = greedy("v1").await;
    let with = greedy("v2").await;
    assert_eq!(with["choices"][0]["token_ids"], remembered, "{with}");
    assert_ne!(
        without["choices"][0]["token_ids"], remembered,
        "the model says it without memory"
    );
    for lp in with["choices"][0]["token_logprobs"].as_array().unwrap() {
        assert!(lp.as_f64().unwrap() > 0.3f64.ln(), "{with}");
    }
}

/// `POST /v1/messages/count_tokens` for an agent the embedded engine serves:
/// the count its chat template and tokenizer give, the same as the prompt
/// tokens of the call itself (the version's system prompt included).
#[tokio::test]
async fn count_tokens_counts_what_the_engine_would_prefill() {
    let hone = start();
    let messages = json!([{"role": "user", "content": "how many tokens is this question?"}]);
    let counted: Value = client()
        .post(hone.url("/v1/messages/count_tokens"))
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "assistant", "messages": messages}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answered: Value = client()
        .post(hone.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "assistant", "max_tokens": 4, "messages": messages}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let prefilled = answered["usage"]["input_tokens"].as_u64().unwrap();
    assert!(prefilled > 10, "{answered}");
    assert_eq!(counted["input_tokens"].as_u64(), Some(prefilled), "{counted}");
}
