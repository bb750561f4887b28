//! [`LearnStore`] on SQLite: rewards, dataset snapshots (made immutable by
//! triggers in the schema), evaluation runs and results.

use super::{lock, write_tx, SqliteStore};
use crate::rows::{content_hash, to_dataset, to_run, traffic_only, DatasetRow, RunRow, DATASET_COLUMNS, RUN_COLUMNS};
use crate::{EpisodeFacts, EpisodeFilter, LearnStore, StoreError};
use hone_types::{DatasetInfo, EpisodeId, EvalRunInfo, Instance, InstanceResult, RewardRecord, VersionId};
use rusqlite::{params, OptionalExtension};

fn dataset_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DatasetRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

fn run_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ))
}

impl LearnStore for SqliteStore {
    fn put_rewards(&self, rewards: &[RewardRecord]) -> Result<(), StoreError> {
        let mut conn = lock(&self.writer);
        let tx = write_tx(&mut conn)?;
        {
            let mut stmt = tx.prepare_cached(
                // Stale from the start when a signal arrived between reading
                // the episode and storing its reward.
                "INSERT INTO rewards (episode_id, agent, spec_version, value, passed, record, computed_at, signals_seen, stale)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,
                         (SELECT COUNT(*) FROM signals WHERE episode_id = ?1) > ?8)
                 ON CONFLICT (episode_id, spec_version) DO UPDATE SET
                    value = excluded.value, passed = excluded.passed, record = excluded.record,
                    computed_at = excluded.computed_at, signals_seen = excluded.signals_seen,
                    stale = excluded.stale",
            )?;
            for r in rewards {
                stmt.execute(params![
                    r.episode_id.as_str(),
                    r.agent,
                    r.spec_version,
                    r.value,
                    r.passed,
                    serde_json::to_string(r)?,
                    r.computed_at,
                    r.signals_seen
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn reward(&self, episode: &EpisodeId, spec_version: &str) -> Result<Option<RewardRecord>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT record FROM rewards WHERE episode_id = ?1 AND spec_version = ?2")?;
            let row: Option<String> = stmt
                .query_row(params![episode.as_str(), spec_version], |r| r.get(0))
                .optional()?;
            Ok(row.map(|r| serde_json::from_str(&r)).transpose()?)
        })
    }

    fn reward_summary(&self, agent: &str, spec_version: &str) -> Result<(u64, Option<f64>), StoreError> {
        self.with_reader(|conn| {
            let (count, mean): (i64, Option<f64>) = conn.query_row(
                "SELECT COUNT(*), AVG(value) FROM rewards WHERE agent = ?1 AND spec_version = ?2",
                params![agent, spec_version],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            Ok((count.max(0) as u64, mean))
        })
    }

    fn scan_episodes(
        &self,
        filter: &EpisodeFilter,
        visit: &mut dyn FnMut(EpisodeFacts) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT c.episode_id, MIN(c.version_id), MIN(c.started_at), COUNT(*),
                        MAX(c.outcome != 'ok'),
                        MAX(c.invalid_tool_call OR c.clarifying_question OR c.refusal OR c.empty OR c.truncated),
                        COALESCE(SUM(c.cost_usd), 0.0),
                        (SELECT r.value FROM rewards r WHERE r.episode_id = c.episode_id AND r.spec_version = ?6),
                        (SELECT r.passed FROM rewards r WHERE r.episode_id = c.episode_id AND r.spec_version = ?6),
                        (SELECT r.stale FROM rewards r WHERE r.episode_id = c.episode_id AND r.spec_version = ?6)
                 FROM calls c
                 WHERE c.agent = ?1
                   AND {traffic}
                   AND (?2 IS NULL OR c.version_id = ?2)
                   AND (?3 IS NULL OR c.started_at >= ?3)
                   AND (?4 IS NULL OR c.started_at < ?4)
                   AND (?5 IS NULL OR c.episode_id IN (SELECT episode_id FROM signals WHERE name = ?5))
                 GROUP BY c.episode_id
                 ORDER BY MIN(c.started_at), c.episode_id",
                traffic = traffic_only("c.episode_id")
            ))?;
            let mut rows = stmt.query(params![
                filter.agent,
                filter.version.as_ref().map(VersionId::as_str),
                filter.since,
                filter.until,
                filter.signal,
                filter.spec_version,
            ])?;
            while let Some(r) = rows.next()? {
                let id: String = r.get(0)?;
                let value: Option<f64> = r.get(7)?;
                let passed: Option<bool> = r.get(8)?;
                visit(EpisodeFacts {
                    id: crate::rows::episode_id(&id)?,
                    version_id: r.get(1)?,
                    started_at: r.get(2)?,
                    calls: r.get::<_, i64>(3)?.max(0) as u32,
                    any_error: r.get(4)?,
                    any_flag: r.get(5)?,
                    cost_usd: r.get(6)?,
                    reward: value.zip(passed),
                    reward_stale: r.get::<_, Option<bool>>(9)?.unwrap_or(false),
                })?;
            }
            Ok(())
        })
    }

    fn create_dataset(
        &self,
        name: &str,
        agent: &str,
        builder: &str,
        params: &serde_json::Value,
        items: &[Instance],
        created_at: i64,
    ) -> Result<DatasetInfo, StoreError> {
        let hash = content_hash(items)?;
        let mut conn = lock(&self.writer);
        let tx = write_tx(&mut conn)?;
        let latest: i64 = tx.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM datasets WHERE name = ?1",
            [name],
            |r| r.get(0),
        )?;
        let version = latest + 1;
        let id = format!("{name}@{version}");
        tx.execute(
            "INSERT INTO datasets (id, name, version, agent, builder, params, item_count, content_hash, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                id,
                name,
                version,
                agent,
                builder,
                serde_json::to_string(params)?,
                items.len() as i64,
                hash,
                created_at
            ],
        )?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO dataset_items (dataset_id, idx, instance_id, item) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (i, item) in items.iter().enumerate() {
                stmt.execute(params![id, i as i64, item.id, serde_json::to_string(item)?])
                    .map_err(|e| match e {
                        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
                            StoreError::Corrupt(format!("instance id `{}` appears twice in dataset `{name}`", item.id))
                        }
                        e => e.into(),
                    })?;
            }
        }
        tx.commit()?;
        Ok(DatasetInfo {
            id,
            name: name.to_owned(),
            version: version as u32,
            agent: agent.to_owned(),
            builder: builder.to_owned(),
            params: params.clone(),
            item_count: items.len() as u64,
            content_hash: hash,
            created_at,
        })
    }

    fn datasets(&self) -> Result<Vec<DatasetInfo>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {DATASET_COLUMNS} FROM datasets ORDER BY name, version"
            ))?;
            let rows = stmt.query_map([], dataset_row)?;
            rows.map(|r| to_dataset(r?)).collect()
        })
    }

    fn dataset(&self, name_or_id: &str) -> Result<Option<DatasetInfo>, StoreError> {
        self.with_reader(|conn| {
            let row = if name_or_id.contains('@') {
                conn.prepare_cached(&format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE id = ?1"))?
                    .query_row([name_or_id], dataset_row)
                    .optional()?
            } else {
                conn.prepare_cached(&format!(
                    "SELECT {DATASET_COLUMNS} FROM datasets WHERE name = ?1 ORDER BY version DESC LIMIT 1"
                ))?
                .query_row([name_or_id], dataset_row)
                .optional()?
            };
            row.map(to_dataset).transpose()
        })
    }

    fn dataset_items(&self, dataset_id: &str) -> Result<Vec<Instance>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached("SELECT item FROM dataset_items WHERE dataset_id = ?1 ORDER BY idx")?;
            let rows = stmt.query_map([dataset_id], |r| r.get::<_, String>(0))?;
            rows.map(|r| Ok(serde_json::from_str(&r?)?)).collect()
        })
    }

    fn start_eval_run(&self, run: &EvalRunInfo) -> Result<EvalRunInfo, StoreError> {
        {
            let conn = lock(&self.writer);
            conn.execute(
                "INSERT OR IGNORE INTO eval_runs (id, dataset_id, agent, version_id, target, created_at, finished_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL)",
                params![
                    run.id,
                    run.dataset_id,
                    run.agent,
                    run.version_id.as_str(),
                    run.target,
                    run.created_at
                ],
            )?;
        }
        self.eval_run(&run.id)?
            .ok_or_else(|| StoreError::NotFound(format!("eval run `{}` vanished", run.id)))
    }

    fn finish_eval_run(&self, run_id: &str, finished_at: i64) -> Result<(), StoreError> {
        let conn = lock(&self.writer);
        conn.execute(
            "UPDATE eval_runs SET finished_at = ?2 WHERE id = ?1",
            params![run_id, finished_at],
        )?;
        Ok(())
    }

    fn eval_run(&self, run_id: &str) -> Result<Option<EvalRunInfo>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM eval_runs WHERE id = ?1"))?;
            stmt.query_row([run_id], run_row).optional()?.map(to_run).transpose()
        })
    }

    fn eval_runs(&self, agent: Option<&str>, limit: usize) -> Result<Vec<EvalRunInfo>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM eval_runs
                 WHERE (?1 IS NULL OR agent = ?1) ORDER BY created_at DESC, id DESC LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![agent, limit as i64], run_row)?;
            rows.map(|r| to_run(r?)).collect()
        })
    }

    fn put_eval_result(&self, run_id: &str, result: &InstanceResult) -> Result<(), StoreError> {
        let conn = lock(&self.writer);
        conn.execute(
            "INSERT OR REPLACE INTO eval_results (run_id, instance_id, attempt, result) VALUES (?1, ?2, ?3, ?4)",
            params![
                run_id,
                result.instance_id,
                result.attempt,
                serde_json::to_string(result)?
            ],
        )?;
        Ok(())
    }

    fn eval_results(&self, run_id: &str) -> Result<Vec<InstanceResult>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT result FROM eval_results WHERE run_id = ?1 ORDER BY instance_id, attempt")?;
            let rows = stmt.query_map([run_id], |r| r.get::<_, String>(0))?;
            rows.map(|r| Ok(serde_json::from_str(&r?)?)).collect()
        })
    }
}
