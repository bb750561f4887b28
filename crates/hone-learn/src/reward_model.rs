//! A reward model learned from users' signals (`[agents.NAME.reward.model]`):
//! what the reward spec would say of an answer no user saw, learned from
//! the answers users did see and react to.
//!
//! - **Features**: the agent's base model (its champion's checkpoint, no
//!   adapter) reads an episode's last call — its recorded prompt and
//!   completion token ids, as the embedded engine served them — and its
//!   final hidden states at the completion's tokens are averaged, beside
//!   the state at the last token ([`features`]).
//! - **Head**: L2-regularised logistic regression on standardised
//!   features, predicting whether the spec passed the episode, fitted by
//!   Newton's method ([`Head::fit`]); its expected reward is the pass
//!   probability weighing the mean rewards of passed and failed episodes.
//! - **Quality**, on episodes it was not trained on (a hash of the
//!   episode id holds a share out): AUC of the pass probability, Spearman's
//!   rank correlation of the expected reward with the spec's reward, and
//!   the expected calibration error ([`auc`], [`spearman`],
//!   [`calibration_error`]). Below the spec's `min_auc` nothing uses it.
//!
//! - **Standing in for users** ([`StandIn`]): a usable model, saved beside
//!   the data (`reward-models/AGENT.json`), predicts the users' part of the
//!   reward (the spec's signal terms) for an answer no user saw — a gate
//!   re-run, a rollout, a shadow sample — where the spec's own sources are
//!   silent; critics, the judge and penalties score it as always.
//!
//! Checked against an independent implementation in
//! `tests/reference/reward_model.py`.

use crate::error::LearnError;
use hone_config::RewardModelSpec;
use hone_store::{CycleStore, EpisodeFilter};
use hone_types::{EpisodeDetail, EpisodeId, RewardModelQuality};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The L2 penalty on the head's weights (standardised features).
pub const L2: f64 = 1.0;

/// Calibration bins of [`calibration_error`].
pub const CALIBRATION_BINS: usize = 10;

/// A logistic head on standardised features, and what its pass
/// probability is worth in the users' part of the spec's reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Head {
    pub mean: Vec<f64>,
    pub scale: Vec<f64>,
    pub weights: Vec<f64>,
    pub bias: f64,
    /// Mean users' part of the reward (the spec's signal terms) of the
    /// passed and of the failed training episodes.
    pub reward_if_passed: f64,
    pub reward_if_failed: f64,
}

