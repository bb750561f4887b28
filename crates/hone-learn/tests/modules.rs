//! hone-learn's modules form no import cycle: reading every source file's
//! `crate::` paths (tests left out), neither the graph of its top-level
//! modules (the base modules, the groups `scoring`, `data`, `release`,
//! `search`, and `cycle`) nor that of the modules inside the groups
//! (`scoring::reward`, `search::eval`, …) has a cycle, so each can be read,
//! changed and tested above the ones it uses. A child module may use its
//! parent (`optimiser::reflect` uses `optimiser`'s context).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The modules that group others by role.
const GROUPS: [&str; 4] = ["scoring", "data", "release", "search"];

/// A module path's first segments as a node: the top-level module, and
/// with `inside_groups` the module within a group too (`search::eval`).
fn node<'a>(mut segments: impl Iterator<Item = &'a str>, inside_groups: bool) -> String {
    let first = segments.next().unwrap_or_default().trim_end_matches(".rs");
    match segments.next() {
        Some(second) if inside_groups && GROUPS.contains(&first) && second != "mod.rs" => {
            format!("{first}::{}", second.trim_end_matches(".rs"))
        }
        _ => first.to_owned(),
    }
}

/// Module → the modules its code names (see [`node`]).
fn graph(src: &Path, inside_groups: bool) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        let module = node(relative.split('/'), inside_groups);
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let used = edges.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let path: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let name = node(path.split("::").filter(|s| !s.is_empty()), inside_groups);
                if !name.is_empty() && name != module && !module.starts_with(&format!("{name}::")) {
                    used.insert(name);
                }
            }
        }
    }
    edges
}

/// A cycle through `from`, if any: the path back to it.
fn cycle_from(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_owned(), vec![from.to_owned()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == from {
                return Some([path.clone(), vec![next.clone()]].concat());
            }
            if seen.insert(next.clone()) {
                stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
            }
        }
    }
    None
}

fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    edges
        .keys()
        .filter_map(|m| cycle_from(edges, m))
        .map(|c| c.join(" → "))
        .collect()
}

#[test]
fn the_top_level_modules_import_one_another_without_a_cycle() {
    let edges = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), false);
    assert!(
        edges.len() >= 10 && edges["search"].contains("scoring") && edges["cycle"].contains("release"),
        "the graph was read: {edges:?}"
    );
    let found = cycles(&edges);
    assert!(found.is_empty(), "import cycles: {found:#?}");
}

#[test]
fn the_modules_inside_the_groups_import_one_another_without_a_cycle() {
    let edges = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), true);
    assert!(
        edges.len() > 20 && edges["search::optimiser"].contains("search::eval"),
        "the graph was read: {edges:?}"
    );
    let found = cycles(&edges);
    assert!(found.is_empty(), "import cycles: {found:#?}");
}
