//! Deployment decisions (docs/ARCHITECTURE.md, "Concepts"): start a canary, promote
//! it, roll it (or the champion) back. Every change is one compare-and-swap
//! on the agent's stored deployment together with the candidate's new
//! status and its history, so a decision is applied once or not at all.

use crate::client::GatewayClient;
use crate::error::{LearnError, Result};
use hone_artefacts::{local_adapter_name, Artefacts};
use hone_config::{is_artefact_url, AgentConfig, Config, ProviderKind};
use hone_store::{CandidateUpdate, CycleStore};
use hone_types::time::now_ms;
use hone_types::{Alert, Candidate, CandidateStatus, Deployment, HistoryEvent, VersionId};
use serde_json::json;

/// The agent's deployment as stored, or as the config declares it (with no
/// revision) until the learner first changes it.
pub fn current(store: &dyn CycleStore, agent: &AgentConfig) -> Result<(Deployment, Option<u64>)> {
    if let Some(d) = store.deployment(&agent.name)? {
        let revision = d.revision;
        return Ok((d, Some(revision)));
    }
    let champion = agent
        .versions
        .get(&agent.deployment.champion)
        .map(|v| v.id.clone())
        .ok_or_else(|| LearnError::config(format!("agent `{}` has no champion version", agent.name)))?;
    Ok((
        Deployment {
            agent: agent.name.clone(),
            champion,
            canary: None,
            canary_share: agent.deployment.canary_share,
            canary_since: None,
            previous: Vec::new(),
            revision: 0,
            source: "config".to_owned(),
            updated_at: 0,
        },
        None,
    ))
}

/// Makes the candidate's adapters servable: the embedded engine hot-swaps an
/// adapter found in its directory on first use (each replica fetches it from
/// the shared artefact store first, when one is configured); an
/// OpenAI-compatible server (vLLM) is asked to load it by the gateway (`POST
/// /admin/adapters`, which calls the server's `/v1/load_lora_adapter`). Any
/// failure refuses the deploy.
pub async fn prepare_adapters(
    config: &Config,
    gateway: &GatewayClient,
    candidate: &hone_types::VersionSpec,
) -> Result<Vec<String>> {
    let artefacts = Artefacts::new(&config.artefacts).map_err(|e| LearnError::config(e.to_string()))?;
    let mut done = Vec::new();
    for route in &candidate.routes {
        let Some(adapter) = &route.adapter else { continue };
        let provider = config
            .providers
            .get(&route.provider)
            .ok_or_else(|| LearnError::config(format!("provider `{}` is not configured", route.provider)))?;
        let path = config.adapters_dir(&route.provider).join(local_adapter_name(adapter));
        match provider.kind {
            ProviderKind::Local => {
                done.push(format!(
                    "adapter {adapter} {} for the embedded engine (hot-swapped on first use)",
                    reachable(&artefacts, adapter, &path).await?
                ));
            }
            ProviderKind::OpenAi if is_artefact_url(adapter) => {
                return Err(LearnError::config(format!(
                    "provider `{}` loads adapters by name from its adapter directory, not by URL (`{adapter}`)",
                    route.provider
                )))
            }
            ProviderKind::OpenAi => {
                // Without a shared store the path is the server's to read.
                if artefacts.shared_url().is_some() {
                    reachable(&artefacts, adapter, &path).await?;
                }
                let absolute = std::path::absolute(&path).unwrap_or(path);
                gateway
                    .load_adapter(&route.provider, adapter, &absolute.display().to_string())
                    .await
                    .map_err(|e| {
                        LearnError::gateway(format!("`{}` refused to load adapter `{adapter}`: {e}", route.provider))
                    })?;
                done.push(format!("adapter {adapter} loaded by `{}`", route.provider));
            }
            ProviderKind::Anthropic => {
                return Err(LearnError::config(format!(
                    "provider `{}` (Anthropic) cannot serve LoRA adapters",
                    route.provider
                )))
            }
        }
    }
    Ok(done)
}

