//! [`CycleStore`] on PostgreSQL. Each method is one transaction; a cycle's
//! step and a deployment's revision are compared inside the statement that
//! changes them, so two learners or replicas never both apply one decision.
//! The learner's lead is a session advisory lock on a connection of its own.

use super::{insert_versions, PostgresStore};
use crate::cycle_store::rules;
use crate::rows::{episode_id, parse_records, recent_episodes, signal_names, traffic_only};
use crate::{CandidateUpdate, CycleStore, Lead, Step, StoreError, Success, WindowEpisode};
use deadpool_postgres::Transaction;
use hone_types::{Alert, Candidate, CycleInfo, Deployment, HistoryEvent, VersionId, VersionRecord};

/// The advisory lock that numbers an agent's cycles one at a time.
const CYCLE_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('hone.cycle/' || $1))";

async fn insert_events(tx: &Transaction<'_>, events: &[HistoryEvent]) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let stmt = tx
        .prepare_cached("INSERT INTO history (agent, at, kind, record) VALUES ($1, $2, $3, $4)")
        .await?;
    for e in events {
        tx.execute(&stmt, &[&e.agent, &e.at, &e.kind, &serde_json::to_string(e)?])
            .await?;
    }
    Ok(())
}

async fn apply_updates(tx: &Transaction<'_>, updates: &[CandidateUpdate], now: i64) -> Result<(), StoreError> {
    for u in updates {
        let row = tx
            .query_opt(
                "SELECT record FROM candidates WHERE cycle_id = $1 AND version_id = $2 FOR UPDATE",
                &[&u.cycle_id, &u.version_id.as_str()],
            )
            .await?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(format!(
                "no candidate {} in cycle {}",
                u.version_id, u.cycle_id
            )));
        };
        let c = rules::updated(serde_json::from_str(row.try_get::<_, &str>(0)?)?, u, now);
        tx.execute(
            "UPDATE candidates SET status = $3, record = $4 WHERE cycle_id = $1 AND version_id = $2",
            &[
                &u.cycle_id,
                &u.version_id.as_str(),
                &c.status.as_str(),
                &serde_json::to_string(&c)?,
            ],
        )
        .await?;
    }
    Ok(())
}

const OPEN_CYCLE: &str = "SELECT record FROM cycles WHERE agent = $1 AND state NOT IN ('done', 'failed')";

