//! The LLM judge as the reward model, for agents on hosted models (no
//! token ids to read): each rubric the spec offers (`rubrics`, else the
//! judge's own) scores the episodes users reacted to; the rubric whose
//! scores best tell passed from failed on the training side is chosen, and
//! the logistic head on its score calibrates it to the users' reward. Its
//! quality is then measured on the held-out side, as any reward model's.
//!
//! Judge calls cost money: each cycle makes at most `judge_calls` of them,
//! and every score is kept with the saved model (by rubric and episode —
//! a recorded answer never changes), so an episode is judged once per
//! rubric across cycles.

use super::{held_out, Example};
use crate::scoring::judge::Judge;
use hone_config::{JudgeMode, JudgeSpec, RewardModelSpec};
use hone_types::EpisodeDetail;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Judge calls made at once.
pub(super) const CONCURRENCY: usize = 4;

/// Scores kept between cycles: by [`rubric_key`], then by episode id.
pub type Judged = BTreeMap<String, BTreeMap<String, f64>>;

/// What names a rubric's scores: the judge's provider and model with the
/// rubric's text (another model, or other words, score anew).
pub fn rubric_key(judge: &JudgeSpec, rubric: &str) -> String {
    let digest = Sha256::digest(format!("{}\n{}\n{rubric}", judge.provider, judge.model).as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// `base` asking `rubric`, one episode at a time.
pub fn with_rubric(base: &Judge, rubric: &str) -> Judge {
    Judge {
        spec: JudgeSpec {
            mode: JudgeMode::Absolute,
            rubric: rubric.to_owned(),
            ..base.spec.clone()
        },
        agent: base.agent.clone(),
        client: base.client.clone(),
    }
}

/// The rubrics to choose from.
pub fn rubrics(spec: &RewardModelSpec, base: &Judge) -> Vec<String> {
    if spec.rubrics.is_empty() {
        vec![base.spec.rubric.clone()]
    } else {
        spec.rubrics.clone()
    }
}

/// What judging found: per rubric, the episodes it scored (as examples
/// with the score as their one feature), and the calls made.
pub struct Scored {
    pub per_rubric: Vec<Vec<Example>>,
    pub calls: usize,
    pub failed: usize,
}

/// Scores `reacted` (episode, passed, users' part) with every rubric,
/// taking earlier scores from `judged` and adding the new ones to it, at
/// most `spec.judge_calls` new calls (episodes in the order given, each
/// across every rubric before the next episode).
pub async fn score(
    reacted: &[(EpisodeDetail, bool, f64)],
    spec: &RewardModelSpec,
    base: &Judge,
    judged: &mut Judged,
) -> Scored {
    let rubrics = rubrics(spec, base);
    let keys: Vec<String> = rubrics.iter().map(|r| rubric_key(&base.spec, r)).collect();
    let judges: Vec<Judge> = rubrics.iter().map(|r| with_rubric(base, r)).collect();
    let mut asks = Vec::new();
    for (i, (episode, _, _)) in reacted.iter().enumerate() {
        for (r, key) in keys.iter().enumerate() {
            let known = judged
                .get(key)
                .is_some_and(|m| m.contains_key(episode.summary.id.as_str()));
            if !known && asks.len() < spec.judge_calls {
                asks.push((i, r));
            }
        }
    }
    let calls = asks.len();
    let mut answers = Vec::with_capacity(calls);
    for chunk in asks.chunks(CONCURRENCY) {
        let asked = chunk.iter().map(|(i, r)| ask(&judges[*r], &reacted[*i].0, *i, *r));
        answers.extend(futures::future::join_all(asked).await);
    }
    let mut failed = 0;
    for (i, r, score) in answers {
        match score {
            Some(s) => {
                judged
                    .entry(keys[r].clone())
                    .or_default()
                    .insert(reacted[i].0.summary.id.to_string(), s);
            }
            None => failed += 1,
        }
    }
    let per_rubric = keys
        .iter()
        .map(|key| {
            let scores = judged.get(key);
            reacted
                .iter()
                .filter_map(|(episode, passed, reward)| {
                    let s = scores?.get(episode.summary.id.as_str())?;
                    Some(Example {
                        id: episode.summary.id.clone(),
                        x: vec![*s],
                        passed: *passed,
                        reward: *reward,
                    })
                })
                .collect()
        })
        .collect();
    Scored {
        per_rubric,
        calls,
        failed,
    }
}

/// `judge`'s score of `episode`, tagged with where it belongs.
async fn ask(judge: &Judge, episode: &EpisodeDetail, i: usize, r: usize) -> (usize, usize, Option<f64>) {
    (i, r, judge.absolute(episode).await.ok().map(|s| s.score))
}

/// The rubric whose calibrated score ranks the training side's passed
/// episodes above its failed ones best (AUC on the training side only:
/// the held-out side judges the choice), with that AUC per rubric.
pub fn choose(per_rubric: &[Vec<Example>], spec: &RewardModelSpec) -> (usize, Vec<Option<f64>>) {
    let training_auc: Vec<Option<f64>> = per_rubric
        .iter()
        .map(|examples| {
            let learn: Vec<&Example> = examples.iter().filter(|e| !held_out(&e.id, spec.held_out)).collect();
            let x: Vec<Vec<f64>> = learn.iter().map(|e| e.x.clone()).collect();
            let passed: Vec<bool> = learn.iter().map(|e| e.passed).collect();
            let rewards: Vec<f64> = learn.iter().map(|e| e.reward).collect();
            let head = super::Head::fit(&x, &passed, &rewards, super::L2)?;
            let p: Vec<f64> = x.iter().map(|x| head.probability(x)).collect();
            super::auc(&p, &passed)
        })
        .collect();
    let best = training_auc
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.unwrap_or(0.0).total_cmp(&b.1.unwrap_or(0.0)).then(b.0.cmp(&a.0)))
        .map_or(0, |(i, _)| i);
    (best, training_auc)
}
