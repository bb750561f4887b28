//! Evaluation: run one version over a dataset snapshot and score every
//! instance with the agent's reward spec (the instance's reference as the
//! label). Single-call agents are replayed — the recorded request goes
//! through the gateway pinned to the version (`X-Hone-Version`), i.e.
//! through the candidate's harness and provider. Multi-step agents run
//! through their **agent endpoint**: `POST URL {"input": …}` with the version
//! and the episode id in `X-Hone-Version` / `X-Hone-Episode`, which the agent
//! passes on to the gateway on each of its calls.
//!
//! Runs are stored per instance as they finish, so a run that stopped is
//! resumed by running it again; `attempt` > 0 re-runs instances (to tell a
//! flip from noise).

mod report;

pub use report::{per_instance, summarise, EvalSummary, InstanceScore, Rates};

use crate::client::{ChatClient, GatewayClient};
use crate::episode::final_text;
use crate::error::LearnError;
use crate::scoring::reward::Rewarder;
use futures::StreamExt;
use hone_store::{LearnStore, Recorder, StoreError};
use hone_types::time::now_ms;
use hone_types::{
    BehaviourFlags, DatasetInfo, EpisodeDetail, EpisodeId, EvalRunInfo, Instance, InstanceResult, VersionId,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How instances are run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The recorded request, replayed through the gateway.
    Replay,
    /// The agent's own endpoint (`http://…/run`).
    Endpoint(String),
}

impl Target {
    /// How an agent's cycle runs its instances: through its agent endpoint
    /// (`[agents.NAME.learn] endpoint`) when it has one, else by replay.
    pub fn of(agent: &hone_config::AgentConfig) -> Target {
        agent.learn.endpoint.clone().map_or(Target::Replay, Target::Endpoint)
    }

    pub fn name(&self) -> &str {
        match self {
            Target::Replay => "replay",
            Target::Endpoint(url) => url,
        }
    }
}

#[derive(Debug, Clone)]
pub struct EvalOptions {
    pub concurrency: usize,
    /// Per instance, per try.
    pub timeout: Duration,
    /// Extra tries after a failed one (errors and time-outs, not low scores).
    pub retries: u32,
    /// 0 for a first run; higher to re-run instances.
    pub attempt: u32,
    /// Runs of every instance, as attempts `attempt .. attempt + samples`
    /// (at temperature > 0 one sample per instance is a coin toss).
    pub samples: u32,
    /// Run only these instances (re-runs of flips).
    pub only: Option<HashSet<String>>,
}

impl EvalOptions {
    /// The defaults, running `concurrency` instances at once.
    pub fn with_concurrency(concurrency: usize) -> Self {
        Self {
            concurrency,
            ..Self::default()
        }
    }
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            concurrency: 4,
            timeout: Duration::from_secs(120),
            retries: 1,
            attempt: 0,
            samples: 1,
            only: None,
        }
    }
}

/// Everything an evaluation needs: the gateway to send calls through, the
/// store the gateway records into, and the agent's reward spec.
pub struct Evaluator {
    pub store: Arc<dyn LearnStore>,
    pub gateway: GatewayClient,
    pub rewarder: Arc<Rewarder>,
    /// The recorder of an in-process gateway: flushed before reading an
    /// episode back. Without it the store is polled.
    pub recorder: Option<Arc<Recorder>>,
}

/// The run id: the same dataset, version and target always resume the same run.
pub fn run_id(dataset: &str, version: &VersionId, target: &Target) -> String {
    let digest = Sha256::digest(format!("{dataset}\n{version}\n{}", target.name()).as_bytes());
    hex::encode(digest)[..16].to_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub failed: usize,
}

