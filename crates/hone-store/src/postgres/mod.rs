//! The PostgreSQL store: one database that gateway replicas, the learner and
//! the CLI share (`store = { type = "postgres", url = "…" }`).
//!
//! The store traits are synchronous (SQLite is); this backend bridges them
//! to `tokio-postgres` in one place, [`PostgresStore::run`]: the
//! connections of its `deadpool-postgres` pool are driven by the tokio
//! runtime the store was opened in (it has none of its own), and a method
//! called on one of that runtime's workers first hands the worker's other
//! tasks off (`block_in_place`), so async callers never stall the runtime
//! while they wait. It may be called from a plain thread, `spawn_blocking`
//! or a multi-threaded runtime's task — not from a current-thread runtime's
//! task, which cannot be handed off (`hone serve` runs a multi-threaded
//! runtime when its store is PostgreSQL). The schema is
//! `migrations/postgres/`, applied under an advisory lock so replicas
//! starting together migrate once.

mod cycle;
mod learn;
pub mod local;
mod tls;

use crate::rows::{signal_columns, to_signal, to_summary, to_version, traffic_only, VersionRow};
use crate::{Store, StoreError};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use hone_types::{
    CallId, CallRecord, EpisodeDetail, EpisodeId, EpisodePage, EpisodeQuery, Signal, VersionId, VersionRecord,
};
use std::future::Future;
use std::time::Duration;
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row};

/// Schema migrations, applied in order; the index is the schema version.
const MIGRATIONS: &[&str] = &[include_str!("../../migrations/postgres/0001_init.sql")];

/// The advisory lock migrations run under ("hone" "migr").
const MIGRATION_LOCK: i64 = 0x686f_6e65_6d69_6772;

/// Connections kept by default (`store.pool`).
pub const DEFAULT_POOL: usize = 16;

/// How long a method waits for a connection (the database down or the pool
/// exhausted) before it fails with [`StoreError::Unavailable`] — short: the
/// recorder then keeps calls in its journal and retries.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Parameters of a statement.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

pub struct PostgresStore {
    /// The runtime the store was opened in, which drives its connections.
    runtime: tokio::runtime::Handle,
    pool: Pool,
    config: tokio_postgres::Config,
    /// How connections negotiate TLS (`tls.rs`).
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// The URL without its password, for messages.
    shown: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("url", &self.shown).finish()
    }
}

/// What the server said (its SQLSTATE and message), not just "db error".
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => with_causes(e),
    }
}

/// `e` and every error under it (a failed TLS handshake says why only there).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        source = cause.source();
    }
    text
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        // Class 22 (data exception: a NUL character, an invalid byte
        // sequence, a value out of range), class 23 (a constraint the row
        // breaks) and 54000 (a value over the server's limits) are about
        // the data, not the server.
        let refused = e
            .code()
            .is_some_and(|c| c.code().starts_with("22") || c.code().starts_with("23") || c.code() == "54000");
        if refused {
            StoreError::Refused(describe(&e))
        } else {
            StoreError::Unavailable(describe(&e))
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        StoreError::Unavailable(format!("no database connection: {}", with_causes(&e)))
    }
}

