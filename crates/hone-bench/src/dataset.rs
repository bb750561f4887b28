//! `hone bench dataset`: builds a `traffic` dataset of `--size` instances
//! from a store of `--calls` recorded calls and exports it as JSONL, timing
//! both and reading the process's peak resident memory for each phase (the
//! peak is reset after the store is filled, so it shows what the build
//! itself needs). Run it at two store sizes to see memory stay flat, and
//! with `--stores sqlite,postgres` to compare the engines in one run (the
//! PostgreSQL one on a private server under `--dir`, fsync on, commits not
//! waited for — the durability class of SQLite's `synchronous = NORMAL`).

use anyhow::{Context, Result};
use hone_learn::data::dataset::{self, BuildOptions, Builder, ExportFormat};
use hone_store::{CycleStore, EpisodeFilter, LocalPostgres, PostgresStore, SqliteStore, Store};
use hone_types::{CallRecord, EpisodeId, VersionId};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

pub struct Options {
    pub calls: u64,
    pub size: usize,
    pub dir: PathBuf,
    /// `sqlite`, `postgres`.
    pub stores: Vec<String>,
    /// Where to write the result file (the command, commit, date,
    /// machine and every table), if anywhere.
    pub out: Option<std::path::PathBuf>,
}

/// Peak resident set size in MiB (Linux), after `reset_peak`.
fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn reset_peak() {
    // Writing 5 to clear_refs resets VmHWM to the current RSS (Linux ≥ 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn template() -> Result<CallRecord> {
    Ok(serde_json::from_value(json!({
        "id": "00000000-0000-7000-8000-000000000000",
        "episode_id": "e",
        "agent": "support",
        "version_id": "0000000000000000",
        "started_at": 0,
        "outcome": "ok",
        "stream": false,
        "request": {"model": "support", "messages": [
            {"role": "system", "content": "You are a support agent for an online shop. Be brief and precise."},
            {"role": "user", "content": "x"}]},
        "response": {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Your order ships tomorrow; the tracking link follows by mail."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 42, "completion_tokens": 14, "total_tokens": 56}},
        "error": null, "provider": "up", "model": "m", "attempts": [],
        "usage": {"prompt_tokens": 42, "completion_tokens": 14, "total_tokens": 56},
        "cost_usd": 0.0001, "latency_ms": 120.0, "ttft_ms": null, "upstream_ms": 110.0,
        "flags": {"invalid_tool_call": false, "clarifying_question": false, "refusal": false, "empty": false, "truncated": false}
    }))?)
}

/// Fills the store with `calls` calls in episodes of 1–3 calls over three
/// versions, with 5% flagged and 1% failed calls.
pub(crate) fn fill(store: &dyn Store, calls: u64) -> Result<()> {
    let have = store.call_count()?;
    if have >= calls {
        hone_console::note(format_args!("store already holds {have} calls"));
        return Ok(());
    }
    let template = template()?;
    let versions: Vec<VersionId> = ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "cccccccccccccccc"]
        .iter()
        .filter_map(|v| VersionId::parse(v))
        .collect();
    let started = Instant::now();
    let mut batch = Vec::with_capacity(10_000);
    let (mut episode, mut in_episode) = (0u64, 0u64);
    for i in have..calls {
        let mut c = template.clone();
        if in_episode > episode % 3 {
            episode += 1;
            in_episode = 0;
        }
        in_episode += 1;
        c.id = hone_types::CallId::parse(&uuid_from(i).to_string()).context("call id")?;
        c.episode_id = EpisodeId::parse(&format!("ep-{episode:09}")).context("episode id")?;
        c.version_id = versions[(episode % 10).min(2) as usize].clone();
        c.started_at = 1_700_000_000_000 + i as i64 * 10;
        c.request.messages[1] = hone_types::openai::Message::new(
            hone_types::openai::Role::User,
            format!(
                "Ticket {}: where is my order {}? It was due on day {}.",
                episode,
                episode * 7919 % 100_003,
                episode % 28
            ),
        );
        c.flags.refusal = i % 20 == 7;
        if i % 100 == 3 {
            c.outcome = hone_types::CallOutcome::UpstreamError;
        }
        c.cost_usd = Some(0.0001 * (1 + i % 17) as f64);
        batch.push(c);
        if batch.len() == batch.capacity() {
            store.write_calls(&batch)?;
            batch.clear();
            if (i + 1) % 100_000 == 0 {
                hone_console::note(format_args!(
                    "  {} calls written ({:.0} calls/s)",
                    i + 1,
                    (i + 1 - have) as f64 / started.elapsed().as_secs_f64()
                ));
            }
        }
    }
    store.write_calls(&batch)?;
    Ok(())
}

