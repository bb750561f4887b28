//! What every backend shares about rows: the SQL that tells traffic from
//! evaluation episodes, and the conversion of a row's plain columns into a
//! typed record — written once, so SQLite and PostgreSQL read alike.

use crate::StoreError;
use hone_types::{
    CallId, CallRecord, DatasetInfo, EpisodeId, EpisodeSummary, EvalRunInfo, Instance, Signal, SignalSource,
    SignalValue, VersionId, VersionRecord,
};
use sha2::{Digest, Sha256};

/// SQL that is true when `column` names a traffic episode rather than an
/// evaluation run: the store's form of [`EpisodeId::is_evaluation`].
pub(crate) fn traffic_only(column: &str) -> String {
    format!("{column} NOT LIKE '{}%'", hone_types::ids::EVALUATION_PREFIX)
}

/// Calls read per episode of a window at most (see [`recent_episodes`]).
const WINDOW_CALLS_PER_EPISODE: usize = 64;

/// SQL for the ids of a version's newest traffic episodes since a time, at
/// most `limit` of them, given the placeholders of agent, version, since
/// and limit: found among its newest `limit` × 64 calls through the
/// `(version_id, started_at)` index, so a window reads what it shows and
/// not every call since a canary started (an average of over 64 calls per
/// episode would shorten the window). The same text serves both engines.
pub(crate) fn recent_episodes(agent: &str, version: &str, since: &str, limit: &str) -> String {
    format!(
        "SELECT r.episode_id FROM (
             SELECT episode_id, started_at FROM calls
             WHERE version_id = {version} AND agent = {agent} AND started_at >= {since} AND {traffic}
             ORDER BY started_at DESC LIMIT CAST({limit} AS BIGINT) * {per}
         ) r GROUP BY r.episode_id ORDER BY MAX(r.started_at) DESC LIMIT {limit}",
        traffic = traffic_only("episode_id"),
        per = WINDOW_CALLS_PER_EPISODE,
    )
}

/// The call as it is stored: in an episode of its own agent. Clients choose
/// episode ids, so another agent may hold this one already (`holder`, the
/// agent of the stored episode of that id); then the call goes to
/// `id@agent` ([`EpisodeId::for_agent`]): the first agent to store an id
/// keeps it bare, and no agent sees, blocks or learns of another's. `None`
/// when the call is stored as it is. Both backends apply this inside their
/// write transaction, so it is decided once, whichever gateway recorded the
/// call.
pub(crate) fn in_own_episode(call: &CallRecord, holder: Option<&str>) -> Option<CallRecord> {
    match holder {
        Some(holder) if holder != call.agent => {
            let mut moved = call.clone();
            moved.episode_id = call.episode_id.for_agent(&call.agent);
            Some(moved)
        }
        _ => None,
    }
}

/// SHA-256 over the instances' canonical JSON, one per line.
pub fn content_hash(items: &[Instance]) -> Result<String, StoreError> {
    let mut hasher = Sha256::new();
    for item in items {
        hasher.update(serde_json::to_vec(item)?);
        hasher.update(b"\n");
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The JSON array of signal names a window's query aggregates (`None`:
/// the episode has none).
pub(crate) fn signal_names(json: Option<&str>) -> Result<Vec<String>, StoreError> {
    match json {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("signal names {text}: {e}"))),
    }
}

pub(crate) fn episode_id(id: &str) -> Result<EpisodeId, StoreError> {
    EpisodeId::parse_stored(id).map_err(|e| StoreError::Corrupt(format!("episode id `{id}` {e}")))
}

/// `(seq, id, agent, started_at, last_call_at, call_count)`.
pub(crate) type SummaryRow = (i64, String, String, i64, i64, i64);

pub(crate) fn to_summary(
    (_, id, agent, started_at, last_call_at, call_count): SummaryRow,
) -> Result<EpisodeSummary, StoreError> {
    Ok(EpisodeSummary {
        id: episode_id(&id)?,
        agent,
        started_at,
        last_call_at,
        call_count: call_count.max(0) as u64,
    })
}

