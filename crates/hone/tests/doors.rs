//! Regression tests for the second hostile review of `hone serve`, one per
//! finding, each on the real binary over loopback: the dashboard behind
//! keys (anonymous and cross-origin access, sessions, sign-in limits,
//! security headers), answers that could jam the store (a streamed answer
//! over the limit, a call the database refuses), stream memory, the time to
//! first token, token limits sent upstream, and HTTP/2 with prior knowledge.

use crate::hardening::{two_agents, KEY_ALPHA, KEY_BETA};
use crate::support::{chat, client, config, get_json, FakeUpstream, Hone};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

const ADMIN: &str = "doors-admin-secret";

/// A client that does not follow redirects, so they can be checked.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn call(hone: &Hone, key: &str, agent: &str, episode: &str, text: &str) -> reqwest::Response {
    client()
        .post(hone.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-hone-episode", episode)
        .json(&chat(agent, text))
        .send()
        .await
        .unwrap()
}

/// Signs in at `/ui/login` with `token`; the session cookie (`name=value`).
async fn sign_in(hone: &Hone, token: &str) -> String {
    let r = browser()
        .post(hone.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "signing in with {token}");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Max-Age=", "Path=/ui"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap().to_owned();
    assert!(pair.starts_with("hone_session="), "{pair}");
    assert!(
        !cookie.contains(token),
        "the cookie is never the credential itself: {cookie}"
    );
    pair
}