/// Where every replica will find `adapter` (kept locally at `path` here):
/// named by URL; published in the shared store (published now when only
/// this machine has it); or, without a shared store, in `path`.
async fn reachable(artefacts: &Artefacts, adapter: &str, path: &std::path::Path) -> Result<String> {
    let failed = |e: hone_artefacts::ArtefactError| LearnError::state(e.to_string());
    if is_artefact_url(adapter) {
        return Ok("is named by URL: each replica fetches it".to_owned());
    }
    let here = path.join("adapter_config.json").exists();
    let Some(url) = artefacts.adapter_url(adapter) else {
        return if here {
            Ok("ready".to_owned())
        } else {
            Err(LearnError::state(format!(
                "adapter `{adapter}` is not in {}",
                path.display()
            )))
        };
    };
    if artefacts.published_adapter(adapter).await.map_err(failed)?.is_some() {
        return Ok(format!("is published at {url}: each replica fetches it"));
    }
    if !here {
        return Err(LearnError::state(format!(
            "adapter `{adapter}` is neither published at {url} nor in {}",
            path.display()
        )));
    }
    artefacts.publish_adapter(adapter, path).await.map_err(failed)?;
    Ok(format!("published now at {url}: each replica fetches it"))
}

/// What a deployment change did.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Applied(String),
    /// Already in the asked state (a resumed decision): nothing written.
    AlreadyDone(String),
    Refused(String),
}

impl Change {
    /// What happened, in words.
    pub fn line(&self) -> &str {
        match self {
            Change::Applied(line) | Change::AlreadyDone(line) | Change::Refused(line) => line,
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Applied(line) => f.write_str(line),
            Change::AlreadyDone(line) => write!(f, "{line} (already so)"),
            Change::Refused(line) => write!(f, "refused: {line}"),
        }
    }
}

/// Approves a candidate and makes it the canary on the configured share of
/// new episodes.
pub async fn start_canary(
    config: &Config,
    gateway: &GatewayClient,
    store: &dyn CycleStore,
    agent: &AgentConfig,
    candidate: &Candidate,
    approved_by: &str,
) -> Result<Change> {
    let (deployment, revision) = current(store, agent)?;
    if deployment.canary.as_ref() == Some(&candidate.version_id) {
        return Ok(Change::AlreadyDone(format!(
            "{} is already the canary",
            candidate.version_id
        )));
    }
    if deployment.champion == candidate.version_id {
        return Ok(Change::AlreadyDone(format!(
            "{} is already the champion",
            candidate.version_id
        )));
    }
    if let Some(canary) = &deployment.canary {
        return Ok(Change::Refused(format!(
            "canary {canary} is still running; promote or roll it back first"
        )));
    }
    if !matches!(candidate.status, CandidateStatus::OnFront | CandidateStatus::Approved) {
        return Ok(Change::Refused(format!(
            "candidate {} is {}, not on the front",
            candidate.version_id,
            candidate.status.as_str()
        )));
    }
    let record = store
        .version(&candidate.version_id)?
        .ok_or_else(|| LearnError::state(format!("version {} is not stored", candidate.version_id)))?;
    let now = now_ms();
    let prepared = match prepare_adapters(config, gateway, &record.spec).await {
        Ok(p) => p,
        Err(why) => {
            let reason = format!("deploy refused: {why}");
            store.update_candidates(
                &[update(candidate, CandidateStatus::OnFront, &reason)],
                &[HistoryEvent::new(&agent.name, now, "deploy_refused", &reason)
                    .version(&candidate.version_id)
                    .cycle(&candidate.cycle_id)],
                now,
            )?;
            return Ok(Change::Refused(reason));
        }
    };
    let gate_gain_low = candidate.scores.as_ref().and_then(|s| s.gate_gain).map(|g| g.low);
    let share = agent.deployment.canary_share_for(gate_gain_low);
    let next = Deployment {
        canary: Some(candidate.version_id.clone()),
        canary_share: share.share,
        canary_since: Some(now),
        source: "learner".to_owned(),
        ..deployment.clone()
    };
    let summary = format!(
        "{} approved by {approved_by}; canary on {:.0}% of new episodes{} against champion {}",
        candidate.version_id,
        next.canary_share * 100.0,
        share.reason.map_or(String::new(), |why| format!(" ({why})")),
        deployment.champion
    );
    let events = [
        HistoryEvent::new(
            &agent.name,
            now,
            "approve",
            format!("{} approved by {approved_by}", candidate.version_id),
        )
        .version(&candidate.version_id)
        .cycle(&candidate.cycle_id),
        HistoryEvent::new(&agent.name, now, "canary", &summary)
            .version(&candidate.version_id)
            .cycle(&candidate.cycle_id)
            .evidence(json!({"scores": candidate.scores, "adapters": prepared, "champion": deployment.champion})),
    ];
    let applied = store.change_deployment(
        &next,
        revision,
        &[update(candidate, CandidateStatus::Canary, &summary)],
        &events,
        None,
        now,
    )?;
    Ok(if applied {
        Change::Applied(summary)
    } else {
        Change::Refused("the deployment changed meanwhile; try again".into())
    })
}

