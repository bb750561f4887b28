//! Plays a checkpoint greedily on held-out `calc` tasks and prints each
//! episode's turns and score, then where episodes fail per difficulty: how
//! many call the tool first, how many of those name the expression exactly
//! (copying the problem's numbers), and how many of those are solved
//! (copying the tool's result into the answer):
//! `cargo run --release -p hone-envs --example answers -- DIR [N]`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use hone_engine::model::Model;
use hone_envs::{Builtin, Difficulty, Split};
use hone_types::openai::{Message, Role};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    hone_engine::threads::fix_thread_count();
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
    let (mut solved, mut right_call) = (0.0, 0);
    // Per difficulty: tasks, solved, tool first, exact expression, solved after an exact one.
    let mut stages = [[0.0f64; 5]; 3];
    for i in 0..n {
        let difficulty = Difficulty::from_level((i % 3) as u8 + 1).unwrap();
        let task = env.task(Split::HeldOut, i, difficulty);
        let mut turns = Vec::new();
        let played = hone_envs::episode::play(env.as_ref(), &task, 3, |messages: Vec<Message>| {
            let text = tokenizer
                .template
                .render_openai(
                    serde_json::to_value(&messages).unwrap().as_array().unwrap(),
                    Some(&tools),
                    true,
                )
                .unwrap();
            let generated =
                hone_engine::generate::generate(&model, &tokenizer.encode(&text).unwrap(), None, &sampling).unwrap();
            let out = tokenizer.decode(&generated.tokens).unwrap();
            turns.push(out.replace('\n', " "));
            let parsed = hone_types::tool_calls::parse(out.trim_end_matches("<|im_end|>"));
            let message = if parsed.tool_calls.is_empty() {
                Message::new(Role::Assistant, parsed.content)
            } else {
                hone_envs::assistant_tool_calls(
                    parsed
                        .tool_calls
                        .into_iter()
                        .map(|c| ("call_1".to_owned(), c.name, c.arguments))
                        .collect(),
                )
            };
            async move { Ok::<_, ()>(message) }
        })
        .await
        .unwrap();
        let hone_envs::TaskData::Calc(calc) = &task.data else {
            unreachable!()
        };
        let tool_first = turns.first().is_some_and(|t| t.starts_with("<tool_call>"));
        let exact = turns
            .first()
            .is_some_and(|t| t.contains(&format!("\"{}\"", calc.expression)));
        right_call += usize::from(exact);
        solved += played.score;
        let row = &mut stages[usize::from(difficulty.level()) - 1];
        for (k, add) in [
            1.0,
            played.score,
            f64::from(u8::from(tool_first)),
            f64::from(u8::from(exact)),
        ]
        .into_iter()
        .enumerate()
        {
            row[k] += add;
        }
        if exact {
            row[4] += played.score;
        }
        println!(
            "{difficulty:?} {} | {} = {}",
            played.score, task.prompt, calc.expression
        );
        for turn in turns {
            println!("  -> {turn}");
        }
    }
    for (level, [tasks, solved, tool, exact, copied]) in stages.iter().enumerate() {
        println!(
            "level {}: solved {solved}/{tasks}; tool first {tool}; exact expression {exact}; solved after an exact one {copied}",
            level + 1
        );
    }
    println!("solved {solved}/{n}; first call names the expression exactly in {right_call}/{n}");
}
