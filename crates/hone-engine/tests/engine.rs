//! The running engine: concurrent requests batched together (with different
//! adapters) give what each gives alone; streamed text adds up to the final
//! text; stop strings cut it; adapters come and go without disturbing
//! requests in flight; a prompt that starts like an earlier one reuses its
//! keys and values and gives what a cold prefill gives.

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
            ..EngineOptions::default()
        },
    )
    .unwrap();
    assert!(engine.adapters().is_empty());
    engine.generate_blocking(request("hi", 1, 3, Some("v2"))).unwrap();
    assert_eq!(engine.adapters()[0].name, "v2");
}

/// Past `max_adapters`, loading one unloads the least recently used adapter
/// that the adapters folder can give back; it is loaded again when next
/// named, and one loaded from elsewhere is never unloaded for the limit.
#[test]
fn past_its_limit_the_engine_unloads_the_least_recently_used_adapter_it_can_load_again() {
    let model_dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(Arch::Llama, hone_engine::init::Preset::Tiny, 11, model_dir.path()).unwrap();
    let adapters = tempfile::tempdir().unwrap();
    for name in ["a", "b", "c", "d"] {
        let target = adapters.path().join(name);
        std::fs::create_dir(&target).unwrap();
        for file in ["adapter_config.json", "adapter_model.safetensors"] {
            std::fs::copy(reference_adapter_dir().join(file), target.join(file)).unwrap();
        }
    }
    let load = |max_adapters: usize| {
        let options = EngineOptions {
            adapters_dir: Some(adapters.path().to_path_buf()),
            max_adapters,
            ..EngineOptions::default()
        };
        Engine::load(model_dir.path(), options).unwrap()
    };
    let resident = |engine: &Engine| {
        let mut names: Vec<String> = engine.adapters().into_iter().map(|a| a.name).collect();
        names.sort();
        names
    };
    let engine = load(3);
    engine.load_adapter("outside", &reference_adapter_dir()).unwrap();
    engine.adapter("a").unwrap();
    engine.adapter("b").unwrap();
    engine.adapter("a").unwrap(); // `a` now used after `b`
    engine.adapter("c").unwrap();
    assert_eq!(resident(&engine), ["a", "c", "outside"]);
    engine.adapter("d").unwrap();
    assert_eq!(resident(&engine), ["c", "d", "outside"]);
    // An unloaded adapter serves again when a request names it.
    engine.generate_blocking(request("hi", 1, 3, Some("b"))).unwrap();
    assert_eq!(resident(&engine), ["b", "d", "outside"]);

    let unlimited = load(0);
    for name in ["a", "b", "c", "d"] {
        unlimited.adapter(name).unwrap();
    }
    assert_eq!(resident(&unlimited), ["a", "b", "c", "d"]);
}

/// Greedy-free sampling with logprobs, so two engines can be compared token
/// by token.
fn blocking(engine: &Engine, prompt: &str, adapter: Option<&str>) -> hone_engine::Generation {
    engine
        .generate_blocking(request(prompt, 5, 12, adapter))
        .unwrap()
        .remove(0)
        .1
}

#[test]
fn a_prompt_that_starts_like_an_earlier_one_reuses_its_prefix_and_gives_what_a_cold_prefill_gives() {
    let dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(Arch::Llama, hone_engine::init::Preset::Tiny, 11, dir.path()).unwrap();
    let cached = Engine::load(dir.path(), EngineOptions::default()).unwrap();
    let cold = Engine::load(
        dir.path(),
        EngineOptions {
            prefix_cache_bytes: 0,
            ..EngineOptions::default()
        },
    )
    .unwrap();
    for engine in [&cached, &cold] {
        engine.load_adapter("tuned", &reference_adapter_dir()).unwrap();
    }
    let system = "<|im_start|>system\nYou answer arithmetic questions; call calc when unsure.<|im_end|>\n";
    let first = format!("{system}<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n");
    let second = format!("{system}<|im_start|>user\nAnd 12 * 7?<|im_end|>\n");
    let next_turn = format!("{first}<|im_start|>assistant\n7<|im_end|>\n<|im_start|>user\nThanks");
    let shared = |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    // (prompt, adapter, prompt tokens the cached engine should reuse)
    let steps = [
        (first.as_str(), None, 0),
        (second.as_str(), None, shared(&first, &second)),
        (next_turn.as_str(), None, first.len()),
        // Keys and values computed under the base are never reused under an adapter.
        (second.as_str(), Some("tuned"), 0),
        (first.as_str(), Some("tuned"), shared(&first, &second)),
        // The same prompt again: all but its last token.
        (first.as_str(), Some("tuned"), first.len() - 1),
    ];
    let mut reused = 0;
    for (prompt, adapter, expected) in steps {
        let warm = blocking(&cached, prompt, adapter);
        let fresh = blocking(&cold, prompt, adapter);
        assert_eq!(warm.cached_prompt_tokens, expected, "{prompt:?} under {adapter:?}");
        assert_eq!(fresh.cached_prompt_tokens, 0, "the cache is off");
        assert_eq!(warm.tokens, fresh.tokens, "{prompt:?} under {adapter:?}");
        for (a, b) in warm.logprobs.iter().zip(&fresh.logprobs) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
        reused += expected as u64;
    }
    let stats = cached.prefix_stats();
    assert_eq!((stats.lookups, stats.hits, stats.reused_tokens), (6, 4, reused));
    assert_eq!(cold.prefix_stats().hits, 0);
}

