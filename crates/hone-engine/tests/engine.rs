//! The running engine: concurrent requests batched together (with different
//! adapters) give what each gives alone; streamed text adds up to the final
//! text; stop strings cut it; adapters come and go without disturbing
//! requests in flight.

use candle_core::{DType, Device};
use hone_engine::engine::{Engine, EngineOptions, Event, Request};
use hone_engine::{generate, Arch, Finish, Sampling};
use std::path::{Path, PathBuf};

fn reference_adapter_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/reference/adapters/llama")
}

fn engine() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(Arch::Llama, hone_engine::init::Preset::Tiny, 11, dir.path()).unwrap();
    let engine = Engine::load(dir.path(), EngineOptions::default()).unwrap();
    (dir, engine)
}

fn request(prompt: &str, seed: u64, max_tokens: usize, adapter: Option<&str>) -> Request {
    Request {
        prompt: prompt.bytes().map(u32::from).collect(),
        sampling: Sampling {
            temperature: 1.0,
            seed,
            max_tokens,
            top_logprobs: 2,
            ..Sampling::default()
        },
        n: 1,
        adapter: adapter.map(str::to_owned),
        memory: None,
        stop: Vec::new(),
    }
}

/// Collects a request's events: per sample, (tokens from Token events, streamed text, Done).
fn collect(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    n: usize,
) -> Vec<(Vec<u32>, String, String, hone_engine::Generation)> {
    let mut tokens = vec![Vec::new(); n];
    let mut streamed = vec![String::new(); n];
    let mut done = vec![None; n];
    while let Some(event) = rx.blocking_recv() {
        match event {
            Event::Token { index, token, .. } => tokens[index].push(token),
            Event::Text { index, text } => streamed[index].push_str(&text),
            Event::Done {
                index,
                text,
                generation,
            } => done[index] = Some((text, generation)),
            Event::Failed(message) => panic!("failed: {message}"),
        }
    }
    (0..n)
        .map(|i| {
            let (text, generation) = done[i].clone().expect("every sample finishes");
            (tokens[i].clone(), streamed[i].clone(), text, generation)
        })
        .collect()
}

#[test]
fn concurrent_requests_with_different_adapters_match_running_alone() {
    let (_dir, engine) = engine();
    engine.load_adapter("tuned", &reference_adapter_dir()).unwrap();
    let requests = [
        request("<|im_start|>user\nfirst", 1, 24, Some("tuned")),
        request("second, longer prompt here", 2, 30, None),
        request("x", 3, 16, Some("tuned")),
    ];
    // Submitted together, so the scheduler decodes them in one batch.
    let receivers: Vec<_> = requests.iter().map(|r| engine.submit(r.clone()).unwrap()).collect();
    for (request, rx) in requests.iter().zip(receivers) {
        let (tokens, streamed, text, generation) = collect(rx, 1).remove(0);
        let adapter = request.adapter.as_deref().map(|name| engine.adapter(name).unwrap());
        let mut sampling = request.sampling.clone();
        sampling.stop_tokens = engine.stop_tokens().to_vec();
        let alone = generate(engine.model(), &request.prompt, adapter, &sampling).unwrap();
        assert_eq!(generation.tokens, alone.tokens, "batched with others = alone");
        for (a, b) in generation.logprobs.iter().zip(&alone.logprobs) {
            assert!((a - b).abs() < 1e-5);
        }
        assert_eq!(tokens, generation.tokens, "every token is streamed");
        assert_eq!(streamed, text, "the streamed text adds up to the final text");
        let visible = match generation.finish {
            Finish::Stop => &generation.tokens[..generation.tokens.len() - 1],
            Finish::Length => &generation.tokens[..],
        };
        assert_eq!(text, engine.tokenizer().decode(visible).unwrap());
    }
    let with = engine
        .generate_blocking(request("same prompt", 9, 12, Some("tuned")))
        .unwrap();
    let without = engine.generate_blocking(request("same prompt", 9, 12, None)).unwrap();
    assert_ne!(
        with[0].1.logprobs, without[0].1.logprobs,
        "the adapter changes the output"
    );
}

