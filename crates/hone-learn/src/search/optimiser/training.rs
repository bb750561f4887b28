//! What the weight optimisers (`grpo`, `dpo`, `sft`) share: write their
//! examples in the trainer's JSONL format, train a LoRA adapter on the
//! champion's base model with `hone-train` (or, for `sft` and `dpo` with
//! `trainer.type = "trl"`, with TRL: `trl.rs`), and propose the champion
//! with that adapter.
//!
//! The adapter is trained into `<adapters_dir>/<name>.partial` and renamed
//! to `<adapters_dir>/<name>` when complete, so a crash never leaves a
//! half-written adapter under a name a version uses; a resumed cycle finds
//! the finished adapter and proposes it without training again. With a
//! shared artefact store the adapter is published there before it is
//! proposed (no version ever names an adapter a replica cannot fetch), and
//! a learner on a fresh machine fetches the base checkpoint, the parent
//! adapter and an adapter this cycle already published instead of
//! training again.

use super::{describe_diff, Proposal, ProposeContext};
use crate::data::dataset::{export_rows, ExportFormat};
use crate::error::LearnError;
use hone_config::{ProviderKind, TrainerSpec, TrainingSpec};
use hone_train::data::SftExample;
use hone_train::data::{self, Renderer};
use hone_train::policy::Sequence;
use hone_train::{Data, LoraSpec, StepReport, TrainConfig, Trainer};
use hone_types::time::now_ms;
use hone_types::{HistoryEvent, Instance, SampledTokens, TrainingSummary};
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

/// The champion's base checkpoint (a directory or URL) and adapter, when it
/// runs on the embedded engine; otherwise why not (the embedded engine's own
/// optimisers, `memory`, need it there).
pub fn local_base(ctx: &ProposeContext<'_>) -> Result<(String, Option<String>), String> {
    let route = ctx.champion.routes.first().ok_or("the champion has no route")?;
    match ctx.config.providers.get(&route.provider).map(|p| p.kind) {
        Some(ProviderKind::Local) => Ok((route.model.clone(), route.adapter.clone())),
        _ => Err(format!(
            "the champion runs on provider `{}`, not the embedded engine; weight training needs its weights on a `local` provider",
            route.provider
        )),
    }
}