#[test]
fn the_prefix_cache_stays_within_its_budget_and_forgets_unloaded_adapters() {
    use hone_engine::{KvCache, Model, PrefixCache};
    let dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(Arch::Llama, hone_engine::init::Preset::Tiny, 11, dir.path()).unwrap();
    let model = Model::load(dir.path(), DType::F32, &Device::Cpu).unwrap();
    let prefill = |prompt: &[u32]| {
        let mut cache = KvCache::new();
        let input = candle_core::Tensor::new(prompt, model.device())
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        model.hidden(&input, &mut cache, None).unwrap();
        cache
    };
    let prompt = |first: u32, len: usize| (0..len as u32).map(|i| (first + i) % 250).collect::<Vec<u32>>();
    let per_prompt = prefill(&prompt(0, 40)).bytes();
    assert!(per_prompt > 0);
    let mut cache = PrefixCache::new(3 * per_prompt);
    for first in 0..5 {
        let p = prompt(first * 50, 40);
        cache.insert(&p, &None, &prefill(&p)).unwrap();
        assert!(
            cache.bytes() <= 3 * per_prompt,
            "{} over {}",
            cache.bytes(),
            3 * per_prompt
        );
    }
    // The least recently used were evicted: the first prompt is gone, the last is there.
    assert!(cache.lookup(&prompt(0, 40), &None).unwrap().is_empty());
    assert_eq!(cache.lookup(&prompt(200, 40), &None).unwrap().len(), 39);
    // A prompt longer than the whole budget is not kept.
    let huge = prompt(7, 200);
    let before = cache.bytes();
    cache.insert(&huge, &None, &prefill(&huge)).unwrap();
    assert_eq!(cache.bytes(), before);

    // A prompt that extends an entry replaces it rather than adding a copy;
    // one an entry already covers adds nothing.
    let mut cache = PrefixCache::new(10 * per_prompt);
    let (short, longer) = (prompt(200, 40), prompt(200, 60));
    cache.insert(&short, &None, &prefill(&short)).unwrap();
    cache.insert(&longer, &None, &prefill(&longer)).unwrap();
    assert_eq!(cache.bytes(), prefill(&longer).bytes());
    cache.insert(&short, &None, &prefill(&short)).unwrap();
    assert_eq!(cache.bytes(), prefill(&longer).bytes());
    assert_eq!(cache.lookup(&longer, &None).unwrap().len(), 59);

    // Entries under an adapter live only while someone else still holds it.
    let adapter = Some(std::sync::Arc::new(
        hone_engine::Adapter::load(&reference_adapter_dir(), DType::F32, &Device::Cpu).unwrap(),
    ));
    let mut cache = PrefixCache::new(10 * per_prompt);
    let p = prompt(3, 40);
    cache.insert(&p, &adapter, &prefill(&p)).unwrap();
    assert_eq!(cache.lookup(&p, &adapter).unwrap().len(), 39);
    assert!(cache.lookup(&p, &None).unwrap().is_empty(), "not under another adapter");
    let remembered = cache.bytes();
    assert!(remembered > 0);
    let same_weights = Some(std::sync::Arc::new(
        hone_engine::Adapter::load(&reference_adapter_dir(), DType::F32, &Device::Cpu).unwrap(),
    ));
    drop(adapter);
    assert!(
        cache.lookup(&p, &same_weights).unwrap().is_empty(),
        "the unloaded copy is forgotten"
    );
    assert_eq!(cache.bytes(), 0);
}
