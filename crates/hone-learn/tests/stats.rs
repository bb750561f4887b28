//! The tests behind the monitors and the gate against scipy on fixed
//! samples (`reference/monitor_stats.py` made `reference/monitor_stats.json`,
//! latencies shaped like the ones issue 16 recorded among them).

use hone_learn::stats::{mean_greater_p, sign_test, two_proportion_p};
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
fn two_proportion_test_matches_scipy() {
    for c in reference()["cases"]["two_proportion_greater"].as_array().unwrap() {
        let n = |k: &str| c[k].as_u64().unwrap();
        let p = two_proportion_p(n("hits_a"), n("n_a"), n("hits_b"), n("n_b"));
        let expected = c["p"].as_f64().unwrap();
        assert!(close(p, expected), "{c}: ours {p} vs scipy {expected}");
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
