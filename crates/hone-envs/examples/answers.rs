//! Prints a checkpoint's greedy first answer to held-out `calc` tasks, to
//! see what a base policy gets wrong:
//! `cargo run --release -p hone-envs --example answers -- DIR [N]`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use hone_engine::model::Model;
use hone_envs::{Builtin, Difficulty, Split};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: answers DIR [N]"));
    let n: u64 = args.next().map_or(9, |n| n.parse().unwrap());
    let env = Builtin::Calc.build(hone_envs::calc::DEFAULT_SEED);
    let model = Model::load(&dir, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    let tokenizer = hone_engine::Tokenizer::load(&dir).unwrap();
    let tools = serde_json::to_value(env.tools()).unwrap();
    let sampling = hone_engine::generate::Sampling {
        temperature: 0.0,
        max_tokens: 80,
        stop_tokens: tokenizer.token_id("<|im_end|>").into_iter().collect(),
        ..Default::default()
    };
    for i in 0..n {
        let difficulty = Difficulty::from_level((i % 3) as u8 + 1).unwrap();
        let task = env.task(Split::HeldOut, i, difficulty);
        let messages = serde_json::to_value(hone_envs::opening(env.as_ref(), &task)).unwrap();
        let text = tokenizer.template.render(&messages, Some(&tools), true).unwrap();
        let generated =
            hone_engine::generate::generate(&model, &tokenizer.encode(&text).unwrap(), None, &sampling).unwrap();
        println!(
            "{difficulty:?} | {}\n  -> {}",
            task.prompt,
            tokenizer.decode(&generated.tokens).unwrap().replace('\n', " ")
        );
    }
}
