//! Dataset builders over recorded traffic: deterministic for a seed,
//! stratified, near-duplicates dropped, snapshots immutable; export in the
//! trainer's formats and import back.

use crate::support::World;
use hone_learn::data::dataset::{build, export, read_instances, BuildOptions, Builder, ExportFormat};
use hone_learn::scoring::reward::{recompute, Rewarder};
use hone_store::{EpisodeFilter, LearnStore};
use serde_json::{json, Value};

async fn traffic(w: &World) {
    for i in 0..24 {
        let id = format!("q{i:02}");
        // q00..q03 ask the same question: near-duplicates of each other.
        let (a, b) = if i < 4 { (1, 1) } else { (i, i + 1) };
        let text = if i % 5 == 0 && i >= 4 {
            "silence".to_owned()
        } else {
            format!("What is {a}+{b}?")
        };
        w.ask("calc", &id, &text).await;
        if i % 3 != 0 {
            w.feedback(&id, "gold", json!(a + b)).await;
        }
    }
    w.recorder.flush(std::time::Duration::from_secs(5)).await.unwrap();
}

fn options(w: &World, builder: Builder, size: usize, seed: u64) -> BuildOptions {
    let agent = &w.config.agents["calc"];
    BuildOptions {
        builder,
        name: builder.name().to_owned(),
        filter: EpisodeFilter {
            agent: "calc".into(),
            spec_version: Some(agent.reward.version()),
            ..Default::default()
        },
        size,
        seed,
        dedup: true,
        champion: Some(agent.versions["v1"].id.clone()),
        reference_signal: agent.reward.reference_signal.clone(),
    }
}

fn ids(w: &World, dataset: &str) -> Vec<String> {
    w.store
        .dataset_items(dataset)
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect()
}