async fn get(hone: &Hone, path: &str, cookie: Option<&str>) -> (u16, String) {
    let mut request = browser().get(hone.url(path));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// Posts a dashboard form from the dashboard's own origin, as `cookie`.
async fn post_form(hone: &Hone, path: &str, cookie: &str, body: String) -> reqwest::Response {
    browser()
        .post(hone.url(path))
        .header("cookie", cookie)
        .header("origin", format!("http://{}", hone.addr))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// An episode as `GET /v1/episodes/{id}` gives it (with `key`, if any).
async fn episode(hone: &Hone, id: &str, key: Option<&str>) -> Value {
    let mut request = client().get(hone.url(&format!("/v1/episodes/{id}")));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap().json().await.unwrap()
}

/// The CSRF token the page's forms carry.
fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a form with a CSRF token");
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

#[tokio::test]
async fn finding_dashboard_open_with_keys_only_now_needs_a_key_and_a_key_sees_only_its_agents() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&two_agents(&upstream));
    assert_eq!(
        call(&hone, KEY_BETA, "beta", "beta-ticket", "beta's secret plan")
            .await
            .status(),
        200
    );
    assert_eq!(
        call(&hone, KEY_ALPHA, "alpha", "alpha-ticket", "alpha's question")
            .await
            .status(),
        200
    );
    hone.wait_caught_up();

    // Anonymous: sent to sign in; an action is refused and changes nothing.
    let r = browser()
        .get(hone.url("/ui/episodes/beta-ticket"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/ui/login");
    assert!(!r.text().await.unwrap().contains("secret plan"));
    for origin in [None, Some("http://evil.example")] {
        let mut post = browser()
            .post(hone.url("/ui/agents/beta/rollback"))
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(origin) = origin {
            post = post.header("origin", origin);
        }
        let r = post.send().await.unwrap();
        assert!([401, 403].contains(&r.status().as_u16()), "{origin:?}: {}", r.status());
    }

    // Alpha's key sees alpha and nothing of beta, as if beta did not exist.
    let alpha = sign_in(&hone, KEY_ALPHA).await;
    let (status, page) = get(&hone, "/ui/episodes/alpha-ticket", Some(&alpha)).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("alpha&#x27;s question") || page.contains("alpha's question"),
        "{page}"
    );
    let (status, page) = get(&hone, "/ui/episodes/beta-ticket", Some(&alpha)).await;
    assert_eq!(status, 404);
    assert!(!page.contains("secret plan"));
    let (status, _) = get(&hone, "/ui/agents/beta", Some(&alpha)).await;
    assert_eq!(status, 404);
    let (_, overview) = get(&hone, "/ui", Some(&alpha)).await;
    assert!(overview.contains("/ui/agents/alpha") && !overview.contains("/ui/agents/beta"));
    let (_, episodes) = get(&hone, "/ui/episodes", Some(&alpha)).await;
    assert!(episodes.contains("alpha-ticket") && !episodes.contains("beta-ticket"));
    let (status, _) = get(&hone, "/ui/episodes?agent=beta", Some(&alpha)).await;
    assert_eq!(status, 404);
    let csrf = csrf_of(&overview);
    let r = post_form(&hone, "/ui/agents/beta/rollback", &alpha, format!("csrf={csrf}")).await;
    assert_eq!(r.status(), 404, "no action on another agent");

    // Beta's key, as a script sends it, sees beta's episode.
    let r = browser()
        .get(hone.url("/ui/episodes/beta-ticket"))
        .bearer_auth(KEY_BETA)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("secret plan"));

    // Signing out ends the session on the server, not only in the browser.
    let r = post_form(&hone, "/ui/logout", &alpha, format!("csrf={csrf}")).await;
    assert_eq!(r.status(), 303);
    assert!(r.headers()["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    let (status, _) = get(&hone, "/ui", Some(&alpha)).await;
    assert_eq!(status, 303, "the old cookie no longer signs in");
}

async fn canary(hone: &Hone, expected: Option<&str>) -> Option<String> {
    crate::support::canary_when(hone, ADMIN, "assistant", expected).await
}

#[tokio::test]
async fn finding_cross_port_csrf_post_rolled_back_a_champion_now_refused() {
    use hone_store::{CycleStore, Store};
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[gateway]\nadmin_token_env = \"HONE_TEST_ADMIN\"\n{}\n[agents.assistant.versions.v2]\nprovider = \"up\"\nmodel = \"fake-model\"\nsystem = \"You are kind.\"\n[agents.assistant.deployment]\nchampion = \"v1\"\n",
        config(&upstream)
    );
    let hone = Hone::start_in(dir.path(), &text, &[("HONE_TEST_ADMIN", ADMIN)]);
    // Once it answers, its store is made (hone listens before it migrates).
    hone.wait_caught_up();
    // A canary on v2, as the learner would start one.
    let store = hone_store::SqliteStore::open(&hone.db_path(), false).unwrap();
    let labelled = |label: &str| {
        store
            .versions(Some("assistant"))
            .unwrap()
            .into_iter()
            .find(|v| v.label.as_deref() == Some(label))
            .unwrap()
            .id
    };
    let (v1, v2) = (labelled("v1"), labelled("v2"));
    let stored = store.deployment("assistant").unwrap();
    let next = hone_types::Deployment {
        agent: "assistant".into(),
        champion: v1,
        canary: Some(v2.clone()),
        canary_share: 0.5,
        canary_since: Some(hone_types::time::now_ms()),
        previous: vec![],
        revision: 0,
        source: "learner".into(),
        updated_at: hone_types::time::now_ms(),
    };
    assert!(store
        .change_deployment(
            &next,
            stored.map(|d| d.revision),
            &[],
            &[],
            None,
            hone_types::time::now_ms()
        )
        .unwrap());
    assert_eq!(canary(&hone, Some(v2.as_str())).await.as_deref(), Some(v2.as_str()));

    let session = sign_in(&hone, ADMIN).await;
    let (status, page) = get(&hone, "/ui/agents/assistant", Some(&session)).await;
    assert_eq!(status, 200);
    let csrf = csrf_of(&page);
    let post = |origin: String, site: Option<&'static str>, body: String| {
        let mut request = browser()
            .post(hone.url("/ui/agents/assistant/rollback"))
            .header("cookie", &session)
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(site) = site {
            request = request.header("sec-fetch-site", site);
        }
        request.send()
    };
    let port = hone.addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    // The attacker's page on another port of the same host: SameSite lets
    // the cookie through, the origin check does not (with or without the
    // token, which that page cannot read).
    let other = format!("http://127.0.0.1:{}", port.wrapping_add(1));
    for body in [String::new(), format!("csrf={csrf}")] {
        let r = post(other.clone(), Some("same-site"), body.clone()).await.unwrap();
        assert_eq!(r.status(), 403, "cross-port post with body {body:?}");
    }
    // From this origin but without the form's token: refused too.
    let own = format!("http://{}", hone.addr);
    let r = post(own.clone(), Some("same-origin"), String::new()).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = post(own.clone(), Some("same-origin"), "csrf=guessed".into())
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        canary(&hone, Some(v2.as_str())).await.as_deref(),
        Some(v2.as_str()),
        "nothing changed"
    );
    // The dashboard's own form rolls the canary back.
    let r = post(own, Some("same-origin"), format!("csrf={csrf}")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(canary(&hone, None).await, None);

    // Every page says it may not be framed, run scripts or be sniffed.
    let r = browser().get(hone.url("/ui/login")).send().await.unwrap();
    let headers = r.headers();
    assert!(headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("frame-ancestors 'none'"));
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    // Behind a TLS proxy the cookie is Secure.
    let r = browser()
        .post(hone.url("/ui/login"))
        .header("x-forwarded-proto", "https")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN}"))
        .send()
        .await
        .unwrap();
    assert!(r.headers()["set-cookie"].to_str().unwrap().contains("; Secure"));
}

