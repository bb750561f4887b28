//! The tests behind the monitors and the gate against scipy on fixed
//! samples (`reference/monitor_stats.py` made `reference/monitor_stats.json`,
//! latencies shaped like those of identical fake upstreams among them), and the
//! drift measure against scipy (`reference/drift.py`), and the canary's
//! always-valid sequential test against an independent implementation
//! (`reference/sequential.py` made `reference/sequential.json`).

use hone_learn::stats::{fisher_greater_p, mean_greater_p, sign_test};
use serde_json::Value;

fn reference() -> Value {
    serde_json::from_str(include_str!("reference/monitor_stats.json")).unwrap()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn close(ours: f64, scipy: f64) -> bool {
    (ours - scipy).abs() <= 1e-6 * scipy.abs().max(1e-12) + 1e-12
}

#[test]
fn welch_t_test_matches_scipy() {
    let r = reference();
    let cases = r["cases"]["welch_greater"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for c in cases {
        let p = mean_greater_p(&numbers(&c["a"]), &numbers(&c["b"]));
        let expected = c["p"].as_f64().unwrap();
        assert!(close(p, expected), "{}: ours {p} vs scipy {expected}", c["name"]);
    }
}

#[test]
fn sign_test_matches_scipy() {
    for c in reference()["cases"]["sign_test"].as_array().unwrap() {
        let p = sign_test(c["wins"].as_u64().unwrap(), c["losses"].as_u64().unwrap());
        let expected = c["p"].as_f64().unwrap();
        assert!(close(p, expected), "{c}: ours {p} vs scipy {expected}");
    }
}

/// A canary or champion episode of a monitor's window: right, one call,
/// `latency_ms` long, with or without an invalid tool call.
fn window_episode(latency_ms: f64, invalid_tool_call: bool) -> hone_store::WindowEpisode {
    hone_store::WindowEpisode {
        id: hone_types::EpisodeId::new_v7(),
        started_at: 0,
        calls: 1,
        error: false,
        invalid_tool_call,
        clarifying_question: false,
        refusal: false,
        empty: false,
        tool_use: true,
        answer_chars: 10.0,
        cost_usd: 0.0,
        latency_ms,
        reward: Some(1.0),
        signals: Vec::new(),
    }
}

/// A recorded canary window (`hone bench learn --seed 3`): one
/// invalid tool call in 24 canary episodes against none in 87 of the
/// champion's. The pooled two-proportion z-test the rate monitors used
/// said p = 0.028 and rolled back a candidate whose reward was 0.88
/// against 0.10; Fisher's exact test (scipy: p = 0.216) keeps the default
/// monitor quiet, and fires on six in 24 (scipy: p = 6e-5).
#[test]
fn one_invalid_tool_call_in_a_canary_window_does_not_fire_and_a_real_rise_does() {
    use hone_learn::release::monitor::{check, Expected};
    let spec = hone_config::LearnSpec::default().monitor;
    assert!(spec.min_episodes <= 24, "the canary window has 24 episodes");
    let champion: Vec<_> = (0..87).map(|_| window_episode(40.0, false)).collect();
    let canary = |invalid: usize| -> Vec<_> { (0..24).map(|i| window_episode(40.0, i < invalid)).collect() };
    let scipy = |a: u64| {
        reference()["cases"]["fisher_greater"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["passes_a"] == a && c["runs_a"] == 24 && c["runs_b"] == 87)
            .unwrap()["p"]
            .as_f64()
            .unwrap()
    };
    let one = check(&spec, &canary(1), &champion, Expected::default());
    assert!(one.is_empty(), "{one:?}");
    assert!(scipy(1) > 0.05);
    let six = check(&spec, &canary(6), &champion, Expected::default());
    assert_eq!(
        six.iter().map(|f| f.metric.as_str()).collect::<Vec<_>>(),
        ["invalid_tool_call"]
    );
    assert!(
        close(six[0].p_value, scipy(6)),
        "ours {} vs scipy {}",
        six[0].p_value,
        scipy(6)
    );
}

/// A canary a few ms slower than the champion over a few
/// dozen episodes on identical upstreams. Welch's test calls it significant
/// (scipy: p ≈ 0.016), so only the minimum effect size keeps the default
/// latency monitor quiet; a canary twice as slow and 50+ ms slower fires.
#[test]
fn a_significant_but_tiny_latency_rise_does_not_fire_and_a_real_one_does() {
    use hone_learn::release::monitor::{check, Expected};
    use hone_store::WindowEpisode;
    let r = reference();
    let case = |name: &str| {
        r["cases"]["welch_greater"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let episodes = |latencies: Vec<f64>| -> Vec<WindowEpisode> {
        latencies.into_iter().map(|ms| window_episode(ms, false)).collect()
    };
    let mut spec = hone_config::LearnSpec::default().monitor;
    spec.min_episodes = 10; // the canary sample has 17
    let default_latency = spec.bounds["latency"];
    assert_eq!(
        (default_latency.relative, default_latency.absolute),
        (Some(1.0), Some(50.0))
    );
    let tiny = case("latency_of_identical_upstreams");
    assert!(tiny["p"].as_f64().unwrap() < 0.05, "the sample is significant");
    let fired = check(
        &spec,
        &episodes(numbers(&tiny["b"])),
        &episodes(numbers(&tiny["a"])),
        Expected::default(),
    );
    assert!(fired.is_empty(), "{fired:?}");
    // Twice as slow and more than 50 ms slower: beyond both parts.
    let slow: Vec<f64> = numbers(&tiny["b"]).iter().map(|x| x * 2.0 + 60.0).collect();
    let fired = check(
        &spec,
        &episodes(slow),
        &episodes(numbers(&tiny["a"])),
        Expected::default(),
    );
    assert_eq!(fired.iter().map(|f| f.metric.as_str()).collect::<Vec<_>>(), ["latency"]);
    // Evaluation predicted the canary at 3× the latency: then that is no alert.
    let expected = Expected {
        cost_ratio: 1.0,
        latency_ratio: 3.0,
    };
    let slow: Vec<f64> = numbers(&tiny["b"]).iter().map(|x| x * 2.0 + 60.0).collect();
    assert!(check(&spec, &episodes(slow), &episodes(numbers(&tiny["a"])), expected).is_empty());
}

#[test]
fn fisher_exact_test_matches_scipy() {
    let cases = reference()["cases"]["fisher_greater"].as_array().unwrap().clone();
    assert_eq!(cases.len(), 9);
    for c in cases {
        let n = |k: &str| c[k].as_u64().unwrap();
        let p = fisher_greater_p(n("passes_a"), n("runs_a"), n("passes_b"), n("runs_b"));
        let expected = c["p"].as_f64().unwrap();
        assert!(close(p, expected), "{c}: ours {p} vs scipy {expected}");
    }
}

#[test]
fn drift_divergence_matches_scipy() {
    let r: Value = serde_json::from_str(include_str!("reference/drift.json")).unwrap();
    let counts = |v: &Value| -> std::collections::BTreeMap<String, f64> {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, n)| (k.clone(), n.as_f64().unwrap()))
            .collect()
    };
    for c in r["cases"].as_array().unwrap() {
        let ours = hone_learn::data::drift::jensen_shannon(&counts(&c["p"]), &counts(&c["q"]));
        let expected = c["divergence"].as_f64().unwrap();
        assert!((ours - expected).abs() < 1e-9, "{c}: ours {ours} vs scipy {expected}");
    }
}

/// The permutation test: two samples of one task mix are not drift; a
/// window of new tasks is, at the smallest p-value 400 relabellings give.
#[test]
fn drift_permutation_test_separates_a_new_task_mix_from_the_same_one() {
    use hone_learn::data::drift::{divergence_test, task_words, PERMUTATIONS};
    let sums: Vec<Vec<String>> = (0..60)
        .map(|i| task_words(&format!("What is {}+{}?", i, i % 7)))
        .collect();
    let mixed: Vec<Vec<String>> = (0..60)
        .map(|i| {
            if i % 2 == 0 {
                task_words(&format!("What is {i} times 3?"))
            } else {
                task_words(&format!("What is {}+{}?", i, i % 7))
            }
        })
        .collect();
    let (same, p_same) = divergence_test(&sums[..30], &sums[30..], PERMUTATIONS, 1);
    assert!(same < 1e-9 && p_same > 0.5, "{same} {p_same}");
    let (moved, p_moved) = divergence_test(&mixed[30..], &sums[..30], PERMUTATIONS, 1);
    assert!(moved > 0.05, "{moved}");
    assert!((p_moved - 1.0 / (PERMUTATIONS + 1) as f64).abs() < 1e-12, "{p_moved}");
    // Numbers are one token: different numbers are the same task.
    assert_eq!(task_words("What is 12+7?"), task_words("what is 3 + 99"));
}

/// The promotion rule (`watch::Online`) on fixed online rewards: its two
/// one-sided tests against scipy, and its call against the one the
/// reference script makes independently (by default a canary not shown
/// worse is promoted; with a margin it must be shown within it, and is
/// rolled back at the cap when it is not).
#[test]
fn the_promotion_rule_calls_what_scipy_and_the_reference_rule_call() {
    use hone_config::{DeploymentConfig, PromotionRule};
    use hone_learn::watch::{Call, Context, Online};
    let cases = reference()["cases"]["promotion"].as_array().unwrap().clone();
    assert_eq!(cases.len(), 8);
    for c in &cases {
        let mut deployment = DeploymentConfig::new("v1".into());
        deployment.canary_episodes = c["canary_episodes"].as_u64().unwrap() as usize;
        deployment.promotion = match c["margin"].as_f64() {
            None => PromotionRule::NotShownWorse,
            Some(margin) => PromotionRule::WithinMargin {
                margin,
                max_episodes: c["max_episodes"].as_u64().unwrap() as usize,
            },
        };
        let timed =
            |v: &Value| -> Vec<(i64, f64)> { numbers(v).into_iter().enumerate().map(|(i, x)| (i as i64, x)).collect() };
        let online = Online::of(
            &deployment,
            0.95,
            &Context::first((0.0, 1.0)),
            &timed(&c["canary"]),
            &timed(&c["champion"]),
        );
        let name = &c["name"];
        let expected = c["p_champion_better"].as_f64().unwrap();
        assert!(
            close(online.p_champion_better, expected),
            "{name}: {online:?} vs scipy {expected}"
        );
        match (online.p_within_margin, c["p_within_margin"].as_f64()) {
            (Some(ours), Some(scipy)) => assert!(close(ours, scipy), "{name}: {ours} vs scipy {scipy}"),
            (None, None) => {}
            (ours, scipy) => panic!("{name}: {ours:?} vs scipy {scipy:?}"),
        }
        let call = match c["call"].as_str().unwrap() {
            "wait" => Call::Wait,
            "promote" => Call::Promote,
            "roll_back" => Call::RollBack,
            other => panic!("{other}"),
        };
        assert_eq!(online.call, call, "{name}: {}", online.summary());
    }
}

fn timed_pairs(v: &Value) -> Vec<(i64, f64)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_i64().unwrap(), p[1].as_f64().unwrap()))
        .collect()
}

