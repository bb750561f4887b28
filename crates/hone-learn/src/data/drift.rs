//! Drift: has live traffic moved away from what the agent was learning on?
//!
//! The measure is the Jensen–Shannon divergence (bits, in `[0, 1]`) between
//! the word distributions of the tasks (the first user message, lower-cased,
//! every number one `#` token) in the cycle's window and in the episodes
//! before it; its significance is a permutation test over episodes (the
//! window's and the earlier episodes' labels shuffled). Why this measure:
//! it needs no labels, no embedding model and no task taxonomy, so it works
//! for any agent hone fronts; a new kind of task brings new words and
//! shifts the mix of old ones, which is exactly what it measures; the
//! divergence is bounded, so one minimum effect size fits every agent; and
//! a permutation test makes no assumption about how words co-occur within
//! an episode (a chi-square test over words would, wrongly, treat them as
//! independent draws). The same measure over failed episodes only finds a
//! new failure cluster: failures about something they were not about
//! before.
//!
//! The cycle's datasets step runs it ([`check`]); a drift is raised as an
//! alert (`hone alerts`, the history, the webhook) and that cycle's
//! datasets sample the new window only.

use crate::data::dataset::normalise;
use crate::episode::first_request;
use hone_config::DriftSpec;
use hone_store::{EpisodeFilter, LearnStore, StoreError};
use hone_types::openai::task_of;
use hone_types::EpisodeId;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeMap;

/// Which traffic a drift was measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Every episode: the task mix.
    Tasks,
    /// Failed episodes only: a new failure cluster.
    Failures,
}

impl Mix {
    /// The alert's metric name.
    pub fn metric(self) -> &'static str {
        match self {
            Mix::Tasks => "drift_task_mix",
            Mix::Failures => "drift_failure_mix",
        }
    }
}

/// One drift measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    pub mix: Mix,
    /// Jensen–Shannon divergence of the two word distributions, in bits.
    pub divergence: f64,
    pub p_value: f64,
    pub recent: usize,
    pub earlier: usize,
    /// The words whose share grew most in the window, largest first.
    pub rising: Vec<String>,
    /// Window episodes holding the most rising words (evidence to read).
    pub examples: Vec<EpisodeId>,
}

/// Random relabellings of the permutation test: p-values down to 1/401.
pub const PERMUTATIONS: usize = 400;

/// An episode's task as words, numbers as `#`.
pub fn task_words(text: &str) -> Vec<String> {
    normalise(text)
        .into_iter()
        .map(|w| {
            if w.chars().any(|c| c.is_ascii_digit()) {
                "#".to_owned()
            } else {
                w
            }
        })
        .collect()
}

/// Jensen–Shannon divergence (base 2) of two count vectors over the same
/// keys (missing keys count 0); 0 when either is empty.
pub fn jensen_shannon(p: &BTreeMap<String, f64>, q: &BTreeMap<String, f64>) -> f64 {
    let (sp, sq): (f64, f64) = (p.values().sum(), q.values().sum());
    if sp <= 0.0 || sq <= 0.0 {
        return 0.0;
    }
    let kl_half = |x: f64, m: f64| if x > 0.0 { x * (x / m).log2() } else { 0.0 };
    let mut js = 0.0;
    for key in p.keys().chain(q.keys().filter(|k| !p.contains_key(*k))) {
        let a = p.get(key).copied().unwrap_or(0.0) / sp;
        let b = q.get(key).copied().unwrap_or(0.0) / sq;
        let m = (a + b) / 2.0;
        js += 0.5 * kl_half(a, m) + 0.5 * kl_half(b, m);
    }
    js.max(0.0)
}

fn counts<'a>(episodes: impl Iterator<Item = &'a Vec<String>>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for words in episodes {
        for w in words {
            *out.entry(w.clone()).or_default() += 1.0;
        }
    }
    out
}

/// The divergence between `recent` and `earlier` (one word list per
/// episode) and its permutation p-value: the share of `permutations`
/// random relabellings (seeded) whose divergence is at least as large,
/// counting the observed one.
pub fn divergence_test(recent: &[Vec<String>], earlier: &[Vec<String>], permutations: usize, seed: u64) -> (f64, f64) {
    let observed = jensen_shannon(&counts(recent.iter()), &counts(earlier.iter()));
    let mut pooled: Vec<&Vec<String>> = recent.iter().chain(earlier).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut as_large = 1usize;
    for _ in 0..permutations {
        pooled.shuffle(&mut rng);
        let (a, b) = pooled.split_at(recent.len());
        if jensen_shannon(&counts(a.iter().copied()), &counts(b.iter().copied())) >= observed - 1e-12 {
            as_large += 1;
        }
    }
    (observed, as_large as f64 / (permutations + 1) as f64)
}