#[tokio::test]
async fn finding_unlimited_sign_in_attempts_now_limited_per_address() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&two_agents(&upstream));
    let attempt = |token: &str| {
        browser()
            .post(hone.url("/ui/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    for i in 0..5 {
        assert_eq!(attempt(&format!("guess-{i}")).await.unwrap().status(), 401);
    }
    let r = attempt("guess-5").await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let r = attempt(KEY_ALPHA).await.unwrap();
    assert_eq!(r.status(), 429, "not even the right key gets through while limited");
}

/// Reads an SSE body whole.
async fn stream_text(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

async fn stream_call(hone: &Hone, episode: &str, text: &str) -> String {
    let mut request = chat("alpha", text);
    request["stream"] = json!(true);
    let r = client()
        .post(hone.url("/v1/chat/completions"))
        .bearer_auth(KEY_ALPHA)
        .header("x-hone-episode", episode)
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    stream_text(r).await
}

async fn all_readable(hone: &Hone, n: usize) {
    for i in 0..n {
        let r = client()
            .get(hone.url(&format!("/v1/episodes/after-{i}")))
            .bearer_auth(KEY_ALPHA)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "episode after-{i}; log:\n{}", hone.log());
    }
}

async fn calls_after(hone: &Hone, n: usize) {
    for i in 0..n {
        let r = call(
            hone,
            KEY_ALPHA,
            "alpha",
            &format!("after-{i}"),
            &format!("question {i}"),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
}

#[tokio::test]
async fn finding_one_huge_streamed_answer_jammed_the_store_now_cut_at_the_limit() {
    let upstream = FakeUpstream::start().await;
    let mut hone = Hone::start(&two_agents(&upstream));
    // 40 MiB, over the 32 MiB answer limit: the stream is cut with an error.
    let body = stream_call(&hone, "huge", "HUGESTREAM:40").await;
    assert!(
        body.contains("upstream_response_too_large"),
        "{}",
        &body[body.len().saturating_sub(500)..]
    );
    calls_after(&hone, 100).await;
    hone.wait_caught_up();
    all_readable(&hone, 100).await;
    let huge = episode(&hone, "huge", Some(KEY_ALPHA)).await;
    let recorded = &huge["calls"][0];
    assert_eq!(recorded["outcome"], "upstream_error", "{recorded}");
    assert!(recorded["response"].is_null(), "the part is not half-stored");
    let health = get_json(&hone.url("/health")).await;
    assert_eq!(health["status"], "ok", "{health}");
    hone.restart();
    hone.wait_caught_up();
    all_readable(&hone, 100).await;
}

/// The process's peak resident memory (kB).
fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn finding_stream_memory_grew_with_the_answer_now_bounded_by_the_limit() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&two_agents(&upstream));
    stream_call(&hone, "warm-up", "hello there").await;
    let before = peak_rss_kb(hone.child.id());
    // 256 MiB streamed: before, the gateway held it all (and more) at once.
    let body = stream_call(&hone, "very-huge", "HUGESTREAM:256").await;
    assert!(body.contains("upstream_response_too_large"));
    let grown_mib = peak_rss_kb(hone.child.id()).saturating_sub(before) / 1024;
    eprintln!("peak memory grew by {grown_mib} MiB for a 256 MiB stream");
    assert!(
        grown_mib < 160,
        "peak memory grew by {grown_mib} MiB for a 256 MiB stream (the limit is 32 MiB)"
    );
}

#[tokio::test]
async fn finding_a_call_the_database_refused_was_retried_forever_now_set_aside() {
    let upstream = FakeUpstream::start().await;
    let mut hone = Hone::start(&two_agents(&upstream));
    assert_eq!(call(&hone, KEY_ALPHA, "alpha", "first", "hello").await.status(), 200);
    hone.wait_caught_up();
    // The database refuses one kind of call for good (as SQLite refuses a
    // value over its length limit).
    rusqlite::Connection::open(hone.db_path())
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON calls WHEN NEW.record LIKE '%POISON-PILL%'
             BEGIN SELECT RAISE(ABORT, 'this row is refused'); END;",
        )
        .unwrap();
    assert_eq!(
        call(&hone, KEY_ALPHA, "alpha", "poison", "POISON-PILL").await.status(),
        200
    );
    calls_after(&hone, 100).await;
    hone.wait_caught_up();
    all_readable(&hone, 100).await;
    let refused = hone.dir.join("data").join("journal").join("refused");
    let kept: Vec<_> = std::fs::read_dir(&refused).unwrap().collect();
    assert_eq!(kept.len(), 1, "the refused call is kept aside");
    assert!(hone.metrics().await.contains("hone_recorder_refused_calls_total 1"));
    let health = get_json(&hone.url("/health")).await;
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(health["reasons"][0].as_str().unwrap().contains("refused"), "{health}");
    assert!(hone.log().contains("the database refused a call"));
    // After a restart the journal is copied again: still one file, nothing stuck.
    hone.restart();
    hone.wait_caught_up();
    all_readable(&hone, 100).await;
    assert_eq!(std::fs::read_dir(&refused).unwrap().count(), 1);
}

