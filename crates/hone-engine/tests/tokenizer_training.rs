//! A byte-level BPE tokenizer learned from a corpus: byte and special
//! tokens keep their ids, every text round-trips, the corpus compresses,
//! and a checkpoint written with it loads with a vocabulary that holds it.

use hone_engine::init::{trained_tokenizer, write_checkpoint_with, Numbers, Preset, SPECIAL_TOKENS};
use hone_engine::{Arch, Tokenizer};

fn corpus() -> Vec<String> {
    (0..200)
        .map(|i| {
            format!(
                "<|im_start|>user\nA shop has {} apples and sells {}. How many are left?<|im_end|>\n\
                 <|im_start|>assistant\n<tool_call>\n{{\"name\": \"calc\", \"arguments\": {{\"expression\": \"{} - {}\"}}}}\n</tool_call><|im_end|>\n",
                i + 10,
                i % 7,
                i + 10,
                i % 7
            )
        })
        .collect()
}

#[test]
fn a_learned_tokenizer_keeps_byte_and_special_ids_round_trips_and_compresses() {
    let texts = corpus();
    let learned = trained_tokenizer(&texts, 512, Numbers::Digits).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model");
    write_checkpoint_with(Arch::Qwen2, Preset::Tiny, 0, &path, &learned).unwrap();
    let tokenizer = Tokenizer::load(&path).unwrap();
    for (k, (special, _)) in SPECIAL_TOKENS.iter().enumerate() {
        assert_eq!(tokenizer.token_id(special), Some(256 + k as u32), "{special}");
    }
    // A byte that never occurs in the corpus is still its own id.
    assert_eq!(tokenizer.encode("~").unwrap(), vec![u32::from(b'~')]);
    let mut bytes = 0;
    let mut tokens = 0;
    for text in texts
        .iter()
        .chain([&"Something else entirely: ünïcödé ✓ 42".to_owned()])
    {
        let ids = tokenizer.encode(text).unwrap();
        assert_eq!(&tokenizer.decode(&ids).unwrap(), text);
        bytes += text.len();
        tokens += ids.len();
    }
    assert!(tokens * 3 < bytes, "{tokens} tokens for {bytes} bytes");
    let config = hone_engine::ModelConfig::from_file(&path.join("config.json")).unwrap();
    assert!(
        config.vocab_size >= tokenizer.vocab_size(),
        "{} < {}",
        config.vocab_size,
        tokenizer.vocab_size()
    );
    hone_engine::model::Model::load(&path, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
}

/// Numbers cut as digits stay one token per digit; cut as runs, a frequent
/// number becomes one token, and either way it is cut apart from the text
/// around it (so it reads the same wherever it is copied to).
#[test]
fn numbers_are_cut_as_digits_or_as_runs() {
    let texts = corpus();
    let dir = tempfile::tempdir().unwrap();
    let tokens_of = |numbers: Numbers, text: &str| {
        let path = dir.path().join(format!("{numbers:?}"));
        write_checkpoint_with(
            Arch::Qwen2,
            Preset::Tiny,
            0,
            &path,
            &trained_tokenizer(&texts, 512, numbers).unwrap(),
        )
        .unwrap();
        let tokenizer = Tokenizer::load(&path).unwrap();
        let ids = tokenizer.encode(text).unwrap();
        ids.iter()
            .map(|id| tokenizer.decode(&[*id]).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        tokens_of(Numbers::Digits, "has 123 apples"),
        ["has", " ", "1", "2", "3", " apples"]
    );
    let runs = tokens_of(Numbers::Runs, "has 123 apples");
    assert!(runs.contains(&"123".to_owned()), "{runs:?}");
    assert_eq!(runs.concat(), "has 123 apples");
    assert!(
        runs.iter()
            .all(|t| t == "123" || !t.chars().any(|c| c.is_ascii_digit())),
        "{runs:?}"
    );
}