impl Head {
    /// Fits the head to `x` (one row of features per episode) and `passed`,
    /// minimising the mean logistic loss plus `l2 / (2n)` times the squared
    /// weights (the bias is not penalised). `None` with fewer than two
    /// rows, rows of different lengths, or only one class.
    pub fn fit(x: &[Vec<f64>], passed: &[bool], rewards: &[f64], l2: f64) -> Option<Head> {
        let n = x.len();
        let d = x.first()?.len();
        if n < 2 || passed.len() != n || rewards.len() != n || x.iter().any(|r| r.len() != d) {
            return None;
        }
        let positives = passed.iter().filter(|p| **p).count();
        if positives == 0 || positives == n {
            return None;
        }
        let mean: Vec<f64> = (0..d).map(|j| x.iter().map(|r| r[j]).sum::<f64>() / n as f64).collect();
        let scale: Vec<f64> = (0..d)
            .map(|j| {
                let var = x.iter().map(|r| (r[j] - mean[j]).powi(2)).sum::<f64>() / n as f64;
                if var > 1e-12 {
                    var.sqrt()
                } else {
                    1.0
                }
            })
            .collect();
        // Standardised rows with a leading 1 for the bias.
        let z: Vec<Vec<f64>> = x
            .iter()
            .map(|r| {
                std::iter::once(1.0)
                    .chain((0..d).map(|j| (r[j] - mean[j]) / scale[j]))
                    .collect()
            })
            .collect();
        let y: Vec<f64> = passed.iter().map(|p| f64::from(u8::from(*p))).collect();
        let theta = newton(&z, &y, l2)?;
        let mean_of = |want: bool| {
            let v: Vec<f64> = rewards
                .iter()
                .zip(passed)
                .filter(|(_, p)| **p == want)
                .map(|(r, _)| *r)
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        Some(Head {
            mean,
            scale,
            bias: theta[0],
            weights: theta[1..].to_vec(),
            reward_if_passed: mean_of(true),
            reward_if_failed: mean_of(false),
        })
    }

    /// The probability that the spec passes an answer with these features.
    pub fn probability(&self, x: &[f64]) -> f64 {
        let logit = self.bias
            + x.iter()
                .zip(&self.mean)
                .zip(&self.scale)
                .zip(&self.weights)
                .map(|(((v, m), s), w)| w * (v - m) / s)
                .sum::<f64>();
        sigmoid(logit)
    }

    /// The expected users' part of the reward for an answer with these features.
    pub fn reward(&self, x: &[f64]) -> f64 {
        let p = self.probability(x);
        p * self.reward_if_passed + (1.0 - p) * self.reward_if_failed
    }
}

fn sigmoid(t: f64) -> f64 {
    if t >= 0.0 {
        1.0 / (1.0 + (-t).exp())
    } else {
        let e = t.exp();
        e / (1.0 + e)
    }
}

/// Newton's method on the L2-penalised mean logistic loss over rows `z`
/// (first column the bias, unpenalised); `None` if a step cannot be solved.
fn newton(z: &[Vec<f64>], y: &[f64], l2: f64) -> Option<Vec<f64>> {
    let (n, k) = (z.len() as f64, z[0].len());
    let mut theta = vec![0.0; k];
    for _ in 0..100 {
        let mut gradient = vec![0.0; k];
        let mut hessian = vec![vec![0.0; k]; k];
        for (row, target) in z.iter().zip(y) {
            let p = sigmoid(row.iter().zip(&theta).map(|(a, b)| a * b).sum());
            let w = p * (1.0 - p);
            for ((g, h), a) in gradient.iter_mut().zip(hessian.iter_mut()).zip(row) {
                *g += (p - target) * a / n;
                for (cell, b) in h.iter_mut().zip(row) {
                    *cell += w * a * b / n;
                }
            }
        }
        // The penalty, on every weight but the bias.
        for (i, (g, h)) in gradient.iter_mut().zip(hessian.iter_mut()).enumerate().skip(1) {
            *g += l2 / n * theta[i];
            h[i] += l2 / n;
        }
        let step = cholesky_solve(&hessian, &gradient)?;
        let mut largest: f64 = 0.0;
        for (t, s) in theta.iter_mut().zip(&step) {
            *t -= s;
            largest = largest.max(s.abs());
        }
        if largest < 1e-10 {
            break;
        }
    }
    Some(theta)
}

/// Solves `a x = b` for a symmetric positive definite `a`.
fn cholesky_solve(a: &[Vec<f64>], b: &[f64]) -> Option<Vec<f64>> {
    let k = a.len();
    let mut l = vec![vec![0.0; k]; k];
    for i in 0..k {
        for j in 0..=i {
            let sum: f64 = (0..j).map(|m| l[i][m] * l[j][m]).sum();
            if i == j {
                let d = a[i][i] - sum;
                if d <= 0.0 {
                    // Separable data with no penalty on the bias: a tiny
                    // ridge keeps the step finite.
                    l[i][i] = (d.max(0.0) + 1e-12).sqrt();
                } else {
                    l[i][i] = d.sqrt();
                }
            } else {
                l[i][j] = (a[i][j] - sum) / l[j][j];
            }
        }
    }
    let mut forward = vec![0.0; k];
    for i in 0..k {
        forward[i] = (b[i] - (0..i).map(|m| l[i][m] * forward[m]).sum::<f64>()) / l[i][i];
    }
    let mut x = vec![0.0; k];
    for i in (0..k).rev() {
        x[i] = (forward[i] - (i + 1..k).map(|m| l[m][i] * x[m]).sum::<f64>()) / l[i][i];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Ranks from 1, ties given their average rank.
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|a, b| values[*a].total_cmp(&values[*b]));
    let mut out = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for k in i..=j {
            out[order[k]] = rank;
        }
        i = j + 1;
    }
    out
}

