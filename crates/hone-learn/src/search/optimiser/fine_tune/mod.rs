//! `openai-sft` and `openai-dpo`: the champion's hosted model fine-tuned by
//! its provider (OpenAI, Azure OpenAI or any host of OpenAI's fine-tuning
//! API, by the provider's `base_url`), from the cycle's train half.
//!
//! Only an agent with `allow_upload = true` uploads anything, and only the
//! episodes its `[agents.NAME.learn.upload]` filter lets out, redacted. The
//! job's cost is estimated before it is created and refused over the
//! optimiser's or the cycle's budget; its id is in the cycle's history the
//! moment it exists (a `fine_tune` event), so a resumed cycle polls the same
//! job instead of starting another; its events are the cycle's `train`
//! history; a cancelled cycle cancels it. Its model (`ft:…`) becomes a
//! candidate routed to the same provider, gated like any other.

pub mod api;
pub mod export;
pub mod grader;

use super::{describe_diff, Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use api::{Api, NewJob, Status};
use futures::future::BoxFuture;
use hone_config::{FineTuneMethod, FineTuneSpec, ProviderKind};
use hone_types::time::now_ms;
use hone_types::{HistoryEvent, Spend};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::time::{Duration, Instant};

pub struct FineTune {
    pub spec: FineTuneSpec,
}

/// What the cycle's history keeps of a job it created (`fine_tune`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub optimiser: String,
    pub job_id: String,
    pub model: String,
    pub training_file: String,
    /// sha256 of the training file's bytes as uploaded.
    pub training_sha256: String,
    pub validation_file: Option<String>,
    pub examples: u64,
    pub redacted: u64,
    pub estimated_tokens: u64,
    pub estimated_usd: Option<f64>,
}

impl Optimiser for FineTune {
    fn name(&self) -> &'static str {
        self.spec.method.name()
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            let name = self.name();
            let say = |line: String| (ctx.progress)(&format!("{name}: {line}"));
            let Some(route) = ctx.champion.routes.first() else {
                say("the champion has no route; nothing proposed".into());
                return Ok(Vec::new());
            };
            let provider = ctx
                .config
                .providers
                .get(&route.provider)
                .filter(|p| p.kind == ProviderKind::OpenAi && p.engine.is_none());
            let Some(provider) = provider else {
                say(format!(
                    "the champion routes to `{}`, not a host of OpenAI's fine-tuning API; nothing proposed",
                    route.provider
                ));
                return Ok(Vec::new());
            };
            let api_key = provider.api_key_env.as_ref().and_then(|k| std::env::var(k).ok());
            let api = Api::new(&provider.base_url, api_key, provider.timeout).map_err(LearnError::config)?;
            let record = match self.recorded_job(ctx)? {
                Some(record) => {
                    say(format!(
                        "resuming job {} (created earlier in this cycle)",
                        record.job_id
                    ));
                    record
                }
                None => match self.create_job(ctx, &api, &route.model).await? {
                    Some(record) => record,
                    None => return Ok(Vec::new()),
                },
            };
            let job = self.follow(ctx, &api, &record).await?;
            let Some(model) = job.fine_tuned_model.clone() else {
                return Err(LearnError::training("fine-tuning")(format!(
                    "job {} succeeded without naming its model",
                    job.id
                )));
            };
            let trained = job.trained_tokens.unwrap_or(record.estimated_tokens);
            let spend = Spend {
                calls: 1,
                tokens: trained,
                cost_usd: self.spec.usd_per_mtok.map_or(0.0, |p| trained as f64 * p / 1e6),
            };
            ctx.meter.charge_spend(spend);
            let mut child = ctx.champion.clone();
            if let Some(first) = child.routes.first_mut() {
                first.model = model.clone();
            }
            say(format!("job {} trained {model} on {trained} tokens", job.id));
            if provider.price(&model).is_none() {
                say(format!(
                    "no price for `{model}` (set [providers.{}.prices.\"ft:{}\"]): its calls are recorded without a cost",
                    route.provider,
                    model.trim_start_matches("ft:").split(':').next().unwrap_or_default()
                ));
            }
            Ok(vec![Proposal {
                diff: format!(
                    "{} ({name} job {}, {} examples, {trained} trained tokens, training file sha256 {})",
                    describe_diff(ctx.champion, &child),
                    job.id,
                    record.examples,
                    &record.training_sha256[..12]
                ),
                spec: child,
                training: None,
                spend: Some(spend),
            }])
        })
    }
}

impl FineTune {
    /// The job this optimiser created earlier in the cycle, if any.
    fn recorded_job(&self, ctx: &ProposeContext<'_>) -> Result<Option<JobRecord>, LearnError> {
        Ok(ctx
            .store
            .history(&ctx.agent.name, 2000)?
            .into_iter()
            .filter(|e| e.kind == "fine_tune" && e.cycle_id.as_deref() == Some(ctx.cycle.id.as_str()))
            .filter_map(|e| serde_json::from_value::<JobRecord>(e.evidence).ok())
            .find(|r| r.optimiser == self.name()))
    }