/// The first call's recorded time to first token in `episode`.
async fn ttft_of(hone: &Hone, episode: &str) -> f64 {
    let r = self::episode(hone, episode, None).await;
    r["calls"][0]["ttft_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no ttft_ms: {r}"))
}

#[tokio::test]
async fn finding_ttft_stopped_at_the_opening_role_chunk_now_at_the_first_token_on_every_door() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let streamed = |path: &'static str, episode: &'static str, body: Value| {
        let request = client()
            .post(hone.url(path))
            .header("x-hone-episode", episode)
            .header("anthropic-version", "2023-06-01")
            .json(&body);
        async move {
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), 200, "{path}");
            stream_text(r).await
        }
    };
    streamed(
        "/v1/chat/completions",
        "ttft-chat",
        json!({"model": "assistant", "stream": true, "messages": [{"role": "user", "content": "FIRSTTOKEN:200 hi"}]}),
    )
    .await;
    streamed(
        "/v1/responses",
        "ttft-responses",
        json!({"model": "assistant", "stream": true, "input": "FIRSTTOKEN:200 hi"}),
    )
    .await;
    streamed(
        "/v1/messages",
        "ttft-messages",
        json!({"model": "claude", "stream": true, "max_tokens": 50, "messages": [{"role": "user", "content": "FIRSTTOKEN:200 hi"}]}),
    )
    .await;
    hone.wait_caught_up();
    for episode in ["ttft-chat", "ttft-responses", "ttft-messages"] {
        let ttft = ttft_of(&hone, episode).await;
        assert!(ttft >= 200.0, "{episode}: ttft_ms {ttft} is before the first token");
    }
}

