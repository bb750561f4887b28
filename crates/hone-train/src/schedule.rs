//! Which examples each micro-batch of each step trains on, and, for GRPO,
//! the advantage each completion gets there — as plain data, so that
//! [`Trainer`](crate::Trainer) and a trainer that is not hone's own (TRL,
//! fed by `hone-learn`) train the same samples with the same advantages in
//! the same order. The running baselines of baseline mode move with the
//! steps, so a GRPO plan is computed step by step exactly as the trainer
//! moves them.

use crate::data::GrpoGroup;
use crate::loss::grpo::{episode_advantages, Baseline, GrpoOptions};
use crate::trainer::TrainConfig;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeMap;

/// Optimiser steps for `examples` examples under `config`: its `steps`,
/// or enough for `epochs` passes.
pub fn total_steps(config: &TrainConfig, examples: usize) -> usize {
    let per_step = config.batch_size * config.accumulation;
    config
        .steps
        .unwrap_or_else(|| (config.epochs * examples).div_ceil(per_step.max(1)))
        .max(1)
}

/// Passes over `n` examples in a seeded shuffle per epoch.
#[derive(Debug, Clone)]
pub struct Order {
    n: usize,
    seed: u64,
    batch: usize,
    accumulation: usize,
    epoch: Option<(usize, Vec<usize>)>,
}

impl Order {
    pub fn new(config: &TrainConfig, n: usize) -> Self {
        Self {
            n,
            seed: config.seed,
            batch: config.batch_size.min(n.max(1)),
            accumulation: config.accumulation,
            epoch: None,
        }
    }

    /// The examples of micro-batch `micro` of step `step` (0-based). A
    /// micro-batch never holds one example twice: with fewer examples than
    /// the batch size, it holds each once.
    pub fn items(&mut self, step: usize, micro: usize) -> Vec<usize> {
        let first = (step * self.accumulation + micro) * self.batch;
        (first..first + self.batch).map(|c| self.at(c)).collect()
    }

    fn at(&mut self, c: usize) -> usize {
        let n = self.n.max(1);
        let epoch = c / n;
        if self.epoch.as_ref().map(|(e, _)| *e) != Some(epoch) {
            let mut order: Vec<usize> = (0..n).collect();
            let mut rng = rand::rngs::StdRng::seed_from_u64(self.seed ^ (epoch as u64).wrapping_mul(0x9E37));
            order.shuffle(&mut rng);
            self.epoch = Some((epoch, order));
        }
        self.epoch.as_ref().map_or(c % n, |(_, order)| order[c % n])
    }
}

/// One GRPO micro-batch: its completions as (group, sample) with their
/// advantages, and the rewards it reports — each baseline-mode group's mean
/// under its agent (these move the agent's baseline at the end of the
/// step), each other completion's alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GrpoBatch {
    pub keys: Vec<(usize, usize)>,
    pub advantages: Vec<f64>,
    pub rewards: Vec<(Option<String>, f64)>,
}

/// The advantages of the groups `items` under the baselines as they stand.
/// A group of one answer (or of the calls of one episode) is in baseline
/// mode: each call's credit against its agent's running baseline. Other
/// groups are group-relative, an episode counted once; a group without
/// variance is dropped when `options` says so.
pub fn grpo_batch(groups: &[GrpoGroup], items: &[usize], baseline: &Baseline, options: &GrpoOptions) -> GrpoBatch {
    let mut batch = GrpoBatch::default();
    for &i in items {
        let group = &groups[i];
        let rs: Vec<f64> = group.samples.iter().map(|s| s.reward).collect();
        let episodes: Vec<Option<&str>> = group.samples.iter().map(|s| s.episode.as_deref()).collect();
        let single = rs.len() == 1 || (episodes[0].is_some() && episodes.iter().all(|e| *e == episodes[0]));
        let advantages = if single {
            batch
                .rewards
                .push((Some(group.agent.clone()), rs.iter().sum::<f64>() / rs.len() as f64));
            Some(rs.iter().map(|r| baseline.advantage(&group.agent, *r)).collect())
        } else {
            batch.rewards.extend(rs.iter().map(|r| (None, *r)));
            episode_advantages(&rs, &episodes, options)
        };
        for (j, a) in advantages.into_iter().flatten().enumerate() {
            batch.keys.push((i, j));
            batch.advantages.push(a);
        }
    }
    batch
}

