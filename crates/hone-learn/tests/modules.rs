//! hone-learn's modules form no import cycle: reading every source file's
//! `crate::` paths (tests left out), the graph of its top-level modules
//! (`ask`, `reward`, `eval`, `optimiser`, …) has no cycle, so each can be
//! read, changed and tested above the ones it uses. A child module may use
//! its parent (`optimiser::reflect` uses `optimiser`'s context).

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

/// Top-level module → the top-level modules its code names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        let first = relative.components().next().unwrap().as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let used = edges.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let name: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
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

#[test]
fn the_top_level_modules_import_one_another_without_a_cycle() {
    let edges = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        edges.len() > 10 && edges["optimiser"].contains("eval"),
        "the graph was read: {edges:?}"
    );
    let cycles: Vec<String> = edges
        .keys()
        .filter_map(|m| cycle_from(&edges, m))
        .map(|c| c.join(" → "))
        .collect();
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}