/// Measures both mixes of `agent`'s traffic in `[since, until)` against
/// up to `spec.reference` episodes before `since`; returns the drifts
/// beyond `spec` (none when either group is too small).
pub fn check(
    store: &dyn LearnStore,
    agent: &str,
    spec_version: &str,
    since: i64,
    until: Option<i64>,
    spec: &DriftSpec,
    seed: u64,
) -> Result<Vec<Drift>, StoreError> {
    let scan = |since: Option<i64>, until: Option<i64>, keep: usize| -> Result<Vec<(EpisodeId, bool)>, StoreError> {
        let filter = EpisodeFilter {
            agent: agent.to_owned(),
            since,
            until,
            spec_version: Some(spec_version.to_owned()),
            ..EpisodeFilter::default()
        };
        Ok(store
            .last_episodes(&filter, keep, &|_| true)?
            .into_iter()
            .map(|f| {
                let failed = f.any_error || f.reward.is_some_and(|(_, passed)| !passed);
                (f.id, failed)
            })
            .collect())
    };
    let recent = scan(Some(since), until, usize::MAX)?;
    let earlier = scan(None, Some(since), spec.reference)?;
    let words = |episodes: &[(EpisodeId, bool)]| -> Result<Vec<(EpisodeId, bool, Vec<String>)>, StoreError> {
        let mut out = Vec::with_capacity(episodes.len());
        for (id, failed) in episodes {
            if let Some(e) = store.episode(id)? {
                let text = first_request(&e).map(|r| task_of(&r.messages)).unwrap_or_default();
                out.push((id.clone(), *failed, task_words(&text)));
            }
        }
        Ok(out)
    };
    let (recent, earlier) = (words(&recent)?, words(&earlier)?);
    let mut drifts = Vec::new();
    for mix in [Mix::Tasks, Mix::Failures] {
        let pick = |group: &[(EpisodeId, bool, Vec<String>)]| -> Vec<(EpisodeId, Vec<String>)> {
            group
                .iter()
                .filter(|(_, failed, _)| mix == Mix::Tasks || *failed)
                .map(|(id, _, w)| (id.clone(), w.clone()))
                .collect()
        };
        let (r, e) = (pick(&recent), pick(&earlier));
        if r.len() < spec.min_episodes || e.len() < spec.min_episodes {
            continue;
        }
        let rw: Vec<Vec<String>> = r.iter().map(|(_, w)| w.clone()).collect();
        let ew: Vec<Vec<String>> = e.iter().map(|(_, w)| w.clone()).collect();
        let (divergence, p_value) = divergence_test(&rw, &ew, PERMUTATIONS, seed);
        if divergence < spec.min_divergence || p_value > spec.alpha {
            continue;
        }
        let rising = rising_words(&counts(rw.iter()), &counts(ew.iter()), 5);
        let mut examples: Vec<(usize, EpisodeId)> = r
            .iter()
            .map(|(id, w)| (w.iter().filter(|x| rising.contains(x)).count(), id.clone()))
            .collect();
        examples.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        drifts.push(Drift {
            mix,
            divergence,
            p_value,
            recent: r.len(),
            earlier: e.len(),
            rising,
            examples: examples.into_iter().take(5).map(|(_, id)| id).collect(),
        });
    }
    Ok(drifts)
}

/// The `n` words whose share grew most from `before` to `now`.
fn rising_words(now: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>, n: usize) -> Vec<String> {
    let (sn, sb): (f64, f64) = (
        now.values().sum::<f64>().max(1.0),
        before.values().sum::<f64>().max(1.0),
    );
    let mut growth: Vec<(f64, &String)> = now
        .iter()
        .map(|(w, c)| (c / sn - before.get(w).copied().unwrap_or(0.0) / sb, w))
        .filter(|(g, _)| *g > 0.0)
        .collect();
    growth.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    growth.into_iter().take(n).map(|(_, w)| w.clone()).collect()
}
