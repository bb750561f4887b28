//! A reward model learned from users' signals (`[agents.NAME.reward.model]`):
//! what the reward spec would say of an answer no user saw, learned from
//! the answers users did see and react to.
//!
//! - **Reading** an episode, by one of two readers: on the embedded
//!   engine, the agent's base model reads the recorded token ids of its
//!   last call ([`hidden`]); for a hosted agent, the spec's LLM judge
//!   scores it under the rubric that best tells users' passes from their
//!   failures ([`judged`]).
//! - **Head**: a logistic head on what was read predicts whether the spec
//!   passes the episode; its expected reward is the pass probability
//!   weighing the mean rewards of passed and failed episodes ([`Head`]).
//! - **Quality**, on episodes it was not trained on (a hash of the
//!   episode id holds a share out): AUC, rank correlation and calibration
//!   error. Below the spec's `min_auc` nothing uses it.
//! - **Standing in for users** ([`StandIn`]): a usable model, saved beside
//!   the data (`reward-models/AGENT.json`), predicts the users' part of the
//!   reward (the spec's signal terms) for an answer no user saw — a gate
//!   re-run, a rollout, a shadow sample — where the spec's own sources are
//!   silent; critics, the judge and penalties score it as always.

mod head;
pub mod hidden;
pub mod judged;

pub use head::{auc, calibration_error, spearman, Head, CALIBRATION_BINS, L2};

use crate::error::LearnError;
use crate::scoring::judge::Judge;
use hone_config::RewardModelSpec;
use hone_store::{CycleStore, EpisodeFilter};
use hone_types::{EpisodeDetail, EpisodeId, RewardModelQuality, RewardModelReads};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Whether `id` is held out: a hash of the episode id, so an episode is
/// on one side only, whichever cycle looks.
pub fn held_out(id: &EpisodeId, share: f64) -> bool {
    let digest = Sha256::digest(id.as_str().as_bytes());
    let v = u64::from_be_bytes(digest[..8].try_into().unwrap_or_default());
    (v as f64 / u64::MAX as f64) < share
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

/// One episode users reacted to, as read for the reward model.
pub struct Example {
    pub id: EpisodeId,
    pub x: Vec<f64>,
    pub passed: bool,
    pub reward: f64,
}

/// What reads episodes for the reward model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reader {
    /// The base model in this checkpoint reads the recorded token ids.
    HiddenStates { checkpoint: PathBuf },
    /// The spec's judge scores the episode under this rubric.
    Judge { rubric: String },
}

/// What training found, beside the quality it stores.
pub struct Trained {
    pub saved: Saved,
    pub quality: RewardModelQuality,
    /// What happened, for the cycle's log.
    pub line: String,
}

/// A reward model as saved: how it reads, its head when one was fitted,
/// how good it was, under which reward spec, and (for the judge) every
/// score it paid for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved {
    pub spec_version: String,
    pub reader: Reader,
    pub head: Option<Head>,
    pub quality: RewardModelQuality,
    #[serde(default, skip_serializing_if = "judged::Judged::is_empty")]
    pub judged: judged::Judged,
}

/// Where an agent's latest reward model is saved under the data directory.
pub fn saved_path(data_dir: &Path, agent: &str) -> PathBuf {
    data_dir.join("reward-models").join(format!("{agent}.json"))
}

impl Saved {
    /// The model saved at `path`, when there is one that can be read.
    pub fn read(path: &Path) -> Option<Saved> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Writes it (to a temporary file renamed into place: a reader never
    /// sees half of it).
    pub fn save(&self, path: &Path) -> Result<(), LearnError> {
        let saving = format!("cannot save the reward model to {}", path.display());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(LearnError::training(saving.clone()))?;
        }
        let text = serde_json::to_vec_pretty(self).map_err(LearnError::training(saving.clone()))?;
        let partial = path.with_extension("json.partial");
        std::fs::write(&partial, text).map_err(LearnError::training(saving.clone()))?;
        std::fs::rename(&partial, path).map_err(LearnError::training(saving.clone()))
    }
}

/// How a loaded model reads an episode.
enum Reading {
    HiddenStates(hone_engine::Model),
    Judge(Judge),
}

