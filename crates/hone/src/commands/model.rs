//! `hone model init`: writes a checkpoint of a named preset in the Hugging
//! Face layout: randomly initialised, or for `demo` the base policy
//! `hone demo` trains (so tests and users get the same model it starts from).
//! `hone model import`: a GGUF file into the same layout, loaded back by the
//! engine before it is reported written.

use anyhow::{bail, Context, Result};
use hone_console::note;
use hone_demo::base_policy::{self, Recipe};
use hone_engine::init::{write_checkpoint, Preset};
use hone_engine::Arch;
use hone_envs::Builtin;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// The preset names of the demo's trained base policy: `hone demo`'s, and
/// `hone demo --quick`'s, which is now the same base (kept as a name).
pub const DEMO: &str = "demo";
pub const DEMO_QUICK: &str = "demo-quick";

/// The recipe a demo preset builds, on calc tasks up to `max_difficulty`;
/// `None` for the other presets.
pub fn demo_recipe(preset: &str, max_difficulty: u8) -> Option<Recipe> {
    match preset {
        DEMO | DEMO_QUICK => Some(Recipe::demo(Builtin::Calc, max_difficulty)),
        _ => None,
    }
}

pub fn init(arch: Arch, preset: &str, out: &Path, seed: u64, max_difficulty: u8) -> Result<ExitCode> {
    if let Some(recipe) = demo_recipe(preset, max_difficulty) {
        return demo(arch, out, seed, recipe, preset);
    }
    let preset = Preset::parse(preset)
        .with_context(|| format!("unknown preset `{preset}` ({}, {DEMO}, {DEMO_QUICK})", Preset::NAMES))?;
    write_checkpoint(arch, preset, seed, out)
        .with_context(|| format!("cannot write the checkpoint to {}", out.display()))?;
    writeln!(
        std::io::stdout(),
        "wrote a random {arch:?} checkpoint to {}",
        out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

fn demo(arch: Arch, out: &Path, seed: u64, recipe: Recipe, preset: &str) -> Result<ExitCode> {
    if arch != Arch::Qwen2 {
        bail!("the `{preset}` preset is a Qwen2-architecture model; use --arch qwen2");
    }
    let recipe = Recipe {
        init_seed: seed,
        ..recipe
    };
    let total = recipe.drill_steps + recipe.steps;
    note(format_args!(
        "training the demo base policy (recipe {}) into {}: {total} steps",
        recipe.hash(),
        out.display()
    ));
    let built = base_policy::ensure(&recipe, out, &mut |step, steps, loss| {
        if step % 50 == 0 || step == steps {
            note(format_args!("step {step}/{steps} loss {loss:.3}"));
        }
    })
    .with_context(|| format!("cannot build the demo base policy in {}", out.display()))?;
    for attempt in &built.attempts {
        note(format_args!("copy check, {}", attempt.summary(&recipe)));
    }
    writeln!(
        std::io::stdout(),
        "wrote the demo base policy ({} parameters, loss {:.3} → {:.3}, {:.0} s) to {}",
        built.parameters,
        built.first_loss,
        built.last_loss,
        built.seconds,
        out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn import(file: &Path, out: &Path) -> Result<ExitCode> {
    note(format_args!("converting {} into {}", file.display(), out.display()));
    let imported = hone_engine::gguf::import(file, out)?;
    let engine = hone_engine::Engine::load(out, hone_engine::EngineOptions::default())
        .with_context(|| format!("the converted checkpoint in {} does not load", out.display()))?;
    drop(engine);
    let stored: Vec<String> = imported
        .stored_as
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    writeln!(
        std::io::stdout(),
        "wrote {} ({:?}, {:.1}M parameters in {} tensors stored as {}; {} tokens, pre-tokenizer {}) to {}",
        imported.name.as_deref().unwrap_or("the model"),
        imported.arch,
        imported.parameters as f64 / 1e6,
        imported.tensors,
        stored.join(", "),
        imported.vocab_size,
        imported.pre_tokenizer,
        out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
