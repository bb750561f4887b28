//! Which agent each episode belongs to. Episode ids are chosen by clients
//! (`X-Hone-Episode`), so two agents may pick the same one; the first agent
//! to use an id owns it, and another agent's call naming it is refused (409)
//! before anything is recorded — otherwise one agent's key could read or
//! extend another agent's conversation.
//!
//! Ownership is decided by the store for episodes already there and by an
//! in-memory claim for those whose first call is still on its way through
//! the recorder. Claims are dropped once the recorder has caught up (the
//! store then knows every owner); the store itself also never mixes agents
//! in one episode, so a claim lost in that window still exposes nothing.

use crate::error::{ApiError, ErrorKind};
use hone_store::{Recorder, Store};
use hone_types::EpisodeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Claims kept before they are dropped (once the store has caught up).
const CLAIMS_KEPT: usize = 16_384;

#[derive(Default)]
pub struct EpisodeOwners {
    claims: Mutex<HashMap<EpisodeId, String>>,
}

impl EpisodeOwners {
    /// Claims `episode` for `agent`, or refuses it when another agent owns it.
    /// `fresh`: the gateway just made the id up, so nobody else can own it.
    pub async fn claim(
        &self,
        store: &Arc<dyn Store>,
        recorder: &Recorder,
        episode: &EpisodeId,
        agent: &str,
        fresh: bool,
    ) -> Result<(), ApiError> {
        if !fresh && !self.claimed_by(episode, agent) {
            let (store, id) = (store.clone(), episode.clone());
            let stored = tokio::task::spawn_blocking(move || store.episode_agent(&id))
                .await
                .map_err(|e| ApiError::new(ErrorKind::Internal, "episode_lookup_failed", e.to_string()))??;
            if stored.is_some_and(|owner| owner != agent) {
                return Err(conflict(episode));
            }
        }
        let mut claims = self.lock();
        if claims.len() >= CLAIMS_KEPT && recorder.is_caught_up() {
            claims.clear();
        }
        match claims.entry(episode.clone()) {
            std::collections::hash_map::Entry::Occupied(owner) if owner.get() != agent => Err(conflict(episode)),
            std::collections::hash_map::Entry::Occupied(_) => Ok(()),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(agent.to_owned());
                Ok(())
            }
        }
    }

    fn claimed_by(&self, episode: &EpisodeId, agent: &str) -> bool {
        self.lock().get(episode).is_some_and(|owner| owner == agent)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EpisodeId, String>> {
        self.claims.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The refusal never names the owner.
fn conflict(episode: &EpisodeId) -> ApiError {
    ApiError::new(
        ErrorKind::Conflict,
        "episode_belongs_to_another_agent",
        format!("episode `{episode}` is already used by another agent; give each agent its own X-Hone-Episode ids"),
    )
    .with_param(Some("X-Hone-Episode".into()))
}
