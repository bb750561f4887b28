//! The copy check of a checkpoint as a build runs it, at the demo's easy
//! recipe's settings or others: how many of the check's episodes call the
//! tool first, how many of those are solved, and how many are solved in all.
//! `cargo run --release -p hone-envs --example check -- DIR [TEMPERATURE] [SAMPLES]`

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use hone_demo::base_policy::{copy_check, Recipe};
use hone_envs::Builtin;

fn main() {
    hone_engine::threads::fix_thread_count();
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: check DIR [TEMPERATURE] [SAMPLES]"));
    let mut recipe = Recipe::demo(Builtin::Calc, 1);
    if let Some(t) = args.next() {
        recipe.check_temperature = t.parse().unwrap();
    }
    if let Some(n) = args.next() {
        recipe.check_samples = n.parse().unwrap();
    }
    let env = recipe.environment.build(recipe.environment_seed);
    let started = std::time::Instant::now();
    let c = copy_check(&recipe, env.as_ref(), &dir, 0).unwrap();
    println!(
        "{} episodes ({} tasks × {} at temperature {}): {} called the tool first, {} of those solved; {} solved in all ({:.1}%) in {:.1} s",
        c.episodes,
        recipe.check_tasks,
        recipe.check_samples.max(1),
        recipe.check_temperature,
        c.tool_first,
        c.solved_after_tool,
        c.solved,
        100.0 * c.success(),
        started.elapsed().as_secs_f64()
    );
}
