//! hone's learner alone, the middle side of `hone bench learn`: hone's GRPO
//! trainer (`hone_train`, with the settings the demo's `grpo` optimiser
//! trains with) on episodes hone's engine samples through the gateway, in
//! the same steps as TRL's side — [`BATCH`] training tasks a step, each
//! played `group_size` times through the environment, every episode
//! rewarded by a simulated user's implicit signals and the reward spec
//! ([`super::reward::SameReward::react`]), one optimiser step on the calls'
//! recorded token ids and logprobs with their per-call credit — and no
//! gate, no canary. Each step's adapter is served as a version for the
//! next step's sampling; one every `--checkpoint-seconds` of learning is
//! kept and measured afterwards like TRL's.
//!
//! Beside the demo's loop it separates what hone's learner costs from what
//! its safety path (traffic to learn from, the gate, the canary) adds.

use super::{Checkpoint, LearnArgs, Point, Served};
use crate::commands::bench::support::progress;
use crate::commands::demo::{self, AGENT};
use anyhow::{Context, Result};
use futures::StreamExt;
use hone_envs::{RunContext, Split};
use hone_learn::optimiser::grpo::group_row;
use hone_learn::optimiser::rollouts::Rollout;
use hone_learn::optimiser::training::{push_row, train_config, Method, BATCH};
use hone_train::data::{read_grpo, Renderer};
use hone_train::optim::Schedule;
use hone_train::{Data, Trainer};
use hone_types::EpisodeId;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Learns for `--minutes` from the base, then measures the adapters kept.
pub(super) async fn side(served: &Served, args: &LearnArgs, lr: f64, noise: f64) -> Result<Vec<Point>> {
    progress(format!(
        "hone bench learn: [2/4] hone GRPO alone — its trainer on its engine's samples for {} minutes, no gate, no canary",
        args.minutes
    ));
    // A user of its own, seeded apart from the demo's and TRL's.
    let same = served.same_reward(noise, args.seed.wrapping_add(3_000_017))?;
    let runner = &served.stage.runner;
    let group = served.grpo.group_size.max(1);
    let mut config = train_config(Method::Grpo, &served.grpo);
    // TRL's side: the same lr, constant, for as long as the budget lasts.
    config.optim.lr = lr;
    config.optim.schedule = Schedule::Constant;
    config.steps = Some(1_000_000);
    config.seed = args.seed;
    let work = args.data_dir.join("hone-grpo");
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let data_path = work.join("groups.jsonl");

    let budget = args.minutes * 60.0;
    let started = Instant::now();
    let (mut version, mut trainer) = (served.base_id.clone(), None::<Trainer>);
    let (mut episodes, mut saved_at, mut rewards) = (0usize, 0.0, Vec::new());
    let mut kept = Vec::new();
    for step in 1usize.. {
        // Play: BATCH tasks, each `group` times, the current adapter serving.
        let label = format!("bench-alone-{step}");
        let first = ((step - 1) * BATCH) as u64;
        let plays = (0..BATCH).flat_map(|k| (0..group).map(move |a| (k, a)));
        let played = futures::stream::iter(plays)
            .map(|(k, attempt)| {
                let task = demo::task_at(runner, Split::Train, first + k as u64, args.max_difficulty);
                let context = RunContext {
                    episode: EpisodeId::evaluation(&label, k, &attempt.to_string()).ok(),
                    version: Some(version.to_string()),
                };
                async move { anyhow::Ok((k, runner.run(&task, &context).await?)) }
            })
            .buffer_unordered(BATCH * group)
            .collect::<Vec<_>>()
            .await;
        served
            .stage
            .recorder
            .flush(Duration::from_secs(30))
            .await
            .map_err(|e| anyhow::anyhow!("the gateway did not record the episodes: {e}"))?;

        // Reward every episode as hone's learner rewards its rollouts.
        let mut groups: BTreeMap<usize, Vec<Rollout>> = BTreeMap::new();
        for outcome in played {
            let (k, outcome) = outcome?;
            let mut episode = served
                .store
                .episode(&outcome.episode)?
                .with_context(|| format!("episode {} was not recorded", outcome.episode))?;
            let (reward, _) = same.react(&mut episode, outcome.played.score)?;
            rewards.push(reward.value);
            groups.entry(k).or_default().push(Rollout { episode, reward });
        }
        episodes += BATCH * group;

        // One optimiser step on the calls' recorded tokens.
        let mut rows = Vec::new();
        let mut missing = 0u64;
        for row in groups.values().filter_map(|g| group_row(AGENT, g, &mut missing)) {
            push_row(&mut rows, &row)?;
        }
        std::fs::write(&data_path, &rows)?;
        let data = Data::Grpo(read_grpo(&data_path, Renderer { tokenizer: None })?);
        let adapter = format!("bench-alone-step-{step:04}");
        let (adapter_dir, base) = (served.adapters().join(&adapter), served.base.clone());
        let config = config.clone();
        let previous = trainer.take();
        let stepped = tokio::task::spawn_blocking(move || {
            let mut trainer = match previous {
                Some(mut trainer) => {
                    trainer.replace_data(data)?;
                    trainer
                }
                None => Trainer::new(&base, &candle_core::Device::Cpu, config, data, Vec::new(), None)?,
            };
            let report = trainer.train_step()?;
            trainer.lora.save_peft(&adapter_dir, &base)?;
            anyhow::Ok((trainer, report))
        })
        .await??;
        trainer = Some(stepped.0);
        version = served.register(&adapter, "hone-grpo")?;

        let now = started.elapsed().as_secs_f64();
        let mean = |last: &[f64]| last.iter().sum::<f64>() / last.len().max(1) as f64;
        progress(format!(
            "hone-grpo: step {step}, {now:.0} s, {episodes} episodes, reward {:.3} (mean of the last {} steps {:.3}), loss {:.3}{}",
            mean(&rewards[rewards.len().saturating_sub(BATCH * group)..]),
            step.min(5),
            mean(&rewards[rewards.len().saturating_sub(5 * BATCH * group)..]),
            stepped.1.loss,
            if missing > 0 {
                format!("; {missing} calls without token ids left out")
            } else {
                String::new()
            }
        ));
        let done = now >= budget;
        if done || now - saved_at >= args.checkpoint_seconds {
            kept.push(Checkpoint {
                adapter,
                learning_s: now,
                episodes,
            });
            saved_at = now;
        }
        if done {
            break;
        }
    }
    progress("hone bench learn: measuring hone GRPO alone's checkpoints on the held-out tasks".to_owned());
    served.measure("hone-grpo", &kept, args).await
}

