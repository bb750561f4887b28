//! kNN-LM memory: the interpolation against numpy on the same inputs
//! (`tests/reference/knn_lm.py`), λ = 0 is exactly the model, a datastore
//! of one episode makes greedy decoding reproduce it, rows with and without
//! memory decode together as they would alone, and a datastore round-trips
//! through its file with its content hash.

use candle_core::{DType, Device};
use hone_engine::generate::{self, generate_with_memory};
use hone_engine::{Arch, Datastore, KnnLm, Model, Sampling};
use serde_json::Value;
use std::sync::Arc;

fn tiny() -> (tempfile::TempDir, Model) {
    let dir = tempfile::tempdir().unwrap();
    hone_engine::init::write_checkpoint(Arch::Qwen2, hone_engine::init::Preset::Tiny, 7, dir.path()).unwrap();
    let model = Model::load(dir.path(), DType::F32, &Device::Cpu).unwrap();
    (dir, model)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn interpolation_matches_the_numpy_reference() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/reference/knn_lm.json");
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let keys: Vec<Vec<f32>> = reference["keys"].as_array().unwrap().iter().map(floats).collect();
    let mut datastore = Datastore::new(keys[0].len());
    for (key, value) in keys.iter().zip(reference["values"].as_array().unwrap()) {
        datastore.add(key, value.as_u64().unwrap() as u32).unwrap();
    }
    let datastore = Arc::new(datastore);
    let queries: Vec<Vec<f32>> = reference["queries"].as_array().unwrap().iter().map(floats).collect();
    let lm: Vec<Vec<f32>> = reference["lm"].as_array().unwrap().iter().map(floats).collect();
    let cases = reference["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 28);
    for case in cases {
        let memory = KnnLm {
            datastore: datastore.clone(),
            k: case["k"].as_u64().unwrap() as usize,
            lambda: case["lambda"].as_f64().unwrap(),
            temperature: case["temperature"].as_f64().unwrap(),
            adaptive: case["adaptive"].as_bool().unwrap(),
        };
        let q = case["query"].as_u64().unwrap() as usize;
        let got = memory.interpolate(&lm[q], &queries[q]);
        for (token, (got, expected)) in got.iter().zip(case["expected"].as_array().unwrap()).enumerate() {
            match expected.as_f64() {
                None => assert_eq!(*got, f32::NEG_INFINITY, "{case}: token {token}"),
                Some(e) => assert!(
                    (f64::from(*got) - e).abs() < 2e-5,
                    "{case}: token {token}: {got} vs {e}"
                ),
            }
        }
    }
}

/// `prompt` as byte tokens of the tiny model.
fn tokens(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

#[test]
fn lambda_zero_is_exactly_the_model_and_one_episode_is_reproduced_greedily() {
    let (_dir, model) = tiny();
    let prompt = tokens("<|im_start|>user\nwhat is the code?");
    let remembered = tokens(" the code is 4711, ok");
    let mut datastore = Datastore::new(model.config.hidden_size);
    assert_eq!(
        datastore.add_sequence(&model, &prompt, &remembered, None).unwrap(),
        remembered.len()
    );
    let datastore = Arc::new(datastore);
    let greedy = Sampling {
        temperature: 0.0,
        max_tokens: remembered.len(),
        ..Sampling::default()
    };
    let sampled = Sampling {
        temperature: 0.8,
        seed: 9,
        max_tokens: 10,
        ..Sampling::default()
    };
    let with = |lambda: f64| {
        Some(Arc::new(KnnLm {
            datastore: datastore.clone(),
            k: 8,
            lambda,
            // Sharp over distances: the exact context's key takes the kNN mass.
            temperature: 0.1,
            adaptive: false,
        }))
    };

    // λ = 0: the model's own distribution, bit for bit.
    for sampling in [&greedy, &sampled] {
        let base = generate_with_memory(&model, &prompt, None, None, sampling, 2).unwrap();
        let zero = generate_with_memory(&model, &prompt, None, with(0.0), sampling, 2).unwrap();
        assert_eq!(base, zero);
    }

    // The untrained model does not say it; with the episode in memory,
    // greedy decoding does, and the reported logprobs are the mixture's.
    let base = generate_with_memory(&model, &prompt, None, None, &greedy, 1)
        .unwrap()
        .remove(0);
    assert_ne!(base.tokens, remembered);
    let recalled = generate_with_memory(&model, &prompt, None, with(0.5), &greedy, 1)
        .unwrap()
        .remove(0);
    assert_eq!(recalled.tokens, remembered);
    for (lp, base_lp) in recalled.logprobs.iter().zip(&base.logprobs) {
        // λ · p_kNN puts up to 0.5 on the remembered token (less where another
        // stored context lies close): far above the near-uniform model's ~0.01.
        assert!(
            *lp > (0.3f32).ln() && *lp > *base_lp + 2.0,
            "{lp} vs the model's {base_lp}"
        );
    }
}

/// Adaptive λ: a remembered context still gets the datastore's full
/// weight (its key is at distance ~0), while a context unlike anything
/// stored decodes as the model alone would, to within float rounding.
#[test]
fn adaptive_memory_speaks_where_a_context_recurs_and_keeps_quiet_elsewhere() {
    let (_dir, model) = tiny();
    let prompt = tokens("<|im_start|>user\nwhat is the code?");
    let remembered = tokens(" the code is 4711, ok");
    let mut datastore = Datastore::new(model.config.hidden_size);
    datastore.add_sequence(&model, &prompt, &remembered, None).unwrap();
    let fixed = KnnLm {
        datastore: Arc::new(datastore),
        k: 8,
        lambda: 0.5,
        temperature: 0.1,
        adaptive: false,
    };
    let memory = Some(Arc::new(KnnLm {
        adaptive: true,
        ..fixed.clone()
    }));
    let greedy = Sampling {
        temperature: 0.0,
        max_tokens: remembered.len(),
        ..Sampling::default()
    };
    let recalled = generate_with_memory(&model, &prompt, None, memory.clone(), &greedy, 1)
        .unwrap()
        .remove(0);
    assert_eq!(recalled.tokens, remembered);
    let other = tokens("<|im_start|>user\nZZZZ qqqq ####");
    let alone = generate_with_memory(&model, &other, None, None, &greedy, 1)
        .unwrap()
        .remove(0);
    let quiet = generate_with_memory(&model, &other, None, memory, &greedy, 1)
        .unwrap()
        .remove(0);
    assert_eq!(quiet.tokens, alone.tokens);
    for (a, b) in quiet.logprobs.iter().zip(&alone.logprobs) {
        assert!((a - b).abs() < 1e-4, "{a} vs the model's {b}");
    }
    // The control: with a fixed λ the same unrelated context is pushed.
    let pushed = generate_with_memory(&model, &other, None, Some(Arc::new(fixed)), &greedy, 1)
        .unwrap()
        .remove(0);
    assert!(
        pushed.tokens != alone.tokens
            || pushed
                .logprobs
                .iter()
                .zip(&alone.logprobs)
                .any(|(a, b)| (a - b).abs() > 0.1),
        "a fixed λ left the unrelated context alone too: the test shows nothing"
    );
}

#[test]
fn rows_with_and_without_memory_decode_together_as_they_would_alone() {
    let (_dir, model) = tiny();
    let prompt = tokens("<|im_start|>user\nname a colour");
    let mut datastore = Datastore::new(model.config.hidden_size);
    datastore
        .add_sequence(&model, &prompt, &tokens(" teal blue"), None)
        .unwrap();
    let memory = Arc::new(KnnLm {
        datastore: Arc::new(datastore),
        k: 4,
        lambda: 0.6,
        temperature: 2.0,
        adaptive: false,
    });
    let sampling = Arc::new(Sampling {
        temperature: 0.7,
        seed: 3,
        max_tokens: 8,
        ..Sampling::default()
    });
    let alone = |memory: Option<Arc<KnnLm>>| {
        generate_with_memory(&model, &prompt, None, memory, &sampling, 1)
            .unwrap()
            .remove(0)
    };
    let (expected_with, expected_without) = (alone(Some(memory.clone())), alone(None));
    let mut with = generate::start(
        &model,
        &prompt,
        hone_engine::KvCache::new(),
        None,
        Some(memory),
        sampling.clone(),
        1,
    )
    .unwrap();
    let mut without = generate::start(
        &model,
        &prompt,
        hone_engine::KvCache::new(),
        None,
        None,
        sampling.clone(),
        1,
    )
    .unwrap();
    while with[0].finish.is_none() || without[0].finish.is_none() {
        let mut batch = vec![&mut with[0], &mut without[0]];
        generate::step(&model, &mut batch).unwrap();
    }
    let got_with = with.remove(0).into_generation();
    let got_without = without.remove(0).into_generation();
    assert_eq!(got_with.tokens, expected_with.tokens);
    assert_eq!(got_without.tokens, expected_without.tokens);
    for (a, b) in got_with.logprobs.iter().zip(&expected_with.logprobs) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
    assert_ne!(
        expected_with.tokens, expected_without.tokens,
        "the memory changed nothing"
    );
}

#[test]
fn a_datastore_round_trips_through_its_file_with_its_content_hash() {
    let (_dir, model) = tiny();
    let mut datastore = Datastore::new(model.config.hidden_size);
    datastore
        .add_sequence(&model, &tokens("hello"), &tokens(" world"), None)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.safetensors");
    datastore.save(&path).unwrap();
    let loaded = Datastore::load(&path).unwrap();
    assert_eq!(loaded, datastore);
    assert_eq!(loaded.content_hash(), datastore.content_hash());
    let mut grown = loaded.clone();
    grown
        .add_sequence(&model, &tokens("hello"), &tokens(" there"), None)
        .unwrap();
    assert_ne!(grown.content_hash(), datastore.content_hash());
    assert_eq!(grown.len(), datastore.len() + 6);
    // The nearest key to a stored one is itself.
    let key = loaded.search(&vec![0.0; loaded.dim()], loaded.len());
    assert_eq!(key.len(), loaded.len());
    assert!(key.windows(2).all(|w| w[0].distance <= w[1].distance));
}

/// `n` keys of width `dim` around `n / 16` seeded random centres, each
/// key's value its own row number.
fn clustered(n: usize, dim: usize) -> Datastore {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let centres: Vec<Vec<f32>> = (0..n.div_ceil(16))
        .map(|_| (0..dim).map(|_| uniform()).collect())
        .collect();
    let mut store = Datastore::new(dim);
    for i in 0..n {
        let key: Vec<f32> = centres[i % centres.len()].iter().map(|c| c + 0.2 * uniform()).collect();
        store.add(&key, i as u32).unwrap();
    }
    store
}

#[test]
fn a_datastore_above_the_exact_limit_is_searched_through_an_index_that_finds_the_nearest_keys() {
    let small = clustered(1_000, 16).indexed();
    assert!(!small.is_indexed(), "a small datastore is scanned");

    let exact = clustered(hone_engine::EXACT_LIMIT + 1_000, 16);
    let indexed = exact.clone().indexed();
    assert!(indexed.is_indexed() && !exact.is_indexed());
    assert_eq!(indexed, exact, "indexing changes no pair");

    // Each stored key finds itself first, at distance 0, and the exact 16
    // nearest of queries near stored keys are found (the recall is measured
    // against the scan of the unindexed copy).
    let rows = [0usize, 77, 4_321, 9_999, 17_000];
    for row in rows {
        let found = indexed.search(indexed.key(row), 16);
        assert_eq!(found.len(), 16);
        assert_eq!(found[0].value as usize, row);
        assert!(found[0].distance < 1e-4, "{}", found[0].distance);
        assert!(found.windows(2).all(|w| w[0].distance <= w[1].distance));
    }
    let queries: Vec<Vec<f32>> = (0..100)
        .map(|i| indexed.key(i * 173).iter().map(|v| v + 0.01).collect())
        .collect();
    let recall = indexed.recall(&queries, 16);
    assert!(recall > 0.9, "recall@16 {recall}");
    let approximate: Vec<Vec<u32>> = queries
        .iter()
        .map(|q| indexed.search(q, 16).iter().map(|n| n.value).collect())
        .collect();
    let scanned: Vec<Vec<u32>> = queries
        .iter()
        .map(|q| exact.search(q, 16).iter().map(|n| n.value).collect())
        .collect();
    let agree = approximate
        .iter()
        .zip(&scanned)
        .map(|(a, s)| s.iter().filter(|v| a.contains(v)).count())
        .sum::<usize>();
    assert!(
        (agree as f64 / (16.0 * queries.len() as f64) - recall).abs() < 1e-9,
        "recall is the share of the scan's neighbours found"
    );

    // A change drops the index; a saved datastore is read back as it was
    // and indexed again by `indexed`, as a server does.
    let mut grown = indexed.clone();
    grown.add(&[0.0; 16], 0).unwrap();
    assert!(!grown.is_indexed());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.safetensors");
    grown.save(&path).unwrap();
    let loaded = Datastore::load(&path).unwrap();
    assert!(!loaded.is_indexed());
    assert_eq!(loaded, grown);
    let served = loaded.indexed();
    assert!(served.is_indexed());
    assert_eq!(served.search(served.key(17_000), 1)[0].value, 17_000);
}
