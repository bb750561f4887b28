//! Which version answers: the deployment split, sticky per episode, or the
//! version pinned by `X-Hone-Version` (how evaluation runs a candidate).

use hone_types::{EpisodeId, VersionId, VersionSpec};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// Who gets new episodes: canaries their shares, the champion the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub champion: VersionId,
    /// (version, share) for canaries.
    pub canaries: Vec<(VersionId, f64)>,
    /// The stored deployment's revision this split came from (`None`: the config's).
    pub revision: Option<u64>,
}

/// One agent's routable versions and its split. Both change while serving:
/// the learner deploys candidates (the split is re-read from the store) and
/// evaluation pins versions created after start (looked up on first use).
#[derive(Debug)]
pub struct AgentRoutes {
    pub name: String,
    /// Label → id for declared versions.
    pub labels: HashMap<String, VersionId>,
    versions: RwLock<HashMap<VersionId, Arc<VersionSpec>>>,
    split: RwLock<Arc<Split>>,
}

/// FNV-1a with a splitmix64 finaliser: stable across processes and releases
/// (unlike std's hasher), and well mixed even for sequential ids.
fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// A uniform point in [0, 1) fixed by agent and episode.
pub fn episode_point(agent: &str, episode: &EpisodeId) -> f64 {
    (stable_hash(&[agent.as_bytes(), episode.as_str().as_bytes()]) >> 11) as f64 / (1u64 << 53) as f64
}

impl AgentRoutes {
    pub fn new(
        name: String,
        labels: HashMap<String, VersionId>,
        versions: HashMap<VersionId, Arc<VersionSpec>>,
        split: Split,
    ) -> Self {
        Self {
            name,
            labels,
            versions: RwLock::new(versions),
            split: RwLock::new(Arc::new(split)),
        }
    }

    pub fn split(&self) -> Arc<Split> {
        self.split.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn set_split(&self, split: Split) {
        *self.split.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(split);
    }

    /// The version for an episode: the same episode always lands on the same
    /// version while the split stays the same.
    pub fn choose(&self, episode: &EpisodeId) -> VersionId {
        let split = self.split();
        let point = episode_point(&self.name, episode);
        let mut edge = 0.0;
        for (version, share) in &split.canaries {
            edge += share;
            if point < edge {
                return version.clone();
            }
        }
        split.champion.clone()
    }

    pub fn spec(&self, id: &VersionId) -> Option<Arc<VersionSpec>> {
        self.versions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    pub fn add_version(&self, id: VersionId, spec: Arc<VersionSpec>) {
        self.versions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, spec);
    }

    /// Resolves a label or an id among the versions known here.
    pub fn resolve(&self, label_or_id: &str) -> Option<(VersionId, Arc<VersionSpec>)> {
        let id = self
            .labels
            .get(label_or_id)
            .cloned()
            .or_else(|| VersionId::parse(label_or_id))?;
        let spec = self.spec(&id)?;
        Some((id, spec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn routes(canary_share: f64) -> AgentRoutes {
        let champion = VersionId::parse("aaaaaaaaaaaaaaaa").unwrap();
        let canary = VersionId::parse("bbbbbbbbbbbbbbbb").unwrap();
        AgentRoutes::new(
            "assistant".into(),
            HashMap::new(),
            HashMap::new(),
            Split {
                champion,
                canaries: vec![(canary, canary_share)],
                revision: None,
            },
        )
    }

    #[test]
    fn the_split_follows_the_shares() {
        let r = routes(0.1);
        let canary_hits = (0..20_000)
            .filter(|i| {
                r.choose(&EpisodeId::parse(&format!("e{i}")).unwrap())
                    .as_str()
                    .starts_with('b')
            })
            .count();
        let share = canary_hits as f64 / 20_000.0;
        assert!((share - 0.1).abs() < 0.01, "canary share {share}");
    }

    proptest! {
        #[test]
        fn an_episode_always_gets_the_same_version(id in "[a-z0-9-]{1,40}", share in 0.01f64..0.99) {
            let r = routes(share);
            let e = EpisodeId::parse(&id).unwrap();
            prop_assert_eq!(r.choose(&e), r.choose(&e));
            let p = episode_point("assistant", &e);
            prop_assert!((0.0..1.0).contains(&p));
        }
    }
}