fn uuid_from(i: u64) -> uuid::Uuid {
    uuid::Uuid::from_u64_pair(0x0000_0000_0000_7000, 0x8000_0000_0000_0000 | i)
}

pub fn run(o: Options) -> Result<ExitCode> {
    let mut rows = Vec::new();
    // Kept alive while its store is measured.
    let mut server = None;
    for engine in &o.stores {
        let store: Box<dyn CycleStore> = match engine.as_str() {
            "sqlite" => Box::new(SqliteStore::open(&o.dir.join("hone.db"), false)?),
            "postgres" => {
                // The server runs as `postgres` when this is root: it must be
                // able to pass through `--dir` (search, not list).
                crate::support::let_others_through(&o.dir)?;
                let pg_dir = o.dir.join("postgres");
                let fresh = !pg_dir.join("data").exists();
                let local = if fresh {
                    LocalPostgres::create_durable(&pg_dir)?
                } else {
                    LocalPostgres::open_durable(&pg_dir)?
                };
                if fresh {
                    local.create_database("bench")?;
                }
                let url = local.url("bench");
                server = Some(local);
                Box::new(PostgresStore::connect(&url, 4)?)
            }
            other => anyhow::bail!("--stores: `{other}` is not `sqlite` or `postgres`"),
        };
        rows.push(measure(engine, store.as_ref(), &o)?);
    }
    drop(server);
    let mut out = crate::report::Report::new(o.out.clone());
    writeln!(out, "| store | calls | fill calls/s | episodes scanned | instances | build s | build peak RSS | export s | export peak RSS | RSS before |")?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|")?;
    for row in rows {
        writeln!(out, "{row}")?;
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// Fills one store, builds the dataset and exports it; one table row.
fn measure(engine: &str, store: &dyn CycleStore, o: &Options) -> Result<String> {
    hone_console::note(format_args!(
        "{engine}: filling {} with {} calls …",
        o.dir.display(),
        o.calls
    ));
    let had = store.call_count()?;
    let started = Instant::now();
    fill(store, o.calls)?;
    let calls = store.call_count()?;
    let fill_rate = if calls > had {
        format!("{:.0}", (calls - had) as f64 / started.elapsed().as_secs_f64())
    } else {
        "(filled before)".into()
    };
    reset_peak();
    let before = peak_mib();
    let started = Instant::now();
    let options = BuildOptions {
        builder: Builder::Traffic,
        name: "bench-traffic".into(),
        filter: EpisodeFilter {
            agent: "support".into(),
            ..EpisodeFilter::default()
        },
        size: o.size,
        seed: 0,
        dedup: true,
        champion: None,
        reference_signal: None,
    };
    let (info, stats) = dataset::build(store, &options, 0, &mut |n| {
        hone_console::note(format_args!("  {engine}: scanned {n} episodes"))
    })?;
    let build_s = started.elapsed().as_secs_f64();
    let build_peak = peak_mib();
    reset_peak();
    let started = Instant::now();
    let items = store.dataset_items(&info.id)?;
    let path = o.dir.join(format!("traffic-{engine}.jsonl"));
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let lines = dataset::export(&items, ExportFormat::Chat, &mut w)?;
    w.flush()?;
    let export_s = started.elapsed().as_secs_f64();
    let export_peak = peak_mib();
    let mib = |m: Option<f64>| m.map(|v| format!("{v:.0} MiB")).unwrap_or_else(|| "n/a".into());
    Ok(format!(
        "| {engine} | {calls} | {fill_rate} | {} | {} | {build_s:.2} | {} | {export_s:.2} ({lines} lines) | {} | {} |",
        stats.scanned,
        info.item_count,
        mib(build_peak),
        mib(export_peak),
        mib(before)
    ))
}
