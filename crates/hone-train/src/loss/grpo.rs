//! Group Relative Policy Optimisation with the variants practitioners use.
//!
//! Advantages are group-relative: `A = r − mean(group)`, divided by the
//! group's (unbiased) standard deviation + 1e-4 unless `scale_by_std` is off
//! (Dr. GRPO). Groups whose rewards are all equal carry no signal and can be
//! dropped. The per-token objective is PPO's clipped surrogate with an
//! asymmetric range (`ε_low`, `ε_high`, as DAPO raises the upper bound):
//! `−min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A)` where `ρ = exp(ℓ − ℓ_behaviour)`
//! is the importance ratio against the logprobs the sampler recorded, so
//! slightly stale episodes are corrected; plus `β·KL_k3(π‖ref)` when `β > 0`.
//!
//! **Off-policy samples** (production episodes served by another version
//! than the one training starts from) are corrected as decoupled PPO does:
//! the clip acts on `ρ = exp(ℓ − ℓ_prox)`, the ratio to the *proximal*
//! policy (the training's starting policy, scored once before the first
//! step), and each token is weighted by the truncated importance weight
//! `w = min(exp(ℓ_prox − ℓ_behaviour), cap)` (held constant), as TRL's and
//! ART's truncated importance sampling weight tokens a different engine
//! sampled. Truncation bounds the variance a very stale token would bring;
//! the bias it leaves is towards the proximal policy, the safe side.
//! Aggregation: per token over the batch (DAPO), per sequence then averaged
//! (the original GRPO), or by a constant (Dr. GRPO: `1/(B·max_tokens)`).
//!
//! The **baseline mode** trains single production samples (one answer per
//! prompt, the user's reward) with `A = r − b`, `b` a running mean per
//! agent — see [`Baseline`].

use super::{kl_k3, LossOutput};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How per-token losses are summed into the batch loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Σ over all tokens / token count (DAPO; TRL's `bnpo`).
    Token,
    /// Mean per sequence, then mean over sequences (GRPO; TRL's `grpo`).
    Sequence,
    /// Σ over all tokens / (sequences · max completion tokens) (Dr. GRPO).
    DrGrpo,
}

