//! Builds a base policy from a recipe and measures it on held-out tasks:
//! `cargo run --release -p hone-envs --example base_policy -- calc 300 2000 [out]`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use hone_demo::base_policy::{build, success_rate, Recipe};
use hone_envs::Builtin;

/// The allocator `hone` uses, so build times match `hone model init`'s.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: Builtin = args.first().map_or("calc", String::as_str).parse().unwrap();
    let levels = std::env::var("MAX_DIFFICULTY").map_or(3, |v| v.parse().unwrap());
    // AIMED=1: the easy recipe aimed lower (`Recipe::aimed`).
    let mut recipe = if std::env::var("AIMED").is_ok() {
        Recipe::aimed(env)
    } else {
        Recipe::demo(env, levels)
    };
    if let Some(steps) = args.get(1) {
        recipe.steps = steps.parse().unwrap();
    }
    if let Some(n) = args.get(2) {
        recipe.demonstrations = n.parse().unwrap();
    }
    if let Some(lr) = args.get(4) {
        recipe.lr = lr.parse().unwrap();
    }
    // Further knobs for recipe experiments.
    let var = |name: &str| std::env::var(name).ok().map(|v| v.parse::<f64>().unwrap());
    if let Some(v) = var("BATCH") {
        recipe.batch = v as usize;
    }
    if let Some(v) = var("VOCAB") {
        recipe.vocab_size = v as usize;
    }
    if let Some(v) = var("DRILLS") {
        recipe.drill_steps = v as usize;
    }
    if let Some(v) = var("DRILL_BATCH") {
        recipe.drill_batch = v as usize;
    }
    if let Some(v) = var("DRILL_EVERY") {
        recipe.drill_every = v as usize;
    }
    if let Some(v) = var("ANSWER_CANDIDATES") {
        recipe.answer_drill_candidates = v as usize;
    }
    if let Some(v) = var("ANSWER_DRILLS") {
        recipe.answer_drill_share = v;
    }
    if let Some(v) = var("DIRECT") {
        recipe.direct_share = v;
    }
    if std::env::var("UNSCORED_GUESSES").is_ok() {
        recipe.direct_guesses_scored = false;
    }
    if std::env::var("NUMBER_TOKENS").is_ok() {
        recipe.numbers = hone_engine::init::Numbers::Runs;
    }
    if let Ok(v) = std::env::var("PRESET") {
        recipe.preset = v;
    }
    if let Some(v) = var("PARTS") {
        recipe.gradient_parts = v as usize;
    }
    if let Some(v) = var("ATTEMPTS") {
        recipe.attempts = v as usize;
    }
    if let Some(v) = var("LR") {
        recipe.lr = v;
    }
    if let Some(v) = var("CHECK") {
        recipe.check_tasks = v as usize;
    }
    if let Some(v) = var("SELECT_FROM") {
        recipe.select_from = v as usize;
    }
    if let Some(v) = var("SELECT_EVERY") {
        recipe.select_every = v as usize;
    }
    if let Some(v) = var("SEED") {
        recipe.init_seed = v as u64;
    }
    // As `hone model init --preset demo`: one thread per op for a small
    // model (no thread has started: the runtime is the current thread).
    let hidden_size = hone_engine::init::Preset::parse(&recipe.preset).map_or(usize::MAX, |p| p.hidden_size());
    hone_engine::threads::fix_thread_count_to(hone_engine::threads::per_op_for_hidden_size(hidden_size));
    let out = std::path::PathBuf::from(args.get(3).map_or("/tmp/hone-base", String::as_str));
    let started = std::time::Instant::now();
    let built = build(&recipe, &out, &mut |step, steps, loss| {
        if step % 25 == 0 || step == steps || steps <= 10 {
            println!(
                "step {step}/{steps} loss {loss:.3} ({:.0} s) rss {} MB",
                started.elapsed().as_secs_f64(),
                resident_mb()
            );
        }
    })
    .unwrap();
    for attempt in &built.attempts {
        println!("{}", attempt.summary(&recipe));
    }
    println!(
        "built {} params in {:.0} s: loss {:.3} → {:.3}",
        built.parameters, built.seconds, built.first_loss, built.last_loss
    );
    let environment = env.build(recipe.environment_seed);
    let t = std::time::Instant::now();
    let rate = success_rate(&out, environment.as_ref(), 60, 3).await.unwrap();
    println!(
        "held-out success {:.1}% over 60 tasks ({:.0} s)",
        rate * 100.0,
        t.elapsed().as_secs_f64()
    );
}

/// The process's resident memory in MB (0 where `/proc` is missing).
fn resident_mb() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok());
    pages.unwrap_or(0) * 4096 / 1_000_000
}