impl Evaluator {
    pub async fn run(
        &self,
        dataset: &DatasetInfo,
        version: &VersionId,
        target: &Target,
        options: &EvalOptions,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<(EvalRunInfo, Vec<InstanceResult>), StoreError> {
        let id = run_id(&dataset.id, version, target);
        let run = self.store.start_eval_run(&EvalRunInfo {
            id: id.clone(),
            dataset_id: dataset.id.clone(),
            agent: dataset.agent.clone(),
            version_id: version.clone(),
            target: target.name().to_owned(),
            created_at: now_ms(),
            finished_at: None,
        })?;
        let items = self.store.dataset_items(&dataset.id)?;
        let attempts = options.attempt..options.attempt + options.samples.max(1);
        let done: HashSet<(String, u32)> = self
            .store
            .eval_results(&id)?
            .into_iter()
            .filter(|r| attempts.contains(&r.attempt))
            .map(|r| (r.instance_id, r.attempt))
            .collect();
        let todo: Vec<(usize, &Instance, u32)> = attempts
            .flat_map(|attempt| items.iter().enumerate().map(move |(k, i)| (k, i, attempt)))
            .filter(|(_, i, attempt)| !done.contains(&(i.id.clone(), *attempt)))
            .filter(|(_, i, _)| options.only.as_ref().is_none_or(|only| only.contains(&i.id)))
            .collect();
        let total = todo.len();
        let mut finished = 0;
        let mut failed = 0;
        progress(Progress {
            done: 0,
            total,
            failed: 0,
        });
        let todo: Vec<(usize, Instance, u32)> = todo
            .into_iter()
            .map(|(i, item, attempt)| (i, item.clone(), attempt))
            .collect();
        let mut stream = futures::stream::iter(todo)
            // Owned items: a closure over borrowed ones is not provably `Send`
            // for every lifetime, and an evaluation must run on spawned tasks.
            .map(|(index, instance, attempt): (usize, Instance, u32)| {
                let id = &id;
                let options = EvalOptions {
                    attempt,
                    only: None,
                    ..options.clone()
                };
                async move { self.run_instance(id, index, &instance, version, target, &options).await }
            })
            .buffer_unordered(options.concurrency.max(1));
        while let Some(result) = stream.next().await {
            let result = result?;
            failed += usize::from(result.score.is_none());
            self.store.put_eval_result(&id, &result)?;
            finished += 1;
            progress(Progress {
                done: finished,
                total,
                failed,
            });
        }
        drop(stream);
        self.store.finish_eval_run(&id, now_ms())?;
        let run = self.store.eval_run(&id)?.unwrap_or(run);
        Ok((run, self.store.eval_results(&id)?))
    }

    async fn run_instance(
        &self,
        run: &str,
        index: usize,
        instance: &Instance,
        version: &VersionId,
        target: &Target,
        options: &EvalOptions,
    ) -> Result<InstanceResult, StoreError> {
        let mut last_error = String::new();
        let mut episode_id = None;
        let mut elapsed = 0.0;
        for attempt_try in 0..=options.retries {
            let attempt = format!("{}-{attempt_try}", options.attempt);
            let id = EpisodeId::evaluation(run, index, &attempt)
                .map_err(|e| StoreError::Corrupt(format!("evaluation episode id for run {run}: {e}")))?;
            let started = Instant::now();
            let outcome = tokio::time::timeout(options.timeout, self.send(instance, &id, version, target)).await;
            elapsed = started.elapsed().as_secs_f64() * 1000.0;
            episode_id = Some(id.clone());
            match outcome {
                Err(_) => last_error = format!("timed out after {} s", options.timeout.as_secs_f64()),
                Ok(Err(e)) => last_error = e.to_string(),
                Ok(Ok(())) => match self.read_back(&instance.agent, &id).await? {
                    Some(episode) => return Ok(self.score(instance, &episode, options.attempt, elapsed).await),
                    None => last_error = "the run made no call through the gateway".to_owned(),
                },
            }
            tracing::debug!(instance = %instance.id, try_ = attempt_try, error = %last_error, "evaluation try failed");
        }
        Ok(InstanceResult {
            instance_id: instance.id.clone(),
            attempt: options.attempt,
            episode_id: episode_id.unwrap_or_else(EpisodeId::new_v7),
            score: None,
            passed: false,
            error: Some(last_error),
            cost_usd: 0.0,
            latency_ms: elapsed,
            flags: BehaviourFlags::default(),
            calls: 0,
            tool_calls: 0,
            answer_chars: 0,
            failures: Vec::new(),
        })
    }

    async fn send(
        &self,
        instance: &Instance,
        episode: &EpisodeId,
        version: &VersionId,
        target: &Target,
    ) -> Result<(), LearnError> {
        match target {
            Target::Replay => {
                let mut request = instance.request.clone().ok_or_else(|| {
                    LearnError::state(format!("instance `{}` has no recorded request to replay", instance.id))
                })?;
                request["model"] = json!(instance.agent);
                self.gateway
                    .chat(&request, episode.as_str(), Some(version.as_str()))
                    .await
                    .map(|_| ())
            }
            Target::Endpoint(url) => {
                let response = self
                    .gateway
                    .http()
                    .post(url)
                    .header("x-hone-version", version.as_str())
                    .header("x-hone-episode", episode.as_str())
                    .json(&json!({"input": instance.input}))
                    .send()
                    .await
                    .map_err(|e| LearnError::gateway(format!("agent endpoint {url} unreachable: {e}")))?;
                let status = response.status();
                if !status.is_success() {
                    let body = response.text().await.unwrap_or_default();
                    return Err(LearnError::gateway(format!("agent endpoint answered {status}: {body}")));
                }
                let _: Value = response.json().await.map_err(|e| {
                    LearnError::gateway(format!("agent endpoint answered something that is not JSON: {e}"))
                })?;
                Ok(())
            }
        }
    }

    /// `agent`'s episode `id` as the gateway recorded it.
    async fn read_back(&self, agent: &str, id: &EpisodeId) -> Result<Option<EpisodeDetail>, StoreError> {
        if let Some(recorder) = &self.recorder {
            if let Err(e) = recorder.flush(Duration::from_secs(10)).await {
                tracing::warn!(error = %e, "recorder did not flush; reading what is stored");
            }
            return self.store.agent_episode(agent, id);
        }
        // A remote gateway: its recorder commits within milliseconds.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = None;
        loop {
            let episode = self.store.agent_episode(agent, id)?;
            let count = episode.as_ref().map(|e| e.calls.len());
            if count.is_some() && count == seen {
                return Ok(episode);
            }
            if Instant::now() > deadline {
                return Ok(episode);
            }
            seen = count;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn score(
        &self,
        instance: &Instance,
        episode: &EpisodeDetail,
        attempt: u32,
        latency_ms: f64,
    ) -> InstanceResult {
        let verdicts = self.rewarder.judge(std::slice::from_ref(episode)).await;
        let reward = self.rewarder.score(
            episode,
            instance.reference.as_ref(),
            verdicts.get(&episode.summary.id),
            now_ms(),
        );
        let mut flags = BehaviourFlags::default();
        let mut tool_calls = 0;
        for c in &episode.calls {
            flags.invalid_tool_call |= c.flags.invalid_tool_call;
            flags.clarifying_question |= c.flags.clarifying_question;
            flags.refusal |= c.flags.refusal;
            flags.empty |= c.flags.empty;
            flags.truncated |= c.flags.truncated;
            tool_calls += c
                .response
                .as_ref()
                .and_then(|r| r.choices.first())
                .map(|ch| ch.message.tool_calls().len() as u32)
                .unwrap_or(0);
        }
        InstanceResult {
            instance_id: instance.id.clone(),
            attempt,
            episode_id: episode.summary.id.clone(),
            score: Some(reward.value),
            passed: reward.passed,
            error: None,
            cost_usd: episode.calls.iter().filter_map(|c| c.cost_usd).sum(),
            latency_ms,
            flags,
            calls: episode.calls.len() as u32,
            tool_calls,
            answer_chars: final_text(episode).chars().count() as u64,
            failures: reward.failures,
        }
    }
}