    /// Exports, checks the budget, uploads and creates the job; `None` (with
    /// a line said) when there is nothing to upload or it may not be.
    async fn create_job(
        &self,
        ctx: &ProposeContext<'_>,
        api: &Api,
        champion_model: &str,
    ) -> Result<Option<JobRecord>, LearnError> {
        let name = self.name();
        let say = |line: String| (ctx.progress)(&format!("{name}: {line}"));
        let upload = &ctx.agent.learn.upload;
        if !upload.allowed {
            say(format!(
                "agent `{}` does not allow its episodes to leave the machine (`allow_upload = true` in its learn table); nothing uploaded",
                ctx.agent.name
            ));
            return Ok(None);
        }
        let threshold = ctx.agent.reward.pass_threshold;
        let items = ctx.store.dataset_items(&ctx.target.id)?;
        let mut allowed = Vec::new();
        let mut held_back = 0;
        for item in items {
            let episode = match &item.episode_id {
                Some(id) => ctx.store.episode(id)?,
                None => None,
            };
            if !export::may_upload(upload, episode.as_ref())
                || episode.as_ref().is_some_and(|e| super::dropped(ctx.agent, e))
            {
                held_back += 1;
                continue;
            }
            let chosen = match self.spec.method {
                FineTuneMethod::Supervised => {
                    item.reward.is_some_and(|r| r >= threshold) || super::sft::demonstrated(&item)
                }
                FineTuneMethod::Preference | FineTuneMethod::Reinforcement => true,
            };
            if chosen {
                allowed.push(export::as_served(&item, ctx.champion));
            }
        }
        let (mut grading, mut needs_reference) = (None, false);
        if self.spec.method == FineTuneMethod::Reinforcement {
            let made = grader::of(&ctx.agent.reward);
            if !made.left_out.is_empty() {
                say(format!(
                    "the host's grader leaves out what it cannot express: {}",
                    made.left_out.join(", ")
                ));
            }
            let Some(grader) = made.grader else {
                say("the reward spec has nothing the host can grade; nothing uploaded".into());
                return Ok(None);
            };
            (grading, needs_reference) = (Some(grader), made.needs_reference);
        }
        let mut rows =
            export::rows(&allowed, self.spec.method, needs_reference).map_err(LearnError::training("exporting"))?;
        if self.spec.method == FineTuneMethod::Preference {
            // On-policy pairs: the champion rolled out on the tasks that may
            // be uploaded, its best answer over its worst.
            match super::rollouts::scored(ctx, name, &allowed, self.spec.group_size).await? {
                Ok(groups) => {
                    let before = rows.len();
                    rows.extend(groups.values().filter_map(|g| export::rollout_pair(g, ctx.champion)));
                    say(format!(
                        "{} preference pairs from the champion's rollouts",
                        rows.len() - before
                    ));
                }
                Err(why) => say(why),
            }
        }
        let redactor = export::Redactor::new(upload);
        let redacted: usize = rows.iter_mut().map(|r| redactor.redact(r)).sum();
        if !upload.redact_command.is_empty() {
            let argv = upload.redact_command.clone();
            rows = tokio::task::spawn_blocking(move || export::through_hook(&argv, rows))
                .await?
                .map_err(LearnError::training("the redaction program (upload.redact_command)"))?;
        }
        let (training, validation) = export::split(&rows, self.spec.validation_share);
        let examples = training.iter().filter(|b| **b == b'\n').count();
        say(format!(
            "{examples} training and {} validation examples from the train half ({held_back} episodes held back by the upload filter, {redacted} redactions)",
            rows.len() - examples
        ));
        if examples < self.spec.min_examples {
            say(format!(
                "{examples} examples, fewer than min_examples {}; nothing uploaded",
                self.spec.min_examples
            ));
            return Ok(None);
        }
        let epochs = self.spec.n_epochs.unwrap_or(FineTuneSpec::ESTIMATED_EPOCHS);
        let estimated_tokens = export::estimated_tokens(&training, epochs);
        let estimated_usd = self.spec.usd_per_mtok.map(|p| estimated_tokens as f64 * p / 1e6);
        if let Err(why) = ctx.meter.fits(estimated_tokens, estimated_usd.unwrap_or(0.0)) {
            let line = format!(
                "the job is estimated at {estimated_tokens} trained tokens{}: {why}; not created",
                estimated_usd.map(|u| format!(" (${u:.2})")).unwrap_or_default()
            );
            say(line.clone());
            let event =
                HistoryEvent::new(&ctx.agent.name, now_ms(), "budget", format!("{name}: {line}")).cycle(&ctx.cycle.id);
            ctx.store.add_history(&[event])?;
            return Ok(None);
        }
        let model = self
            .spec
            .base_model
            .clone()
            .unwrap_or_else(|| champion_model.to_owned());
        let cycle = &ctx.cycle.id;
        let training_sha256 = hex::encode(Sha256::digest(&training));
        let training_file = api
            .upload(&format!("hone-{cycle}-{name}-train.jsonl"), training)
            .await
            .map_err(LearnError::training("uploading the training file"))?;
        let validation_file = if validation.is_empty() {
            None
        } else {
            Some(
                api.upload(&format!("hone-{cycle}-{name}-validation.jsonl"), validation)
                    .await
                    .map_err(LearnError::training("uploading the validation file"))?
                    .id,
            )
        };
        let mut hyperparameters = json!({});
        for (key, value) in [
            (
                "reasoning_effort",
                self.spec.reasoning_effort.as_ref().map(|v| json!(v)),
            ),
            ("n_epochs", self.spec.n_epochs.map(|v| json!(v))),
            ("batch_size", self.spec.batch_size.map(|v| json!(v))),
            (
                "learning_rate_multiplier",
                self.spec.learning_rate_multiplier.map(|v| json!(v)),
            ),
            ("beta", self.spec.beta.map(|v| json!(v))),
        ] {
            if let Some(v) = value {
                hyperparameters[key] = v;
            }
        }
        let kind = self.spec.method.api_type();
        let mut method = json!({"type": kind, kind: {"hyperparameters": hyperparameters}});
        if let Some(grader) = grading {
            method[kind]["grader"] = grader;
        }
        let job = api
            .create(&NewJob {
                model: model.clone(),
                training_file: training_file.id.clone(),
                validation_file: validation_file.clone(),
                suffix: suffix(cycle),
                seed: self.spec.seed,
                method,
                metadata: json!({"hone_agent": ctx.agent.name, "hone_cycle": cycle, "hone_optimiser": name}),
            })
            .await
            .map_err(LearnError::training("creating the fine-tuning job"))?;
        let record = JobRecord {
            optimiser: name.to_owned(),
            job_id: job.id.clone(),
            model,
            training_file: training_file.id,
            training_sha256,
            validation_file,
            examples: examples as u64,
            redacted: redacted as u64,
            estimated_tokens,
            estimated_usd,
        };
        let line = format!(
            "{name}: job {} created on {} ({examples} examples, estimated {estimated_tokens} trained tokens{})",
            job.id,
            record.model,
            estimated_usd.map(|u| format!(", ${u:.2}")).unwrap_or_default()
        );
        (ctx.progress)(&line);
        let event = HistoryEvent::new(&ctx.agent.name, now_ms(), "fine_tune", line)
            .cycle(cycle)
            .evidence(serde_json::to_value(&record).unwrap_or_default());
        ctx.store.add_history(&[event])?;
        Ok(Some(record))
    }

