//! The reward model's numerical part: an L2-regularised logistic head on
//! standardised features, fitted by Newton's method, predicting whether
//! the spec passes an answer; and its quality measures — AUC, Spearman's
//! rank correlation, expected calibration error. Checked against an
//! independent implementation in `tests/reference/reward_model.py`.

use serde::{Deserialize, Serialize};

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
