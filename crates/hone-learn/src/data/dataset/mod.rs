//! Datasets built from traffic: `regression` (passed under the champion),
//! `errors` (failed or flagged), `traffic` (a stratified sample of the live
//! distribution) and `cost` (the most expensive), with filters,
//! deterministic sampling by seed and near-duplicate removal of inputs.
//! Each build writes a new immutable snapshot `name@N`.

mod dedup;
mod export;
mod import;
mod instance;
mod select;
mod split;

pub use dedup::{fingerprint, normalise, Deduper, Fingerprint};
pub use export::{export, rows as export_rows, ExportFormat};
pub use import::read_instances;
pub use instance::instance_from_episode;
pub use select::{sample_key, Strata};
pub use split::{split, with, without, without_ids};

use hone_store::{EpisodeFacts, EpisodeFilter, LearnStore, StoreError};
use hone_types::{DatasetInfo, EpisodeId, VersionId};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builder {
    Regression,
    Errors,
    Traffic,
    Cost,
}

impl Builder {
    pub const NAMES: [&'static str; 4] = ["regression", "errors", "traffic", "cost"];

    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "regression" => Self::Regression,
            "errors" => Self::Errors,
            "traffic" => Self::Traffic,
            "cost" => Self::Cost,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub builder: Builder,
    /// The snapshot's name (default: the builder's).
    pub name: String,
    pub filter: EpisodeFilter,
    pub size: usize,
    pub seed: u64,
    /// Drop inputs that are near-duplicates of one already taken.
    pub dedup: bool,
    /// `regression`: the champion whose passing episodes are taken.
    pub champion: Option<VersionId>,
    /// The spec's reference signal (labels carried into instances).
    pub reference_signal: Option<String>,
}

/// What a build saw and kept, stored in the snapshot's params.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BuildStats {
    pub scanned: u64,
    pub eligible: u64,
    pub unrewarded: u64,
    pub duplicates: u64,
    pub kept: u64,
}

/// The last part of a traffic stratum of failed episodes.
const FAILED: &str = "failed";

fn class(f: &EpisodeFacts) -> &'static str {
    if f.any_error {
        "error"
    } else if f.any_flag {
        "flagged"
    } else {
        "ok"
    }
}