impl Aggregation {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "token" | "dapo" | "bnpo" => Some(Self::Token),
            "sequence" | "grpo" => Some(Self::Sequence),
            "dr-grpo" | "dr_grpo" => Some(Self::DrGrpo),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrpoOptions {
    pub scale_by_std: bool,
    pub drop_zero_variance: bool,
    pub aggregation: Aggregation,
    pub epsilon_low: f64,
    pub epsilon_high: f64,
    /// Weight of the KL-to-reference term (0: off).
    pub kl_beta: f64,
    /// The Dr. GRPO normaliser; 0 takes the longest completion in the batch.
    pub max_completion_tokens: usize,
    /// Step of the running baseline (baseline mode).
    pub baseline_rate: f64,
    /// Largest importance weight of an off-policy token (truncated
    /// importance sampling).
    #[serde(default = "default_is_cap")]
    pub is_cap: f64,
}

fn default_is_cap() -> f64 {
    2.0
}

impl Default for GrpoOptions {
    fn default() -> Self {
        Self {
            scale_by_std: true,
            drop_zero_variance: true,
            aggregation: Aggregation::Token,
            epsilon_low: 0.2,
            epsilon_high: 0.28,
            kl_beta: 0.0,
            max_completion_tokens: 0,
            baseline_rate: 0.1,
            is_cap: default_is_cap(),
        }
    }
}

/// Group-relative advantages; `None` when the group has no variance and
/// such groups are dropped.
pub fn group_advantages(rewards: &[f64], options: &GrpoOptions) -> Option<Vec<f64>> {
    let alone: Vec<Option<&str>> = vec![None; rewards.len()];
    episode_advantages(rewards, &alone, options)
}

/// Group-relative advantages of completions that are calls of multi-call
/// episodes (`episodes[i]` names the episode of completion `i`; `None`
/// stands alone). The group's mean and spread are taken over episodes, each
/// counted once with the mean reward of its calls, so an episode with more
/// calls does not weigh more; each call's advantage is its own reward
/// against that mean, so a call credited less than its episode (an invalid
/// tool call, say) gets less. With one call per episode this is the
/// ordinary group-relative advantage.
pub fn episode_advantages(rewards: &[f64], episodes: &[Option<&str>], options: &GrpoOptions) -> Option<Vec<f64>> {
    // (episode, sum of its calls' rewards, calls), in order of first appearance.
    let mut sums: Vec<(Option<&str>, f64, f64)> = Vec::new();
    for (&r, &e) in rewards.iter().zip(episodes) {
        match sums.iter_mut().find(|(id, _, _)| e.is_some() && *id == e) {
            Some(entry) => {
                entry.1 += r;
                entry.2 += 1.0;
            }
            None => sums.push((e, r, 1.0)),
        }
    }
    let means: Vec<f64> = sums.iter().map(|(_, s, n)| s / n).collect();
    let n = means.len() as f64;
    let mean = means.iter().sum::<f64>() / n;
    let var = if means.len() > 1 {
        means.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    if options.drop_zero_variance && var == 0.0 {
        return None;
    }
    let std = var.sqrt();
    Some(
        rewards
            .iter()
            .map(|r| {
                if options.scale_by_std {
                    (r - mean) / (std + 1e-4)
                } else {
                    r - mean
                }
            })
            .collect(),
    )
}

/// A running per-agent reward baseline for single-sample episodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub values: BTreeMap<String, f64>,
}

impl Baseline {
    /// `r − b` for `agent`; the first reward seen starts the baseline.
    pub fn advantage(&self, agent: &str, reward: f64) -> f64 {
        reward - self.values.get(agent).copied().unwrap_or(reward)
    }

    /// Moves the agent's baseline towards the mean reward of a step.
    pub fn update(&mut self, agent: &str, mean_reward: f64, rate: f64) {
        let b = self.values.entry(agent.to_owned()).or_insert(mean_reward);
        *b += rate * (mean_reward - *b);
    }
}

/// One completion's per-token inputs.
#[derive(Debug, Clone, Copy)]
pub struct GrpoSequence<'a> {
    pub advantage: f64,
    pub logprobs: &'a [f32],
    /// The sampler's logprobs; `None` is on-policy (ratio 1).
    pub behaviour: Option<&'a [f32]>,
    /// For an off-policy sample, the proximal policy's logprobs (the
    /// training's starting policy): the clip acts against these and the
    /// behaviour logprobs only weight the tokens.
    pub proximal: Option<&'a [f32]>,
    /// LoRA-off logprobs, needed when `kl_beta > 0`.
    pub reference: Option<&'a [f32]>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GrpoStats {
    /// Share of tokens whose ratio was clipped.
    pub clip_fraction: f64,
    pub mean_ratio: f64,
    /// Off-policy tokens: their mean importance weight (after truncation)
    /// and the share truncated at the cap; 0 when there are none.
    pub mean_is_weight: f64,
    pub truncated_fraction: f64,
}