#[tokio::test]
async fn finding_max_tokens_sent_to_openai_now_max_completion_tokens_and_every_limit_capped() {
    let upstream = FakeUpstream::start().await;
    let text = format!(
        "{}\n[agents.capped.versions.v1]\nprovider = \"up\"\nmodel = \"o4-mini\"\nmax_tokens = 10\n",
        config(&upstream)
    );
    let hone = Hone::start(&text);
    let send = |path: &'static str, body: Value| {
        let request = client()
            .post(hone.url(path))
            .header("anthropic-version", "2023-06-01")
            .json(&body);
        async move {
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), 200, "{path}");
        }
    };
    // The version's ceiling, when the client set no limit.
    send("/v1/chat/completions", chat("capped", "none set")).await;
    // Both limits from the client: both capped.
    send(
        "/v1/chat/completions",
        json!({"model": "capped", "max_tokens": 500, "max_completion_tokens": 400, "messages": [{"role": "user", "content": "both set"}]}),
    )
    .await;
    // The Messages door's required max_tokens, to an OpenAI upstream.
    send(
        "/v1/messages",
        json!({"model": "assistant", "max_tokens": 64, "messages": [{"role": "user", "content": "from messages"}]}),
    )
    .await;
    let bodies = upstream.bodies("/v1/chat/completions");
    let sent = |needle: &str| {
        bodies
            .iter()
            .find(|b| b.to_string().contains(needle))
            .unwrap_or_else(|| panic!("no upstream request with {needle}"))
            .clone()
    };
    let none = sent("none set");
    assert_eq!(none["max_completion_tokens"], 10, "{none}");
    assert!(none.get("max_tokens").is_none(), "{none}");
    let both = sent("both set");
    assert_eq!(
        (both["max_completion_tokens"].clone(), both["max_tokens"].clone()),
        (json!(10), json!(10))
    );
    let messages = sent("from messages");
    assert_eq!(messages["max_completion_tokens"], 64, "{messages}");
    assert!(messages.get("max_tokens").is_none(), "{messages}");
}