/// Builds and stores a snapshot. Memory is bounded by the sample size:
/// episodes are streamed from the store and only candidates are kept.
pub fn build(
    store: &dyn LearnStore,
    options: &BuildOptions,
    now: i64,
    progress: &mut dyn FnMut(u64),
) -> Result<(DatasetInfo, BuildStats), StoreError> {
    let mut stats = BuildStats::default();
    let mut filter = options.filter.clone();
    if options.builder == Builder::Regression {
        filter.version = options.champion.clone().or(filter.version);
    }
    // Twice the size as candidates: room for near-duplicates to be dropped.
    let capacity = options.size.saturating_mul(2).max(1);
    let mut strata: Strata<EpisodeId> = Strata::new(capacity);
    store.scan_episodes(&filter, &mut |f| {
        stats.scanned += 1;
        if stats.scanned.is_multiple_of(100_000) {
            progress(stats.scanned);
        }
        let eligible = match options.builder {
            Builder::Regression => match f.reward {
                Some((_, passed)) => passed && !f.any_error,
                None => {
                    stats.unrewarded += 1;
                    false
                }
            },
            Builder::Errors => f.any_error || f.any_flag || f.reward.is_some_and(|(_, passed)| !passed),
            Builder::Traffic | Builder::Cost => true,
        };
        if !eligible {
            return Ok(());
        }
        stats.eligible += 1;
        match options.builder {
            Builder::Traffic => {
                let outcome = match f.reward {
                    Some((_, true)) => "passed",
                    Some((_, false)) => FAILED,
                    None => "unscored",
                };
                let stratum = format!("{}/{}/{outcome}", f.version_id, class(&f));
                strata.offer(&stratum, sample_key(options.seed, f.id.as_str()), f.id);
            }
            // Most expensive first: the key is the cost's bits, inverted (costs are ≥ 0).
            Builder::Cost => strata.offer("all", u64::MAX - f.cost_usd.max(0.0).to_bits(), f.id),
            _ => strata.offer("all", sample_key(options.seed, f.id.as_str()), f.id),
        }
        Ok(())
    })?;
    progress(stats.scanned);
    let seen = strata.seen().clone();
    let mut deduper = Deduper::default();
    let mut chosen = Vec::new();
    let mut leftovers = Vec::new();
    let mut take =
        |key: u64, id: &EpisodeId, chosen: &mut Vec<_>, stats: &mut BuildStats| -> Result<bool, StoreError> {
            let Some(episode) = store.episode(id)? else {
                return Ok(false);
            };
            let reward = episode_reward(store, &episode.summary.id, filter.spec_version.as_deref())?;
            let instance = instance_from_episode(&episode, options.reference_signal.as_deref(), reward);
            if options.dedup && !deduper.insert(fingerprint(&instance_text(&instance))) {
                stats.duplicates += 1;
                return Ok(false);
            }
            chosen.push((key, instance));
            Ok(true)
        };
    // Hard-example mining: failed episodes weigh double in a traffic sample,
    // so as the agent improves and failures get rarer, the datasets keep
    // enough of them to learn from and to gate on.
    let weight = |stratum: &str| if stratum.ends_with(FAILED) { 2.0 } else { 1.0 };
    for select::Allocation { quota, candidates, .. } in strata.allocate_weighted(options.size, &weight) {
        let mut taken = 0;
        let mut rest = candidates.into_iter();
        for (key, id) in rest.by_ref() {
            if taken == quota {
                leftovers.push((key, id));
                break;
            }
            taken += usize::from(take(key, &id, &mut chosen, &mut stats)?);
        }
        leftovers.extend(rest);
    }
    // A stratum short of its quota (near-duplicates dropped) is made up from
    // the other strata's next candidates, in key order.
    leftovers.sort();
    for (key, id) in leftovers {
        if chosen.len() >= options.size {
            break;
        }
        take(key, &id, &mut chosen, &mut stats)?;
    }
    chosen.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
    let items: Vec<_> = chosen.into_iter().map(|(_, i)| i).collect();
    stats.kept = items.len() as u64;
    let params = json!({
        "builder": options.builder.name(),
        "size": options.size,
        "seed": options.seed,
        "dedup": options.dedup,
        "filter": {
            "agent": filter.agent,
            "version": filter.version.as_ref().map(VersionId::as_str),
            "since": filter.since,
            "until": filter.until,
            "signal": filter.signal,
            "reward_spec": filter.spec_version,
        },
        "strata": seen,
        "scanned": stats.scanned,
        "eligible": stats.eligible,
        "unrewarded": stats.unrewarded,
        "duplicates_dropped": stats.duplicates,
    });
    let info = store.create_dataset(
        &options.name,
        &filter.agent,
        options.builder.name(),
        &params,
        &items,
        now,
    )?;
    Ok((info, stats))
}

fn episode_reward(store: &dyn LearnStore, id: &EpisodeId, spec: Option<&str>) -> Result<Option<f64>, StoreError> {
    Ok(match spec {
        Some(s) => store.reward(id, s)?.map(|r| r.value),
        None => None,
    })
}

/// The text an instance is deduplicated on: its input and request messages.
fn instance_text(i: &hone_types::Instance) -> String {
    let mut text = match &i.input {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(messages) = i
        .request
        .as_ref()
        .and_then(|r| r.get("messages"))
        .and_then(|m| m.as_array())
    {
        for m in messages {
            if let Some(c) = m.get("content").and_then(|c| c.as_str()) {
                text.push(' ');
                text.push_str(c);
            }
        }
    }
    text
}