pub fn grpo_loss(sequences: &[GrpoSequence], options: &GrpoOptions) -> (LossOutput, GrpoStats) {
    let tokens: usize = sequences.iter().map(|s| s.logprobs.len()).sum();
    let longest = sequences.iter().map(|s| s.logprobs.len()).max().unwrap_or(0);
    let normaliser = if options.max_completion_tokens > 0 {
        options.max_completion_tokens
    } else {
        longest
    };
    let (low, high) = (1.0 - options.epsilon_low, 1.0 + options.epsilon_high);
    let mut loss = 0.0;
    let mut grads = Vec::with_capacity(sequences.len());
    let mut stats = GrpoStats::default();
    let mut off_policy_tokens = 0usize;
    for s in sequences {
        let weight = match options.aggregation {
            Aggregation::Token => 1.0 / tokens.max(1) as f64,
            Aggregation::Sequence => 1.0 / (s.logprobs.len().max(1) * sequences.len()) as f64,
            Aggregation::DrGrpo => 1.0 / (sequences.len() * normaliser.max(1)) as f64,
        };
        let a = s.advantage;
        let mut g = Vec::with_capacity(s.logprobs.len());
        for (t, lp) in s.logprobs.iter().enumerate() {
            let lp = *lp as f64;
            let behaviour = s.behaviour.and_then(|b| b.get(t)).map_or(lp, |b| *b as f64);
            let (old, weight_is) = match s.proximal.and_then(|p| p.get(t)) {
                Some(prox) => {
                    let prox = *prox as f64;
                    let w = (prox - behaviour).exp();
                    off_policy_tokens += 1;
                    if w > options.is_cap {
                        stats.truncated_fraction += 1.0;
                    }
                    let w = w.min(options.is_cap);
                    stats.mean_is_weight += w;
                    (prox, w)
                }
                None => (behaviour, 1.0),
            };
            let ratio = (lp - old).exp();
            let clipped = ratio.clamp(low, high);
            let (unclipped_term, clipped_term) = (ratio * a, clipped * a);
            let mut token_loss = -weight_is * unclipped_term.min(clipped_term);
            // The min picks the unclipped branch (gradient −A·ρ) unless the
            // clipped one is smaller, which happens only outside the range,
            // where clip() is flat.
            let inside = (low..=high).contains(&ratio);
            let mut grad = if a != 0.0 && (inside || unclipped_term < clipped_term) {
                -weight_is * a * ratio
            } else {
                0.0
            };
            if !inside {
                stats.clip_fraction += 1.0;
            }
            stats.mean_ratio += ratio;
            if options.kl_beta > 0.0 {
                if let Some(r) = s.reference.and_then(|r| r.get(t)) {
                    let (kl, dkl) = kl_k3(lp, *r as f64);
                    token_loss += options.kl_beta * kl;
                    grad += options.kl_beta * dkl;
                }
            }
            loss += weight * token_loss;
            g.push((weight * grad) as f32);
        }
        grads.push(g);
    }
    if tokens > 0 {
        stats.clip_fraction /= tokens as f64;
        stats.mean_ratio /= tokens as f64;
    }
    if off_policy_tokens > 0 {
        stats.mean_is_weight /= off_policy_tokens as f64;
        stats.truncated_fraction /= off_policy_tokens as f64;
    }
    (LossOutput { loss, grads }, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from Python's `statistics.stdev` over the episodes' mean rewards.
    #[test]
    fn episodes_count_once_and_calls_keep_their_own_credit() {
        let options = GrpoOptions::default();
        let close = |a: &[f64], b: &[f64]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        // Two calls of episode A (reward 1) and one of B (0): A does not weigh double.
        let a = episode_advantages(&[1.0, 1.0, 0.0], &[Some("A"), Some("A"), Some("B")], &options).unwrap_or_default();
        assert!(
            close(
                &a,
                &[
                    0.707_006_795_326_683_4,
                    0.707_006_795_326_683_4,
                    -0.707_006_795_326_683_4
                ]
            ),
            "{a:?}"
        );
        // A call credited less than its episode gets less.
        let a = episode_advantages(&[1.0, 0.5, 0.0], &[Some("A"), Some("A"), Some("B")], &options).unwrap_or_default();
        assert!(
            close(
                &a,
                &[
                    1.178_289_121_650_081_5,
                    0.235_657_824_330_016_28,
                    -0.706_973_472_990_048_9
                ]
            ),
            "{a:?}"
        );
        // Without episodes: the plain group advantage.
        assert_eq!(
            episode_advantages(&[1.0, 0.0], &[None, None], &options),
            group_advantages(&[1.0, 0.0], &options)
        );
        assert_eq!(episode_advantages(&[1.0, 1.0], &[Some("A"), Some("B")], &options), None);
    }
}
