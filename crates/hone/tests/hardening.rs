//! Regression tests for the first hostile review of `hone serve`, one
//! per finding, each on the real binary over loopback with the fault
//! injected for real: two agents' keys sharing an episode id, a file-size
//! limit that tears journal writes, upstreams that hang or send garbage or
//! far too much, hundreds of slow clients, a stalled journal, a locked
//! database, malformed HTTP, and exposure beyond loopback.

use crate::support::{chat, client, config, FakeUpstream, Hone};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub(crate) const KEY_ALPHA: &str = "key-alpha";
pub(crate) const KEY_BETA: &str = "key-beta";

/// Two agents on the fake upstream, each with its own key.
pub(crate) fn two_agents(upstream: &FakeUpstream) -> String {
    format!(
        r#"
[[gateway.api_keys]]
name = "alpha-key"
sha256 = "39a00d29356083a9c9d65c14652350d61b11d5d2e8582da510887c8e11be08c8"
agents = ["alpha"]

[[gateway.api_keys]]
name = "beta-key"
sha256 = "8fd493b2a681a4810d9fd40526a9de960deb255e7bfbb1c4d509d06d6da6ff5b"
agents = ["beta"]

[providers.up]
type = "openai"
base_url = "{}"
max_retries = 0

[agents.alpha.versions.v1]
provider = "up"
model = "fake-model"

[agents.beta.versions.v1]
provider = "up"
model = "fake-model"
"#,
        upstream.base_url()
    )
}

async fn send(request: reqwest::RequestBuilder) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// POSTs a chat request, in `episode` when given.
async fn post_chat(hone: &Hone, episode: Option<&str>, request: &Value) -> reqwest::Response {
    let mut builder = client().post(hone.url("/v1/chat/completions")).json(request);
    if let Some(episode) = episode {
        builder = builder.header("x-hone-episode", episode);
    }
    builder.send().await.unwrap()
}

/// The same error, with the id it names taken out.
fn without(body: &Value, id: &str) -> String {
    body.to_string().replace(id, "ID")
}