/// `postgres://user@host:port/db`, never the password.
pub fn redacted(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(host, port)| match host {
            tokio_postgres::config::Host::Tcp(h) => format!("{h}:{port}"),
            tokio_postgres::config::Host::Unix(p) => format!("{}:{port}", p.display()),
        })
        .collect();
    format!(
        "postgres://{}@{}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`,
    /// or the key=value form), keeping up to `pool` connections, and applies
    /// migrations. Fails when the database cannot be reached now, or when
    /// called outside a tokio runtime (whose workers will drive the
    /// connections for as long as the store lives).
    pub fn connect(url: &str, pool: usize) -> Result<Self, StoreError> {
        let tls::Settings { config, tls } = tls::parse(url).map_err(|message| StoreError::Open {
            path: "store.url".into(),
            message,
        })?;
        let shown = redacted(&config);
        let open_err = |message: String| StoreError::Open {
            path: shown.clone(),
            message,
        };
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            open_err("a PostgreSQL store is opened inside a tokio runtime, which drives its connections".into())
        })?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| open_err(e.to_string()))?;
        let store = PostgresStore {
            runtime,
            pool,
            config,
            tls,
            shown: shown.clone(),
        };
        store.run(store.migrate()).map_err(|e| open_err(e.to_string()))?;
        Ok(store)
    }

    /// The URL without its password.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// Whether this store's connections are encrypted (TLS), as the server
    /// sees one of them.
    pub fn encrypted(&self) -> Result<bool, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let row = client
                .query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
                .await?;
            Ok(row.get::<_, bool>(0))
        })
    }

    /// Runs `work` to completion for a synchronous caller, on the runtime
    /// the store was opened in. On a worker of a multi-threaded runtime the
    /// worker's queue is handed to another thread first; elsewhere (a plain
    /// thread, a blocking-pool thread) this just waits.
    pub(crate) fn run<T>(&self, work: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        tokio::task::block_in_place(|| self.runtime.block_on(work))
    }

    pub(crate) async fn client(&self) -> Result<Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// A connection of its own, outside the pool (held for a session-level
    /// advisory lock, or listening for notifications); its driver runs on
    /// the store's runtime until the client is dropped.
    pub(crate) async fn dedicated(&self) -> Result<tokio_postgres::Client, StoreError> {
        let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, self.config.connect(self.tls.clone()))
            .await
            .map_err(|_| StoreError::Unavailable(format!("cannot reach {} in time", self.shown)))??;
        drop(self.runtime.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "dedicated PostgreSQL connection ended");
            }
        }));
        Ok(client)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        // Created only when missing (IF NOT EXISTS would log a notice on
        // every start of every replica).
        let exists: bool = tx
            .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
            .await?
            .try_get(0)?;
        if !exists {
            tx.batch_execute("CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
                .await?;
        }
        let applied: i64 = tx
            .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", &[])
            .await?
            .try_get(0)?;
        for (i, sql) in MIGRATIONS.iter().enumerate() {
            let version = i as i64 + 1;
            if version <= applied {
                continue;
            }
            tx.batch_execute(sql).await?;
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, (extract(epoch FROM now()) * 1000)::bigint)",
                &[&version],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The first column of every row, as JSON records.
    pub(crate) async fn records(&self, sql: &str, params: &Params<'_>) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await?;
        let rows = client.query(&stmt, params).await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    async fn detail<C: GenericClient>(
        client: &C,
        summary: hone_types::EpisodeSummary,
    ) -> Result<EpisodeDetail, StoreError> {
        let calls = client
            .query(
                "SELECT record FROM calls WHERE episode_id = $1 AND agent = $2 ORDER BY started_at, id",
                &[&summary.id.as_str(), &summary.agent],
            )
            .await?
            .iter()
            .map(|r| Ok(serde_json::from_str(r.try_get::<_, &str>(0)?)?))
            .collect::<Result<Vec<CallRecord>, StoreError>>()?;
        let signals = client
            .query(
                "SELECT id, episode_id, call_id, name, value, source, comment, created_at FROM signals
                 WHERE episode_id = $1 ORDER BY created_at, id",
                &[&summary.id.as_str()],
            )
            .await?
            .iter()
            .map(|r| {
                to_signal((
                    r.try_get(0)?,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    r.try_get(4)?,
                    r.try_get(5)?,
                    r.try_get(6)?,
                    r.try_get(7)?,
                ))
            })
            .collect::<Result<Vec<Signal>, StoreError>>()?;
        Ok(EpisodeDetail {
            summary,
            calls,
            signals,
        })
    }
}

fn summary_of(r: &Row) -> Result<hone_types::EpisodeSummary, StoreError> {
    to_summary((
        r.try_get(0)?,
        r.try_get(1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
        r.try_get(5)?,
    ))
}

pub(crate) fn version_of(r: &Row) -> Result<VersionRecord, StoreError> {
    let row: VersionRow = (
        r.try_get(0)?,
        r.try_get(1)?,
        r.try_get(2)?,
        r.try_get(3)?,
        r.try_get(4)?,
        r.try_get(5)?,
        r.try_get(6)?,
    );
    to_version(row)
}

/// Stores versions not stored yet (a known id only gains a missing label).
pub(crate) async fn insert_versions(
    client: &deadpool_postgres::Transaction<'_>,
    versions: &[VersionRecord],
) -> Result<(), StoreError> {
    let stmt = client
        .prepare(
            "INSERT INTO versions (id, agent, label, spec, parent, created_by, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (id) DO UPDATE SET label = COALESCE(excluded.label, versions.label)",
        )
        .await?;
    for v in versions {
        client
            .execute(
                &stmt,
                &[
                    &v.id.as_str(),
                    &v.agent,
                    &v.label,
                    &serde_json::to_string(&v.spec)?,
                    &v.parent.as_ref().map(VersionId::as_str),
                    &v.created_by,
                    &v.created_at,
                ],
            )
            .await?;
    }
    Ok(())
}

/// The columns of `calls` in the order [`CallColumns`] binds them.
const CALL_COLUMNS: &str = "id, episode_id, agent, version_id, started_at, outcome, stream, provider, model,
    prompt_tokens, completion_tokens, cost_usd, latency_ms, ttft_ms, upstream_ms,
    invalid_tool_call, clarifying_question, refusal, empty, truncated, record";

/// A batch of calls as one array per column, bound to one multi-row insert.
#[derive(Default)]
struct CallColumns {
    id: Vec<String>,
    episode_id: Vec<String>,
    agent: Vec<String>,
    version_id: Vec<String>,
    started_at: Vec<i64>,
    outcome: Vec<String>,
    stream: Vec<bool>,
    provider: Vec<Option<String>>,
    model: Vec<Option<String>>,
    prompt_tokens: Vec<Option<i64>>,
    completion_tokens: Vec<Option<i64>>,
    cost_usd: Vec<Option<f64>>,
    latency_ms: Vec<f64>,
    ttft_ms: Vec<Option<f64>>,
    upstream_ms: Vec<f64>,
    invalid_tool_call: Vec<bool>,
    clarifying_question: Vec<bool>,
    refusal: Vec<bool>,
    empty: Vec<bool>,
    truncated: Vec<bool>,
    record: Vec<String>,
}

impl CallColumns {
    fn of(calls: &[CallRecord]) -> Result<Self, StoreError> {
        let mut c = CallColumns::default();
        for call in calls {
            let usage = call.usage.as_ref();
            c.id.push(call.id.to_string());
            c.episode_id.push(call.episode_id.as_str().to_owned());
            c.agent.push(call.agent.clone());
            c.version_id.push(call.version_id.as_str().to_owned());
            c.started_at.push(call.started_at);
            c.outcome.push(call.outcome.as_str().to_owned());
            c.stream.push(call.stream);
            c.provider.push(call.provider.clone());
            c.model.push(call.model.clone());
            c.prompt_tokens.push(usage.map(|u| u.prompt_tokens as i64));
            c.completion_tokens.push(usage.map(|u| u.completion_tokens as i64));
            c.cost_usd.push(call.cost_usd);
            c.latency_ms.push(call.latency_ms);
            c.ttft_ms.push(call.ttft_ms);
            c.upstream_ms.push(call.upstream_ms);
            c.invalid_tool_call.push(call.flags.invalid_tool_call);
            c.clarifying_question.push(call.flags.clarifying_question);
            c.refusal.push(call.flags.refusal);
            c.empty.push(call.flags.empty);
            c.truncated.push(call.flags.truncated);
            c.record.push(serde_json::to_string(call)?);
        }
        Ok(c)
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 21] {
        [
            &self.id,
            &self.episode_id,
            &self.agent,
            &self.version_id,
            &self.started_at,
            &self.outcome,
            &self.stream,
            &self.provider,
            &self.model,
            &self.prompt_tokens,
            &self.completion_tokens,
            &self.cost_usd,
            &self.latency_ms,
            &self.ttft_ms,
            &self.upstream_ms,
            &self.invalid_tool_call,
            &self.clarifying_question,
            &self.refusal,
            &self.empty,
            &self.truncated,
            &self.record,
        ]
    }
}

/// One statement for a whole batch: the calls not stored yet are inserted
/// (a replayed call is skipped), and their episodes created or extended. An
/// episode belongs to the agent of its first call; a call naming another
/// agent's episode is kept but never joins it (the gateway refuses those).
/// Returns how many calls were new.
fn write_calls_sql() -> &'static str {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "WITH batch AS (
            SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::text[],
                $7::bool[], $8::text[], $9::text[], $10::int8[], $11::int8[], $12::float8[], $13::float8[],
                $14::float8[], $15::float8[], $16::bool[], $17::bool[], $18::bool[], $19::bool[], $20::bool[],
                $21::text[])
            WITH ORDINALITY AS b({CALL_COLUMNS}, ord)
        ), inserted AS (
            INSERT INTO calls ({CALL_COLUMNS})
            SELECT {CALL_COLUMNS} FROM batch ORDER BY ord
            ON CONFLICT (id) DO NOTHING
            RETURNING id, episode_id, agent, started_at
        ), owners AS (
            SELECT DISTINCT ON (b.episode_id) b.episode_id, b.agent
            FROM batch b JOIN inserted i ON i.id = b.id
            ORDER BY b.episode_id, b.ord
        ), episode_rows AS (
            INSERT INTO episodes (id, agent, started_at, last_call_at, call_count)
            SELECT i.episode_id, i.agent, MIN(i.started_at), MAX(i.started_at), COUNT(*)
            FROM inserted i JOIN owners o ON o.episode_id = i.episode_id AND o.agent = i.agent
            GROUP BY i.episode_id, i.agent
            ON CONFLICT (id) DO UPDATE SET
                started_at = LEAST(episodes.started_at, excluded.started_at),
                last_call_at = GREATEST(episodes.last_call_at, excluded.last_call_at),
                call_count = episodes.call_count + excluded.call_count
            WHERE episodes.agent = excluded.agent
        )
        SELECT COUNT(*) FROM inserted"
        )
    });
    &SQL
}