#[tokio::test]
async fn builders_are_deterministic_stratified_deduplicated_and_snapshots_immutable() {
    let w = World::start().await;
    traffic(&w).await;
    let spec = w.config.agents["calc"].reward.clone();
    let rewarder = Rewarder::new("calc", &spec, None).unwrap();
    recompute(w.learn_store(), &rewarder, 1, &mut |_| {}).await.unwrap();

    let (a, stats) = build(w.learn_store(), &options(&w, Builder::Traffic, 10, 7), 1, &mut |_| {}).unwrap();
    let (b, _) = build(w.learn_store(), &options(&w, Builder::Traffic, 10, 7), 2, &mut |_| {}).unwrap();
    let (c, _) = build(w.learn_store(), &options(&w, Builder::Traffic, 10, 8), 3, &mut |_| {}).unwrap();
    assert_eq!(
        (a.id.as_str(), b.id.as_str(), c.id.as_str()),
        ("traffic@1", "traffic@2", "traffic@3")
    );
    assert_eq!(stats.scanned, 24);
    assert_eq!(ids(&w, &a.id), ids(&w, &b.id), "the same seed picks the same episodes");
    assert_eq!(a.content_hash, b.content_hash);
    assert_ne!(ids(&w, &a.id), ids(&w, &c.id), "another seed picks others");
    assert_eq!(a.item_count, 10);
    // Strata: the flagged `silence` episodes (empty answers) are 4 of 24, so
    // 10 × 4/24 ≈ 2 would be theirs, but they are near-duplicates of each
    // other: one is kept and the other strata make up the size.
    let flagged = w
        .store
        .dataset_items(&a.id)
        .unwrap()
        .iter()
        .filter(|i| i.input == json!("silence"))
        .count();
    assert_eq!(flagged, 1, "{:?}", a.params["strata"]);
    assert_eq!(
        a.params["strata"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        24
    );

    // Near-duplicates: a sample of everything keeps one of the four `What is 1+1?` and one `silence`.
    let (all, stats) = build(w.learn_store(), &options(&w, Builder::Traffic, 24, 1), 4, &mut |_| {}).unwrap();
    assert_eq!(stats.duplicates, 3 + 3);
    assert_eq!(all.item_count, 24 - 6);

    // Regression: passed under the champion (a gold label matched); errors: the rest.
    let (reg, _) = build(
        w.learn_store(),
        &options(&w, Builder::Regression, 50, 0),
        5,
        &mut |_| {},
    )
    .unwrap();
    let reg_items = w.store.dataset_items(&reg.id).unwrap();
    assert!(reg_items.iter().all(|i| i.reward == Some(1.0) && i.reference.is_some()));
    let (err, _) = build(w.learn_store(), &options(&w, Builder::Errors, 50, 0), 6, &mut |_| {}).unwrap();
    let err_items = w.store.dataset_items(&err.id).unwrap();
    assert!(err_items.iter().all(|i| i.reward != Some(1.0)));
    let mut no_dedup = options(&w, Builder::Regression, 50, 0);
    no_dedup.dedup = false;
    let (reg_all, _) = build(w.learn_store(), &no_dedup, 7, &mut |_| {}).unwrap();
    let (err_all, _) = build(
        w.learn_store(),
        &BuildOptions {
            dedup: false,
            ..options(&w, Builder::Errors, 50, 0)
        },
        8,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(
        reg_all.item_count + err_all.item_count,
        24,
        "every episode is one or the other"
    );
    let (cost, _) = build(w.learn_store(), &options(&w, Builder::Cost, 3, 0), 9, &mut |_| {}).unwrap();
    assert_eq!(cost.item_count, 3);

    // Immutable: the database refuses to change a snapshot.
    let conn = rusqlite::Connection::open(w.config.store.sqlite_path().unwrap()).unwrap();
    for sql in [
        "UPDATE dataset_items SET item = '{}' WHERE dataset_id = 'traffic@1'",
        "DELETE FROM dataset_items WHERE dataset_id = 'traffic@1'",
        "UPDATE datasets SET item_count = 0 WHERE id = 'traffic@1'",
    ] {
        let e = conn.execute(sql, []).unwrap_err();
        assert!(e.to_string().contains("immutable"), "{sql}: {e}");
    }
    assert_eq!(ids(&w, &a.id), ids(&w, &b.id));

    // Export for the trainer, and import back.
    let items = w.store.dataset_items(&reg.id).unwrap();
    let mut chat = Vec::new();
    let n = export(&items, ExportFormat::Chat, &mut chat).unwrap();
    assert_eq!(n as usize, items.len());
    let first: Value = serde_json::from_slice(chat.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages.last().unwrap()["role"], "assistant");
    let mut grpo = Vec::new();
    export(&w.store.dataset_items(&all.id).unwrap(), ExportFormat::Grpo, &mut grpo).unwrap();
    let group: Value = serde_json::from_slice(grpo.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert!(group["completions"][0]["reward"].is_number() && group["prompt"].is_array());
    let mut native = Vec::new();
    export(&items, ExportFormat::Hone, &mut native).unwrap();
    let back = read_instances("x.jsonl", std::str::from_utf8(&native).unwrap(), "calc").unwrap();
    assert_eq!(back, items);
    let chat_back = read_instances("chat.jsonl", std::str::from_utf8(&chat).unwrap(), "calc").unwrap();
    assert_eq!(chat_back.len(), items.len());
    let e = read_instances(
        "bad.jsonl",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
        "calc",
    )
    .unwrap_err();
    assert_eq!(e, "bad.jsonl:1: messages: no assistant message to use as the reference");
}

#[tokio::test]
async fn dpo_pairs_come_from_better_and_worse_answers_to_the_same_prompt() {
    let w = World::start().await;
    let good = hone_types::Instance {
        id: "a".into(),
        agent: "calc".into(),
        episode_id: None,
        version_id: None,
        input: json!("What is 2+2?"),
        request: Some(json!({"messages": [{"role": "user", "content": "What is 2+2?"}]})),
        reference: None,
        output: vec![json!({"role": "assistant", "content": "4"})],
        reward: Some(1.0),
        cost_usd: None,
    };
    let bad = hone_types::Instance {
        id: "b".into(),
        output: vec![json!({"role": "assistant", "content": "5"})],
        reward: Some(0.0),
        ..good.clone()
    };
    let mut out = Vec::new();
    assert_eq!(
        export(&[bad.clone(), good.clone()], ExportFormat::Dpo, &mut out).unwrap(),
        1
    );
    let pair: Value = serde_json::from_slice(out.trim_ascii_end()).unwrap();
    assert_eq!(pair["chosen"][0]["content"], "4");
    assert_eq!(pair["rejected"][0]["content"], "5");
    drop(w);
}