/// The bets on a canary — run pairing, aGRAPA bets, wealth, and the
/// confidence sequence on its grid — match the reference's, computed there
/// from scratch from the definitions (`reference/betting.py`).
#[test]
fn the_betting_test_matches_an_independent_implementation() {
    use hone_learn::stats::betting::{compare, merged};
    let r: Value = serde_json::from_str(include_str!("reference/betting.json")).unwrap();
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 5);
    let near = |ours: f64, theirs: f64| (ours - theirs).abs() <= 1e-9 * theirs.abs().max(1.0);
    for c in cases {
        let name = &c["name"];
        let range = (c["range"][0].as_f64().unwrap(), c["range"][1].as_f64().unwrap());
        let test = compare(
            merged(&timed_pairs(&c["champion"]), &timed_pairs(&c["canary"])),
            range,
            c["least_gain"].as_f64().unwrap(),
            c["alpha"].as_f64().unwrap(),
        );
        assert_eq!(test.pairs as u64, c["pairs"].as_u64().unwrap(), "{name}");
        match (test.difference, c["difference"].as_f64()) {
            (Some(ours), Some(theirs)) => assert!(near(ours, theirs), "{name}: {test:?}"),
            (ours, theirs) => assert_eq!(ours, theirs, "{name}"),
        }
        for (ours, key) in [
            (test.wealth, "wealth"),
            (test.peak_wealth, "peak_wealth"),
            (test.peak_wealth_worse, "peak_wealth_worse"),
            (test.peak_wealth_short, "peak_wealth_short"),
        ] {
            let theirs = c[key].as_f64().unwrap();
            assert!(
                (ours.ln() - theirs.ln()).abs() < 1e-9,
                "{name} {key}: {ours} vs {theirs}"
            );
        }
        let (low, high) = test.interval.unwrap();
        assert!(near(low, c["interval"][0].as_f64().unwrap()), "{name}: {test:?}");
        assert!(near(high, c["interval"][1].as_f64().unwrap()), "{name}: {test:?}");
        match name.as_str().unwrap() {
            "clearly_better" => assert!(test.shown_better(0.025) && !test.shown_worse(0.05), "{test:?}"),
            "clearly_worse" => assert!(test.shown_worse(0.05) && !test.shown_better(0.05), "{test:?}"),
            "small_gain_short" => assert!(test.shown_short(0.05) && !test.shown_better(0.05), "{test:?}"),
            _ => assert!(!test.shown_better(0.05) && !test.shown_worse(0.05), "{name}: {test:?}"),
        }
    }
}

