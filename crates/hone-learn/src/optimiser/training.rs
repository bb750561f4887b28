//! What the weight optimisers (`grpo`, `dpo`, `sft`) share: write their
//! examples in the trainer's JSONL format, train a LoRA adapter on the
//! champion's base model with `hone-train`, and propose the champion with
//! that adapter.
//!
//! The adapter is trained into `<adapters_dir>/<name>.partial` and renamed
//! to `<adapters_dir>/<name>` when complete, so a crash never leaves a
//! half-written adapter under a name a version uses; a resumed cycle finds
//! the finished adapter and proposes it without training again.

use super::{describe_diff, Proposal, ProposeContext};
use crate::dataset::{export_rows, ExportFormat};
use crate::error::LearnError;
use hone_config::{ProviderKind, TrainingSpec};
use hone_train::data::{self, Renderer};
use hone_train::{Data, LoraSpec, TrainConfig, Trainer};
use hone_types::Instance;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Grpo,
    Dpo,
    Sft,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Grpo => "grpo",
            Method::Dpo => "dpo",
            Method::Sft => "sft",
        }
    }

    fn format(self) -> ExportFormat {
        match self {
            Method::Grpo => ExportFormat::Grpo,
            Method::Dpo => ExportFormat::Dpo,
            Method::Sft => ExportFormat::Chat,
        }
    }
}

/// The champion's base model directory, when it runs on the embedded engine
/// (training needs the weights); otherwise why not.
pub fn local_base(ctx: &ProposeContext<'_>) -> Result<(PathBuf, Option<String>), String> {
    let route = ctx.champion.routes.first().ok_or("the champion has no route")?;
    match ctx.config.providers.get(&route.provider).map(|p| p.kind) {
        Some(ProviderKind::Local) => Ok((PathBuf::from(&route.model), route.adapter.clone())),
        _ => Err(format!(
            "the champion runs on provider `{}`, not the embedded engine; weight training needs its weights on a `local` provider",
            route.provider
        )),
    }
}

/// `instances` as JSONL rows of `method`'s training format, rendered from
/// their messages by the chat template at training time and marked so
/// (`"source": "rendered"`), and how many rows (instances without what the
/// format needs are skipped). Recorded token ids are preferred where a
/// path has them; these are demonstrations and calls without any.
pub fn rendered_rows(instances: &[Instance], method: Method) -> Result<(Vec<u8>, u64), LearnError> {
    let failed = |e: &dyn std::fmt::Display| LearnError::training(e.to_string());
    let values = export_rows(instances, method.format()).map_err(|e| failed(&e))?;
    let mut rows = Vec::new();
    for mut v in values.iter().cloned() {
        v["source"] = serde_json::json!("rendered");
        push_row(&mut rows, &v)?;
    }
    Ok((rows, values.len() as u64))
}

/// Appends one JSONL row.
pub fn push_row(rows: &mut Vec<u8>, row: &serde_json::Value) -> Result<(), LearnError> {
    serde_json::to_writer(&mut *rows, row).map_err(|e| LearnError::training(e.to_string()))?;
    rows.push(b'\n');
    Ok(())
}

/// What an optimiser trains on: JSONL rows of the trainer's format.
pub struct Examples {
    pub rows: Vec<u8>,
    /// Rows (examples, pairs, groups).
    pub count: u64,
    /// Where each agent's running reward baseline starts (GRPO baseline mode).
    pub baselines: BTreeMap<String, f64>,
}

impl Examples {
    pub fn new(rows: Vec<u8>, count: u64) -> Self {
        Self {
            rows,
            count,
            baselines: BTreeMap::new(),
        }
    }
}