impl Store for PostgresStore {
    fn write_calls(&self, calls: &[CallRecord]) -> Result<usize, StoreError> {
        if calls.is_empty() {
            return Ok(0);
        }
        let mut ids: Vec<&str> = calls.iter().map(|c| c.episode_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // Writers of the same episode ids (other gateways) take turns, in
            // one order so that they never deadlock: which agent stored an id
            // first is then known before these calls are placed.
            tx.execute(
                "SELECT pg_advisory_xact_lock(ids.key) FROM (
                    SELECT DISTINCT hashtextextended(id, 0) AS key FROM unnest($1::text[]) AS id ORDER BY key
                 ) AS ids",
                &[&ids],
            )
            .await?;
            let mut holders: std::collections::HashMap<String, String> = tx
                .query("SELECT id, agent FROM episodes WHERE id = ANY($1)", &[&ids])
                .await?
                .into_iter()
                .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                .collect::<Result<_, tokio_postgres::Error>>()?;
            let placed: Vec<CallRecord> = calls
                .iter()
                .map(|call| {
                    let holder = holders
                        .entry(call.episode_id.as_str().to_owned())
                        .or_insert_with(|| call.agent.clone());
                    crate::rows::in_own_episode(call, Some(holder)).unwrap_or_else(|| call.clone())
                })
                .collect();
            let columns = CallColumns::of(&placed)?;
            let stmt = tx.prepare_cached(write_calls_sql()).await?;
            let written: i64 = tx.query_one(&stmt, &columns.params()).await?.try_get(0)?;
            tx.commit().await?;
            Ok(written.max(0) as usize)
        })
    }

    fn upsert_versions(&self, versions: &[VersionRecord]) -> Result<(), StoreError> {
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            insert_versions(&tx, versions).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn version(&self, id: &VersionId) -> Result<Option<VersionRecord>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT id, agent, label, spec, parent, created_by, created_at FROM versions WHERE id = $1",
                )
                .await?;
            client
                .query_opt(&stmt, &[&id.as_str()])
                .await?
                .map(|r| version_of(&r))
                .transpose()
        })
    }

    fn versions(&self, agent: Option<&str>) -> Result<Vec<VersionRecord>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT id, agent, label, spec, parent, created_by, created_at FROM versions
                     WHERE $1::text IS NULL OR agent = $1 ORDER BY created_at, id",
                )
                .await?;
            client.query(&stmt, &[&agent]).await?.iter().map(version_of).collect()
        })
    }

    fn call(&self, id: CallId) -> Result<Option<CallRecord>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let stmt = client.prepare_cached("SELECT record FROM calls WHERE id = $1").await?;
            match client.query_opt(&stmt, &[&id.to_string()]).await? {
                Some(r) => Ok(Some(serde_json::from_str(r.try_get::<_, &str>(0)?)?)),
                None => Ok(None),
            }
        })
    }

    fn episode_agent(&self, id: &EpisodeId) -> Result<Option<String>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached("SELECT agent FROM episodes WHERE id = $1")
                .await?;
            Ok(client
                .query_opt(&stmt, &[&id.as_str()])
                .await?
                .map(|r| r.try_get(0))
                .transpose()?)
        })
    }

    fn insert_signal(&self, signal: &Signal) -> Result<(), StoreError> {
        let (value, source) = signal_columns(signal)?;
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let episode = signal.episode_id.as_str();
            let known: bool = tx
                .query_one("SELECT EXISTS (SELECT 1 FROM episodes WHERE id = $1)", &[&episode])
                .await?
                .try_get(0)?;
            if !known {
                return Err(StoreError::NotFound(format!("no episode with id `{episode}`")));
            }
            if let Some(call) = signal.call_id {
                let known: bool = tx
                    .query_one(
                        "SELECT EXISTS (SELECT 1 FROM calls WHERE id = $1 AND episode_id = $2)",
                        &[&call.to_string(), &episode],
                    )
                    .await?
                    .try_get(0)?;
                if !known {
                    return Err(StoreError::NotFound(format!(
                        "no call with id `{call}` in episode `{episode}`"
                    )));
                }
            }
            tx.execute(
                "INSERT INTO signals (id, episode_id, call_id, name, value, source, comment, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                &[
                    &signal.id.to_string(),
                    &episode,
                    &signal.call_id.map(|c| c.to_string()),
                    &signal.name,
                    &value,
                    &source,
                    &signal.comment,
                    &signal.created_at,
                ],
            )
            .await?;
            // Late feedback: the episode's rewards no longer count this signal.
            tx.execute("UPDATE rewards SET stale = TRUE WHERE episode_id = $1", &[&episode])
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn episode(&self, id: &EpisodeId) -> Result<Option<EpisodeDetail>, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let row = client
                .query_opt(
                    "SELECT seq, id, agent, started_at, last_call_at, call_count FROM episodes WHERE id = $1",
                    &[&id.as_str()],
                )
                .await?;
            match row {
                Some(r) => Ok(Some(Self::detail(&**client, summary_of(&r)?).await?)),
                None => Ok(None),
            }
        })
    }

    fn episodes(&self, query: &EpisodeQuery) -> Result<EpisodePage, StoreError> {
        // A flag is a column of `calls`: only the known names reach the SQL.
        let flag_filter = match query.flag.as_deref() {
            None => String::new(),
            Some(name) => match hone_types::call::BehaviourFlags::NAMES.iter().find(|n| **n == name) {
                Some(column) => {
                    format!(" AND EXISTS (SELECT 1 FROM calls f WHERE f.episode_id = episodes.id AND f.{column})")
                }
                None => {
                    return Ok(EpisodePage {
                        episodes: Vec::new(),
                        next_cursor: None,
                    })
                }
            },
        };
        let sql = format!(
            "SELECT seq, id, agent, started_at, last_call_at, call_count FROM episodes
             WHERE ($1::text[] IS NULL OR agent = ANY($1))
               AND ($2::int8 IS NULL OR started_at >= $2)
               AND ($3::int8 IS NULL OR started_at < $3)
               AND ($4::int8 IS NULL OR seq < $4)
               AND ($6::text IS NULL OR EXISTS (SELECT 1 FROM calls v WHERE v.episode_id = episodes.id AND v.version_id = $6))
               AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM signals s WHERE s.episode_id = episodes.id AND s.name = $7))
               AND ($8::text IS NULL OR EXISTS (SELECT 1 FROM rewards r WHERE r.episode_id = episodes.id
                    AND r.spec_version = $8 AND r.value >= $9 AND r.value <= $10))
               AND (NOT $11 OR {traffic}){flag_filter}
             ORDER BY seq DESC LIMIT $5",
            traffic = traffic_only("id")
        );
        let limit = i64::from(query.limit.max(1));
        let reward = query.reward.as_ref();
        let version = query.version.as_ref().map(|v| v.as_str());
        let (spec, min, max) = (
            reward.map(|r| r.spec_version.as_str()),
            reward.map(|r| r.min),
            reward.map(|r| r.max),
        );
        self.run(async {
            let client = self.client().await?;
            let stmt = client.prepare_cached(&sql).await?;
            let rows = client
                .query(
                    &stmt,
                    &[
                        &query.agents,
                        &query.since,
                        &query.until,
                        &query.cursor,
                        &(limit + 1),
                        &version,
                        &query.signal,
                        &spec,
                        &min,
                        &max,
                        &query.production_only,
                    ],
                )
                .await?;
            let more = rows.len() as i64 > limit;
            let mut episodes = Vec::with_capacity(rows.len());
            let mut last_seq = None;
            for row in rows.iter().take(limit as usize) {
                last_seq = Some(row.try_get::<_, i64>(0)?);
                episodes.push(Self::detail(&**client, summary_of(row)?).await?);
            }
            Ok(EpisodePage {
                episodes,
                next_cursor: if more { last_seq.map(|s| s.to_string()) } else { None },
            })
        })
    }

    fn call_count(&self) -> Result<u64, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let n: i64 = client.query_one("SELECT COUNT(*) FROM calls", &[]).await?.try_get(0)?;
            Ok(n.max(0) as u64)
        })
    }
}
