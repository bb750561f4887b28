//! The JSONL formats: which tokens are scored, and errors that name the line.

use crate::support::tiny;
use hone_engine::{Arch, Tokenizer};
use hone_train::data::{read_dpo, read_grpo, read_sft, Renderer};
use hone_train::Sequence;
use std::path::Path;

fn write(dir: &Path, name: &str, lines: &[&str]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn scored_text(tokenizer: &Tokenizer, s: &Sequence) -> String {
    let ids: Vec<u32> = s
        .tokens
        .iter()
        .zip(&s.scored)
        .filter(|(_, s)| **s)
        .map(|(t, _)| *t)
        .collect();
    tokenizer.decode(&ids).unwrap()
}

#[test]
fn only_trained_assistant_tokens_are_scored() {
    let (dir, model) = tiny(Arch::Qwen2);
    let tokenizer = Tokenizer::load(&model).unwrap();
    let renderer = Renderer {
        tokenizer: Some(&tokenizer),
    };
    let sft = write(
        dir.path(),
        "sft.jsonl",
        &[
            r#"{"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "six", "weight": 0}, {"role": "user", "content": "5+5?"}, {"role": "assistant", "content": "10"}]}"#,
            "",
            r#"{"prompt": [{"role": "user", "content": "hi"}], "completion": "hello"}"#,
            r#"{"prompt_tokens": [1, 2], "completion_tokens": [3, 4]}"#,
        ],
    );
    let examples = read_sft(&sft, renderer).unwrap();
    assert_eq!(examples.len(), 3);
    assert_eq!(examples[0].line, 1);
    assert_eq!(examples[1].line, 3, "blank lines are skipped but counted");
    assert_eq!(
        scored_text(&tokenizer, &examples[0].sequence),
        "4<|im_end|>10<|im_end|>"
    );
    assert_eq!(scored_text(&tokenizer, &examples[1].sequence), "hello<|im_end|>");
    assert_eq!(examples[2].sequence.scored, vec![false, false, true, true]);

    // Multi-turn GRPO: the tool result inside the completion is not scored.
    let grpo = write(
        dir.path(),
        "grpo.jsonl",
        &[
            r#"{"prompt": [{"role": "user", "content": "Weather?"}], "completions": [{"reward": 1, "messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "RAIN"}, {"role": "assistant", "content": "Rain."}]}, {"reward": 0, "text": "No idea."}]}"#,
            r#"{"agent": "support", "prompt_tokens": [5, 6, 7], "completions": [{"reward": 0.5, "tokens": [8, 9, 10, 11], "mask": [1, 0, 0, 1], "logprobs": [-0.5, null, null, -1.5]}]}"#,
        ],
    );
    let groups = read_grpo(&grpo, renderer).unwrap();
    let first = scored_text(&tokenizer, &groups[0].samples[0].sequence);
    assert!(
        first.contains("<tool_call>") && first.ends_with("Rain.<|im_end|>"),
        "{first}"
    );
    assert!(!first.contains("RAIN"), "the tool result must not be scored: {first}");
    assert_eq!(groups[0].agent, "default");
    assert_eq!(groups[1].agent, "support");
    assert_eq!(
        groups[1].samples[0].sequence.scored,
        vec![false, false, false, true, false, false, true]
    );
    assert_eq!(groups[1].samples[0].behaviour, Some(vec![-0.5, -1.5]));

    let dpo = write(
        dir.path(),
        "dpo.jsonl",
        &[
            r#"{"prompt": [{"role": "user", "content": "Hi"}], "chosen": "Hello!", "rejected": [{"role": "assistant", "content": "Go away."}]}"#,
        ],
    );
    let pairs = read_dpo(&dpo, renderer).unwrap();
    assert_eq!(scored_text(&tokenizer, &pairs[0].chosen), "Hello!<|im_end|>");
    assert_eq!(scored_text(&tokenizer, &pairs[0].rejected), "Go away.<|im_end|>");
}

#[test]
fn malformed_lines_are_named() {
    let (dir, model) = tiny(Arch::Llama);
    let tokenizer = Tokenizer::load(&model).unwrap();
    let renderer = Renderer {
        tokenizer: Some(&tokenizer),
    };
    let good = r#"{"prompt_tokens": [1], "completion_tokens": [2]}"#;
    let cases: Vec<(&str, &str)> = vec![
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (
            r#"{"prompt_tokens": [1], "completion_tokens": "x"}"#,
            "completion_tokens: invalid type",
        ),
        (
            r#"{"messages": [{"role": "user", "content": "no answer"}]}"#,
            "no assistant message",
        ),
        (r#"{"something": 1}"#, "expected `messages`"),
        (r#"{"prompt_tokens": [1], "completion_tokens": []}"#, "no tokens"),
    ];
    for (bad, expected) in cases {
        let path = write(dir.path(), "bad.jsonl", &[good, bad]);
        let err = read_sft(&path, renderer).unwrap_err().to_string();
        assert!(err.contains("bad.jsonl:2:") && err.contains(expected), "{bad} → {err}");
    }
    let grpo_cases: Vec<(&str, &str)> = vec![
        (
            r#"{"prompt_tokens": [1], "completions": [{"tokens": [2], "reward": "high"}]}"#,
            "completions[0].reward",
        ),
        (r#"{"prompt_tokens": [1], "completions": []}"#, "`completions` is empty"),
        (
            r#"{"prompt_tokens": [1], "completions": [{"tokens": [2, 3], "reward": 1, "logprobs": [-1]}]}"#,
            "1 entries for 2 completion tokens",
        ),
        (
            r#"{"prompt_tokens": [1], "completions": [{"tokens": [2], "reward": 1, "logprobs": [0.5]}]}"#,
            "not a finite number ≤ 0",
        ),
        (
            r#"{"prompt": [{"role": "user", "content": "x"}], "completions": [{"tokens": [2], "reward": 1}]}"#,
            "need `prompt_tokens`",
        ),
    ];
    for (bad, expected) in grpo_cases {
        let path = write(dir.path(), "bad.jsonl", &[bad]);
        let err = read_grpo(&path, renderer).unwrap_err().to_string();
        assert!(err.contains("bad.jsonl:1:") && err.contains(expected), "{bad} → {err}");
    }
    let empty = write(dir.path(), "empty.jsonl", &[""]);
    assert!(read_dpo(&empty, renderer)
        .unwrap_err()
        .to_string()
        .contains("no examples"));
    // Token ids outside the vocabulary are caught before training.
    let model = hone_engine::Model::load(&model, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    let seq = Sequence::prompt_completion(&[1], &[99_999]);
    let err = hone_train::Packed::new(&model, &[&seq]).unwrap_err().to_string();
    assert!(err.contains("99999") && err.contains("vocabulary"), "{err}");
}