#[test]
fn n_samples_and_stop_strings() {
    let (_dir, engine) = engine();
    let mut greedy = request("<|im_start|>assistant\n", 0, 40, None);
    greedy.sampling.temperature = 0.0;
    let (full, generation) = engine.generate_blocking(greedy.clone()).unwrap().remove(0);
    assert_eq!(
        generation.finish,
        Finish::Length,
        "random weights rarely emit the end token"
    );
    // A stop string from the middle of the greedy text cuts it there.
    let chars: Vec<char> = full.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let cut = full.find(&stop).unwrap();
    let mut stopped = greedy.clone();
    stopped.stop = vec![stop.clone()];
    let result = collect(engine.submit(stopped).unwrap(), 1).remove(0);
    assert_eq!(result.2, full[..cut], "the text ends before the stop string `{stop}`");
    assert_eq!(result.1, result.2, "no part of the stop string was streamed");
    assert_eq!(result.3.finish, Finish::Stop);
    assert!(result.3.tokens.len() < generation.tokens.len());

    let mut many = request("<|im_start|>user\nhello", 100, 10, None);
    many.n = 4;
    let samples = collect(engine.submit(many.clone()).unwrap(), 4);
    for (i, sample) in samples.iter().enumerate() {
        let mut alone = many.clone();
        alone.n = 1;
        alone.sampling.seed = 100 + i as u64;
        let (_, single) = engine.generate_blocking(alone).unwrap().remove(0);
        assert_eq!(sample.3.tokens, single.tokens, "sample {i} = its own seeded run");
    }
    many.n = 17;
    assert!(engine.submit(many).is_err(), "n above max_batch is refused");
}

#[test]
fn adapters_load_and_unload_at_run_time_without_disturbing_requests_in_flight() {
    // A checkpoint that names no end token, so a request runs to max_tokens:
    // still running when the adapter goes away.
    let dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(Arch::Llama, hone_engine::init::Preset::Tiny, 11, dir.path()).unwrap();
    for file in ["config.json", "generation_config.json", "tokenizer_config.json"] {
        let path = dir.path().join(file);
        let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        json.as_object_mut().unwrap().remove("eos_token_id");
        json.as_object_mut().unwrap().remove("eos_token");
        std::fs::write(&path, json.to_string()).unwrap();
    }
    let engine = Engine::load(dir.path(), EngineOptions::default()).unwrap();
    assert!(engine.stop_tokens().is_empty());
    let info = engine.load_adapter("a", &reference_adapter_dir()).unwrap();
    assert_eq!((info.rank, info.alpha), (4, 8.0));
    assert_eq!(engine.adapters().len(), 1);
    let long = request("hello", 5, 600, Some("a"));
    let reference = engine.generate_blocking(long.clone()).unwrap();
    assert_eq!(reference[0].1.tokens.len(), 600);

    let mut rx = engine.submit(long).unwrap();
    // Wait until it is running, then unload the adapter under it.
    loop {
        if let Some(Event::Token { .. }) = rx.blocking_recv() {
            break;
        }
    }
    assert!(engine.unload_adapter("a"));
    assert!(!engine.unload_adapter("a"));
    let mut last = None;
    while let Some(event) = rx.blocking_recv() {
        if let Event::Done { generation, .. } = event {
            last = Some(generation);
        }
    }
    assert_eq!(
        last.unwrap().tokens,
        reference[0].1.tokens,
        "the running request kept its adapter"
    );
    let err = engine.submit(request("hello", 5, 5, Some("a"))).unwrap_err();
    assert!(err.to_string().contains("adapter `a` is not loaded"), "{err}");
    assert!(engine.adapters().is_empty());

    let missing = engine.load_adapter("b", Path::new("/nonexistent")).unwrap_err();
    assert!(missing.to_string().contains("/nonexistent"), "{missing}");
    assert!(engine.load_adapter("../x", &reference_adapter_dir()).is_err());
}

#[test]
fn adapters_are_found_in_the_adapters_dir_on_first_use() {
    let model_dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(Arch::Llama, hone_engine::init::Preset::Tiny, 11, model_dir.path()).unwrap();
    let adapters = tempfile::tempdir().unwrap();
    let target = adapters.path().join("v2");
    std::fs::create_dir(&target).unwrap();
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(reference_adapter_dir().join(file), target.join(file)).unwrap();
    }
    let engine = Engine::load(
        model_dir.path(),
        EngineOptions {
            dtype: DType::F32,
            device: Device::Cpu,
            max_batch: 4,
            adapters_dir: Some(adapters.path().to_path_buf()),
        },
    )
    .unwrap();
    assert!(engine.adapters().is_empty());
    engine.generate_blocking(request("hi", 1, 3, Some("v2"))).unwrap();
    assert_eq!(engine.adapters()[0].name, "v2");
}
