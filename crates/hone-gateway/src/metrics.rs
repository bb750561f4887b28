//! Prometheus metrics, kept with atomics (no registry crate): request
//! counts by route and status class, latency, upstream time and gateway
//! overhead histograms, and the recorder's queue, spool and rows.

use hone_store::RecorderStats;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Histogram bucket upper bounds in seconds.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

pub struct Histogram {
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: BUCKETS.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn observe(&self, seconds: f64) {
        let seconds = seconds.max(0.0);
        if let Some(i) = BUCKETS.iter().position(|&b| seconds <= b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let total = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "{name}_count {total}");
    }
}

/// Routes counted separately.
#[derive(Debug, Clone, Copy)]
pub enum RouteName {
    Chat,
    Models,
    Feedback,
    Episodes,
    Admin,
    Other,
    Responses,
    Messages,
    Embeddings,
    Traces,
}

const ROUTES: [&str; 10] = [
    "chat",
    "models",
    "feedback",
    "episodes",
    "admin",
    "other",
    "responses",
    "messages",
    "embeddings",
    "traces",
];
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

#[derive(Default)]
pub struct Metrics {
    requests: [[AtomicU64; 5]; ROUTES.len()],
    pub upstream_errors: AtomicU64,
    pub upstream_retries: AtomicU64,
    pub client_disconnects: AtomicU64,
    /// `POST /v1/embeddings` answered, the input tokens they counted, and
    /// their cost in nano-dollars (from the provider's `prices`).
    pub embedding_requests: AtomicU64,
    pub embedding_tokens: AtomicU64,
    pub embedding_cost_nanousd: AtomicU64,
    pub request_seconds: Histogram,
    pub upstream_seconds: Histogram,
    pub overhead_seconds: Histogram,
}

impl Metrics {
    pub fn count(&self, route: RouteName, status: u16) {
        let class = usize::from((status / 100).clamp(1, 5) - 1);
        self.requests[route as usize][class].fetch_add(1, Ordering::Relaxed);
    }

    pub fn render(&self, recorder: &RecorderStats) -> String {
        let mut out = String::with_capacity(8192);
        out.push_str(
            "# HELP hone_requests_total HTTP requests by route and status class.\n# TYPE hone_requests_total counter\n",
        );
        for (r, route) in ROUTES.iter().enumerate() {
            for (c, class) in CLASSES.iter().enumerate() {
                let n = self.requests[r][c].load(Ordering::Relaxed);
                if n > 0 {
                    let _ = writeln!(out, "hone_requests_total{{route=\"{route}\",status=\"{class}\"}} {n}");
                }
            }
        }
        let load = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let lines: [(&str, &str, u64); 19] = [
            (
                "hone_embedding_requests_total",
                "Embedding requests answered (not episodes).",
                load(&self.embedding_requests),
            ),
            (
                "hone_embedding_tokens_total",
                "Input tokens of answered embedding requests.",
                load(&self.embedding_tokens),
            ),
            (
                "hone_upstream_errors_total",
                "Chat calls that failed on every provider.",
                load(&self.upstream_errors),
            ),
            (
                "hone_upstream_retries_total",
                "Upstream attempts beyond the first.",
                load(&self.upstream_retries),
            ),
            (
                "hone_client_disconnects_total",
                "Chat calls whose client left before the end.",
                load(&self.client_disconnects),
            ),
            (
                "hone_recorder_rows_journaled_total",
                "Calls appended to the journal (acknowledged).",
                load(&recorder.rows_journaled),
            ),
            (
                "hone_recorder_rows_written_total",
                "Calls committed to the store.",
                load(&recorder.rows_written),
            ),
            (
                "hone_recorder_rows_replayed_total",
                "Calls copied into the store from journal files (at start, after an outage).",
                load(&recorder.rows_replayed),
            ),
            (
                "hone_recorder_batches_total",
                "Group-commit batches.",
                load(&recorder.batches),
            ),
            (
                "hone_recorder_store_failures_total",
                "Batches the store refused.",
                load(&recorder.store_failures),
            ),
            (
                "hone_recorder_refused_total",
                "Calls that could not be journaled (their requests failed).",
                load(&recorder.lost_and_refused),
            ),
            (
                "hone_recorder_append_failures_total",
                "Journal appends that failed (each cut back to the last whole line).",
                load(&recorder.append_failures),
            ),
            (
                "hone_recorder_ack_timeouts_total",
                "Calls refused because the journal did not take them in time (a stalled disk).",
                load(&recorder.ack_timeouts),
            ),
            (
                "hone_recorder_torn_fragments_total",
                "Torn journal fragments (never acknowledged) skipped when reading the journal back.",
                load(&recorder.torn_fragments),
            ),
            (
                "hone_recorder_corrupt_lines_total",
                "Unreadable journal lines found at start (kept in *.jsonl.corrupt files).",
                load(&recorder.corrupt_lines),
            ),
            (
                "hone_recorder_refused_calls_total",
                "Calls the database refused for what they hold (kept in journal/refused/, not in the store).",
                load(&recorder.rows_refused),
            ),
            (
                "hone_recorder_spool_bytes",
                "Bytes of acknowledged calls waiting in the on-disk journal for the store.",
                recorder.spool_bytes(),
            ),
            (
                "hone_recorder_store_unavailable",
                "1 while the store cannot be written and calls wait in the journal.",
                load(&recorder.store_unavailable),
            ),
            (
                "hone_recorder_queue_depth",
                "Acknowledged calls not yet in the store.",
                recorder.queue_depth(),
            ),
        ];
        let cost = load(&self.embedding_cost_nanousd) as f64 / 1e9;
        let _ = writeln!(
            out,
            "# HELP hone_embedding_cost_usd_total What embedding requests cost (from `prices`).\n# TYPE hone_embedding_cost_usd_total counter\nhone_embedding_cost_usd_total {cost}"
        );
        for (name, help, value) in lines {
            // Sizes and states go up and down: gauges; everything named _total only counts up.
            let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
        self.request_seconds.render(
            &mut out,
            "hone_request_duration_seconds",
            "Chat call latency as the client sees it.",
        );
        self.upstream_seconds.render(
            &mut out,
            "hone_upstream_duration_seconds",
            "Time spent waiting on providers per chat call.",
        );
        self.overhead_seconds.render(
            &mut out,
            "hone_gateway_overhead_seconds",
            "Chat call latency minus upstream time.",
        );
        out
    }
}
