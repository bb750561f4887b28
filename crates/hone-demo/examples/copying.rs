//! How well a checkpoint copies, per `calc` template, teacher-forced at
//! temperature 1 on held-out tasks: the probability that its first turn
//! opens a tool call, and that the call's expression gets each of the
//! problem's numbers right given everything before it (their product, and
//! the least likely one). Greedy play hides what sampling shows: a number
//! the model copies with probability 0.4 is right at temperature 0 and
//! wrong half the time at 0.3.
//! `cargo run --release -p hone-envs --example copying -- DIR [TASKS] [LEVELS]`
//! (TASKS held-out tasks, default 120, taking turns over levels 1..=LEVELS,
//! default 1).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use hone_engine::model::{KvCache, Model};
use hone_engine::Tokenizer;
use hone_envs::calc::format_number;
use hone_envs::{Builtin, Difficulty, Environment, Split, TaskData};
use hone_types::openai::{Message, Role};
use std::collections::BTreeMap;

/// What the model writes before the expression's first character.
const CALL_OPENING: &str = "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"";

fn main() {
    hone_engine::threads::fix_thread_count();
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: copying DIR [TASKS] [LEVELS]"));
    let tasks: u64 = args.next().map_or(120, |n| n.parse().unwrap());
    let levels: u64 = args.next().map_or(1, |n| n.parse().unwrap());
    let env = Builtin::Calc.build(hone_envs::calc::DEFAULT_SEED);
    let model = Model::load(&dir, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    let tokenizer = Tokenizer::load(&dir).unwrap();
    let tools = serde_json::to_value(env.tools()).unwrap();
    // Per template: tasks, Σ P(tool), Σ P(every number), Σ P(least likely number).
    let mut rows: BTreeMap<String, (usize, f64, f64, f64)> = BTreeMap::new();
    // Per tens of the result: tasks, Σ P(the answer copies the tool's result).
    let mut answers: BTreeMap<i64, (usize, f64)> = BTreeMap::new();
    for i in 0..tasks {
        let difficulty = Difficulty::from_level((i % levels) as u8 + 1).unwrap();
        let task = env.task(Split::HeldOut, i, difficulty);
        let TaskData::Calc(calc) = &task.data else {
            unreachable!()
        };
        let messages = vec![Message::new(Role::User, task.prompt.clone())];
        let env: &dyn Environment = env.as_ref();
        let prompt = tokenizer
            .template
            .render_openai(
                serde_json::to_value(&messages).unwrap().as_array().unwrap(),
                Some(&tools),
                true,
            )
            .unwrap();
        let p = |written: &str, next: &str| {
            probability(&model, &tokenizer, &format!("{prompt}{written}"), next, usize::MAX)
        };
        // The first token of a call: how the tokenizer cuts the opening
        // differs between builds, so only that token is asked for.
        let tool = probability(&model, &tokenizer, &prompt, CALL_OPENING, 1);
        let (mut every, mut least) = (1.0, 1.0f64);
        for (start, number) in numbers(&calc.expression) {
            let q = p(&format!("{CALL_OPENING}{}", &calc.expression[..start]), number);
            every *= q;
            least = least.min(q);
        }
        let row = rows.entry(template(difficulty, &task.prompt)).or_default();
        *row = (row.0 + 1, row.1 + tool, row.2 + every, row.3 + least);
        // The answer after the right call and the tool's result.
        let mut solved = messages.clone();
        let demonstration = env.demonstration(&task);
        solved.extend(demonstration[..2].iter().cloned());
        let context = tokenizer
            .template
            .render_openai(
                serde_json::to_value(&solved).unwrap().as_array().unwrap(),
                Some(&tools),
                true,
            )
            .unwrap();
        let result = format_number(calc.answer);
        let q = probability(
            &model,
            &tokenizer,
            &format!("{context}The answer is "),
            &result,
            usize::MAX,
        );
        let bucket = answers.entry((calc.answer / 10.0).floor() as i64 * 10).or_default();
        *bucket = (bucket.0 + 1, bucket.1 + q);
    }
    println!(
        "{:44} {:>5} {:>8} {:>13} {:>6}",
        "template", "tasks", "P(tool)", "P(every num)", "least"
    );
    for (name, (n, tool, every, least)) in rows {
        let n_f = n as f64;
        println!(
            "{name:44} {n:>5} {:>8.2} {:>13.2} {:>6.2}",
            tool / n_f,
            every / n_f,
            least / n_f
        );
    }

    println!("\n{:>9} {:>5} {:>22}", "result", "tasks", "P(answer = result)");
    for (tens, (n, q)) in answers {
        println!("{:>4}–{:<4} {n:>5} {:>22.2}", tens, tens + 9, q / n as f64);
    }
}

/// The probability that the first `tokens` of `next`'s tokens follow `context`.
fn probability(model: &Model, tokenizer: &Tokenizer, context: &str, next: &str, tokens: usize) -> f64 {
    let before = tokenizer.encode(context).unwrap();
    let all = tokenizer.encode(&format!("{context}{next}")).unwrap();
    assert_eq!(all[..before.len()], before[..], "`{next}` merges with what precedes it");
    let input = candle_core::Tensor::new(all.as_slice(), &candle_core::Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let logits = model
        .forward(&input, &mut KvCache::new(), None)
        .unwrap()
        .squeeze(0)
        .unwrap();
    let mut logprob = 0.0;
    for position in before.len()..all.len().min(before.len().saturating_add(tokens)) {
        let row = logits.get(position - 1).unwrap().to_vec1::<f32>().unwrap();
        let top = row.iter().copied().fold(f32::MIN, f32::max);
        let total: f32 = row.iter().map(|x| (x - top).exp()).sum();
        logprob += f64::from(row[all[position] as usize] - top - total.ln());
    }
    logprob.exp()
}

/// Each run of digits in `expression`, with where it starts.
fn numbers(expression: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in expression.char_indices().chain([(expression.len(), ' ')]) {
        match (c.is_ascii_digit(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, &expression[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// A task's template (`{a}`… its slots), after its level.
fn template(difficulty: Difficulty, prompt: &str) -> String {
    let text = hone_envs::calc::template_of(prompt).unwrap_or("?");
    let short: String = text.chars().take(42).collect();
    format!("{} {short}", difficulty.level())
}