/// The champion's base checkpoint and adapter for the weight optimisers:
/// on the embedded engine, or on vLLM (`engine = "vllm"`) serving a
/// checkpoint hone can read too — vLLM names a model it serves from a
/// directory by that directory (`vllm serve /models/qwen`), or an artefact
/// URL. Otherwise why not.
pub fn weight_base(ctx: &ProposeContext<'_>) -> Result<(String, Option<String>), String> {
    let route = ctx.champion.routes.first().ok_or("the champion has no route")?;
    let provider = ctx.config.providers.get(&route.provider);
    let vllm = provider.is_some_and(|p| p.engine == Some(hone_config::HttpEngine::Vllm));
    let readable =
        hone_config::is_artefact_url(&route.model) || std::path::Path::new(&route.model).join("config.json").is_file();
    match provider.map(|p| p.kind) {
        Some(ProviderKind::Local) => Ok((route.model.clone(), route.adapter.clone())),
        Some(ProviderKind::OpenAi) if vllm && readable => Ok((route.model.clone(), route.adapter.clone())),
        Some(ProviderKind::OpenAi) if vllm => Err(format!(
            "the champion's model `{}` on vLLM provider `{}` is not a checkpoint directory or artefact URL hone can read; \
             serve it from its directory (`vllm serve /path/to/model`) so hone can train on its weights",
            route.model, route.provider
        )),
        _ => Err(format!(
            "the champion runs on provider `{}`; weight training needs its weights: the embedded engine, or vLLM serving a checkpoint directory (`engine = \"vllm\"`)",
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
    let values = export_rows(instances, method.format()).map_err(LearnError::training("exporting training rows"))?;
    let mut rows = Vec::new();
    for mut v in values.iter().cloned() {
        v["source"] = serde_json::json!("rendered");
        push_row(&mut rows, &v)?;
    }
    Ok((rows, values.len() as u64))
}

/// A GRPO completion as the trainer takes it: the call's tokens as
/// sampled, the sampler's logprobs, and its reward.
pub fn token_completion(tokens: &SampledTokens, reward: f64) -> serde_json::Value {
    serde_json::json!({
        "prompt_tokens": tokens.prompt,
        "tokens": tokens.completion,
        "logprobs": tokens.logprobs,
        "reward": reward,
    })
}

/// Appends one JSONL row.
pub fn push_row(rows: &mut Vec<u8>, row: &serde_json::Value) -> Result<(), LearnError> {
    serde_json::to_writer(&mut *rows, row).map_err(LearnError::training("writing a training row"))?;
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
    let (model, parent_adapter) = match weight_base(ctx) {
        Ok(found) => found,
        Err(why) => {
            (ctx.progress)(&format!("{}: {why}; nothing proposed", method.name()));
            return Ok(Vec::new());
        }
    };
    let name = adapter_name(ctx.cycle, method);
    let done = ctx.adapters_dir.join(&name);
    if !done.join("adapter_config.json").exists()
        && ctx
            .artefacts
            .published_adapter(&name)
            .await
            .map_err(LearnError::training(format!("looking for a published adapter {name}")))?
            .is_some()
    {
        (ctx.progress)(&format!(
            "{}: adapter {name} was published earlier; fetching it",
            method.name()
        ));
        ctx.artefacts
            .adapter(&name, &ctx.adapters_dir)
            .await
            .map_err(LearnError::training(format!("fetching adapter {name}")))?;
    }
    let resumed = done.join("adapter_config.json").exists();
    if resumed {
        (ctx.progress)(&format!("{}: adapter {name} already trained (resumed)", method.name()));
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
            "{}: training adapter {name} on {lines} examples{}, {} steps",
            method.name(),
            if ctx.replay.calls.is_empty() {
                String::new()
            } else {
                format!(" and {} replayed calls", ctx.replay.calls.len())
            },
            spec.steps
        ));
        let base = ctx
            .artefacts
            .checkpoint(&model)
            .await
            .map_err(LearnError::training(format!("fetching the checkpoint {model}")))?;
        let parent = match &parent_adapter {
            Some(adapter) => Some(
                ctx.artefacts
                    .adapter(adapter, &ctx.adapters_dir)
                    .await
                    .map_err(LearnError::training(format!("fetching the parent adapter {adapter}")))?,
            ),
            None => None,
        };
        let job = Job {
            method,
            spec: spec.clone(),
            replay: replay_settings(ctx),
            base,
            parent,
            adapters_dir: ctx.adapters_dir.clone(),
            name: name.clone(),
            trainer: ctx.agent.learn.trainer.clone(),
        };
        // The trainer's progress, said from here as it comes.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        // A cycle cancelled meanwhile stops the job.
        let (store, cycle_id) = (ctx.store.clone(), ctx.cycle.id.clone());
        let training = tokio::task::spawn_blocking(move || {
            let said = |line| {
                let _ = tx.send(line);
            };
            train(&job, &examples, &said, &|| store.cycle_ended(&cycle_id))
        });
        while let Some(line) = rx.recv().await {
            let line = format!("{}: {line}", method.name());
            (ctx.progress)(&line);
            // The job's progress is part of the cycle's log, on its page.
            let event = HistoryEvent::new(&ctx.agent.name, now_ms(), "train", &line).cycle(&ctx.cycle.id);
            if let Err(e) = ctx.store.add_history(&[event]) {
                tracing::warn!("could not record the training progress: {e}");
            }
        }
        training.await??;
    }
    let manifest = match ctx
        .artefacts
        .publish_adapter(&name, &done)
        .await
        .map_err(LearnError::training(format!("publishing adapter {name}")))?
    {
        Some(manifest) => {
            (ctx.progress)(&format!(
                "{}: adapter {name} published to {} (sha256 {}, {})",
                method.name(),
                ctx.artefacts.adapter_url(&name).unwrap_or_default(),
                manifest.short(),
                hone_artefacts::human_bytes(manifest.bytes())
            ));
            manifest
        }
        None => {
            let dir = done.clone();
            tokio::task::spawn_blocking(move || hone_artefacts::manifest_of(&dir))
                .await?
                .map_err(LearnError::training(format!("hashing adapter {name}")))?
        }
    };
    let training = summary(&done, lines, ctx.replay.calls.len() as u64)?;
    let mut child = ctx.champion.clone();
    if let Some(first) = child.routes.first_mut() {
        first.adapter = Some(name.clone());
        first.adapter_sha256 = Some(manifest.sha256);
    }
    // vLLM serves an adapter once asked to load it: before the gate runs
    // the candidate there (the embedded engine hot-swaps on first use).
    let served_by_vllm = child
        .routes
        .first()
        .and_then(|r| ctx.config.providers.get(&r.provider))
        .is_some_and(|p| p.kind == ProviderKind::OpenAi);
    if served_by_vllm {
        for line in crate::release::deploy::prepare_adapters(ctx.config, &ctx.evaluator.gateway, &child).await? {
            (ctx.progress)(&format!("{}: {line}", method.name()));
        }
    }
    Ok(vec![Proposal {
        diff: format!(
            "{} ({} {} steps, final loss {:.4}, KL to base {:.4}{})",
            describe_diff(ctx.champion, &child),
            method.name(),
            training.steps,
            training.final_loss,
            training.kl_to_base,
            if resumed { ", trained earlier in this cycle" } else { "" }
        ),
        spec: child,
        training: Some(training),
        spend: None,
    }])
}

/// The name of the adapter `method` trains in `cycle`: the cycle's id
/// (`<agent>-<seq>`), the method, and the cycle's start in base 36. The
/// start keeps names apart between stores that share an adapters folder or
/// an artefact store — a store made afresh, or a second deployment, counts
/// its cycles from 1 again, and an adapter found under its name is taken as
/// this cycle's own, trained before a restart (resumed, not retrained). A
/// resumed cycle keeps its start, so it still finds its adapter.
pub fn adapter_name(cycle: &hone_types::CycleInfo, method: Method) -> String {
    format!(
        "{}-{}-{}",
        cycle.id,
        method.name(),
        base36(cycle.started_at.max(0) as u64)
    )
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The replay buffer as the trainer takes it, and how much of each batch.
struct ReplaySettings {
    examples: Vec<SftExample>,
    per_batch: usize,
    ewc: f64,
}

fn replay_settings(ctx: &ProposeContext<'_>) -> ReplaySettings {
    let spec = &ctx.agent.learn.replay;
    let examples: Vec<SftExample> = ctx
        .replay
        .calls
        .iter()
        .enumerate()
        .map(|(line, t)| SftExample {
            line: line + 1,
            sequence: Sequence::prompt_completion(&t.prompt, &t.completion),
        })
        .collect();
    let per_batch = replayed_per_batch(spec.share, examples.len());
    ReplaySettings {
        examples,
        per_batch,
        ewc: if per_batch > 0 { spec.ewc } else { 0.0 },
    }
}

/// Rows per training batch.
pub const BATCH: usize = 4;

/// Replayed rows added to every batch of [`BATCH`] rows so that they are
/// `share` of it (`BATCH·share/(1 − share)`, at least one for any positive
/// share); none when nothing is there to replay or the share is 0, which
/// turns replay off — `dpo`'s anchors, which ride on it, included.
fn replayed_per_batch(share: f64, available: usize) -> usize {
    if available == 0 || share <= 0.0 {
        return 0;
    }
    ((BATCH as f64 * share / (1.0 - share)).round() as usize).max(1)
}

/// The training of the adapter in `dir`, from its `metrics.jsonl`.
fn summary(dir: &Path, examples: u64, replayed: u64) -> Result<TrainingSummary, LearnError> {
    let path = dir.join("metrics.jsonl");
    let reading = || format!("reading {}", path.display());
    let text = std::fs::read_to_string(&path).map_err(LearnError::training(reading()))?;
    let last: StepReport = text
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .transpose()
        .map_err(LearnError::training(reading()))?
        .ok_or_else(|| LearnError::training(reading())("no step was recorded"))?;
    Ok(TrainingSummary {
        steps: last.step as u64,
        final_loss: last.loss,
        kl_to_base: last.kl,
        examples,
        replayed,
    })
}

/// One adapter to train.
struct Job {
    method: Method,
    spec: TrainingSpec,
    replay: ReplaySettings,
    base: PathBuf,
    parent: Option<PathBuf>,
    adapters_dir: PathBuf,
    name: String,
    /// hone's own trainer, or TRL's.
    trainer: TrainerSpec,
}

/// How `method` trains an adapter under `spec`: its LoRA, `spec.steps`
/// steps of [`BATCH`] rows at `spec.lr` (no replay, no EWC).
pub fn train_config(method: Method, spec: &TrainingSpec) -> TrainConfig {
    let mut config = TrainConfig {
        lora: LoraSpec {
            rank: spec.rank,
            alpha: spec.lora_alpha(),
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
        batch_size: BATCH,
        ..TrainConfig::default()
    };
    config.optim.lr = spec.lr;
    config
}

/// A step worth a line of progress: the first, the last and each quarter.
pub fn step_line(report: &StepReport) -> Option<String> {
    let (step, total) = (report.step, report.total_steps.max(1));
    if step != 1 && step != total && !step.is_multiple_of((total / 4).max(1)) {
        return None;
    }
    let reward = report.reward.map(|r| format!(", reward {r:.3}")).unwrap_or_default();
    // TRL's steps measure no KL (its job measures it once, at the end).
    let kl = if report.kl > 0.0 {
        format!(", KL {:.4}", report.kl)
    } else {
        String::new()
    };
    Some(format!("step {step}/{total}: loss {:.4}{reward}{kl}", report.loss))
}

/// Trains the job's adapter into `<adapters_dir>/<name>`, saying its
/// progress; stops (an error, no adapter) once `stop` says so.
fn train(
    job: &Job,
    examples: &Examples,
    say: &(dyn Fn(String) + Sync),
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), LearnError> {
    let partial = job.adapters_dir.join(format!("{}.partial", job.name));
    // TRL's job may resume from the checkpoints it left there; hone's own
    // trainer starts afresh.
    if job.trainer == TrainerSpec::Hone {
        let _ = std::fs::remove_dir_all(&partial);
    }
    std::fs::create_dir_all(&partial).map_err(LearnError::training(format!("creating {}", partial.display())))?;
    let data_path = job.adapters_dir.join(format!("{}.data.jsonl", job.name));
    std::fs::write(&data_path, &examples.rows)
        .map_err(LearnError::training(format!("writing {}", data_path.display())))?;
    let tokenizer = hone_engine::Tokenizer::load(&job.base).map_err(LearnError::training("loading the tokenizer"))?;
    let reading = || format!("reading the {} data", job.method.name());
    let renderer = Renderer {
        tokenizer: Some(&tokenizer),
    };
    let data = match job.method {
        Method::Grpo => data::read_grpo(&data_path, renderer).map(Data::Grpo),
        Method::Dpo => data::read_dpo(&data_path, renderer).map(Data::Dpo),
        Method::Sft => data::read_sft(&data_path, renderer).map(Data::Sft),
    };
    let _ = std::fs::remove_file(&data_path);
    let data = data.map_err(LearnError::training(reading()))?;
    let config = TrainConfig {
        baselines: examples.baselines.clone(),
        replay_per_batch: job.replay.per_batch,
        ewc_lambda: job.replay.ewc,
        ..train_config(job.method, &job.spec)
    };
    if let TrainerSpec::Trl(spec) = &job.trainer {
        let trl_job = super::trl::TrlJob {
            method: job.method,
            spec,
            config: &config,
            base: &job.base,
            parent: job.parent.as_deref(),
        };
        super::trl::train(&trl_job, &data, &partial, say, stop)?;
        return finish(job, &partial);
    }
    let mut trainer = Trainer::new(
        &job.base,
        &candle_core::Device::Cpu,
        config,
        data,
        job.replay.examples.clone(),
        job.parent.as_deref(),
    )
    .map_err(LearnError::training("cannot start training"))?;
    trainer
        .run_while(&partial, &mut |report| {
            if let Some(line) = step_line(report) {
                say(line);
            }
            !stop()
        })
        .map_err(|e| match e {
            hone_train::TrainError::Stopped(step) => {
                LearnError::training("training stopped")(format!("the cycle ended after step {step}"))
            }
            e => LearnError::training("training failed")(e),
        })?;
    finish(job, &partial)
}

/// Clears a trained adapter's scratch files and moves it to its name.
fn finish(job: &Job, partial: &Path) -> Result<(), LearnError> {
    let _ = std::fs::remove_dir_all(partial.join("checkpoints"));
    let done = job.adapters_dir.join(&job.name);
    std::fs::rename(partial, &done).map_err(LearnError::training(format!(
        "moving the adapter to {}",
        done.display()
    )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::replayed_per_batch;

    #[test]
    fn a_zero_share_replays_nothing_and_any_positive_share_at_least_a_row() {
        assert_eq!(replayed_per_batch(0.0, 100), 0, "0 turns replay off, anchors too");
        assert_eq!(replayed_per_batch(0.25, 0), 0, "nothing to replay");
        assert_eq!(replayed_per_batch(0.05, 100), 1, "a small share still replays a row");
        // 4 rows of new data and 1 replayed: 20%; 4 and 4: half.
        assert_eq!(replayed_per_batch(0.2, 100), 1);
        assert_eq!(replayed_per_batch(0.5, 100), 4);
    }
}