#[tokio::test]
async fn finding_h2c_prior_knowledge_was_reset_now_served() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let r = h2
        .post(hone.url("/v1/chat/completions"))
        .header("x-hone-episode", "over-h2c")
        .json(&chat("assistant", "over h2c"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Echo: over h2c");
    let mut request = chat("assistant", "streamed over h2c");
    request["stream"] = json!(true);
    let r = h2
        .post(hone.url("/v1/chat/completions"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(stream_text(r).await.contains("[DONE]"));
    let health = h2.get(hone.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn finding_a_stop_sequence_hit_read_as_end_turn_now_stop_sequence_with_the_sequence() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let request = |stream: bool| {
        json!({"model": "claude", "stream": stream, "max_tokens": 50, "stop_sequences": ["END"],
               "messages": [{"role": "user", "content": "STOPSEQ please"}]})
    };
    let answer: Value = client()
        .post(hone.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&request(false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["stop_reason"], "stop_sequence", "{answer}");
    assert_eq!(answer["stop_sequence"], "END", "{answer}");
    let r = client()
        .post(hone.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&request(true))
        .send()
        .await
        .unwrap();
    let text = stream_text(r).await;
    let delta = text
        .split("\n\n")
        .find(|e| e.starts_with("event: message_delta"))
        .and_then(|e| e.split_once("data: "))
        .map(|(_, data)| serde_json::from_str::<Value>(data).unwrap())
        .unwrap_or_else(|| panic!("no message_delta in {text}"));
    assert_eq!(delta["delta"]["stop_reason"], "stop_sequence", "{delta}");
    assert_eq!(delta["delta"]["stop_sequence"], "END", "{delta}");
}

#[tokio::test]
async fn finding_a_failed_responses_stream_ended_without_response_failed_now_sends_it() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let r = client()
        .post(hone.url("/v1/responses"))
        .json(&json!({"model": "assistant", "stream": true, "input": "CUT"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = stream_text(r).await;
    let events: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("event: "))
        .map(|e| e.lines().next().unwrap_or_default())
        .collect();
    let error = events
        .iter()
        .position(|e| *e == "error")
        .unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(events.get(error + 1), Some(&"response.failed"), "{events:?}");
    let failed = text
        .split("\n\n")
        .find(|e| e.starts_with("event: response.failed"))
        .and_then(|e| e.split_once("data: "))
        .map(|(_, data)| serde_json::from_str::<Value>(data).unwrap())
        .unwrap();
    assert_eq!(failed["response"]["status"], "failed", "{failed}");
    assert!(failed["response"]["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn finding_an_upstream_429_reached_the_client_without_retry_after_now_with_it() {
    let upstream = FakeUpstream::start().await;
    // No retries here, so the upstream's 429 reaches the client.
    let text = config(&upstream).replace("max_retries = 2", "max_retries = 0");
    let hone = Hone::start(&text);
    let r = client()
        .post(hone.url("/v1/chat/completions"))
        .json(&chat("assistant", "RATELIMITONCE:a"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"), "{:?}", r.headers());
}

#[tokio::test]
async fn finding_embeddings_were_not_retried_now_retried_as_chat_calls_are() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let r = client()
        .post(hone.url("/v1/embeddings"))
        .json(&json!({"model": "assistant/text-embed", "input": "FAIL503ONCE:embed hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "a 503 on the first try is retried");
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["data"].as_array().unwrap().len(), 1);
    assert_eq!(upstream.bodies("/v1/embeddings").len(), 2, "one failed try, one retry");
}

#[tokio::test]
async fn finding_episode_ids_were_first_come_now_each_agents_own_and_a_key_of_several_agents_says_whose() {
    let upstream = FakeUpstream::start().await;
    // No keys: every agent is in scope, as for a key of several agents.
    let hone = Hone::start(&config(&upstream));
    for (agent, text) in [("assistant", "assistant's turn"), ("claude", "claude's turn")] {
        let r = client()
            .post(hone.url("/v1/chat/completions"))
            .header("x-hone-episode", "shared-1")
            .json(&chat(agent, text))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{agent}");
    }
    hone.wait_caught_up();
    let r = client().get(hone.url("/v1/episodes/shared-1")).send().await.unwrap();
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "episode_ambiguous", "{body}");
    let mine: Value = client()
        .get(hone.url("/v1/episodes/shared-1?agent=claude"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(mine["agent"], "claude", "{mine}");
    assert!(mine.to_string().contains("claude's turn") && !mine.to_string().contains("assistant's turn"));
    // The listing shows the second agent's as stored; that id reads back too.
    let list = get_json(&hone.url("/v1/episodes")).await;
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert!(ids.contains(&"shared-1") && ids.contains(&"shared-1@claude"), "{ids:?}");
    let stored = episode(&hone, "shared-1@claude", None).await;
    assert_eq!(stored["agent"], "claude");
    // Feedback says whose, or is refused as ambiguous.
    let feedback = |body: Value| client().post(hone.url("/v1/feedback")).json(&body).send();
    let r = feedback(json!({"episode_id": "shared-1", "name": "resolved", "value": true}))
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let r = feedback(json!({"episode_id": "shared-1", "agent": "assistant", "name": "resolved", "value": true}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let assistant = episode(&hone, "shared-1?agent=assistant", None).await;
    assert_eq!(assistant["signals"].as_array().unwrap().len(), 1, "{assistant}");
}

#[tokio::test]
async fn finding_the_messages_door_dropped_top_k_and_thinking_now_passes_them_where_they_are_understood() {
    let upstream = FakeUpstream::start().await;
    let hone = Hone::start(&config(&upstream));
    let thinking = json!({"type": "enabled", "budget_tokens": 2048});
    for (agent, text) in [("claude", "to anthropic"), ("assistant", "to openai")] {
        let r = client()
            .post(hone.url("/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .json(
                &json!({"model": agent, "max_tokens": 50, "top_k": 5, "thinking": thinking,
                          "messages": [{"role": "user", "content": text}]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{agent}");
    }
    let anthropic = &upstream.bodies("/v1/messages")[0];
    assert_eq!(anthropic["top_k"], 5, "{anthropic}");
    assert_eq!(anthropic["thinking"], thinking, "{anthropic}");
    let openai = upstream
        .bodies("/v1/chat/completions")
        .into_iter()
        .find(|b| b.to_string().contains("to openai"))
        .unwrap();
    assert_eq!(openai["top_k"], 5, "as a chat client's top_k goes: {openai}");
    assert!(
        openai.get("thinking").is_none(),
        "no OpenAI-compatible server takes it: {openai}"
    );
}

#[tokio::test]
async fn finding_a_database_held_exclusively_stopped_start_up_now_says_who_holds_it() {
    let upstream = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hone.toml");
    std::fs::write(&config, crate::support::config(&upstream)).unwrap();
    let data = dir.path().join("data");
    // A first start makes the store.
    {
        let hone = Hone::start_in(dir.path(), &crate::support::config(&upstream), &[]);
        hone.wait_caught_up();
    }
    let holder = rusqlite::Connection::open(data.join("hone.db")).unwrap();
    holder
        .execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; COMMIT;")
        .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("holds it for itself") && said.contains("locking_mode = EXCLUSIVE"),
        "{said}"
    );
    drop(holder);
}
