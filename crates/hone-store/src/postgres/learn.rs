//! [`LearnStore`] on PostgreSQL: rewards, dataset snapshots (made immutable
//! by triggers in the schema), evaluation runs and results.

use super::PostgresStore;
use crate::rows::{content_hash, to_dataset, to_run, traffic_only, DATASET_COLUMNS, RUN_COLUMNS};
use crate::{EpisodeFacts, EpisodeFilter, LearnStore, StoreError};
use hone_types::{DatasetInfo, EpisodeId, EvalRunInfo, Instance, InstanceResult, RewardRecord, VersionId};
use tokio_postgres::Row;

fn dataset_of(r: &Row) -> Result<DatasetInfo, StoreError> {
    to_dataset((
        r.try_get(0)?,
        r.try_get(1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
        r.try_get(5)?,
        r.try_get(6)?,
        r.try_get(7)?,
        r.try_get(8)?,
    ))
}

fn run_of(r: &Row) -> Result<EvalRunInfo, StoreError> {
    to_run((
        r.try_get(0)?,
        r.try_get(1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
        r.try_get(5)?,
        r.try_get(6)?,
    ))
}

/// The advisory lock that numbers a dataset's snapshots one at a time.
const DATASET_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('hone.dataset/' || $1))";

impl LearnStore for PostgresStore {
    fn put_rewards(&self, rewards: &[RewardRecord]) -> Result<(), StoreError> {
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let stmt = tx
                .prepare_cached(
                    // Stale from the start when a signal arrived between reading
                    // the episode and storing its reward.
                    "INSERT INTO rewards (episode_id, agent, spec_version, value, passed, record, computed_at, signals_seen, stale)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
                             (SELECT COUNT(*) FROM signals WHERE episode_id = $1) > $8)
                     ON CONFLICT (episode_id, spec_version) DO UPDATE SET
                        value = excluded.value, passed = excluded.passed, record = excluded.record,
                        computed_at = excluded.computed_at, signals_seen = excluded.signals_seen,
                        stale = excluded.stale",
                )
                .await?;
            for r in rewards {
                tx.execute(
                    &stmt,
                    &[
                        &r.episode_id.as_str(),
                        &r.agent,
                        &r.spec_version,
                        &r.value,
                        &r.passed,
                        &serde_json::to_string(r)?,
                        &r.computed_at,
                        &i64::from(r.signals_seen),
                    ],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn reward(&self, episode: &EpisodeId, spec_version: &str) -> Result<Option<RewardRecord>, StoreError> {
        let rows = self.run(self.records(
            "SELECT record FROM rewards WHERE episode_id = $1 AND spec_version = $2",
            &[&episode.as_str(), &spec_version],
        ))?;
        Ok(crate::rows::parse_records(rows)?.into_iter().next())
    }

    fn reward_summary(&self, agent: &str, spec_version: &str) -> Result<(u64, Option<f64>), StoreError> {
        self.run(async {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "SELECT COUNT(*), AVG(value) FROM rewards WHERE agent = $1 AND spec_version = $2",
                    &[&agent, &spec_version],
                )
                .await?;
            let count: i64 = row.try_get(0)?;
            Ok((count.max(0) as u64, row.try_get(1)?))
        })
    }

    fn scan_episodes(
        &self,
        filter: &EpisodeFilter,
        visit: &mut dyn FnMut(EpisodeFacts) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT c.episode_id, MIN(c.version_id), MIN(c.started_at), COUNT(*),
                    bool_or(c.outcome <> 'ok'),
                    bool_or(c.invalid_tool_call OR c.clarifying_question OR c.refusal OR c.empty OR c.truncated),
                    COALESCE(SUM(c.cost_usd), 0.0),
                    r.value, r.passed, r.stale
             FROM calls c
             LEFT JOIN rewards r ON r.episode_id = c.episode_id AND r.spec_version = $6
             WHERE c.agent = $1
               AND {traffic}
               AND ($2::text IS NULL OR c.version_id = $2)
               AND ($3::int8 IS NULL OR c.started_at >= $3)
               AND ($4::int8 IS NULL OR c.started_at < $4)
               AND ($5::text IS NULL OR c.episode_id IN (SELECT episode_id FROM signals WHERE name = $5))
             GROUP BY c.episode_id, r.value, r.passed, r.stale
             ORDER BY MIN(c.started_at), c.episode_id",
            traffic = traffic_only("c.episode_id")
        );
        let version = filter.version.as_ref().map(VersionId::as_str);
        self.run(async {
            let mut client = self.client().await?;
            // A cursor (rows fetched in pages) needs a transaction; memory
            // stays flat however many episodes match.
            let tx = client.build_transaction().read_only(true).start().await?;
            let stmt = tx.prepare_cached(&sql).await?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
                &filter.agent,
                &version,
                &filter.since,
                &filter.until,
                &filter.signal,
                &filter.spec_version,
            ];
            let portal = tx.bind(&stmt, &params).await?;
            loop {
                let rows = tx.query_portal(&portal, 1000).await?;
                if rows.is_empty() {
                    break;
                }
                for r in &rows {
                    let id: &str = r.try_get(0)?;
                    let value: Option<f64> = r.try_get(7)?;
                    let passed: Option<bool> = r.try_get(8)?;
                    visit(EpisodeFacts {
                        id: crate::rows::episode_id(id)?,
                        version_id: r.try_get(1)?,
                        started_at: r.try_get(2)?,
                        calls: r.try_get::<_, i64>(3)?.max(0) as u32,
                        any_error: r.try_get(4)?,
                        any_flag: r.try_get(5)?,
                        cost_usd: r.try_get(6)?,
                        reward: value.zip(passed),
                        reward_stale: r.try_get::<_, Option<bool>>(9)?.unwrap_or(false),
                    })?;
                }
            }
            tx.commit().await?;
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
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = items.iter().find(|i| !seen.insert(i.id.as_str())) {
            return Err(StoreError::Corrupt(format!(
                "instance id `{}` appears twice in dataset `{name}`",
                twice.id
            )));
        }
        let item_json = items.iter().map(serde_json::to_string).collect::<Result<Vec<_>, _>>()?;
        let instance_ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
        let params_json = serde_json::to_string(params)?;
        let version = self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            tx.execute(DATASET_LOCK, &[&name]).await?;
            let latest: i64 = tx
                .query_one(
                    "SELECT COALESCE(MAX(version), 0) FROM datasets WHERE name = $1",
                    &[&name],
                )
                .await?
                .try_get(0)?;
            let version = latest + 1;
            let id = format!("{name}@{version}");
            tx.execute(
                "INSERT INTO datasets (id, name, version, agent, builder, params, item_count, content_hash, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &id,
                    &name,
                    &version,
                    &agent,
                    &builder,
                    &params_json,
                    &(items.len() as i64),
                    &hash,
                    &created_at,
                ],
            )
            .await?;
            tx.execute(
                "INSERT INTO dataset_items (dataset_id, idx, instance_id, item)
                 SELECT $1, i.idx - 1, i.instance_id, i.item
                 FROM UNNEST($2::text[], $3::text[]) WITH ORDINALITY AS i(instance_id, item, idx)",
                &[&id, &instance_ids, &item_json],
            )
            .await?;
            tx.commit().await?;
            Ok(version)
        })?;
        Ok(DatasetInfo {
            id: format!("{name}@{version}"),
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
        self.run(async {
            let client = self.client().await?;
            let rows = client
                .query(
                    &format!("SELECT {DATASET_COLUMNS} FROM datasets ORDER BY name, version"),
                    &[],
                )
                .await?;
            rows.iter().map(dataset_of).collect()
        })
    }

    fn dataset(&self, name_or_id: &str) -> Result<Option<DatasetInfo>, StoreError> {
        let sql = if name_or_id.contains('@') {
            format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE id = $1")
        } else {
            format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE name = $1 ORDER BY version DESC LIMIT 1")
        };
        self.run(async {
            let client = self.client().await?;
            let stmt = client.prepare_cached(&sql).await?;
            client
                .query_opt(&stmt, &[&name_or_id])
                .await?
                .map(|r| dataset_of(&r))
                .transpose()
        })
    }

    fn dataset_items(&self, dataset_id: &str) -> Result<Vec<Instance>, StoreError> {
        let rows = self.run(self.records(
            "SELECT item FROM dataset_items WHERE dataset_id = $1 ORDER BY idx",
            &[&dataset_id],
        ))?;
        crate::rows::parse_records(rows)
    }

    fn start_eval_run(&self, run: &EvalRunInfo) -> Result<EvalRunInfo, StoreError> {
        self.run(async {
            let client = self.client().await?;
            client
                .execute(
                    "INSERT INTO eval_runs (id, dataset_id, agent, version_id, target, created_at, finished_at)
                     VALUES ($1, $2, $3, $4, $5, $6, NULL) ON CONFLICT (id) DO NOTHING",
                    &[
                        &run.id,
                        &run.dataset_id,
                        &run.agent,
                        &run.version_id.as_str(),
                        &run.target,
                        &run.created_at,
                    ],
                )
                .await?;
            Ok(())
        })?;
        self.eval_run(&run.id)?
            .ok_or_else(|| StoreError::NotFound(format!("eval run `{}` vanished", run.id)))
    }

    fn finish_eval_run(&self, run_id: &str, finished_at: i64) -> Result<(), StoreError> {
        self.run(async {
            let client = self.client().await?;
            client
                .execute(
                    "UPDATE eval_runs SET finished_at = $2 WHERE id = $1",
                    &[&run_id, &finished_at],
                )
                .await?;
            Ok(())
        })
    }

    fn eval_run(&self, run_id: &str) -> Result<Option<EvalRunInfo>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM eval_runs WHERE id = $1"))
                .await?;
            client
                .query_opt(&stmt, &[&run_id])
                .await?
                .map(|r| run_of(&r))
                .transpose()
        })
    }

    fn eval_runs(&self, agent: Option<&str>, limit: usize) -> Result<Vec<EvalRunInfo>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM eval_runs
                     WHERE $1::text IS NULL OR agent = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
                ))
                .await?;
            let rows = client.query(&stmt, &[&agent, &(limit as i64)]).await?;
            rows.iter().map(run_of).collect()
        })
    }

    fn put_eval_result(&self, run_id: &str, result: &InstanceResult) -> Result<(), StoreError> {
        let record = serde_json::to_string(result)?;
        self.run(async {
            let client = self.client().await?;
            client
                .execute(
                    "INSERT INTO eval_results (run_id, instance_id, attempt, result) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (run_id, instance_id, attempt) DO UPDATE SET result = excluded.result",
                    &[&run_id, &result.instance_id, &i64::from(result.attempt), &record],
                )
                .await?;
            Ok(())
        })
    }

    fn eval_results(&self, run_id: &str) -> Result<Vec<InstanceResult>, StoreError> {
        let rows = self.run(self.records(
            "SELECT result FROM eval_results WHERE run_id = $1 ORDER BY instance_id, attempt",
            &[&run_id],
        ))?;
        crate::rows::parse_records(rows)
    }
}