/// The area under the ROC curve of `scores` for `positives`: the chance a
/// random positive scores above a random negative, ties counting half
/// (Mann–Whitney); `None` without both classes.
pub fn auc(scores: &[f64], positives: &[bool]) -> Option<f64> {
    let p = positives.iter().filter(|x| **x).count();
    let q = positives.len() - p;
    if p == 0 || q == 0 || scores.len() != positives.len() {
        return None;
    }
    let r = ranks(scores);
    let sum: f64 = r.iter().zip(positives).filter(|(_, x)| **x).map(|(r, _)| r).sum();
    Some((sum - (p * (p + 1)) as f64 / 2.0) / (p * q) as f64)
}

/// Spearman's rank correlation (Pearson's on average ranks); `None` below
/// two values or when either side is constant.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

/// Expected calibration error of probabilities `p` for `outcomes` over
/// `bins` equal-width bins (a probability of 1 in the last): the mean over
/// answers of |mean probability − pass rate| of their bin.
pub fn calibration_error(p: &[f64], outcomes: &[bool], bins: usize) -> Option<f64> {
    if p.is_empty() || p.len() != outcomes.len() || bins == 0 {
        return None;
    }
    let mut sums = vec![(0usize, 0.0, 0.0); bins];
    for (prob, hit) in p.iter().zip(outcomes) {
        let bin = ((prob * bins as f64) as usize).min(bins - 1);
        sums[bin].0 += 1;
        sums[bin].1 += prob;
        sums[bin].2 += f64::from(u8::from(*hit));
    }
    let n = p.len() as f64;
    Some(
        sums.iter()
            .filter(|(count, _, _)| *count > 0)
            .map(|(count, prob, hits)| (*count as f64 / n) * (prob / *count as f64 - hits / *count as f64).abs())
            .sum(),
    )
}

/// Whether `id` is held out: a hash of the episode id, so an episode is
/// on one side only, whichever cycle looks.
pub fn held_out(id: &EpisodeId, share: f64) -> bool {
    let digest = Sha256::digest(id.as_str().as_bytes());
    let v = u64::from_be_bytes(digest[..8].try_into().unwrap_or_default());
    (v as f64 / u64::MAX as f64) < share
}

/// The model's reading of an episode: mean final hidden state over its
/// last call's completion tokens, then the state at its last token; `None`
/// when that call carries no token ids, or ids beyond the vocabulary.
pub fn features(
    model: &hone_engine::Model,
    episode: &EpisodeDetail,
) -> Result<Option<Vec<f64>>, hone_engine::EngineError> {
    let Some(tokens) = episode.calls.iter().rev().find_map(|c| c.sampled_tokens()) else {
        return Ok(None);
    };
    let vocab = model.config.vocab_size as u32;
    let (prompt, completion) = (&tokens.prompt, &tokens.completion);
    if completion.is_empty() || prompt.iter().chain(completion).any(|t| *t >= vocab) {
        return Ok(None);
    }
    let mut context = prompt.clone();
    context.extend_from_slice(completion);
    let input = candle_core::Tensor::new(context.as_slice(), model.device())?.unsqueeze(0)?;
    let hidden = model.hidden(&input, &mut hone_engine::KvCache::new(), None)?;
    let rows = hidden
        .squeeze(0)?
        .narrow(0, prompt.len(), completion.len())?
        .to_dtype(candle_core::DType::F32)?
        .to_vec2::<f32>()?;
    let width = rows.first().map_or(0, Vec::len);
    let mut out = vec![0.0; 2 * width];
    for row in &rows {
        for (o, v) in out.iter_mut().zip(row) {
            *o += f64::from(*v) / rows.len() as f64;
        }
    }
    if let Some(last) = rows.last() {
        for (o, v) in out[width..].iter_mut().zip(last) {
            *o = f64::from(*v);
        }
    }
    Ok(Some(out))
}

