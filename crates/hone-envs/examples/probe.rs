#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]
use hone_engine::model::Model;
use hone_envs::{Builtin, Difficulty, Split};
fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    let env = Builtin::Calc.build(7);
    let model = Model::load(&dir, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    let tok = hone_engine::Tokenizer::load(&dir).unwrap();
    let tools = serde_json::to_value(env.tools()).unwrap();
    let stop: Vec<u32> = ["<|im_end|>"].iter().filter_map(|t| tok.token_id(t)).collect();
    let sampling = hone_engine::generate::Sampling {
        temperature: 0.0,
        max_tokens: 80,
        stop_tokens: stop,
        ..Default::default()
    };
    for i in 0..9u64 {
        let d = Difficulty::from_level((i % 3) as u8 + 1).unwrap();
        let task = env.task(Split::HeldOut, i, d);
        let msgs = serde_json::to_value(hone_envs::opening(env.as_ref(), &task)).unwrap();
        let text = tok.template.render(&msgs, Some(&tools), true).unwrap();
        let g = hone_engine::generate::generate(&model, &tok.encode(&text).unwrap(), None, &sampling).unwrap();
        println!(
            "{:?} | {}\n  -> {}",
            d,
            task.prompt,
            tok.decode(&g.tokens).unwrap().replace('\n', " ")
        );
    }
}