/// Trains `method` on `examples` and proposes the champion with the new
/// adapter.
pub async fn propose_adapter(
    ctx: &ProposeContext<'_>,
    method: Method,
    spec: &TrainingSpec,
    examples: Examples,
) -> Result<Vec<Proposal>, LearnError> {
    let lines = examples.count;
    let (base, parent_adapter) = match local_base(ctx) {
        Ok(found) => found,
        Err(why) => {
            (ctx.progress)(&format!("{}: {why}; nothing proposed", method.name()));
            return Ok(Vec::new());
        }
    };
    let name = format!("{}-{}", ctx.cycle_id, method.name());
    let done = ctx.adapters_dir.join(&name);
    let summary = if done.join("adapter_config.json").exists() {
        (ctx.progress)(&format!("{}: adapter {name} already trained (resumed)", method.name()));
        "trained earlier in this cycle".to_owned()
    } else {
        if (lines as usize) < spec.min_examples {
            (ctx.progress)(&format!(
                "{}: {lines} training examples, fewer than min_examples {}; nothing proposed",
                method.name(),
                spec.min_examples
            ));
            return Ok(Vec::new());
        }
        (ctx.progress)(&format!(
            "{}: training adapter {name} on {lines} examples, {} steps",
            method.name(),
            spec.steps
        ));
        let (spec, adapters_dir, parent_dir) = (
            spec.clone(),
            ctx.adapters_dir.clone(),
            parent_adapter.map(|a| ctx.adapters_dir.join(a)),
        );
        let name2 = name.clone();
        tokio::task::spawn_blocking(move || {
            train(
                method,
                &spec,
                &base,
                parent_dir.as_deref(),
                &examples,
                &adapters_dir,
                &name2,
            )
        })
        .await??
    };
    let mut child = ctx.champion.clone();
    if let Some(first) = child.routes.first_mut() {
        first.adapter = Some(name.clone());
    }
    Ok(vec![Proposal {
        diff: format!("{} ({} {summary})", describe_diff(ctx.champion, &child), method.name()),
        spec: child,
    }])
}

fn train(
    method: Method,
    spec: &TrainingSpec,
    base: &Path,
    parent: Option<&Path>,
    examples: &Examples,
    adapters_dir: &Path,
    name: &str,
) -> Result<String, LearnError> {
    let failed = |e: &dyn std::fmt::Display| LearnError::training(e.to_string());
    let partial = adapters_dir.join(format!("{name}.partial"));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|e| failed(&format!("{}: {e}", partial.display())))?;
    let data_path = partial.join("data.jsonl");
    std::fs::write(&data_path, &examples.rows).map_err(|e| failed(&format!("{}: {e}", data_path.display())))?;
    let tokenizer = hone_engine::Tokenizer::load(base).map_err(|e| failed(&e))?;
    let renderer = Renderer {
        tokenizer: Some(&tokenizer),
    };
    let data = match method {
        Method::Grpo => Data::Grpo(data::read_grpo(&data_path, renderer).map_err(|e| failed(&e))?),
        Method::Dpo => Data::Dpo(data::read_dpo(&data_path, renderer).map_err(|e| failed(&e))?),
        Method::Sft => Data::Sft(data::read_sft(&data_path, renderer).map_err(|e| failed(&e))?),
    };
    let mut config = TrainConfig {
        lora: LoraSpec {
            rank: spec.rank,
            alpha: 2.0 * spec.rank as f64,
            // RL's importance ratios compare the policy with the one that
            // sampled (or its proximal stand-in): no dropout, or a ratio
            // leaves 1 from noise alone.
            dropout: match method {
                Method::Sft => LoraSpec::default().dropout,
                Method::Grpo | Method::Dpo => 0.0,
            },
            ..LoraSpec::default()
        },
        steps: Some(spec.steps),
        batch_size: 4,
        baselines: examples.baselines.clone(),
        ..TrainConfig::default()
    };
    config.optim.lr = spec.lr;
    let mut trainer = Trainer::new(base, &candle_core::Device::Cpu, config, data, Vec::new(), parent)
        .map_err(|e| failed(&format!("cannot start training: {e}")))?;
    let mut last = None;
    trainer
        .run(&partial, &mut |report| last = Some((report.step, report.loss)))
        .map_err(|e| failed(&format!("training failed: {e}")))?;
    let _ = std::fs::remove_file(&data_path);
    let _ = std::fs::remove_dir_all(partial.join("checkpoints"));
    let done = adapters_dir.join(name);
    std::fs::rename(&partial, &done).map_err(|e| failed(&format!("{}: {e}", done.display())))?;
    Ok(match last {
        Some((steps, loss)) => format!("{steps} steps, final loss {loss:.4}"),
        None => "0 steps".to_owned(),
    })
}
