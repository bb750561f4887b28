//! `hone-bench gateway`: measures what hone adds to a call.
//!
//! It starts a fast upstream (a fixed `chat.completion`) and `hone serve`
//! (release build, recording on and durable) as separate processes, then for
//! each rate sends the same open-loop load first straight to the upstream and
//! then through hone — by chat completions and by the Responses API (the
//! same call, translated) — and prints latency percentiles, the overhead (through
//! hone minus direct), hone's CPU time per request, and rows written vs.
//! responses received. Output is a report for a person; nothing is asserted.
//!
//! `--stores sqlite,postgres` repeats the whole measurement with hone
//! recording into each engine, in one run (PostgreSQL: a private durable
//! server from Debian's binaries, fsync on, `synchronous_commit = off`).
//! `--out FILE` also writes every row as JSON, with the command, commit,
//! date and machine that produced it.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod load;
mod upstream;

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("upstream") => {
            let port: u16 = args.get(1).context("usage: hone-bench upstream PORT")?.parse()?;
            upstream::serve(port)
        }
        Some("gateway") => gateway(&args[1..]),
        _ => bail!(
            "usage: hone-bench gateway [--hone PATH] [--seconds N] [--rates 500,1000,2000] [--stores sqlite,postgres] [--upstream-port PORT] [--out FILE] | hone-bench upstream PORT"
        ),
    }
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(port: u16) -> Result<()> {
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing listens on port {port}")
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_name = stat.rsplit_once(')').context("bad /proc stat")?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

fn gateway(args: &[String]) -> Result<()> {
    let hone = PathBuf::from(flag(args, "--hone").unwrap_or("target/release/hone"));
    let seconds: f64 = flag(args, "--seconds").unwrap_or("10").parse()?;
    let rates: Vec<f64> = flag(args, "--rates")
        .unwrap_or("500,1000,2000")
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let stores: Vec<String> = flag(args, "--stores")
        .unwrap_or("sqlite")
        .split(',')
        .map(str::to_owned)
        .collect();
    let me = std::env::current_exe()?;

    // `--upstream-port`: an upstream already listening on loopback (nginx
    // answering a fixed completion, say); otherwise the built-in one.
    let (upstream_port, _upstream) = match flag(args, "--upstream-port") {
        Some(port) => (port.parse::<u16>()?, None),
        None => {
            let port = free_port()?;
            let child = Process(Command::new(&me).args(["upstream", &port.to_string()]).spawn()?);
            (port, Some(child))
        }
    };
    wait_for(upstream_port)?;

    let mut rows = Vec::new();
    for store in &stores {
        let dir = tempfile::tempdir()?;
        // Kept alive while hone records into it.
        let (store_line, _server) = match store.as_str() {
            "sqlite" => (String::new(), None),
            "postgres" => {
                let server = hone_store::LocalPostgres::create_durable(&dir.path().join("postgres"))?;
                let url = server.create_database("bench")?;
                (
                    format!("store = {{ type = \"postgres\", url = \"{url}\" }}\n"),
                    Some(server),
                )
            }
            other => bail!("--stores: `{other}` is not `sqlite` or `postgres`"),
        };
        println!("\n== recording into {store} ==");
        for mut row in measure(&hone, &dir, &store_line, upstream_port, seconds, &rates)? {
            row["store"] = serde_json::json!(store);
            rows.push(row);
        }
    }
    if let Some(out) = flag(args, "--out") {
        let command = std::iter::once("hone-bench".to_owned())
            .chain(args.iter().cloned())
            .collect::<Vec<_>>();
        // The command, commit, date and machine, then what was measured.
        let mut report = serde_json::to_value(hone_console::Provenance::now(&command))?;
        report["method"] = serde_json::json!("open loop at a fixed rate, 64 keep-alive connections, latency from the moment each request was due (latency correction); direct = the same load straight to the upstream, measured in the same run; overhead = through-hone percentile minus direct percentile; CPU = hone's user+system CPU time per answered request");
        report["rows"] = serde_json::json!(rows);
        std::fs::write(out, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("cannot write {out}"))?;
        println!("\nwritten to {out}");
    }
    Ok(())
}

/// Starts hone recording into the store `store_line` names (none: SQLite)
/// and prints the overhead table for every rate.
fn measure(
    hone: &std::path::Path,
    dir: &tempfile::TempDir,
    store_line: &str,
    upstream_port: u16,
    seconds: f64,
    rates: &[f64],
) -> Result<Vec<serde_json::Value>> {
    let config = dir.path().join("bench.toml");
    std::fs::write(
        &config,
        format!(
            "{store_line}[providers.up]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:{upstream_port}/v1\"\n\
             [agents.assistant.versions.v1]\nprovider = \"up\"\nmodel = \"fast\"\n"
        ),
    )?;
    let hone_port = free_port()?;
    let hone_child = Command::new(hone)
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{hone_port}"), "--data-dir"])
        .arg(dir.path().join("data"))
        .env("HONE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| {
            format!(
                "cannot start {} (build it with `cargo build --release -p hone`)",
                hone.display()
            )
        })?;
    let hone_pid = hone_child.id();
    let _hone = Process(hone_child);
    wait_for(hone_port)?;

    let body = serde_json::to_vec(&serde_json::json!({
        "model": "assistant",
        "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is the capital of France?"}],
        "temperature": 0.2
    }))?;
    // The same call through OpenAI's Responses API (translated to chat completions).
    let responses_body = serde_json::to_vec(&serde_json::json!({
        "model": "assistant",
        "instructions": "You are a helpful assistant.",
        "input": "What is the capital of France?",
        "temperature": 0.2
    }))?;
    const CHAT: &str = "/v1/chat/completions";
    const RESPONSES: &str = "/v1/responses";
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    println!("hone gateway benchmark: {seconds}s per run, open loop, 64 keep-alive connections, recording ON (a response is sent only after its call is in the journal, which survives kill -9; batches into the store follow)");
    println!("hone: {}  (pid {hone_pid})\n", hone.display());
    // Warm both paths (connection pools, page cache).
    runtime.block_on(load::run(upstream_port, CHAT, &body, 500.0, 1.0))?;
    runtime.block_on(load::run(hone_port, CHAT, &body, 500.0, 1.0))?;
    runtime.block_on(load::run(hone_port, RESPONSES, &responses_body, 500.0, 1.0))?;

    println!(
        "{:>6} {:>10} | {:>10} {:>10} | {:>10} {:>10} | {:>9} {:>9} | {:>9} | {:>6} | {:>12}",
        "rate",
        "route",
        "direct p50",
        "direct p99",
        "hone p50",
        "hone p99",
        "ovh p50",
        "ovh p99",
        "achieved",
        "errors",
        "CPU/request"
    );
    let mut received = 0u64;
    let mut rows = Vec::new();
    for &rate in rates {
        let direct = runtime.block_on(load::run(upstream_port, CHAT, &body, rate, seconds))?;
        for (route, path, request) in [("chat", CHAT, &body), ("responses", RESPONSES, &responses_body)] {
            let cpu_before = cpu_seconds(hone_pid)?;
            let through = runtime.block_on(load::run(hone_port, path, request, rate, seconds))?;
            let cpu = cpu_seconds(hone_pid)? - cpu_before;
            received += through.ok;
            println!(
                "{:>6} {:>10} | {:>8.3}ms {:>8.3}ms | {:>8.3}ms {:>8.3}ms | {:>7.3}ms {:>7.3}ms | {:>7.0}/s | {:>6} | {:>10.3}ms",
                rate,
                route,
                direct.p(0.50),
                direct.p(0.99),
                through.p(0.50),
                through.p(0.99),
                through.p(0.50) - direct.p(0.50),
                through.p(0.99) - direct.p(0.99),
                through.achieved_rate(),
                through.errors + direct.errors,
                cpu * 1000.0 / through.ok.max(1) as f64,
            );
            rows.push(serde_json::json!({
                "rate": rate,
                "route": route,
                "seconds": seconds,
                "direct_p50_ms": direct.p(0.50),
                "direct_p99_ms": direct.p(0.99),
                "hone_p50_ms": through.p(0.50),
                "hone_p99_ms": through.p(0.99),
                "hone_p999_ms": through.p(0.999),
                "overhead_p50_ms": through.p(0.50) - direct.p(0.50),
                "overhead_p99_ms": through.p(0.99) - direct.p(0.99),
                "achieved_per_s": through.achieved_rate(),
                "errors": through.errors + direct.errors,
                "cpu_ms_per_request": cpu * 1000.0 / through.ok.max(1) as f64,
            }));
        }
    }
    // Warm-up runs were recorded too.
    let warmup = 1000;
    std::thread::sleep(Duration::from_millis(300));
    let metrics = runtime.block_on(load::get(hone_port, "/metrics"))?;
    let written: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hone_recorder_rows_written_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    println!(
        "\nrows written {} = responses received {} (+{warmup} warm-up): {}",
        written,
        received,
        if written == received + warmup { "yes" } else { "NO" }
    );
    println!("ovh = through-hone percentile minus direct percentile; CPU/request = hone's user+system CPU time / requests answered.");
    anyhow::ensure!(
        written == received + warmup,
        "hone wrote {written} rows for {received} answered requests (+{warmup} warm-up)"
    );
    Ok(rows)
}