/// A usable reward model, loaded: it predicts the users' part of the
/// reward for an answer no user saw.
pub struct StandIn {
    pub head: Head,
    pub quality: RewardModelQuality,
    reading: Reading,
    /// Predictions made, by episode: a recorded episode's answer never changes.
    predicted: Mutex<HashMap<EpisodeId, Option<f64>>>,
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
    /// `spec_version`; `None` otherwise (no model yet, below `min_auc`,
    /// another spec's, a judge's without `judge` to ask), or when it
    /// cannot be read.
    pub fn load(path: &Path, spec_version: &str, judge: Option<&Judge>) -> Option<StandIn> {
        let saved = Saved::read(path)?;
        if !saved.quality.usable || saved.spec_version != spec_version {
            return None;
        }
        let reading = match &saved.reader {
            Reader::HiddenStates { checkpoint } => Reading::HiddenStates(
                hidden::load(checkpoint)
                    .map_err(|e| tracing::warn!(path = %path.display(), error = %e, "the reward model's base model cannot be loaded"))
                    .ok()?,
            ),
            Reader::Judge { rubric } => Reading::Judge(judged::with_rubric(judge?, rubric)),
        };
        Some(StandIn {
            head: saved.head?,
            quality: saved.quality,
            reading,
            predicted: Mutex::default(),
        })
    }

