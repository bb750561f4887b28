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
//! kept and measured afterwards like TRL's, the others deleted once the
//! next step has sampled (the engine's `max_adapters` limit unloads them).
//!
//! Nothing is left out of training (`drop_from_training` is empty in the
//! demo's config unless `--reward naive`, which the bench does not offer),
//! as on TRL's side.
//!
//! It sets hone's learner against TRL's on equal terms; the demo's loop
//! differs from it by more than its safety path (its first cycle is `sft`
//! on users' episodes, not GRPO on its own samples).

use super::{Checkpoint, LearnArgs, Point, Testbed};
use anyhow::Result;
use futures::StreamExt;
use hone_demo::{self as demo, DemoArgs, AGENT};
use hone_envs::{RunContext, Split};
use hone_learn::search::optimiser::training::{train_config, Method, BATCH};
use hone_learn::search::optimiser::{group_row, Rollout};
use hone_train::data::{grpo_group, Renderer};
use hone_train::optim::Schedule;
use hone_train::{Data, StepReport, Trainer};
use hone_types::EpisodeId;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Learns for `--minutes` from the base, then measures the adapters kept.
pub(super) async fn side(testbed: &Testbed, args: &LearnArgs, lr: f64, users: &DemoArgs) -> Result<Vec<Point>> {
    hone_console::note(format_args!(
        "hone bench learn: hone GRPO alone — its trainer on its engine's samples for {} minutes, no gate, no canary",
        args.minutes
    ));
    let budget = Budget {
        seconds: args.minutes * 60.0,
        steps: None,
    };
    let learned = learn(testbed, args, lr, users, &budget).await?;
    hone_console::note(format_args!(
        "hone bench learn: measuring hone GRPO alone's {} checkpoints on the held-out tasks ({} steps, {} episodes that failed left out)",
        learned.kept.len(),
        learned.reports.len(),
        learned.failed
    ));
    testbed
        .measure("hone GRPO alone", "hone-grpo", &learned.kept, args)
        .await
}

/// When learning stops: after `seconds` of it, or `steps` optimiser steps.
struct Budget {
    seconds: f64,
    steps: Option<usize>,
}

/// What the learning left: the adapters kept for measuring, every
/// optimiser step's report, and the episodes whose run failed.
struct Learned {
    kept: Vec<Checkpoint>,
    reports: Vec<StepReport>,
    failed: usize,
}