/// Users decide: under `promotion = "sequential"` a canary is promoted at
/// the first look that shows it better at its level, rolled back at one
/// that shows it worse, and rolled back when `canary_max_episodes` pass
/// with neither (however few `canary_episodes` is: the sequential rule
/// does not wait for it, nor decide at it). A later canary of a sequence
/// without promotions needs more evidence; one after promotions less.
#[test]
fn a_sequential_canary_is_decided_by_users_at_any_look_within_its_cap() {
    use hone_config::{DeploymentConfig, PromotionRule};
    use hone_learn::watch::{Call, Context, Online};
    let mut deployment = DeploymentConfig::new("v1".into());
    deployment.canary_episodes = 10;
    deployment.promotion = PromotionRule::Sequential {
        max_episodes: 150,
        least_gain: 0.0,
        max_share: 0.5,
    };
    // Outcomes at a given rate, one episode of each side every 10 ms, the
    // sides interleaved so every run is one episode long.
    let side = |n: usize, every: usize, offset: i64| -> Vec<(i64, f64)> {
        (0..n)
            .map(|i| (offset + 10 * i as i64, if i % every == 0 { -0.5 } else { 1.0 }))
            .collect()
    };
    let champion = side(300, 2, 0);
    let first = Context::first((-0.5, 1.0));
    let call = |context: &Context, canary: &[(i64, f64)]| Online::of(&deployment, 0.95, context, canary, &champion);
    assert_eq!(call(&first, &side(1, 10, 5)).call, Call::Wait, "nothing to bet on yet");
    let better = call(&first, &side(60, 10, 5));
    assert_eq!(better.call, Call::Promote, "{}", better.summary());
    assert!(
        better.summary().contains("evidence it is better"),
        "{}",
        better.summary()
    );
    let look = better.sequential.unwrap();
    assert!(
        look.share > 0.1 && look.share <= 0.5,
        "its share grew with the evidence: {look:?}"
    );
    let worse = call(&first, &side(60, 1, 5));
    assert_eq!(worse.call, Call::RollBack, "{}", worse.summary());
    assert!(worse.sequential.unwrap().share == 0.1, "a worse canary keeps its start");
    let level = call(&first, &side(100, 2, 5));
    assert_eq!(level.call, Call::Wait, "{}", level.summary());
    let capped = call(&first, &side(150, 2, 5));
    assert_eq!(capped.call, Call::RollBack, "{}", capped.summary());
    // The 30th canary without a promotion is tested at a far lower level;
    // after 10 promotions at an 11 times higher one.
    let late = Context {
        canary_number: 30,
        ..first
    };
    let lucky = Context {
        promotions_before: 10,
        ..late
    };
    let (a, b) = (
        call(&late, &side(60, 10, 5)).sequential.unwrap(),
        call(&lucky, &side(60, 10, 5)).sequential.unwrap(),
    );
    assert!(
        a.level < 0.05 * 0.002 && (b.level / a.level - 11.0).abs() < 1e-9,
        "{a:?} {b:?}"
    );
    let needs_more = call(&late, &side(42, 10, 5));
    let enough_then = call(&lucky, &side(42, 10, 5));
    assert!(
        needs_more.call == Call::Wait && enough_then.call == Call::Promote,
        "{} / {}",
        needs_more.summary(),
        enough_then.summary()
    );
    assert_eq!(
        call(&late, &side(60, 1, 5)).call,
        Call::RollBack,
        "worse is worse at any place"
    );
}

/// A canary's place in its sequence is counted from the whole history:
/// every canary so far, and the promotions before the current one started.
#[test]
fn a_canary_is_placed_in_its_sequence_from_the_history() {
    use hone_learn::watch::sequence_of;
    let event = |kind: &str| hone_types::HistoryEvent::new("a", 0, kind, "");
    let history: Vec<_> = [
        "canary", "rollback", "canary", "promote", "canary", "share", "rollback", "canary", "promote", "canary",
    ]
    .iter()
    .map(|k| event(k))
    .collect();
    assert_eq!(sequence_of(&history), (5, 2));
    assert_eq!(
        sequence_of(&history[..8]),
        (4, 1),
        "promotions after it started do not count"
    );
    assert_eq!(sequence_of(&[]), (1, 0));
}