/// Ends a step: the mean of the rewards it reported (`None` when none),
/// each agent's baseline moved towards the mean of its groups.
pub fn end_grpo_step(baseline: &mut Baseline, rewards: &[(Option<String>, f64)], rate: f64) -> Option<f64> {
    if rewards.is_empty() {
        return None;
    }
    let mut by_agent: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (agent, r) in rewards {
        if let Some(agent) = agent {
            by_agent.entry(agent.as_str()).or_default().push(*r);
        }
    }
    for (agent, rs) in by_agent {
        baseline.update(agent, rs.iter().sum::<f64>() / rs.len() as f64, rate);
    }
    Some(rewards.iter().map(|(_, r)| r).sum::<f64>() / rewards.len() as f64)
}

/// One planned step: its micro-batches and its mean reward.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedStep {
    pub micro_batches: Vec<GrpoBatch>,
    pub reward: Option<f64>,
}

/// Every step of GRPO on `groups` under `config` (its `accumulation`
/// micro-batches a step), as [`Trainer`](crate::Trainer) would take them.
pub fn grpo_plan(groups: &[GrpoGroup], config: &TrainConfig) -> Vec<PlannedStep> {
    let mut order = Order::new(config, groups.len());
    let mut baseline = Baseline {
        values: config.baselines.clone(),
    };
    (0..total_steps(config, groups.len()))
        .map(|step| {
            let micro_batches: Vec<GrpoBatch> = (0..config.accumulation)
                .map(|micro| grpo_batch(groups, &order.items(step, micro), &baseline, &config.grpo))
                .collect();
            let rewards: Vec<(Option<String>, f64)> =
                micro_batches.iter().flat_map(|b| b.rewards.iter().cloned()).collect();
            let reward = end_grpo_step(&mut baseline, &rewards, config.grpo.baseline_rate);
            PlannedStep { micro_batches, reward }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::GrpoSample;
    use crate::policy::Sequence;

    fn group(agent: &str, rewards: &[f64]) -> GrpoGroup {
        GrpoGroup {
            line: 1,
            agent: agent.into(),
            samples: rewards
                .iter()
                .map(|&reward| GrpoSample {
                    sequence: Sequence::prompt_completion(&[1], &[2]),
                    reward,
                    behaviour: None,
                    episode: None,
                    off_policy: false,
                })
                .collect(),
        }
    }

    #[test]
    fn a_plan_moves_the_baseline_between_steps_as_the_trainer_does() {
        let groups = vec![group("a", &[1.0]), group("a", &[0.0])];
        let config = TrainConfig {
            batch_size: 1,
            steps: Some(2),
            baselines: BTreeMap::from([("a".to_owned(), 0.5)]),
            ..TrainConfig::default()
        };
        let plan = grpo_plan(&groups, &config);
        assert_eq!(plan.len(), 2);
        let first = &plan[0].micro_batches[0];
        let r0 = groups[first.keys[0].0].samples[0].reward;
        assert!((first.advantages[0] - (r0 - 0.5)).abs() < 1e-12, "{plan:?}");
        // The baseline moved by 0.1 of the way to the first step's reward.
        let b1 = 0.5 + 0.1 * (r0 - 0.5);
        let second = &plan[1].micro_batches[0];
        let r1 = groups[second.keys[0].0].samples[0].reward;
        assert!((second.advantages[0] - (r1 - b1)).abs() < 1e-12, "{plan:?}");
        assert_ne!(r0, r1, "one epoch visits each group once");
    }

    #[test]
    fn groups_without_variance_leave_an_empty_micro_batch_that_still_reports_its_rewards() {
        let groups = vec![group("a", &[1.0, 1.0])];
        let config = TrainConfig {
            steps: Some(1),
            ..TrainConfig::default()
        };
        let plan = grpo_plan(&groups, &config);
        assert!(plan[0].micro_batches[0].keys.is_empty());
        assert_eq!(plan[0].reward, Some(1.0));
    }
}