#[tokio::test]
async fn finding_1_one_agents_key_never_reads_or_extends_another_agents_episode() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&two_agents(&upstream));
    let post = |key: &str, agent: &str, text: &str| {
        client()
            .post(hone.url("/v1/chat/completions"))
            .bearer_auth(key)
            .header("x-hone-episode", "ticket-4711")
            .json(&chat(agent, text))
    };
    let (status, headers, body) = send(post(KEY_BETA, "beta", "beta's private question")).await;
    assert_eq!(status, 200, "{body}");
    let beta_call = headers["x-hone-call"].to_str().unwrap().to_owned();

    // Episode ids are each agent's own: alpha choosing the same id is not
    // refused (a refusal would tell alpha that beta uses it, and let alpha
    // block beta's ids); alpha gets an episode of its own under that id.
    let (status, headers, body) = send(post(KEY_ALPHA, "alpha", "alpha's own question")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-hone-episode"], "ticket-4711");

    // Each key reads its own episode by the id its client chose.
    let get = |key: &str, path: &str| client().get(hone.url(path)).bearer_auth(key);
    let (status, _, mine) = send(get(KEY_ALPHA, "/v1/episodes/ticket-4711")).await;
    assert_eq!(status, 200, "{mine}");
    assert_eq!(mine["agent"], "alpha");
    assert_eq!(mine["calls"].as_array().unwrap().len(), 1);
    assert!(!mine.to_string().contains("private question"), "{mine}");
    let (status, _, unknown) = send(get(KEY_ALPHA, "/v1/episodes/ticket-0000")).await;
    assert_eq!(status, 404, "{unknown}");
    let (status, _, list) = send(get(KEY_ALPHA, "/v1/episodes")).await;
    assert_eq!(status, 200);
    assert!(!list.to_string().contains("private question"), "{list}");

    // Alpha's feedback on beta's call: unknown, and nothing stored; on the
    // episode id: alpha's own episode.
    let feedback = |body: Value| {
        client()
            .post(hone.url("/v1/feedback"))
            .bearer_auth(KEY_ALPHA)
            .json(&body)
    };
    let stranger = uuid::Uuid::now_v7().to_string();
    let (status, _, on_theirs) = send(feedback(json!({"call_id": beta_call, "name": "thumbs", "value": true}))).await;
    let (_, _, on_unknown) = send(feedback(json!({"call_id": stranger, "name": "thumbs", "value": true}))).await;
    assert_eq!(status, 404, "{on_theirs}");
    assert_eq!(without(&on_theirs, &beta_call), without(&on_unknown, &stranger));
    let (status, _, on_episode) = send(feedback(
        json!({"episode_id": "ticket-4711", "name": "thumbs", "value": true}),
    ))
    .await;
    assert_eq!(status, 200, "{on_episode}");

    // Beta's episode is whole and untouched.
    let (status, _, own) = send(get(KEY_BETA, "/v1/episodes/ticket-4711")).await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["agent"], "beta");
    assert_eq!(own["calls"].as_array().unwrap().len(), 1);
    assert!(own["signals"].as_array().unwrap().is_empty());
    // …also after a restart, when each agent's episode comes from the store alone.
    let mut hone = hone;
    hone.restart();
    let (status, _, body) = send(
        client()
            .post(hone.url("/v1/chat/completions"))
            .bearer_auth(KEY_ALPHA)
            .header("x-hone-episode", "ticket-4711")
            .json(&chat("alpha", "again")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    hone.wait_caught_up();
    let get = |key: &str, path: &str| client().get(hone.url(path)).bearer_auth(key);
    let (_, _, mine) = send(get(KEY_ALPHA, "/v1/episodes/ticket-4711")).await;
    assert_eq!(mine["calls"].as_array().unwrap().len(), 2, "{mine}");
    assert_eq!(mine["signals"].as_array().unwrap().len(), 1, "{mine}");
    let (_, _, own) = send(get(KEY_BETA, "/v1/episodes/ticket-4711")).await;
    assert_eq!(own["calls"].as_array().unwrap().len(), 1, "{own}");
}

/// The size of the journal segment being written.
fn journal_size(hone: &Hone) -> u64 {
    std::fs::read_dir(hone.dir.join("data/journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .max()
        .map_or(0, |p| std::fs::metadata(p).unwrap().len())
}

/// The file-size limit hone starts with in the full-disk test (also its
/// hard limit, which an unprivileged process cannot raise again).
const ROOMY: u64 = 1 << 40;

/// Sets the running process's soft file-size limit (`None`: [`ROOMY`]), as a
/// disk filling up and being freed again.
fn set_file_size_limit(hone: &Hone, bytes: Option<u64>) {
    let limit = bytes.unwrap_or(ROOMY);
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &hone.child.id().to_string(), &format!("--fsize={limit}:")])
        .status()
        .unwrap();
    assert!(status.success());
}

async fn wait_healthy(hone: &Hone) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while client().get(hone.url("/health")).send().await.unwrap().status() != 200 {
        assert!(Instant::now() < deadline, "the journal did not become writable again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn finding_2_a_torn_journal_write_on_a_full_disk_loses_no_acknowledged_call() {
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap().keep();
    // Runs under a file-size limit (SIGXFSZ ignored), so that it can be
    // lowered and raised while it serves: a disk filling up and freed again.
    let mut hone = Hone::start_limited(&dir, &config(&upstream), &[], Some(ROOMY));
    let big = "x".repeat(120 << 10);
    let mut acknowledged = Vec::new();
    let (mut torn, mut after_torn) = (0, 0);
    let call = |text: String| {
        client()
            .post(hone.url("/v1/chat/completions"))
            .header("x-hone-episode", "disk-full")
            .json(&chat("assistant", &text))
            .send()
    };
    for round in 0..4 {
        for i in 0..2 {
            let response = call(format!("small {round}.{i}")).await.unwrap();
            assert_eq!(response.status(), 200);
            acknowledged.push(response.headers()["x-hone-call"].to_str().unwrap().to_owned());
        }
        // The disk fills: 64 KiB left, and a call of ~250 KiB to journal.
        set_file_size_limit(&hone, Some(journal_size(&hone) + (64 << 10)));
        let response = call(format!("big {round} {big}")).await.unwrap();
        assert_eq!(response.status(), 503, "a write past the limit was acknowledged");
        torn += 1;
        // Space comes back; the next calls are acknowledged (and must be readable).
        set_file_size_limit(&hone, None);
        wait_healthy(&hone).await;
        let response = call(format!("after torn write {round}")).await.unwrap();
        assert_eq!(response.status(), 200);
        acknowledged.push(response.headers()["x-hone-call"].to_str().unwrap().to_owned());
        after_torn += 1;
    }
    let metrics = hone.metrics().await;
    assert!(
        metrics.contains(&format!("hone_recorder_append_failures_total {torn}")),
        "{metrics}"
    );

    // Crash and start again: every acknowledged call is there.
    hone.kill9();
    hone.file_size_limit = None;
    hone.restart();
    hone.wait_caught_up();
    let episode: Value = client()
        .get(hone.url("/v1/episodes/disk-full"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let stored: Vec<&str> = episode["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for call in &acknowledged {
        assert!(stored.contains(&call.as_str()), "acknowledged call {call} is lost");
    }
    assert_eq!(stored.len(), acknowledged.len(), "a refused call was stored");
    let metrics = hone.metrics().await;
    assert!(metrics.contains("hone_recorder_corrupt_lines_total 0"), "{metrics}");
    eprintln!(
        "full disk: {torn} torn writes refused, {after_torn} calls acknowledged right after one, all {} acknowledged calls found after kill -9 and restart",
        acknowledged.len()
    );
}

/// An upstream that accepts connections and, per `mode`, never answers
/// (`silent`) or sends stream headers and then only keep-alive comments.
fn raw_upstream(mode: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buffer = [0u8; 65536];
                let _ = stream.read(&mut buffer);
                match mode {
                    "keepalive" => {
                        let _ = stream.write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                        );
                        while stream.write_all(b"e\r\n: keep-alive\n\n\r\n").is_ok() {
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                    "garbage" => {
                        let _ = stream.write_all(b"this is not HTTP at all\r\n\r\n");
                    }
                    _ => std::thread::sleep(Duration::from_secs(600)),
                }
            });
        }
    });
    url
}