/// The users' part of a reward: its signal terms, weighted.
pub fn users_part(reward: &hone_types::RewardRecord) -> f64 {
    reward
        .components
        .iter()
        .filter(|c| c.kind == hone_types::ComponentKind::Signal)
        .map(|c| c.weight * c.value)
        .sum()
}

/// One episode users reacted to, read for the reward model.
struct Example {
    id: EpisodeId,
    x: Vec<f64>,
    passed: bool,
    reward: f64,
}

/// What training found, beside the quality it stores.
pub struct Trained {
    /// The model to save, when one was fitted.
    pub saved: Option<Saved>,
    pub quality: RewardModelQuality,
    /// What happened, for the cycle's log.
    pub line: String,
}

/// A trained model as saved: what it reads with, its head, how good it
/// was, and under which reward spec.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved {
    pub spec_version: String,
    pub checkpoint: std::path::PathBuf,
    pub head: Head,
    pub quality: RewardModelQuality,
}

/// Where an agent's latest reward model is saved under the data directory.
pub fn saved_path(data_dir: &std::path::Path, agent: &str) -> std::path::PathBuf {
    data_dir.join("reward-models").join(format!("{agent}.json"))
}

impl Saved {
    /// Writes it (to a temporary file renamed into place: a reader never
    /// sees half of it).
    pub fn save(&self, path: &std::path::Path) -> Result<(), LearnError> {
        let failed = |e: &dyn std::fmt::Display| LearnError::training(format!("cannot save the reward model: {e}"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| failed(&e))?;
        }
        let text = serde_json::to_vec_pretty(self).map_err(|e| failed(&e))?;
        let partial = path.with_extension("json.partial");
        std::fs::write(&partial, text).map_err(|e| failed(&e))?;
        std::fs::rename(&partial, path).map_err(|e| failed(&e))
    }
}

/// A usable reward model, loaded: it predicts the users' part of the
/// reward for an answer no user saw.
pub struct StandIn {
    pub head: Head,
    pub quality: RewardModelQuality,
    model: hone_engine::Model,
    /// Predictions made, by episode: a recorded episode's tokens never change.
    predicted: std::sync::Mutex<std::collections::HashMap<EpisodeId, Option<f64>>>,
}

impl std::fmt::Debug for StandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandIn")
            .field("quality", &self.quality)
            .finish_non_exhaustive()
    }
}

impl StandIn {
    /// The agent's saved model when it is usable and was trained under
    /// `spec_version`; `None` otherwise (no model yet, below `min_auc`, or
    /// another spec's), or when it cannot be read.
    pub fn load(path: &std::path::Path, spec_version: &str) -> Option<StandIn> {
        let saved: Saved = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        if !saved.quality.usable || saved.spec_version != spec_version {
            return None;
        }
        let model = hone_engine::Model::load(&saved.checkpoint, candle_core::DType::F32, &candle_core::Device::Cpu)
            .map_err(|e| tracing::warn!(path = %path.display(), error = %e, "the reward model's base model cannot be loaded"))
            .ok()?;
        Some(StandIn {
            head: saved.head,
            quality: saved.quality,
            model,
            predicted: Default::default(),
        })
    }

    /// The expected users' part of the reward for `episode`'s answer;
    /// `None` when its last call carries no token ids the model can read.
    pub fn predict(&self, episode: &EpisodeDetail) -> Option<f64> {
        let id = &episode.summary.id;
        let cache = || self.predicted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = cache().get(id) {
            return *known;
        }
        let predicted = match features(&self.model, episode) {
            Ok(x) => x.map(|x| self.head.reward(&x)),
            Err(e) => {
                tracing::warn!(episode = %id, error = %e, "the reward model cannot read an episode");
                None
            }
        };
        cache().insert(id.clone(), predicted);
        predicted
    }
}