/// `(id, agent, label, spec, parent, created_by, created_at)`.
pub(crate) type VersionRow = (String, String, Option<String>, String, Option<String>, String, i64);

pub(crate) fn to_version(
    (id, agent, label, spec, parent, created_by, created_at): VersionRow,
) -> Result<VersionRecord, StoreError> {
    let bad = |what: &str| StoreError::Corrupt(format!("version `{id}`: bad {what}"));
    Ok(VersionRecord {
        id: VersionId::parse(&id).ok_or_else(|| bad("id"))?,
        agent,
        label,
        spec: serde_json::from_str(&spec)?,
        parent: parent
            .map(|p| VersionId::parse(&p).ok_or_else(|| bad("parent")))
            .transpose()?,
        created_by,
        created_at,
    })
}

/// `(id, episode_id, call_id, name, value, source, comment, created_at)`.
pub(crate) type SignalRow = (
    String,
    String,
    Option<String>,
    String,
    String,
    String,
    Option<String>,
    i64,
);

pub(crate) fn to_signal(
    (id, episode_id, call_id, name, value, source, comment, created_at): SignalRow,
) -> Result<Signal, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("signal {id}: bad {what}"));
    Ok(Signal {
        id: id.parse().map_err(|_| corrupt("id"))?,
        episode_id: EpisodeId::parse_stored(&episode_id).map_err(|_| corrupt("episode id"))?,
        call_id: call_id
            .map(|c| CallId::parse(&c).ok_or_else(|| corrupt("call id")))
            .transpose()?,
        name,
        value: serde_json::from_str::<SignalValue>(&value)?,
        source: serde_json::from_value::<SignalSource>(serde_json::Value::String(source))?,
        comment,
        created_at,
    })
}

/// A signal's columns as they are stored: `(value, source)`.
pub(crate) fn signal_columns(signal: &Signal) -> Result<(String, String), StoreError> {
    let source = serde_json::to_value(signal.source)?;
    Ok((
        serde_json::to_string(&signal.value)?,
        source.as_str().unwrap_or("user").to_owned(),
    ))
}

pub(crate) const DATASET_COLUMNS: &str =
    "id, name, version, agent, builder, params, item_count, content_hash, created_at";

/// The columns of [`DATASET_COLUMNS`].
pub(crate) type DatasetRow = (String, String, i64, String, String, String, i64, String, i64);

pub(crate) fn to_dataset(
    (id, name, version, agent, builder, params, item_count, content_hash, created_at): DatasetRow,
) -> Result<DatasetInfo, StoreError> {
    Ok(DatasetInfo {
        id,
        name,
        version: version.max(0) as u32,
        agent,
        builder,
        params: serde_json::from_str(&params)?,
        item_count: item_count.max(0) as u64,
        content_hash,
        created_at,
    })
}

pub(crate) const RUN_COLUMNS: &str = "id, dataset_id, agent, version_id, target, created_at, finished_at";

/// The columns of [`RUN_COLUMNS`].
pub(crate) type RunRow = (String, String, String, String, String, i64, Option<i64>);

pub(crate) fn to_run(
    (id, dataset_id, agent, version_id, target, created_at, finished_at): RunRow,
) -> Result<EvalRunInfo, StoreError> {
    Ok(EvalRunInfo {
        version_id: VersionId::parse(&version_id)
            .ok_or_else(|| StoreError::Corrupt(format!("eval run `{id}`: bad version id")))?,
        id,
        dataset_id,
        agent,
        target,
        created_at,
        finished_at,
    })
}

/// Parses JSON records read back from a store.
pub(crate) fn parse_records<T: serde::de::DeserializeOwned>(rows: Vec<String>) -> Result<Vec<T>, StoreError> {
    rows.iter()
        .map(|r| serde_json::from_str(r).map_err(StoreError::from))
        .collect()
}
