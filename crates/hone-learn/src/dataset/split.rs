//! Derived snapshots of a snapshot: its train / target halves, and a set
//! less the instances of another. Both are new immutable snapshots whose
//! `params` name where they came from, so every cycle's sets stay on record.

use super::select::sample_key;
use hone_store::{LearnStore, StoreError};
use hone_types::{DatasetInfo, Instance};
use serde_json::json;
use std::collections::HashSet;

/// Splits `sample` into `(train, target)`: each instance goes to one side by
/// a seeded hash of its id, so the halves are disjoint, balanced in
/// expectation, and the same for the same seed (a resumed cycle splits alike).
/// Stored as `<name>.train` and `<name>.target`.
pub fn split(
    store: &dyn LearnStore,
    sample: &DatasetInfo,
    seed: u64,
    now: i64,
) -> Result<(DatasetInfo, DatasetInfo), StoreError> {
    let items = store.dataset_items(&sample.id)?;
    // Sorted by the hash and dealt alternately: an odd count gives the train side one more.
    let mut keyed: Vec<(u64, Instance)> = items
        .into_iter()
        .map(|i| (sample_key(seed ^ 0x5eed_5917, &i.id), i))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
    let (mut train, mut target) = (Vec::new(), Vec::new());
    for (n, (_, item)) in keyed.into_iter().enumerate() {
        if n % 2 == 0 {
            train.push(item);
        } else {
            target.push(item);
        }
    }
    let part = |side: &str, items: &[Instance]| {
        store.create_dataset(
            &format!("{}.{side}", sample.name),
            &sample.agent,
            "split",
            &json!({"of": sample.id, "side": side, "seed": seed}),
            items,
            now,
        )
    };
    Ok((part("train", &train)?, part("target", &target)?))
}

/// `set` less every instance of `other` (by instance id, which for traffic
/// is the episode id): the
/// same snapshot when nothing overlaps, else `<name>.held` without them.
pub fn without(
    store: &dyn LearnStore,
    set: &DatasetInfo,
    other: &DatasetInfo,
    now: i64,
) -> Result<DatasetInfo, StoreError> {
    let taken: HashSet<String> = store.dataset_items(&other.id)?.into_iter().map(|i| i.id).collect();
    let items = store.dataset_items(&set.id)?;
    if !items.iter().any(|i| taken.contains(&i.id)) {
        return Ok(set.clone());
    }
    let kept: Vec<Instance> = items.into_iter().filter(|i| !taken.contains(&i.id)).collect();
    store.create_dataset(
        &format!("{}.held", set.name),
        &set.agent,
        "without",
        &json!({"of": set.id, "without": other.id}),
        &kept,
        now,
    )
}
