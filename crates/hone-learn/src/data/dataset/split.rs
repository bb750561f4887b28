//! Derived snapshots of a snapshot: its train / target halves, a set less
//! the instances of another, and a set with mined instances added. Each is
//! a new immutable snapshot whose `params` name where it came from, so
//! every cycle's sets stay on record.

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

/// `set` less every instance of the `others` (by instance id, which for
/// traffic is the episode id): the same snapshot when nothing overlaps,
/// else `<name>.held` without them.
pub fn without(
    store: &dyn LearnStore,
    set: &DatasetInfo,
    others: &[&DatasetInfo],
    now: i64,
) -> Result<DatasetInfo, StoreError> {
    let mut taken = HashSet::new();
    for other in others {
        taken.extend(store.dataset_items(&other.id)?.into_iter().map(|i| i.id));
    }
    let ids: Vec<&str> = others.iter().map(|o| o.id.as_str()).collect();
    without_ids(store, set, &taken, &json!({"of": set.id, "without": ids}), now)
}

/// `set` less the instances whose ids are in `taken`; `params` say why.
pub fn without_ids(
    store: &dyn LearnStore,
    set: &DatasetInfo,
    taken: &HashSet<String>,
    params: &serde_json::Value,
    now: i64,
) -> Result<DatasetInfo, StoreError> {
    let items = store.dataset_items(&set.id)?;
    if !items.iter().any(|i| taken.contains(&i.id)) {
        return Ok(set.clone());
    }
    let kept: Vec<Instance> = items.into_iter().filter(|i| !taken.contains(&i.id)).collect();
    store.create_dataset(&format!("{}.held", set.name), &set.agent, "without", params, &kept, now)
}

/// `set` and the instances of `extra` it lacks (by id): the same snapshot
/// when it lacks none, else `<name>.mined` with them; `params` say why.
pub fn with(
    store: &dyn LearnStore,
    set: &DatasetInfo,
    extra: &[Instance],
    params: &serde_json::Value,
    now: i64,
) -> Result<DatasetInfo, StoreError> {
    let mut items = store.dataset_items(&set.id)?;
    let have: HashSet<String> = items.iter().map(|i| i.id.clone()).collect();
    let new: Vec<Instance> = extra.iter().filter(|i| !have.contains(&i.id)).cloned().collect();
    if new.is_empty() {
        return Ok(set.clone());
    }
    items.extend(new);
    store.create_dataset(&format!("{}.mined", set.name), &set.agent, "with", params, &items, now)
}