fn update(candidate: &Candidate, status: CandidateStatus, reason: &str) -> CandidateUpdate {
    CandidateUpdate {
        cycle_id: candidate.cycle_id.clone(),
        version_id: candidate.version_id.clone(),
        status,
        reason: Some(reason.to_owned()),
        scores: None,
    }
}

/// A candidate row's place now, in one word: the deployment names the
/// champion and the canary; a row whose stored status says champion or
/// canary of a version that no longer is one says what it was.
pub fn role(deployment: &Deployment, candidate: &Candidate) -> &'static str {
    if candidate.version_id == deployment.champion {
        "champion"
    } else if deployment.canary.as_ref() == Some(&candidate.version_id) {
        "canary"
    } else {
        match candidate.status {
            CandidateStatus::Champion => "former champion",
            CandidateStatus::Canary => "former canary",
            other => other.as_str(),
        }
    }
}

/// What users showed of a version while it was a canary, as the watcher
/// stored it with its promotion or roll-back: `+0.120 [+0.030, +0.210]
/// over 140 canary episodes`. `history` oldest first.
pub fn online_evidence(history: &[HistoryEvent], version: &VersionId) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Stored {
        canary_episodes: usize,
        sequential: Option<crate::watch::SequentialLook>,
    }
    let event = history
        .iter()
        .rev()
        .find(|e| e.version_id.as_ref() == Some(version) && matches!(e.kind.as_str(), "promote" | "rollback"))?;
    let stored: Stored = serde_json::from_value(event.evidence.clone()).ok()?;
    let c = stored.sequential?.comparison;
    Some(format!(
        "{} {} over {} canary episodes",
        c.difference.map_or("-".into(), |d| format!("{d:+.3}")),
        c.interval
            .map_or("-".into(), |(low, high)| format!("[{low:+.3}, {high:+.3}]")),
        stored.canary_episodes
    ))
}

/// The newest candidate row of a version (its current fate).
pub fn candidate_of(store: &dyn CycleStore, agent: &str, version: &VersionId) -> Result<Option<Candidate>> {
    Ok(store
        .candidates(agent, None)?
        .into_iter()
        .rev()
        .find(|c| &c.version_id == version))
}

/// Gives the running canary `share` of new episodes (under the sequential
/// rule, the share its evidence allows). A change of less than a tenth of
/// the current share is not worth a write: nothing is done.
pub fn set_share(
    store: &dyn CycleStore,
    agent: &AgentConfig,
    canary: &VersionId,
    share: f64,
    why: &str,
) -> Result<Change> {
    let (deployment, revision) = current(store, agent)?;
    if deployment.canary.as_ref() != Some(canary) {
        return Ok(Change::AlreadyDone(format!("{canary} is no longer the canary")));
    }
    if (share - deployment.canary_share).abs() < 0.1 * deployment.canary_share {
        return Ok(Change::AlreadyDone(format!(
            "canary {canary} stays on {:.0}% of new episodes",
            deployment.canary_share * 100.0
        )));
    }
    let now = now_ms();
    let summary = format!(
        "canary {canary} now on {:.0}% of new episodes (was {:.0}%): {why}",
        share * 100.0,
        deployment.canary_share * 100.0
    );
    let next = Deployment {
        canary_share: share,
        source: "learner".to_owned(),
        ..deployment.clone()
    };
    let event = HistoryEvent::new(&agent.name, now, "share", &summary).version(canary);
    let applied = store.change_deployment(&next, revision, &[], &[event], None, now)?;
    Ok(if applied {
        Change::Applied(summary)
    } else {
        Change::Refused("the deployment changed meanwhile".into())
    })
}