fn one_provider(base_url: &str, extra: &str) -> String {
    format!(
        r#"
[gateway]
shutdown_grace_ms = 5000
{extra}

[providers.up]
type = "openai"
base_url = "{base_url}"
max_retries = 0
timeout_ms = 1500

[agents.assistant.versions.v1]
provider = "up"
model = "fake-model"
"#
    )
}

async fn episode_outcomes(hone: &Hone, episode: &str) -> Vec<String> {
    hone.wait_caught_up();
    let body: Value = client()
        .get(hone.url(&format!("/v1/episodes/{episode}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["calls"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|c| c["outcome"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn finding_3_a_stream_upstream_that_hangs_or_only_keeps_alive_ends_at_its_deadline_and_is_recorded() {
    for (mode, episode) in [("silent", "hang-headers"), ("keepalive", "hang-keepalive")] {
        let mut hone = Hone::start(&one_provider(&raw_upstream(mode), ""));
        let mut request = chat("assistant", "hello");
        request["stream"] = json!(true);
        let started = Instant::now();
        let response = post_chat(&hone, Some(episode), &request).await;
        let status = response.status().as_u16();
        let body = response.text().await.unwrap();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{mode}: the stream took {took:?}");
        match mode {
            "silent" => {
                assert_eq!(status, 504, "{body}");
                assert!(body.contains("upstream_timeout"), "{body}");
            }
            _ => {
                assert_eq!(status, 200);
                assert!(body.contains("upstream_timeout") && !body.contains("[DONE]"), "{body}");
            }
        }
        assert_eq!(episode_outcomes(&hone, episode).await, vec!["upstream_error"], "{mode}");
        // SIGTERM drains and exits while the upstream still hangs.
        let stopping = Instant::now();
        assert!(hone.terminate().success());
        assert!(stopping.elapsed() < Duration::from_secs(10));
    }
}

#[tokio::test]
async fn finding_4_slow_connections_are_capped_and_timed_out_while_health_answers() {
    let upstream = FakeUpstream::start().await;
    let extra = "max_connections = 64\nheader_read_timeout_ms = 3000";
    let hone = Hone::start(&one_provider(&upstream.base_url(), extra));
    // 200 clients that start a request and never finish its headers.
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(&hone.addr).unwrap();
        // One over the cap may already be answered and closed.
        let _ = stream.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n");
        slow.push(stream);
    }
    // Over the cap: told so at once, in JSON, and closed.
    let mut refused = Vec::new();
    let mut last = slow.pop().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = last.read_to_end(&mut refused);
    let refused = String::from_utf8_lossy(&refused);
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("\"code\":\"too_many_connections\""), "{refused}");
    // Once the refused ones are closed, the process holds no more
    // descriptors than the cap allows (plus its own files).
    std::thread::sleep(Duration::from_millis(500));
    let fds = std::fs::read_dir(format!("/proc/{}/fd", hone.child.id()))
        .unwrap()
        .count();
    assert!(fds < 64 + 64, "{fds} descriptors open");
    // Within the header timeout the slow ones are closed and /health answers.
    let deadline = Instant::now() + Duration::from_secs(8);
    let health = loop {
        let response = client().get(hone.url("/health")).send().await;
        if let Ok(response) = response {
            if response.status() == 200 {
                break response.json::<Value>().await.unwrap();
            }
        }
        assert!(Instant::now() < deadline, "/health did not answer again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(health["status"], "ok");
    let mut first = slow.remove(0);
    first.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    let closed = first.read_to_end(&mut rest).is_ok();
    assert!(closed, "a slow client was not closed after the header timeout");
}

#[tokio::test]
async fn finding_5_a_stalled_journal_leaves_health_and_models_answering_and_refuses_calls_before_the_upstream() {
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap().keep();
    let stall = dir.join("stall");
    let hone = Hone::start_in(
        &dir,
        &config(&upstream),
        &[("HONE_FAULT_JOURNAL_STALL", stall.to_str().unwrap())],
    );
    std::fs::write(&stall, "").unwrap();
    // A call whose journal write stalls: refused after the bounded wait.
    let stuck = tokio::spawn({
        let url = hone.url("/v1/chat/completions");
        async move {
            let response = client()
                .post(url)
                .json(&chat("assistant", "stuck"))
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    });
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let started = Instant::now();
    let health = client().get(hone.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), 503);
    let health: Value = health.json().await.unwrap();
    assert_eq!(health["status"], "degraded");
    assert_eq!(health["journal"]["state"], "stalled");
    let models = client().get(hone.url("/v1/models")).send().await.unwrap();
    assert_eq!(models.status(), 200);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the event loop waited on the disk"
    );
    // A new call is refused before any upstream is paid for it.
    let before = upstream.bodies("/v1/chat/completions").len();
    let refused = post_chat(&hone, None, &chat("assistant", "refused")).await;
    assert_eq!(refused.status(), 503);
    assert!(refused.text().await.unwrap().contains("recorder_unavailable"));
    assert_eq!(upstream.bodies("/v1/chat/completions").len(), before);
    let (status, body) = stuck.await.unwrap();
    assert_eq!(status, 503, "{body}");
    // The disk comes back: healthy, and calls are recorded again.
    std::fs::remove_file(&stall).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while client().get(hone.url("/health")).send().await.unwrap().status() != 200 {
        assert!(Instant::now() < deadline, "the journal did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ok = post_chat(&hone, None, &chat("assistant", "after")).await;
    assert_eq!(ok.status(), 200);
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn finding_6_oversized_upstream_answers_and_events_get_502_are_recorded_and_stay_out_of_memory() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    // The peak after an ordinary call is the baseline: what the oversized
    // answers may add is bounded by the 32 MiB answer cap (kept once, as its
    // chunks), far below their size.
    let warm_up = post_chat(&hone, Some("ordinary"), &chat("assistant", "hello")).await;
    assert_eq!(warm_up.status(), 200);
    let baseline = peak_rss_kib(hone.child.id());
    for (stream, text, episode) in [(false, "HUGE:200", "huge-answer"), (true, "BIGEVENT:64", "huge-event")] {
        let mut request = chat("assistant", text);
        request["stream"] = json!(stream);
        let response = post_chat(&hone, Some(episode), &request).await;
        let status = response.status().as_u16();
        let body = response.text().await.unwrap();
        assert_eq!(status, if stream { 200 } else { 502 }, "{body}");
        assert!(body.contains("upstream_response_too_large"), "{body}");
        assert_eq!(episode_outcomes(&hone, episode).await, vec!["upstream_error"]);
    }
    let peak = peak_rss_kib(hone.child.id());
    let grown = peak.saturating_sub(baseline);
    assert!(
        grown < 80 << 10,
        "peak RSS grew {grown} KiB ({baseline} → {peak}) on a 200 MiB answer"
    );
}

#[tokio::test]
async fn finding_7_starts_on_a_locked_database_and_spools_until_it_is_free() {
    let upstream = FakeUpstream::start().await;
    let mut hone = Hone::start(&config(&upstream));
    let db = hone.db_path();
    assert!(hone.terminate().success());
    let blocker = rusqlite::Connection::open(&db).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    hone.restart();
    let response = post_chat(&hone, Some("while-locked"), &chat("assistant", "spooled")).await;
    assert_eq!(response.status(), 200);
    let health: Value = client()
        .get(hone.url("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["recorder"]["caught_up"], false);
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    assert_eq!(episode_outcomes(&hone, "while-locked").await, vec!["ok"]);
}

#[cfg(unix)]
#[tokio::test]
async fn finding_7_data_files_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt;
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let response = post_chat(&hone, None, &chat("assistant", "private")).await;
    assert_eq!(response.status(), 200);
    let data = hone.dir.join("data");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("journal")), 0o700);
    let mut checked = 0;
    for dir in [data.clone(), data.join("journal")] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                assert_eq!(mode(&path), 0o600, "{} is readable by others", path.display());
                checked += 1;
            }
        }
    }
    assert!(checked >= 3, "hone.db, its WAL and a journal segment: {checked} files");
}

