//! The base policy builder: a recipe builds a checkpoint (learned tokenizer,
//! full-weight training on demonstrations) that the engine loads, records
//! its recipe and hash, and is reused rather than rebuilt when the recipe is
//! unchanged. (How well the demo's recipe learns is measured by
//! `examples/base_policy.rs`, not asserted here.)

use hone_envs::base_policy::{ensure, existing, success_rate, Recipe};
use hone_envs::Builtin;

#[tokio::test]
async fn a_recipe_builds_a_loadable_checkpoint_once_and_records_how() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("base-calc");
    let mut recipe = Recipe::demo(Builtin::Calc);
    recipe.demonstrations = 40;
    recipe.steps = 6;
    recipe.batch = 2;
    recipe.drill_steps = 2;
    recipe.drill_batch = 2;
    recipe.drill_every = 3; // two of the six demonstration steps drill
    recipe.vocab_size = 400;
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