impl CycleStore for PostgresStore {
    fn lead(&self, agent: &str) -> Result<Option<Lead>, StoreError> {
        self.run(async {
            let client = self.dedicated().await?;
            let held: bool = client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&rules::lead_key(agent)])
                .await?
                .try_get(0)?;
            // The lock lives as long as this connection: dropping the client
            // (or the process dying) ends the session and releases it.
            Ok(held.then(|| Lead::new(client)))
        })
    }

    fn open_cycle(&self, agent: &str) -> Result<Option<CycleInfo>, StoreError> {
        let rows = self.run(self.records(OPEN_CYCLE, &[&agent]))?;
        Ok(parse_records(rows)?.into_iter().next())
    }

    fn start_cycle(&self, agent: &str, trigger: &str, now: i64) -> Result<CycleInfo, StoreError> {
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            tx.execute(CYCLE_LOCK, &[&agent]).await?;
            if let Some(open) = tx.query_opt(OPEN_CYCLE, &[&agent]).await? {
                return Ok(serde_json::from_str(open.try_get::<_, &str>(0)?)?);
            }
            let seq: i64 = tx
                .query_one(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM cycles WHERE agent = $1",
                    &[&agent],
                )
                .await?
                .try_get(0)?;
            let (cycle, started) = rules::new_cycle(agent, seq, trigger, now);
            tx.execute(
                "INSERT INTO cycles (id, agent, seq, state, record, updated_at) VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &cycle.id,
                    &agent,
                    &seq,
                    &cycle.state.as_str(),
                    &serde_json::to_string(&cycle)?,
                    &now,
                ],
            )
            .await?;
            insert_events(&tx, &[started]).await?;
            tx.commit().await?;
            Ok(cycle)
        })
    }

    fn advance_cycle(&self, id: &str, step: &Step<'_>, events: &[HistoryEvent], now: i64) -> Result<bool, StoreError> {
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // The row lock makes a concurrent advance wait, then see the new
            // state and find nothing to move.
            let row = tx
                .query_opt(
                    "SELECT record FROM cycles WHERE id = $1 AND state = $2 FOR UPDATE",
                    &[&id, &step.from.as_str()],
                )
                .await?;
            let Some(row) = row else {
                return Ok(false);
            };
            let cycle = rules::stepped(serde_json::from_str(row.try_get::<_, &str>(0)?)?, step, now);
            tx.execute(
                "UPDATE cycles SET state = $2, record = $3, updated_at = $4 WHERE id = $1",
                &[&id, &cycle.state.as_str(), &serde_json::to_string(&cycle)?, &now],
            )
            .await?;
            insert_events(&tx, events).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    fn cycle(&self, id: &str) -> Result<Option<CycleInfo>, StoreError> {
        let rows = self.run(self.records("SELECT record FROM cycles WHERE id = $1", &[&id]))?;
        Ok(parse_records(rows)?.into_iter().next())
    }

    fn cycles(&self, agent: Option<&str>, limit: usize) -> Result<Vec<CycleInfo>, StoreError> {
        let rows = self.run(self.records(
            "SELECT record FROM cycles WHERE $1::text IS NULL OR agent = $1 ORDER BY updated_at DESC, seq DESC LIMIT $2",
            &[&agent, &(limit as i64)],
        ))?;
        parse_records(rows)
    }

    fn add_candidates(
        &self,
        versions: &[VersionRecord],
        candidates: &[Candidate],
        events: &[HistoryEvent],
    ) -> Result<(), StoreError> {
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            insert_versions(&tx, versions).await?;
            let stmt = tx
                .prepare_cached(
                    "INSERT INTO candidates (cycle_id, version_id, agent, status, record, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (cycle_id, version_id) DO NOTHING",
                )
                .await?;
            for c in candidates {
                tx.execute(
                    &stmt,
                    &[
                        &c.cycle_id,
                        &c.version_id.as_str(),
                        &c.agent,
                        &c.status.as_str(),
                        &serde_json::to_string(c)?,
                        &c.created_at,
                    ],
                )
                .await?;
            }
            insert_events(&tx, events).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn update_candidates(
        &self,
        updates: &[CandidateUpdate],
        events: &[HistoryEvent],
        now: i64,
    ) -> Result<(), StoreError> {
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            apply_updates(&tx, updates, now).await?;
            insert_events(&tx, events).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn candidates(&self, agent: &str, cycle: Option<&str>) -> Result<Vec<Candidate>, StoreError> {
        let rows = self.run(self.records(
            "SELECT record FROM candidates WHERE agent = $1 AND ($2::text IS NULL OR cycle_id = $2)
             ORDER BY created_at, seq",
            &[&agent, &cycle],
        ))?;
        parse_records(rows)
    }

    fn deployment(&self, agent: &str) -> Result<Option<Deployment>, StoreError> {
        let rows = self.run(self.records("SELECT record FROM deployments WHERE agent = $1", &[&agent]))?;
        Ok(parse_records(rows)?.into_iter().next())
    }

    fn deployments(&self) -> Result<Vec<Deployment>, StoreError> {
        parse_records(self.run(self.records("SELECT record FROM deployments ORDER BY agent", &[]))?)
    }

    fn change_deployment(
        &self,
        next: &Deployment,
        expected: Option<u64>,
        updates: &[CandidateUpdate],
        events: &[HistoryEvent],
        alert: Option<&Alert>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let written = rules::next_revision(next, expected, now);
        let record = serde_json::to_string(&written)?;
        let revision = written.revision as i64;
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // The compare-and-swap is the statement itself: the first row
            // only if there is none, a later one only over `expected`.
            let changed = match expected {
                None => {
                    tx.execute(
                        "INSERT INTO deployments (agent, revision, record) VALUES ($1, $2, $3)
                         ON CONFLICT (agent) DO NOTHING",
                        &[&written.agent, &revision, &record],
                    )
                    .await?
                }
                Some(expected) => {
                    tx.execute(
                        "UPDATE deployments SET revision = $2, record = $3 WHERE agent = $1 AND revision = $4",
                        &[&written.agent, &revision, &record, &(expected as i64)],
                    )
                    .await?
                }
            };
            if changed != 1 {
                return Ok(false);
            }
            apply_updates(&tx, updates, now).await?;
            if let Some(alert) = alert {
                let id: i64 = tx
                    .query_one(
                        "INSERT INTO alerts (agent, version_id, at, record) VALUES ($1, $2, $3, '') RETURNING id",
                        &[&alert.agent, &alert.version_id.as_str(), &alert.at],
                    )
                    .await?
                    .try_get(0)?;
                let mut stored = alert.clone();
                stored.id = id;
                tx.execute(
                    "UPDATE alerts SET record = $2 WHERE id = $1",
                    &[&id, &serde_json::to_string(&stored)?],
                )
                .await?;
            }
            insert_events(&tx, events).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    fn add_history(&self, events: &[HistoryEvent]) -> Result<(), StoreError> {
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            insert_events(&tx, events).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn history(&self, agent: &str, limit: usize) -> Result<Vec<HistoryEvent>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let rows = client
                .query(
                    "SELECT id, record FROM (SELECT id, record FROM history WHERE agent = $1 ORDER BY id DESC LIMIT $2) h
                     ORDER BY id",
                    &[&agent, &(limit as i64)],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let mut e: HistoryEvent = serde_json::from_str(r.try_get::<_, &str>(1)?)?;
                    e.id = r.try_get(0)?;
                    Ok(e)
                })
                .collect()
        })
    }

    fn alerts(&self, agent: Option<&str>, limit: usize) -> Result<Vec<Alert>, StoreError> {
        let rows = self.run(self.records(
            "SELECT record FROM alerts WHERE $1::text IS NULL OR agent = $1 ORDER BY id DESC LIMIT $2",
            &[&agent, &(limit as i64)],
        ))?;
        parse_records(rows)
    }

    fn version_rewards(
        &self,
        agent: &str,
        version: &VersionId,
        spec_version: &str,
        limit: usize,
    ) -> Result<Vec<(i64, Option<f64>)>, StoreError> {
        // The newest calls through the (version_id, started_at) index; an
        // episode has a few calls, so 4 × limit calls hold `limit` episodes.
        let sql = format!(
            "SELECT x.episode_id, MIN(x.started_at) AS t,
                    (SELECT r.value FROM rewards r WHERE r.episode_id = x.episode_id AND r.spec_version = $3)
             FROM (SELECT episode_id, started_at FROM calls
                   WHERE version_id = $2 AND agent = $1 AND {traffic}
                   ORDER BY started_at DESC LIMIT $4::int8 * 4) x
             GROUP BY x.episode_id ORDER BY t DESC LIMIT $4",
            traffic = traffic_only("episode_id")
        );
        self.run(async {
            let client = self.client().await?;
            let stmt = client.prepare_cached(&sql).await?;
            let rows = client
                .query(&stmt, &[&agent, &version.as_str(), &spec_version, &(limit as i64)])
                .await?;
            rows.iter().map(|r| Ok((r.try_get(1)?, r.try_get(2)?))).collect()
        })
    }

    fn version_window(
        &self,
        agent: &str,
        version: &VersionId,
        since: i64,
        spec_version: &str,
        limit: usize,
    ) -> Result<Vec<WindowEpisode>, StoreError> {
        let sql = format!(
            "SELECT c.episode_id, MIN(c.started_at), COUNT(*),
                    bool_or(c.outcome <> 'ok'), bool_or(c.invalid_tool_call), bool_or(c.clarifying_question),
                    bool_or(c.refusal), bool_or(c.empty),
                    bool_or(CASE WHEN json_typeof(c.record::json #> '{{response,choices,0,message,tool_calls}}') = 'array'
                                 THEN json_array_length(c.record::json #> '{{response,choices,0,message,tool_calls}}') > 0
                                 ELSE FALSE END),
                    AVG(COALESCE(length(c.record::json #>> '{{response,choices,0,message,content}}'), 0))::float8,
                    COALESCE(SUM(c.cost_usd), 0.0), SUM(c.latency_ms),
                    (SELECT r.value FROM rewards r WHERE r.episode_id = c.episode_id AND r.spec_version = $4),
                    (SELECT json_agg(DISTINCT s.name)::text FROM signals s WHERE s.episode_id = c.episode_id)
             FROM calls c
             WHERE c.agent = $1 AND c.version_id = $2 AND c.started_at >= $3
               AND c.episode_id IN ({recent})
             GROUP BY c.episode_id
             ORDER BY MIN(c.started_at) DESC, c.episode_id DESC
             LIMIT $5",
            recent = recent_episodes("$1", "$2", "$3", "$5")
        );
        self.run(async {
            let client = self.client().await?;
            let stmt = client.prepare_cached(&sql).await?;
            let rows = client
                .query(
                    &stmt,
                    &[&agent, &version.as_str(), &since, &spec_version, &(limit as i64)],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(WindowEpisode {
                        id: episode_id(r.try_get(0)?)?,
                        started_at: r.try_get(1)?,
                        calls: r.try_get::<_, i64>(2)?.max(0) as u32,
                        error: r.try_get(3)?,
                        invalid_tool_call: r.try_get(4)?,
                        clarifying_question: r.try_get(5)?,
                        refusal: r.try_get(6)?,
                        empty: r.try_get(7)?,
                        tool_use: r.try_get(8)?,
                        answer_chars: r.try_get(9)?,
                        cost_usd: r.try_get(10)?,
                        latency_ms: r.try_get(11)?,
                        reward: r.try_get(12)?,
                        signals: signal_names(r.try_get::<_, Option<String>>(13)?.as_deref())?,
                    })
                })
                .collect()
        })
    }

    fn successes(
        &self,
        agent: &str,
        spec_version: &str,
        min_reward: f64,
        limit: usize,
    ) -> Result<Vec<Success>, StoreError> {
        let sql = format!(
            "SELECT r.episode_id, r.value,
                    (SELECT (c.record::json #> '{{request,messages}}')::text FROM calls c
                      WHERE c.episode_id = r.episode_id ORDER BY c.started_at LIMIT 1),
                    (SELECT c.record::json #>> '{{response,choices,0,message,content}}' FROM calls c
                      WHERE c.episode_id = r.episode_id ORDER BY c.started_at DESC LIMIT 1)
             FROM rewards r
             WHERE r.agent = $1 AND r.spec_version = $2 AND r.value >= $3 AND {traffic}
             ORDER BY r.computed_at DESC, r.episode_id DESC
             LIMIT $4",
            traffic = traffic_only("r.episode_id")
        );
        let rows = self.run(async {
            let client = self.client().await?;
            let stmt = client.prepare_cached(&sql).await?;
            let rows = client
                .query(&stmt, &[&agent, &spec_version, &min_reward, &(limit as i64)])
                .await?;
            rows.iter()
                .map(|r| Ok((r.try_get::<_, String>(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
                .collect::<Result<Vec<(String, f64, Option<String>, Option<String>)>, StoreError>>()
        })?;
        let mut out = Vec::new();
        for (id, reward, messages, answer) in rows {
            out.extend(rules::success(&id, reward, messages, answer)?);
        }
        Ok(out)
    }

    fn episodes_since(&self, agent: &str, since: i64) -> Result<u64, StoreError> {
        let sql = format!(
            "SELECT COUNT(*) FROM episodes WHERE agent = $1 AND started_at >= $2 AND {}",
            traffic_only("id")
        );
        self.run(async {
            let client = self.client().await?;
            let n: i64 = client.query_one(&sql, &[&agent, &since]).await?.try_get(0)?;
            Ok(n.max(0) as u64)
        })
    }
}