/// Sends raw bytes and reads the whole reply.
fn raw(addr: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = stream.write_all(request);
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply).into_owned()
}

#[tokio::test]
async fn finding_7_every_refusal_has_an_openai_style_body_and_upstream_faults_are_named() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let long_uri = format!("GET /v1/models?{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    let huge_header = format!(
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(500_000)
    );
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "bad path encoding",
            b"GET /v1/episodes/%ff%fe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            "400",
            "invalid_path",
        ),
        ("URI too long", long_uri.into_bytes(), "414", "uri_too_long"),
        (
            "headers too large",
            huge_header.into_bytes(),
            "431",
            "headers_too_large",
        ),
        (
            "bare CR in a header",
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n".to_vec(),
            "400",
            "invalid_http",
        ),
    ];
    for (what, request, status, code) in cases {
        let reply = raw(&hone.addr, &request);
        assert!(reply.starts_with(&format!("HTTP/1.1 {status}")), "{what}: {reply}");
        assert!(
            reply.to_ascii_lowercase().contains("content-type: application/json"),
            "{what}: {reply}"
        );
        let body = &reply[reply.find("\r\n\r\n").unwrap() + 4..];
        let body: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}: {reply}"));
        assert_eq!(body["error"]["code"], code, "{what}");
    }

    // A 300 KiB feedback value is refused, and stored nowhere.
    let call = post_chat(&hone, None, &chat("assistant", "rate me")).await;
    let call_id = call.headers()["x-hone-call"].to_str().unwrap().to_owned();
    let huge = json!({"call_id": call_id, "name": "note", "value": "v".repeat(300 << 10)});
    let (status, _, body) = send(client().post(hone.url("/v1/feedback")).json(&huge)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "value_too_large");

    // A JSON document where a stream was asked for is named as such.
    let mut request = chat("assistant", "JSONSTREAM");
    request["stream"] = json!(true);
    let (status, _, body) = send(client().post(hone.url("/v1/chat/completions")).json(&request)).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "upstream_protocol_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("stream"), "{body}");

    // An upstream that answers garbage is reachable, just not speaking HTTP.
    let garbage = Hone::start(&one_provider(&raw_upstream("garbage"), ""));
    let (status, _, body) = send(
        client()
            .post(garbage.url("/v1/chat/completions"))
            .json(&chat("assistant", "hi")),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "upstream_protocol_error", "{body}");
}

#[tokio::test]
async fn finding_8_an_open_admin_is_not_served_beyond_loopback_unless_allowed() {
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap().keep();
    std::fs::write(dir.join("hone.toml"), config(&upstream)).unwrap();
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hone = |extra: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hone"));
        command
            .args(["serve", "--config"])
            .arg(dir.join("hone.toml"))
            .args(["--listen", &format!("0.0.0.0:{port}"), "--data-dir"])
            .arg(dir.join("data"))
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        command
    };
    let refused = hone(&[]).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--insecure-open-admin"), "{stderr}");
    assert!(
        !stderr.contains("hone is serving"),
        "refused before saying it serves: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "no colour codes when stderr is not a terminal: {stderr}"
    );

    let mut allowed = hone(&["--insecure-open-admin"]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "not serving with --insecure-open-admin");
        assert!(
            allowed.try_wait().unwrap().is_none(),
            "exited with --insecure-open-admin"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = allowed.kill();
    let _ = allowed.wait();
}