#[cfg(test)]
mod tests {
    use super::super::{LearnArgs, Served};
    use crate::commands::demo::config;
    use clap::Parser;
    use hone_engine::init::{write_checkpoint, Preset};
    use hone_types::{EpisodeId, VersionId};

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        learn: LearnArgs,
    }

    /// On the real gateway and engine (a random tiny model), every step
    /// samples with the adapter the step before it trained: on-policy, as
    /// TRL's side is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_step_samples_with_the_adapter_the_step_before_trained() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("tiny");
        write_checkpoint(hone_engine::Arch::Qwen2, Preset::Tiny, 1, &base).unwrap();
        let hone_dir = dir.path().join("hone");
        std::fs::create_dir_all(&hone_dir).unwrap();
        let args = crate::commands::demo::parsed_args(&["--temperature", "1"]);
        let choices = config::Choices::of(&args);
        let text = config::text(&hone_dir, &base, "http://127.0.0.1:9/run", &choices);
        std::fs::write(hone_dir.join("hone.toml"), text).unwrap();
        let served = Served::start(&hone_dir, &base).await.unwrap();
        let data_dir = dir.path().to_str().unwrap();
        let args = Command::parse_from([
            "learn",
            "--data-dir",
            data_dir,
            "--minutes",
            "0.1",
            "--checkpoint-seconds",
            "0.5",
            "--held-out",
            "4",
        ])
        .learn;

        let points = super::side(&served, &args, 2e-3, 0.05).await.unwrap();
        assert!(!points.is_empty());
        let versions = served.store.versions(Some(crate::commands::demo::AGENT)).unwrap();
        let adapter_of = |id: &VersionId| {
            versions
                .iter()
                .find(|v| &v.id == id)
                .map(|v| v.spec.routes[0].adapter.clone())
                .unwrap()
        };
        let steps = versions.iter().filter(|v| v.created_by == "hone-grpo").count();
        assert!(steps >= 2, "{steps} steps in {} s", 0.1 * 60.0);
        for step in 1..=steps {
            let id = EpisodeId::evaluation(&format!("bench-alone-{step}"), 0, "0").unwrap();
            let episode = served.store.episode(&id).unwrap().unwrap();
            let expected = (step > 1).then(|| format!("bench-alone-step-{:04}", step - 1));
            for call in &episode.calls {
                assert_eq!(adapter_of(&call.version_id), expected, "step {step}");
                assert!(call.sampled_tokens().is_some(), "step {step}: no token ids recorded");
            }
        }
        // The kept checkpoints are steps' adapters, measured in order.
        let kept: Vec<f64> = points.iter().map(|p| p.learning_s).collect();
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "{kept:?}");
        assert!(points.iter().all(|p| p.version.contains("bench-alone-step-")));
        served.stage.stop().await;
    }
}