    /// The rubric it judges with, when the judge reads for it.
    pub fn rubric(&self) -> Option<&str> {
        match &self.reading {
            Reading::Judge(j) => Some(&j.spec.rubric),
            Reading::HiddenStates(_) => None,
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<EpisodeId, Option<f64>>> {
        self.predicted.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads what must be asked before [`StandIn::predict`] can answer:
    /// with the judge as reader, each episode not yet judged (its score
    /// taken from `known` where the spec's own judge already asked the
    /// same rubric). Nothing to do for the base model, which reads on demand.
    pub async fn prepare(&self, episodes: &[&EpisodeDetail], known: &(dyn Fn(&EpisodeId) -> Option<f64> + Sync)) {
        let Reading::Judge(judge) = &self.reading else {
            return;
        };
        let todo: Vec<&EpisodeDetail> = {
            let cache = self.cache();
            episodes
                .iter()
                .copied()
                .filter(|e| !cache.contains_key(&e.summary.id))
                .collect()
        };
        let mut read = Vec::with_capacity(todo.len());
        for chunk in todo.chunks(judged::CONCURRENCY) {
            read.extend(futures::future::join_all(chunk.iter().map(|e| self.judged(judge, e, known))).await);
        }
        self.cache().extend(read);
    }

    /// `episode` read by `judge` (or by `known`), as a prediction.
    async fn judged(
        &self,
        judge: &Judge,
        episode: &EpisodeDetail,
        known: &(dyn Fn(&EpisodeId) -> Option<f64> + Sync),
    ) -> (EpisodeId, Option<f64>) {
        let id = episode.summary.id.clone();
        let score = match known(&id) {
            Some(s) => Some(s),
            None => judge.absolute(episode).await.ok().map(|s| s.score),
        };
        (id, score.map(|s| self.head.reward(&[s])))
    }

    /// The expected users' part of the reward for `episode`'s answer;
    /// `None` when it cannot be read (no token ids the model can read; not
    /// judged, or the judge failed).
    pub fn predict(&self, episode: &EpisodeDetail) -> Option<f64> {
        let id = &episode.summary.id;
        if let Some(known) = self.cache().get(id) {
            return *known;
        }
        let Reading::HiddenStates(model) = &self.reading else {
            return None;
        };
        let predicted = match hidden::features(model, episode) {
            Ok(x) => x.map(|x| self.head.reward(&x)),
            Err(e) => {
                tracing::warn!(episode = %id, error = %e, "the reward model cannot read an episode");
                None
            }
        };
        self.cache().insert(id.clone(), predicted);
        predicted
    }
}

/// Who reads episodes when training: the base model in a checkpoint, or
/// the spec's judge.
pub enum Source<'a> {
    HiddenStates(PathBuf),
    Judge(&'a Judge),
}

/// Trains the reward model on the agent's most recent production
/// episodes that users reacted to (rewarded under `spec_version`), read by
/// `source`, and measures it on the held-out share. `previous` is the
/// model saved before (the judge's scores it paid for are kept).
pub async fn train(
    store: &dyn CycleStore,
    agent: &str,
    spec_version: &str,
    spec: &RewardModelSpec,
    source: Source<'_>,
    previous: Option<Saved>,
) -> Result<Trained, LearnError> {
    let filter = EpisodeFilter {
        agent: agent.to_owned(),
        spec_version: Some(spec_version.to_owned()),
        ..EpisodeFilter::default()
    };
    let facts = store.last_episodes(&filter, spec.window, &|f| {
        f.reward.is_some() && !f.reward_stale && !f.id.is_evaluation()
    })?;
    let mut reacted = Vec::new();
    for f in facts {
        let (Some(episode), Some(reward)) = (store.episode(&f.id)?, store.reward(&f.id, spec_version)?) else {
            continue;
        };
        if reward.signals_seen > 0 {
            reacted.push((episode, reward.passed, users_part(&reward)));
        }
    }
    let count = reacted.len();
    match source {
        Source::HiddenStates(checkpoint) => {
            let outcomes: Vec<(bool, f64)> = reacted.iter().map(|(_, p, r)| (*p, *r)).collect();
            let read = hidden::read_all(checkpoint.clone(), reacted.into_iter().map(|(e, _, _)| e).collect()).await?;
            let examples = read
                .into_iter()
                .zip(outcomes)
                .filter_map(|((episode, x), (passed, reward))| {
                    Some(Example {
                        id: episode.summary.id,
                        x: x?,
                        passed,
                        reward,
                    })
                })
                .collect();
            Ok(measure(
                spec,
                count,
                examples,
                Reader::HiddenStates { checkpoint },
                RewardModelReads::HiddenStates,
                spec_version,
                String::new(),
            ))
        }
        Source::Judge(judge) => {
            let mut kept = previous.map(|p| p.judged).unwrap_or_default();
            let scored = judged::score(&reacted, spec, judge, &mut kept).await;
            let (best, training_auc) = judged::choose(&scored.per_rubric, spec);
            let rubrics = judged::rubrics(spec, judge);
            let shown = |v: &Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
            let choice = if rubrics.len() > 1 {
                format!(
                    "rubric {} of {} chosen on the training side (AUC {}); ",
                    best + 1,
                    rubrics.len(),
                    training_auc.iter().map(shown).collect::<Vec<_>>().join(" / ")
                )
            } else {
                String::new()
            };
            let note = format!(
                "the judge scored {} episodes this cycle ({} failed); {choice}",
                scored.calls - scored.failed,
                scored.failed
            );
            let mut per_rubric = scored.per_rubric;
            let examples = std::mem::take(&mut per_rubric[best]);
            let mut trained = measure(
                spec,
                count,
                examples,
                Reader::Judge {
                    rubric: rubrics[best].clone(),
                },
                RewardModelReads::Judge {
                    rubric: best + 1,
                    of: rubrics.len(),
                },
                spec_version,
                note,
            );
            trained.saved.judged = kept;
            Ok(trained)
        }
    }
}

/// Fits the head on the training side of `examples` and measures it on the
/// held-out side; `note` opens the line (what reading cost, what it chose).
fn measure(
    spec: &RewardModelSpec,
    reacted: usize,
    examples: Vec<Example>,
    reader: Reader,
    reads: RewardModelReads,
    spec_version: &str,
    note: String,
) -> Trained {
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
        reads,
    };
    let saved = |head: Option<Head>, quality: RewardModelQuality| Saved {
        spec_version: spec_version.to_owned(),
        reader: reader.clone(),
        head,
        quality,
        judged: judged::Judged::new(),
    };
    let read = match reads {
        RewardModelReads::HiddenStates => "with token ids",
        RewardModelReads::Judge { .. } => "judged",
    };
    if examples.len() < spec.min_episodes {
        let line = format!(
            "reward model: {note}{} episodes users reacted to {read}, {} needed; not trained",
            examples.len(),
            spec.min_episodes
        );
        return Trained {
            saved: saved(None, quality),
            quality,
            line,
        };
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
            "reward model: {note}the {} training episodes are all {}; nothing to tell apart, not trained",
            learn.len(),
            if passed.iter().all(|p| *p) { "passed" } else { "failed" }
        );
        return Trained {
            saved: saved(None, quality),
            quality,
            line,
        };
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
        "reward model: {note}trained on {} episodes users reacted to, measured on {} held out: AUC {}, rank correlation {}, calibration error {}; {}",
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
    Trained {
        saved: saved(Some(head), quality),
        quality,
        line,
    }
}
