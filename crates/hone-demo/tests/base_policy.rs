//! The base policy builder: a recipe builds a checkpoint (learned tokenizer,
//! full-weight training on demonstrations) that the engine loads, records
//! its recipe and hash, and is reused rather than rebuilt when the recipe is
//! unchanged; a build keeps the best of the checkpoints it copy-checks, and
//! one whose copy check fails is made again from the next init seed. (How well the demo's recipe learns is measured by
//! `examples/base_policy.rs`, not asserted here.)

use hone_demo::base_policy::{best_checked, ensure, existing, success_rate, Recipe};
use hone_envs::Builtin;

/// The demo's recipe cut down to `steps` demonstration steps after
/// `drill_steps` drills, batches of two: seconds to build.
fn small(steps: usize, drill_steps: usize) -> Recipe {
    Recipe {
        demonstrations: 40,
        steps,
        batch: 2,
        drill_steps,
        drill_batch: 2,
        vocab_size: 400,
        ..Recipe::demo(Builtin::Calc, 3)
    }
}

#[tokio::test]
async fn a_recipe_builds_a_loadable_checkpoint_once_and_records_how() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("base-calc");
    let mut recipe = small(6, 2);
    recipe.drill_every = 3; // two of the six demonstration steps drill
    recipe.check_tasks = 0;
    let mut seen = Vec::new();
    let built = ensure(&recipe, &out, &mut |step, steps, loss| seen.push((step, steps, loss))).unwrap();
    // Drills, then demonstrations, under one count.
    assert_eq!(seen.len(), 8);
    assert_eq!(seen.last().map(|s| (s.0, s.1)), Some((8, 8)));
    assert_eq!(built.hash, recipe.hash());
    assert!(
        built.last_loss < built.first_loss,
        "{} → {}",
        built.first_loss,
        built.last_loss
    );
    assert_eq!(existing(&out).unwrap(), built);
    assert_eq!(built.attempts.len(), 1, "no check, one build");
    assert!(built.attempts[0].kept && built.attempts[0].tasks == 0);
    // Unchanged recipe: reused, not rebuilt.
    let again = ensure(&recipe, &out, &mut |_, _, _| panic!("rebuilt")).unwrap();
    assert_eq!(again, built);
    // Another recipe is another hash.
    let mut other = recipe.clone();
    other.steps = 7;
    assert_ne!(other.hash(), recipe.hash());
    let env = Builtin::Calc.build(recipe.environment_seed);
    let rate = success_rate(&out, env.as_ref(), 2, 2).await.unwrap();
    assert!((0.0..=1.0).contains(&rate));
}

/// A copy check no build can pass (a rate above 1): every attempt is made,
/// each from the next init seed, and the last is kept and says so.
#[test]
fn a_build_that_fails_its_copy_check_is_made_again_from_the_next_seed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("base-calc");
    let mut recipe = small(3, 1);
    recipe.init_seed = 5;
    recipe.check_tasks = 3;
    recipe.min_copy_rate = 1.5;
    recipe.attempts = 2;
    let mut steps = Vec::new();
    let built = ensure(&recipe, &out, &mut |step, total, _| steps.push((step, total))).unwrap();
    assert_eq!(steps.len(), 8, "two builds of four steps: {steps:?}");
    let seeds: Vec<u64> = built.attempts.iter().map(|a| a.init_seed).collect();
    assert_eq!(seeds, [5, 6]);
    assert_eq!(built.attempts.iter().map(|a| a.kept).collect::<Vec<_>>(), [false, true]);
    for attempt in &built.attempts {
        assert_eq!(attempt.tasks, 3);
        assert!(attempt.solved_after_tool <= attempt.tool_first && attempt.tool_first <= 3);
    }
    // The weights on disk are the second build's: its own init seed again
    // (without a check) gives the same first loss.
    let mut again = recipe.clone();
    again.init_seed = 6;
    again.check_tasks = 0;
    let alone = ensure(&again, &dir.path().join("alone"), &mut |_, _, _| {}).unwrap();
    assert_eq!(alone.first_loss, built.first_loss);
    assert_eq!(alone.last_loss, built.last_loss);
    assert_eq!(existing(&out).unwrap(), built);
}

/// Checkpoint selection: the checkpoints of the steps it names are checked,
/// the one the rule picks is what lies on disk (the last step's weights
/// only when it is the one picked), and recipe.json says which.
#[tokio::test]
async fn a_build_keeps_the_best_checkpoint_it_checked() {
    let dir = tempfile::tempdir().unwrap();
    let mut recipe = small(6, 1);
    recipe.check_tasks = 3;
    recipe.min_copy_rate = 0.0;
    recipe.attempts = 1;
    recipe.select_from = 2;
    recipe.select_every = 2;
    let built = ensure(&recipe, &dir.path().join("selected"), &mut |_, _, _| {}).unwrap();
    let [attempt] = built.attempts.as_slice() else {
        panic!("one build: {:?}", built.attempts);
    };
    let steps: Vec<usize> = attempt.checked.iter().map(|c| c.step).collect();
    assert_eq!(steps, [2, 4, 6]);
    let best = best_checked(&recipe, &attempt.checked).unwrap();
    assert_eq!(
        (attempt.step, attempt.tool_first, attempt.solved_after_tool),
        (best.step, best.tool_first, best.solved_after_tool)
    );
    assert_eq!(existing(&dir.path().join("selected")).unwrap(), built);
    assert!(!dir.path().join("selected/selected.safetensors").exists());

    // The same build without a check keeps its last step's weights.
    let mut unchecked = recipe.clone();
    unchecked.check_tasks = 0;
    let last = ensure(&unchecked, &dir.path().join("last"), &mut |_, _, _| {}).unwrap();
    assert_eq!(last.last_loss, built.last_loss, "the same training");
    let weights = |name: &str| std::fs::read(dir.path().join(name).join("model.safetensors")).unwrap();
    assert_eq!(
        weights("selected") == weights("last"),
        attempt.step == 6,
        "kept step {}",
        attempt.step
    );
    // Loadable whichever was kept.
    let env = Builtin::Calc.build(recipe.environment_seed);
    let rate = success_rate(&dir.path().join("selected"), env.as_ref(), 2, 2)
        .await
        .unwrap();
    assert!((0.0..=1.0).contains(&rate));
}