/// Makes the canary the champion.
pub fn promote(store: &dyn CycleStore, agent: &AgentConfig, evidence: serde_json::Value, why: &str) -> Result<Change> {
    let (deployment, revision) = current(store, agent)?;
    let Some(canary) = deployment.canary.clone() else {
        return Ok(Change::AlreadyDone("no canary to promote".into()));
    };
    let now = now_ms();
    let mut previous = deployment.previous.clone();
    previous.push(deployment.champion.clone());
    let next = Deployment {
        champion: canary.clone(),
        canary: None,
        canary_since: None,
        previous,
        source: "learner".to_owned(),
        ..deployment.clone()
    };
    let summary = format!("{canary} promoted to champion (was {}): {why}", deployment.champion);
    let updates: Vec<CandidateUpdate> = candidate_of(store, &agent.name, &canary)?
        .map(|c| update(&c, CandidateStatus::Champion, &summary))
        .into_iter()
        .collect();
    let event = HistoryEvent::new(&agent.name, now, "promote", &summary)
        .version(&canary)
        .evidence(evidence);
    let applied = store.change_deployment(&next, revision, &updates, &[event], None, now)?;
    Ok(if applied {
        Change::Applied(summary)
    } else {
        Change::Refused("the deployment changed meanwhile".into())
    })
}

/// Rolls the canary back, or — with no canary — restores the previous
/// champion. `alert` is stored with the change when a monitor caused it.
pub fn rollback(store: &dyn CycleStore, agent: &AgentConfig, why: &str, alert: Option<&Alert>) -> Result<Change> {
    rollback_with(store, agent, why, alert, serde_json::Value::Null)
}

/// [`rollback`], with the online evidence it was decided on stored in its
/// history event (as a promotion's is).
pub fn rollback_with(
    store: &dyn CycleStore,
    agent: &AgentConfig,
    why: &str,
    alert: Option<&Alert>,
    evidence: serde_json::Value,
) -> Result<Change> {
    let (deployment, revision) = current(store, agent)?;
    let now = now_ms();
    let (next, removed, summary) = match (&deployment.canary, deployment.previous.last()) {
        (Some(canary), _) => (
            Deployment {
                canary: None,
                canary_since: None,
                source: "learner".to_owned(),
                ..deployment.clone()
            },
            canary.clone(),
            format!(
                "canary {canary} rolled back; champion {} keeps all traffic: {why}",
                deployment.champion
            ),
        ),
        (None, Some(previous)) => {
            let mut earlier = deployment.previous.clone();
            earlier.pop();
            (
                Deployment {
                    champion: previous.clone(),
                    previous: earlier,
                    source: "learner".to_owned(),
                    ..deployment.clone()
                },
                deployment.champion.clone(),
                format!("champion {} rolled back to {previous}: {why}", deployment.champion),
            )
        }
        (None, None) => {
            return Ok(Change::Refused(format!(
                "agent `{}` has no canary and no earlier champion to roll back to",
                agent.name
            )))
        }
    };
    let updates: Vec<CandidateUpdate> = candidate_of(store, &agent.name, &removed)?
        .map(|c| update(&c, CandidateStatus::RolledBack, &summary))
        .into_iter()
        .collect();
    let mut events = Vec::new();
    if let Some(a) = alert {
        events.push(
            HistoryEvent::new(
                &agent.name,
                now,
                "alert",
                format!(
                    "{} on {}: {:.3} vs champion {:.3} over {} / {} episodes (p = {:.4})",
                    a.firing.metric,
                    a.version_id,
                    a.firing.canary_rate,
                    a.firing.champion_rate,
                    a.firing.canary_episodes,
                    a.firing.champion_episodes,
                    a.firing.p_value
                ),
            )
            .version(&a.version_id)
            .evidence(json!({"episodes": a.firing.episodes})),
        );
    }
    events.push(
        HistoryEvent::new(&agent.name, now, "rollback", &summary)
            .version(&removed)
            .evidence(evidence),
    );
    let applied = store.change_deployment(&next, revision, &updates, &events, alert, now)?;
    Ok(if applied {
        Change::Applied(summary)
    } else {
        Change::Refused("the deployment changed meanwhile".into())
    })
}
