//! The crates' layering, read from the workspace's own `Cargo.toml` files
//! (`cargo metadata --no-deps`): every hone crate has a rank and depends
//! (normally, not as a dev-dependency) only on crates of lower rank, so the
//! demo and the benchmarks sit above everything they use and no product
//! crate can reach them; test support is only ever a dev-dependency; and a
//! team implementing `Environment` compiles neither the trainer nor candle.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Lower ranks are lower layers; a crate may use only lower ranks.
const RANKS: &[(&str, u8)] = &[
    ("hone-types", 0),
    ("hone-engine", 0),
    ("hone-config", 1),
    ("hone-train", 1),
    ("hone-envs", 1),
    ("hone-console", 1),
    ("hone-store", 2),
    ("hone-artefacts", 2),
    ("hone-test-support", 3),
    ("hone-gateway", 3),
    ("hone-learn", 3),
    ("hone-ui", 4),
    ("hone-demo", 5),
    ("hone-bench", 6),
    ("hone", 7),
];

/// Every workspace crate's normal dependencies, by name.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--offline", "--format-version", "1"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|package| {
            let dependencies = package["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect();
            (package["name"].as_str().unwrap().to_owned(), dependencies)
        })
        .collect()
}

fn rank(name: &str) -> Option<u8> {
    RANKS.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

#[test]
fn every_crate_depends_only_on_lower_layers_and_the_lab_crates_sit_on_top() {
    let crates = normal_dependencies();
    let ranked: BTreeSet<&str> = RANKS.iter().map(|(n, _)| *n).collect();
    let members: BTreeSet<&str> = crates.keys().map(String::as_str).collect();
    assert_eq!(members, ranked, "every workspace crate has a rank here, and only they");
    let mut upward = Vec::new();
    for (name, dependencies) in &crates {
        let own = rank(name).unwrap();
        for dependency in dependencies {
            if let Some(theirs) = rank(dependency) {
                if theirs >= own {
                    upward.push(format!("{name} (rank {own}) → {dependency} (rank {theirs})"));
                }
            }
        }
    }
    assert!(upward.is_empty(), "dependencies that do not point down: {upward:?}");
    // Only the binary and the benchmarks use the demo; only the binary the benchmarks.
    let users = |of: &str| -> BTreeSet<&str> {
        crates
            .iter()
            .filter(|(_, d)| d.contains(of))
            .map(|(n, _)| n.as_str())
            .collect()
    };
    assert_eq!(users("hone-demo"), BTreeSet::from(["hone", "hone-bench"]));
    assert_eq!(users("hone-bench"), BTreeSet::from(["hone"]));
    // Test support is a dev-dependency only: no product's API carries it.
    assert_eq!(users("hone-test-support"), BTreeSet::new());
    // The learner never links the server.
    assert!(!crates["hone-learn"].contains("hone-gateway"));
}

#[test]
fn environments_compile_without_the_trainer_the_engine_or_candle() {
    let crates = normal_dependencies();
    // Everything hone-envs pulls in, through the workspace's own crates.
    let mut reached = BTreeSet::new();
    let mut next = vec!["hone-envs".to_owned()];
    while let Some(name) = next.pop() {
        for dependency in crates.get(&name).into_iter().flatten() {
            if reached.insert(dependency.clone()) && crates.contains_key(dependency) {
                next.push(dependency.clone());
            }
        }
    }
    for forbidden in ["hone-train", "hone-engine", "candle-core", "candle-nn"] {
        assert!(
            !reached.contains(forbidden),
            "hone-envs reaches {forbidden}: {reached:?}"
        );
    }
    assert!(
        reached.contains("hone-types"),
        "the walk found hone-envs' dependencies: {reached:?}"
    );
}