    /// Polls the job to its end, its new events said and kept as the
    /// cycle's `train` history; cancels it when the cycle ends meanwhile or
    /// its time limit runs out.
    async fn follow(&self, ctx: &ProposeContext<'_>, api: &Api, record: &JobRecord) -> Result<api::Job, LearnError> {
        let name = self.name();
        let started = Instant::now();
        let limit = Duration::from_secs(self.spec.time_limit_minutes * 60);
        let mut seen: HashSet<String> = HashSet::new();
        let mut last_status = None;
        loop {
            let job = api
                .job(&record.job_id)
                .await
                .map_err(LearnError::training("following the job"))?;
            let mut lines = Vec::new();
            if last_status != Some(job.status) {
                lines.push(format!("{name}: job {} {}", job.id, job.status.as_str()));
                last_status = Some(job.status);
            }
            for event in api
                .events(&record.job_id)
                .await
                .map_err(LearnError::training("reading the job's events"))?
            {
                if seen.insert(event.id.clone()) {
                    lines.push(format!("{name}: {}", event.message));
                }
            }
            let events: Vec<HistoryEvent> = lines
                .iter()
                .map(|l| HistoryEvent::new(&ctx.agent.name, now_ms(), "train", l).cycle(&ctx.cycle.id))
                .collect();
            for line in &lines {
                (ctx.progress)(line);
            }
            if !events.is_empty() {
                ctx.store.add_history(&events)?;
            }
            match job.status {
                Status::Succeeded => return Ok(job),
                Status::Failed => {
                    return Err(LearnError::training("the fine-tuning job failed")(job.failure()));
                }
                Status::Cancelled => {
                    return Err(LearnError::training("the fine-tuning job")(format!(
                        "job {} was cancelled at the host",
                        job.id
                    )));
                }
                _ => {}
            }
            let stop = if ctx.store.cycle_ended(&ctx.cycle.id) {
                Some("the cycle ended")
            } else if started.elapsed() > limit {
                Some("its time limit ran out (time_limit_minutes)")
            } else {
                None
            };
            if let Some(why) = stop {
                api.cancel(&record.job_id)
                    .await
                    .map_err(LearnError::training("cancelling the job"))?;
                return Err(LearnError::training("the fine-tuning job was cancelled")(format!(
                    "job {}: {why}",
                    record.job_id
                )));
            }
            tokio::time::sleep(Duration::from_secs_f64(self.spec.poll_seconds)).await;
        }
    }
}

/// The job's suffix: hone and the cycle (`AGENT-N`), in the characters and
/// length the host accepts.
fn suffix(cycle: &str) -> String {
    let clean: String = format!("hone-{cycle}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .collect();
    clean.chars().take(64).collect()
}
