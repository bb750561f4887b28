//! The SQLite store: one file in the data directory, WAL mode, one writer
//! connection and a small pool of readers so reads never wait on the writer.

mod cycle;
mod learn;

use crate::rows::{signal_columns, to_signal, to_summary, to_version, traffic_only, SummaryRow, VersionRow};
use crate::{Store, StoreError};
use hone_types::{
    CallId, CallRecord, EpisodeDetail, EpisodeId, EpisodePage, EpisodeQuery, EpisodeSummary, Signal, VersionId,
    VersionRecord,
};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Schema migrations, applied in order; the index is the schema version.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/sqlite/0001_init.sql"),
    include_str!("../../migrations/sqlite/0002_learn.sql"),
    include_str!("../../migrations/sqlite/0003_cycle.sql"),
    include_str!("../../migrations/sqlite/0004_late_feedback.sql"),
    include_str!("../../migrations/sqlite/0005_dashboard.sql"),
];

/// Readers kept open between requests.
const READER_POOL: usize = 4;

/// How often the background thread checkpoints the WAL.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

pub struct SqliteStore {
    path: PathBuf,
    checkpoint_stop: Arc<AtomicBool>,
    full_sync: bool,
    pub(crate) writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.checkpoint_stop.store(true, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a connection cannot leave it half-used in a way
    // SQLite would not roll back, so a poisoned lock is safe to take over.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A write transaction that takes the write lock at `BEGIN` (`IMMEDIATE`),
/// waiting for it under the busy timeout. A deferred one that reads first
/// and then writes fails at once with "database is locked" when another
/// connection wrote in between: SQLite cannot wait there without risking a
/// deadlock, so it does not call the busy handler.
pub(crate) fn write_tx(conn: &mut Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
}

impl SqliteStore {
    /// How long the gateway's writes wait for another process's lock before
    /// the recorder spools to its journal: short, calls are waiting.
    pub const RECORDING: Duration = Duration::from_millis(250);

    /// How long other writes (the learner's, the CLI's) wait: a cycle's step
    /// should not fail because the gateway was committing a batch of calls.
    pub const PATIENT: Duration = Duration::from_secs(10);

    /// Opens (creating if needed) the database file and applies migrations.
    /// `full_sync` makes every commit fsync (survives power loss); without it a
    /// commit survives a process crash. A write waits up to [`Self::PATIENT`] for
    /// another process's (a gateway's recorder, a learner's) to finish.
    pub fn open(path: &Path, full_sync: bool) -> Result<Self, StoreError> {
        Self::open_with(path, full_sync, Self::PATIENT)
    }

    /// As [`SqliteStore::open`], a write giving up after `busy` when another
    /// connection holds the lock. The gateway opens its store with
    /// [`Self::RECORDING`]: a recorder that cannot write soon spools to its journal
    /// instead of holding up calls.
    pub fn open_with(path: &Path, full_sync: bool, busy: Duration) -> Result<Self, StoreError> {
        let open_err = |e: &dyn std::fmt::Display| {
            let mut message = e.to_string();
            if message.contains("database is locked") {
                // Still locked after the wait: another process holds the
                // file for itself (`PRAGMA locking_mode = EXCLUSIVE`, or a
                // transaction left open), and the schema cannot be checked.
                message.push_str(
                    " (another process holds it for itself: one with `PRAGMA locking_mode = EXCLUSIVE`, or a transaction left open; stop it, or give hone a data directory of its own)",
                );
            }
            StoreError::Open {
                path: path.display().to_string(),
                message,
            }
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            crate::files::create_private_dir(parent).map_err(|e| open_err(&e))?;
        }
        crate::files::create_private_file(path).map_err(|e| open_err(&e))?;
        let mut writer = Self::connect(path, full_sync, busy).map_err(|e| open_err(&e))?;
        Self::migrate(&mut writer).map_err(|e| open_err(&e))?;
        // Checkpoints move the WAL into the database file. Run inside a
        // commit they stall it for milliseconds (the p99 of every call that
        // waits on that commit), so the writer never checkpoints and a
        // background thread does it between commits.
        writer
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(|e| open_err(&e))?;
        let checkpointer = Self::connect(path, full_sync, Self::RECORDING).map_err(|e| open_err(&e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = stop.clone();
        std::thread::Builder::new()
            .name("hone-checkpoint".into())
            .spawn(move || {
                while !stop_flag.load(Ordering::Relaxed) {
                    std::thread::sleep(CHECKPOINT_EVERY);
                    if let Err(e) = checkpointer.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                        tracing::debug!(error = %e, "WAL checkpoint skipped");
                    }
                }
            })
            .map_err(|e| open_err(&e))?;
        Ok(Self {
            checkpoint_stop: stop,
            path: path.to_owned(),
            full_sync,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
        })
    }

    fn connect(path: &Path, full_sync: bool, busy: Duration) -> rusqlite::Result<Connection> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", if full_sync { "FULL" } else { "NORMAL" })?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(busy)?;
        Ok(conn)
    }

    fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )?;
        let applied: i64 = conn.query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", [], |r| {
            r.get(0)
        })?;
        for (i, sql) in MIGRATIONS.iter().enumerate() {
            let version = i as i64 + 1;
            if version <= applied {
                continue;
            }
            let tx = write_tx(conn)?;
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, strftime('%s','now') * 1000)",
                params![version],
            )?;
            tx.commit()?;
        }
        Ok(())
    }

    pub(crate) fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let conn = match lock(&self.readers).pop() {
            Some(c) => c,
            None => Self::connect(&self.path, self.full_sync, Self::RECORDING)?,
        };
        let result = f(&conn);
        let mut pool = lock(&self.readers);
        if pool.len() < READER_POOL {
            pool.push(conn);
        }
        result
    }

    /// An episode's calls: only those of the agent the episode belongs to.
    fn read_calls(conn: &Connection, episode: &str, agent: &str) -> Result<Vec<CallRecord>, StoreError> {
        let mut stmt = conn
            .prepare_cached("SELECT record FROM calls WHERE episode_id = ?1 AND agent = ?2 ORDER BY started_at, id")?;
        let rows = stmt.query_map([episode, agent], |r| r.get::<_, String>(0))?;
        rows.map(|row| Ok(serde_json::from_str(&row?)?)).collect()
    }

    fn read_signals(conn: &Connection, episode: &str) -> Result<Vec<Signal>, StoreError> {
        let mut stmt = conn.prepare_cached(
            "SELECT id, episode_id, call_id, name, value, source, comment, created_at FROM signals WHERE episode_id = ?1 ORDER BY created_at, id",
        )?;
        let rows = stmt.query_map([episode], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, Option<String>>(6)?,
                r.get::<_, i64>(7)?,
            ))
        })?;
        rows.map(|row| to_signal(row?)).collect()
    }

    fn detail(conn: &Connection, summary: EpisodeSummary) -> Result<EpisodeDetail, StoreError> {
        let calls = Self::read_calls(conn, summary.id.as_str(), &summary.agent)?;
        let signals = Self::read_signals(conn, summary.id.as_str())?;
        Ok(EpisodeDetail {
            summary,
            calls,
            signals,
        })
    }
}

fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SummaryRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
}

impl Store for SqliteStore {
    fn write_calls(&self, calls: &[CallRecord]) -> Result<usize, StoreError> {
        let mut conn = lock(&self.writer);
        let tx = write_tx(&mut conn)?;
        let mut written = 0;
        {
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO calls (id, episode_id, agent, version_id, started_at, outcome, stream, provider, model,
                    prompt_tokens, completion_tokens, cost_usd, latency_ms, ttft_ms, upstream_ms,
                    invalid_tool_call, clarifying_question, refusal, empty, truncated, record)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
            )?;
            let mut episode = tx.prepare_cached(
                "INSERT INTO episodes (id, agent, started_at, last_call_at, call_count) VALUES (?1, ?2, ?3, ?3, 1)
                 ON CONFLICT (id) DO UPDATE SET
                    started_at = MIN(started_at, excluded.started_at),
                    last_call_at = MAX(last_call_at, excluded.last_call_at),
                    call_count = call_count + 1
                 WHERE agent = excluded.agent",
            )?;
            let mut holder = tx.prepare_cached("SELECT agent FROM episodes WHERE id = ?1")?;
            for call in calls {
                let held_by: Option<String> = holder.query_row([call.episode_id.as_str()], |r| r.get(0)).optional()?;
                let moved = crate::rows::in_own_episode(call, held_by.as_deref());
                let call = moved.as_ref().unwrap_or(call);
                let record = serde_json::to_string(call)?;
                let usage = call.usage.as_ref();
                let inserted = insert.execute(params![
                    call.id.to_string(),
                    call.episode_id.as_str(),
                    call.agent,
                    call.version_id.as_str(),
                    call.started_at,
                    call.outcome.as_str(),
                    call.stream,
                    call.provider,
                    call.model,
                    usage.map(|u| u.prompt_tokens as i64),
                    usage.map(|u| u.completion_tokens as i64),
                    call.cost_usd,
                    call.latency_ms,
                    call.ttft_ms,
                    call.upstream_ms,
                    call.flags.invalid_tool_call,
                    call.flags.clarifying_question,
                    call.flags.refusal,
                    call.flags.empty,
                    call.flags.truncated,
                    record,
                ])?;
                if inserted == 1 {
                    episode.execute(params![call.episode_id.as_str(), call.agent, call.started_at])?;
                    written += 1;
                }
            }
        }
        tx.commit()?;
        Ok(written)
    }

    fn upsert_versions(&self, versions: &[VersionRecord]) -> Result<(), StoreError> {
        let mut conn = lock(&self.writer);
        let tx = write_tx(&mut conn)?;
        insert_versions(&tx, versions)?;
        tx.commit()?;
        Ok(())
    }

    fn version(&self, id: &VersionId) -> Result<Option<VersionRecord>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, agent, label, spec, parent, created_by, created_at FROM versions WHERE id = ?1",
            )?;
            let row = stmt.query_row([id.as_str()], version_row).optional()?;
            row.map(to_version).transpose()
        })
    }

    fn versions(&self, agent: Option<&str>) -> Result<Vec<VersionRecord>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, agent, label, spec, parent, created_by, created_at FROM versions
                 WHERE ?1 IS NULL OR agent = ?1 ORDER BY created_at, id",
            )?;
            let rows = stmt.query_map([agent], version_row)?;
            rows.map(|r| to_version(r?)).collect()
        })
    }

    fn call(&self, id: CallId) -> Result<Option<CallRecord>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached("SELECT record FROM calls WHERE id = ?1")?;
            let record: Option<String> = stmt.query_row([id.to_string()], |r| r.get(0)).optional()?;
            Ok(record.map(|r| serde_json::from_str(&r)).transpose()?)
        })
    }

    fn episode_agent(&self, id: &EpisodeId) -> Result<Option<String>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached("SELECT agent FROM episodes WHERE id = ?1")?;
            Ok(stmt.query_row([id.as_str()], |r| r.get(0)).optional()?)
        })
    }

    fn insert_signal(&self, signal: &Signal) -> Result<(), StoreError> {
        let mut conn = lock(&self.writer);
        let tx = write_tx(&mut conn)?;
        let episode_known: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM episodes WHERE id = ?1)",
            [signal.episode_id.as_str()],
            |r| r.get(0),
        )?;
        if !episode_known {
            return Err(StoreError::NotFound(format!(
                "no episode with id `{}`",
                signal.episode_id
            )));
        }
        if let Some(call) = signal.call_id {
            let call_known: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM calls WHERE id = ?1 AND episode_id = ?2)",
                params![call.to_string(), signal.episode_id.as_str()],
                |r| r.get(0),
            )?;
            if !call_known {
                return Err(StoreError::NotFound(format!(
                    "no call with id `{call}` in episode `{}`",
                    signal.episode_id
                )));
            }
        }
        let (value, source) = signal_columns(signal)?;
        tx.execute(
            "INSERT INTO signals (id, episode_id, call_id, name, value, source, comment, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                signal.id.to_string(),
                signal.episode_id.as_str(),
                signal.call_id.map(|c| c.to_string()),
                signal.name,
                value,
                source,
                signal.comment,
                signal.created_at,
            ],
        )?;
        // Late feedback: the episode's rewards no longer count this signal.
        tx.execute(
            "UPDATE rewards SET stale = 1 WHERE episode_id = ?1",
            [signal.episode_id.as_str()],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn episode(&self, id: &EpisodeId) -> Result<Option<EpisodeDetail>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, id, agent, started_at, last_call_at, call_count FROM episodes WHERE id = ?1",
            )?;
            match stmt.query_row([id.as_str()], summary_from_row).optional()? {
                Some(row) => Ok(Some(Self::detail(conn, to_summary(row)?)?)),
                None => Ok(None),
            }
        })
    }

    fn episodes(&self, query: &EpisodeQuery) -> Result<EpisodePage, StoreError> {
        self.with_reader(|conn| {
            let agents = query.agents.as_ref().map(serde_json::to_string).transpose()?;
            // A flag is a column of `calls`: only the known names reach the SQL.
            let flag = match query.flag.as_deref() {
                None => "",
                Some(name) => match hone_types::call::BehaviourFlags::NAMES.iter().find(|n| **n == name) {
                    Some(column) => column,
                    None => return Ok(EpisodePage { episodes: Vec::new(), next_cursor: None }),
                },
            };
            let flag_filter = if flag.is_empty() {
                String::new()
            } else {
                format!(" AND EXISTS (SELECT 1 FROM calls f WHERE f.episode_id = episodes.id AND f.{flag} = 1)")
            };
            let sql = format!(
                "SELECT seq, id, agent, started_at, last_call_at, call_count FROM episodes
                 WHERE (?1 IS NULL OR agent IN (SELECT value FROM json_each(?1)))
                   AND (?2 IS NULL OR started_at >= ?2)
                   AND (?3 IS NULL OR started_at < ?3)
                   AND (?4 IS NULL OR seq < ?4)
                   AND (?6 IS NULL OR EXISTS (SELECT 1 FROM calls v WHERE v.episode_id = episodes.id AND v.version_id = ?6))
                   AND (?7 IS NULL OR EXISTS (SELECT 1 FROM signals s WHERE s.episode_id = episodes.id AND s.name = ?7))
                   AND (?8 IS NULL OR EXISTS (SELECT 1 FROM rewards r WHERE r.episode_id = episodes.id
                        AND r.spec_version = ?8 AND r.value >= ?9 AND r.value <= ?10))
                   AND (?11 = 0 OR {traffic}){flag_filter}
                 ORDER BY seq DESC LIMIT ?5",
                traffic = traffic_only("id")
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let limit = i64::from(query.limit.max(1));
            let reward = query.reward.as_ref();
            let rows: Vec<_> = stmt
                .query_map(
                    params![
                        agents,
                        query.since,
                        query.until,
                        query.cursor,
                        limit + 1,
                        query.version.as_ref().map(|v| v.as_str()),
                        query.signal,
                        reward.map(|r| r.spec_version.as_str()),
                        reward.map(|r| r.min),
                        reward.map(|r| r.max),
                        query.production_only,
                    ],
                    summary_from_row,
                )?
                .collect::<Result<_, _>>()?;
            let more = rows.len() as i64 > limit;
            let mut episodes = Vec::with_capacity(rows.len());
            let mut last_seq = None;
            for row in rows.into_iter().take(limit as usize) {
                last_seq = Some(row.0);
                episodes.push(Self::detail(conn, to_summary(row)?)?);
            }
            Ok(EpisodePage {
                episodes,
                next_cursor: if more { last_seq.map(|s| s.to_string()) } else { None },
            })
        })
    }

    fn call_count(&self) -> Result<u64, StoreError> {
        self.with_reader(|conn| {
            Ok(conn
                .query_row("SELECT COUNT(*) FROM calls", [], |r| r.get::<_, i64>(0))?
                .max(0) as u64)
        })
    }
}

fn version_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<VersionRow> {
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

/// Stores versions not stored yet (a known id only gains a missing label).
fn insert_versions(tx: &rusqlite::Transaction<'_>, versions: &[VersionRecord]) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO versions (id, agent, label, spec, parent, created_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (id) DO UPDATE SET label = COALESCE(excluded.label, label)",
    )?;
    for v in versions {
        stmt.execute(params![
            v.id.as_str(),
            v.agent,
            v.label,
            serde_json::to_string(&v.spec)?,
            v.parent.as_ref().map(VersionId::as_str),
            v.created_by,
            v.created_at,
        ])?;
    }
    Ok(())
}