async fn learn(testbed: &Testbed, args: &LearnArgs, lr: f64, users: &DemoArgs, budget: &Budget) -> Result<Learned> {
    // A user of its own, seeded apart from the demo's and TRL's.
    let same = testbed.same_reward(users.user((0, 0), args.seed.wrapping_add(3_000_017)))?;
    let runner = &testbed.stage.runner;
    let group = testbed.grpo.group_size.max(1);
    let mut config = train_config(Method::Grpo, &testbed.grpo);
    // TRL's side: the same lr, constant, for as long as the budget lasts.
    config.optim.lr = lr;
    config.optim.schedule = Schedule::Constant;
    config.steps = Some(1_000_000);
    config.seed = args.seed;
    // This run's episodes and adapters are its own, in a data directory
    // another run already used too.
    let run = format!("{:x}", hone_types::time::now_ms());

    let started = Instant::now();
    let (mut version, mut trainer) = (testbed.base_id.clone(), None::<Trainer>);
    let (mut episodes, mut failed, mut saved_at) = (0usize, 0usize, 0.0);
    let (mut rewards, mut reports, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    // The adapter that sampled the step under way, to drop once it has
    // unless kept.
    let mut sampler: Option<(String, bool)> = None;
    for step in 1usize.. {
        // Play: BATCH tasks, each `group` times, the current adapter serving.
        let label = format!("bench-alone-{run}-{step}");
        let first = ((step - 1) * BATCH) as u64;
        let plays = (0..BATCH).flat_map(|k| (0..group).map(move |a| (k, a)));
        let mut played = futures::stream::iter(plays)
            .map(|(k, attempt)| {
                let task = demo::task_at(runner, Split::Train, first + k as u64, testbed.levels);
                let context = RunContext {
                    episode: EpisodeId::evaluation(&label, k, &attempt.to_string()).ok(),
                    version: Some(version.to_string()),
                };
                async move { (k, attempt, runner.run(&task, &context).await) }
            })
            .buffer_unordered(BATCH * group)
            .collect::<Vec<_>>()
            .await;
        // Users react in a fixed order, whatever order the runs ended in.
        played.sort_by_key(|(k, attempt, _)| (*k, *attempt));
        testbed
            .stage
            .recorder
            .flush(Duration::from_secs(30))
            .await
            .map_err(|e| anyhow::anyhow!("the gateway did not record the episodes: {e}"))?;

        // Reward every episode as hone's learner rewards its rollouts.
        let mut groups: BTreeMap<usize, Vec<Rollout>> = BTreeMap::new();
        for (k, _, outcome) in played {
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(e) => {
                    failed += 1;
                    hone_console::note(format_args!(
                        "hone-grpo: step {step}: an episode failed ({e}); left out"
                    ));
                    continue;
                }
            };
            let Some(mut episode) = testbed.store.agent_episode(&testbed.spec.agent, &outcome.episode)? else {
                failed += 1;
                continue;
            };
            let (reward, _) = same.react(&mut episode, outcome.played.score)?;
            rewards.push(reward.value);
            groups.entry(k).or_default().push(Rollout { episode, reward });
        }
        episodes += BATCH * group;

        // One optimiser step on the calls' recorded tokens.
        let mut missing = 0u64;
        let rows = groups.values().filter_map(|g| group_row(AGENT, g, &mut missing));
        let renderer = Renderer { tokenizer: None };
        let groups = rows
            .enumerate()
            .map(|(line, row)| grpo_group(line + 1, row, renderer).map_err(anyhow::Error::msg))
            .collect::<Result<Vec<_>>>()?;
        let trained = if groups.is_empty() {
            hone_console::note(format_args!(
                "hone-grpo: step {step}: no episode to train on ({missing} calls without token ids); sampling again"
            ));
            None
        } else {
            let adapter = format!("bench-alone-{run}-step-{step:04}");
            let (adapter_dir, base) = (testbed.adapters().join(&adapter), testbed.base.clone());
            let (config, previous) = (config.clone(), trainer.take());
            let (stepped, report) = tokio::task::spawn_blocking(move || {
                let data = Data::Grpo(groups);
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
            trainer = Some(stepped);
            version = testbed.register(&adapter, "hone-grpo")?;
            // The adapter that sampled this step serves no longer.
            if let Some((old, false)) = sampler.take() {
                let _ = std::fs::remove_dir_all(testbed.adapters().join(&old));
            }
            Some((adapter, report))
        };

        let now = started.elapsed().as_secs_f64();
        let steps = reports.len() + usize::from(trained.is_some());
        let done = now >= budget.seconds || budget.steps.is_some_and(|n| steps >= n);
        if let Some((adapter, report)) = trained {
            let keep = done || now - saved_at >= args.checkpoint_seconds;
            if keep {
                kept.push(Checkpoint {
                    adapter: adapter.clone(),
                    learning_s: now,
                    episodes,
                });
                saved_at = now;
            }
            sampler = Some((adapter, keep));
            let mean = |last: &[f64]| last.iter().sum::<f64>() / last.len().max(1) as f64;
            hone_console::note(format_args!(
                "hone-grpo: step {step}, {now:.0} s, {episodes} episodes, reward {:.3} (mean of the last {} steps {:.3}), loss {:.3}{}",
                mean(&rewards[rewards.len().saturating_sub(BATCH * group)..]),
                step.min(5),
                mean(&rewards[rewards.len().saturating_sub(5 * BATCH * group)..]),
                report.loss,
                if missing > 0 {
                    format!("; {missing} calls without token ids left out")
                } else {
                    String::new()
                }
            ));
            reports.push(report);
        } else if done {
            // The budget ran out on a step with nothing to train on: the
            // adapter serving then is the last one.
            if let Some((adapter, false)) = &sampler {
                kept.push(Checkpoint {
                    adapter: adapter.clone(),
                    learning_s: now,
                    episodes,
                });
            }
        }
        if done {
            break;
        }
    }
    Ok(Learned { kept, reports, failed })
}

#[cfg(test)]
mod tests {
    use super::super::{LearnArgs, Testbed};
    use super::Budget;
    use clap::Parser;
    use hone_demo::config;
    use hone_engine::init::{write_checkpoint, Preset};
    use hone_learn::search::optimiser::training::BATCH;
    use hone_types::{EpisodeId, VersionId};

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        learn: LearnArgs,
    }

    /// On the real gateway and engine (a random tiny model, sampled at
    /// temperature 1 so that groups differ), three steps: every episode of
    /// a step is sampled by the adapter the step before trained, with its
    /// token ids recorded, and the trainer sees its own policy in them
    /// (importance ratio 1: on-policy, as TRL's side is).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_step_samples_with_the_adapter_the_step_before_trained() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("tiny");
        write_checkpoint(hone_engine::Arch::Qwen2, Preset::Tiny, 1, &base).unwrap();
        let hone_dir = dir.path().join("hone");
        std::fs::create_dir_all(&hone_dir).unwrap();
        let args = hone_demo::parse_args(["--temperature", "1"]).unwrap();
        let choices = config::Choices::of(&args);
        let text = config::text(&hone_dir, &base, "http://127.0.0.1:9/run", &choices);
        std::fs::write(hone_dir.join("hone.toml"), text).unwrap();
        let testbed = Testbed::start(&hone_dir, &base, args.max_difficulty).await.unwrap();
        let data_dir = dir.path().to_str().unwrap();
        let args = Command::parse_from(["learn", "--data-dir", data_dir, "--checkpoint-seconds", "1000"]).learn;

        let budget = Budget {
            seconds: 600.0,
            steps: Some(3),
        };
        // Users who react at random half the time, so that a group's
        // rewards differ (a group whose rewards are all equal teaches
        // nothing and reports no ratio).
        let users = hone_demo::parse_args(["--noise", "0.5"]).unwrap();
        let learned = super::learn(&testbed, &args, 2e-3, &users, &budget).await.unwrap();
        assert_eq!(learned.reports.len(), 3);
        assert_eq!(learned.failed, 0);
        let ratios: Vec<f64> = learned
            .reports
            .iter()
            .filter_map(|r| r.extra.get("ratio").copied())
            .collect();
        assert!(
            !ratios.is_empty(),
            "no step had a group to learn from: {:?}",
            learned.reports
        );
        for ratio in ratios {
            assert!((ratio - 1.0).abs() < 0.01, "off-policy: {:?}", learned.reports);
        }
        let versions = testbed.store.versions(Some(hone_demo::AGENT)).unwrap();
        let adapter_of = |id: &VersionId| {
            let version = versions.iter().find(|v| &v.id == id).unwrap();
            version.spec.routes[0].adapter.clone()
        };
        let trained: Vec<_> = versions.iter().filter(|v| v.created_by == "hone-grpo").collect();
        assert_eq!(trained.len(), 3);
        let run = trained[0]
            .label
            .as_deref()
            .unwrap()
            .split('-')
            .nth(2)
            .unwrap()
            .to_owned();
        let group = testbed.grpo.group_size;
        for step in 1..=3usize {
            let expected = (step > 1).then(|| format!("bench-alone-{run}-step-{:04}", step - 1));
            for (k, attempt) in (0..BATCH).flat_map(|k| (0..group).map(move |a| (k, a))) {
                let label = format!("bench-alone-{run}-{step}");
                let id = EpisodeId::evaluation(&label, k, &attempt.to_string()).unwrap();
                let episode = testbed.store.agent_episode(&testbed.spec.agent, &id).unwrap().unwrap();
                assert!(!episode.calls.is_empty());
                for call in &episode.calls {
                    assert_eq!(adapter_of(&call.version_id), expected, "step {step}");
                    assert!(call.sampled_tokens().is_some(), "step {step}: no token ids recorded");
                }
            }
        }
        // With checkpoints 1000 s apart only the last step's adapter is
        // kept; the others, once the next step had sampled, are gone.
        let kept: Vec<&str> = learned.kept.iter().map(|c| c.adapter.as_str()).collect();
        let name = |step: usize| format!("bench-alone-{run}-step-{step:04}");
        assert_eq!(kept, [name(3)]);
        assert!(testbed.adapters().join(name(3)).join("adapter_config.json").is_file());
        assert!(!testbed.adapters().join(name(1)).exists());
        assert!(!testbed.adapters().join(name(2)).exists());
        testbed.stage.stop().await;
    }
}