/// Trains the reward model on the agent's most recent production
/// episodes that users reacted to (rewarded under `spec_version`), read by
/// the base model in `checkpoint`, and measures it on the held-out share.
pub async fn train(
    store: &dyn CycleStore,
    agent: &str,
    spec_version: &str,
    spec: &RewardModelSpec,
    checkpoint: std::path::PathBuf,
) -> Result<Trained, LearnError> {
    let filter = EpisodeFilter {
        agent: agent.to_owned(),
        spec_version: Some(spec_version.to_owned()),
        ..EpisodeFilter::default()
    };
    let facts = store.last_episodes(&filter, spec.window, &|f| {
        f.reward.is_some() && !f.reward_stale && !f.id.is_evaluation()
    })?;
    let mut episodes = Vec::new();
    for f in facts {
        let (Some(episode), Some(reward)) = (store.episode(&f.id)?, store.reward(&f.id, spec_version)?) else {
            continue;
        };
        if reward.signals_seen > 0 {
            episodes.push((episode, reward.passed, users_part(&reward)));
        }
    }
    let reacted = episodes.len();
    let failed = |e: &dyn std::fmt::Display| LearnError::training(e.to_string());
    let reads = checkpoint.clone();
    let examples = tokio::task::spawn_blocking(move || -> Result<Vec<Example>, LearnError> {
        let device = candle_core::Device::Cpu;
        let model = hone_engine::Model::load(&reads, candle_core::DType::F32, &device).map_err(|e| failed(&e))?;
        let mut out = Vec::new();
        for (episode, passed, reward) in episodes {
            if let Some(x) = features(&model, &episode).map_err(|e| failed(&e))? {
                out.push(Example {
                    id: episode.summary.id.clone(),
                    x,
                    passed,
                    reward,
                });
            }
        }
        Ok(out)
    })
    .await
    .map_err(|e| failed(&e))??;
    let (test, learn): (Vec<&Example>, Vec<&Example>) = examples.iter().partition(|e| held_out(&e.id, spec.held_out));
    let mut quality = RewardModelQuality {
        reacted,
        trained_on: learn.len(),
        held_out: test.len(),
        auc: None,
        rank_correlation: None,
        calibration_error: None,
        min_auc: spec.min_auc,
        usable: false,
    };
    if examples.len() < spec.min_episodes {
        let line = format!(
            "reward model: {} episodes users reacted to with token ids, {} needed; not trained",
            examples.len(),
            spec.min_episodes
        );
        return Ok(Trained {
            saved: None,
            quality,
            line,
        });
    }
    let column = |side: &[&Example]| -> (Vec<Vec<f64>>, Vec<bool>, Vec<f64>) {
        (
            side.iter().map(|e| e.x.clone()).collect(),
            side.iter().map(|e| e.passed).collect(),
            side.iter().map(|e| e.reward).collect(),
        )
    };
    let (x, passed, rewards) = column(&learn);
    let Some(head) = Head::fit(&x, &passed, &rewards, L2) else {
        let line = format!(
            "reward model: the {} training episodes are all {}; nothing to tell apart, not trained",
            learn.len(),
            if passed.iter().all(|p| *p) { "passed" } else { "failed" }
        );
        return Ok(Trained {
            saved: None,
            quality,
            line,
        });
    };
    let (tx, tpassed, trewards) = column(&test);
    let probabilities: Vec<f64> = tx.iter().map(|x| head.probability(x)).collect();
    let predicted: Vec<f64> = tx.iter().map(|x| head.reward(x)).collect();
    quality.auc = auc(&probabilities, &tpassed);
    quality.rank_correlation = spearman(&predicted, &trewards);
    quality.calibration_error = calibration_error(&probabilities, &tpassed, CALIBRATION_BINS);
    quality.usable = quality.auc.is_some_and(|a| a >= spec.min_auc);
    let shown = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
    let line = format!(
        "reward model: trained on {} episodes users reacted to, measured on {} held out: AUC {}, rank correlation {}, calibration error {}; {}",
        quality.trained_on,
        quality.held_out,
        shown(quality.auc),
        shown(quality.rank_correlation),
        shown(quality.calibration_error),
        if quality.usable {
            format!("at or above min_auc {}: usable", spec.min_auc)
        } else {
            format!("below min_auc {}: nothing uses it", spec.min_auc)
        }
    );
    Ok(Trained {
        saved: Some(Saved {
            spec_version: spec_version.to_owned(),
            checkpoint,
            head,
            quality,
        }),
        quality,
        line,
    })
}
