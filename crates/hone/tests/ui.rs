//! The dashboard at `/ui`, on a store filled by a real learning cycle: a
//! `hone serve` records 48 arithmetic episodes with gold feedback and one
//! that uses a tool, `hone learn --once` (the `model` optimiser, manual
//! deployment) proposes, gates and fronts candidates, and the restarted
//! server shows them. The pages need the admin token; the front chart has
//! one point per scored candidate; Approve starts a canary and Roll back
//! removes it (checked through `/admin/deployments`); an episode shows its
//! tool calls and reward parts.

use crate::support::{story, Hone};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

const ADMIN: &str = "dashboard-secret";

fn query(db: &Path, sql: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// A client that does not follow redirects, so they can be checked.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn page(hone: &Hone, path: &str) -> String {
    let response = browser().get(hone.url(path)).bearer_auth(ADMIN).send().await.unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    let main = body.split("<main>").nth(1).unwrap_or(&body);
    assert_eq!(status, 200, "{path}: {}", main.chars().take(600).collect::<String>());
    body
}

async fn form(hone: &Hone, path: &str, body: &str) -> String {
    let response = browser()
        .post(hone.url(path))
        .bearer_auth(ADMIN)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.text().await.unwrap()
}

/// The story agent's canary, once it is `expected`.
async fn canary(hone: &Hone, expected: Option<&str>) -> Option<String> {
    crate::support::canary_when(hone, ADMIN, "story", expected).await
}

/// The text of the element with `id` (up to its closing `</div>`/`</table>`).
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id}"));
    let rest = &html[start..];
    let end = rest
        .find("</table>")
        .or_else(|| rest.find("</div>"))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// A store filled by a real cycle, served again: the server, its directory
/// (kept while the server lives), the database, the scored candidates and
/// the one on the front.
struct Filled {
    hone: Hone,
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
    scored: Vec<String>,
    on_front: Vec<String>,
}

async fn filled() -> Filled {
    let upstream = story::upstream().await;

    let dir = tempfile::tempdir().unwrap();
    let text = story::config(&upstream, "[gateway]\nadmin_token_env = \"HONE_TEST_ADMIN\"", "");
    let mut hone = Hone::start_in(dir.path(), &text, &[("HONE_TEST_ADMIN", ADMIN)]);
    story::record(&hone, 48).await;
    let http = reqwest::Client::new();
    // One episode with a tool round trip.
    let tools = json!([{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]);
    let mut messages = vec![json!({"role": "user", "content": "Use the tool: 20+22"})];
    for _ in 0..2 {
        let answer: Value = http
            .post(hone.url("/v1/chat/completions"))
            .header("x-hone-episode", "tool-1")
            .json(&json!({"model": "story", "tools": tools, "messages": messages}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let message = answer["choices"][0]["message"].clone();
        messages.push(message.clone());
        if let Some(call) = message["tool_calls"][0]["id"].as_str() {
            messages.push(json!({"role": "tool", "tool_call_id": call, "content": "42"}));
        }
    }
    http.post(hone.url("/v1/feedback"))
        .json(&json!({"episode_id": "tool-1", "name": "gold", "value": 42}))
        .send()
        .await
        .unwrap();
    hone.wait_caught_up();
    assert!(hone.terminate().success());

    // A real cycle on that store.
    let learn = Command::new(env!("CARGO_BIN_EXE_hone"))
        .args(["learn", "story", "--once", "--config"])
        .arg(dir.path().join("hone.toml"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("HONE_TEST_ADMIN", ADMIN)
        .output()
        .unwrap();
    assert!(learn.status.success(), "{}", String::from_utf8_lossy(&learn.stderr));
    let db = dir.path().join("data").join("hone.db");
    let scored = query(
        &db,
        "SELECT version_id FROM candidates WHERE json_extract(record, '$.scores') IS NOT NULL",
    );
    let on_front = query(&db, "SELECT version_id FROM candidates WHERE status = 'on_front'");
    assert!(!scored.is_empty() && on_front.len() == 1, "{scored:?} {on_front:?}");
    hone.restart();
    Filled {
        hone,
        db,
        scored,
        on_front,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_real_cycle_and_its_buttons_deploy() {
    let Filled {
        hone,
        _dir,
        db,
        scored,
        on_front,
    } = filled().await;

    // Without the admin token: to the login page, and a wrong token is refused.
    let r = browser().get(hone.url("/ui")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/ui/login");
    let r = browser()
        .post(hone.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = browser()
        .post(hone.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert!(r.headers()["set-cookie"].to_str().unwrap().contains("HttpOnly"));
    let r = browser()
        .post(hone.url("/ui/agents/story/rollback"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "an action without the token changes nothing");

    // The overview.
    let overview = page(&hone, "/ui").await;
    let agents = section(&overview, "agents");
    assert!(
        agents.contains("/ui/agents/story") && agents.contains("v1 ("),
        "{agents}"
    );
    let chart = section(&overview, "overview-chart");
    assert!(
        chart.contains("<svg") && chart.contains("story (v1"),
        "each champion's online reward: {chart}"
    );

    // The agent: one front point per scored candidate, Approve on the fronted one.
    let agent = page(&hone, "/ui/agents/story").await;
    let chart = section(&agent, "front-chart");
    assert_eq!(chart.matches("<circle").count(), scored.len(), "{chart}");
    assert!(section(&agent, "candidates").contains("class=\"approve\""));
    assert!(
        section(&agent, "history").contains("front"),
        "the cycle's events are on the timeline"
    );
    assert!(section(&agent, "reward-chart").contains("<svg"));

    // Approve starts a canary; Roll back removes it.
    let approved = form(&hone, "/ui/agents/story/approve", &format!("candidate={}", on_front[0])).await;
    assert!(
        section(&approved, "notice").contains("canary"),
        "{}",
        section(&approved, "notice")
    );
    assert_eq!(
        canary(&hone, Some(&on_front[0])).await.as_deref(),
        Some(on_front[0].as_str())
    );
    // New traffic: a tenth goes to the canary, whose measures show against their bounds.
    let traffic_from = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    for i in 0..100 {
        let r = reqwest::Client::new()
            .post(hone.url("/v1/chat/completions"))
            .header("x-hone-episode", format!("after-{i}"))
            .json(&json!({"model": "story", "messages": [{"role": "user", "content": format!("What is {i}+2?")}]}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    hone.wait_caught_up();
    let watched = page(&hone, "/ui/agents/story").await;
    let monitors = section(&watched, "monitors");
    assert!(
        monitors.contains("within bound") || monitors.contains("fires"),
        "{monitors}"
    );
    // Where the canary stands against the promotion rule: nothing rewarded
    // yet (the watcher scores episodes when it looks), short of the 50
    // rewarded episodes the default asks for.
    let promotion = section(&watched, "promotion");
    for text in [
        "promoted unless the champion is shown better online",
        "0 of 50 / 0",
        "collecting episodes",
    ] {
        assert!(promotion.contains(text), "`{text}` not in {promotion}");
    }
    let rolled = form(&hone, "/ui/agents/story/rollback", "").await;
    assert!(
        section(&rolled, "notice").contains("roll"),
        "{}",
        section(&rolled, "notice")
    );
    assert_eq!(canary(&hone, None).await, None);

    // Episodes, and one as a transcript with its tool call and reward parts.
    // The cycle's evaluation episodes come first (newest): page back.
    let mut path = "/ui/episodes?agent=story".to_owned();
    let mut pages = 0;
    loop {
        let list = page(&hone, &path).await;
        pages += 1;
        if section(&list, "episodes").contains("/ui/episodes/tool-1") {
            break;
        }
        let next = list
            .split("id=\"next\" href=\"")
            .nth(1)
            .expect("tool-1 is on some page");
        // The href as the browser reads it (the template escapes `/` and `&`).
        path = next[..next.find('"').unwrap()]
            .replace("&#x2f;", "/")
            .replace("&amp;", "&");
        assert!(pages < 50, "paging never ends");
    }
    // Filters: production episodes by default, rewards in a range, signals.
    let rows = |html: &str| {
        section(html, "episodes")
            .matches("<tr><td><a href=\"/ui/episodes/")
            .count()
    };
    let production = page(&hone, &format!("/ui/episodes?agent=story&until={traffic_from}")).await;
    assert_eq!(
        rows(&production),
        49,
        "48 arithmetic episodes and tool-1, no evaluation episodes"
    );
    let with_evaluations = page(
        &hone,
        &format!("/ui/episodes?agent=story&evaluations=on&until={traffic_from}"),
    )
    .await;
    assert!(section(&with_evaluations, "episodes").contains("/ui/episodes/eval."));
    let passing = query(
        &db,
        "SELECT CAST(COUNT(*) AS TEXT) FROM rewards WHERE agent = 'story' AND value >= 1 AND episode_id NOT LIKE 'eval.%'",
    );
    let high = page(
        &hone,
        &format!("/ui/episodes?agent=story&min_reward=1&until={traffic_from}"),
    )
    .await;
    assert_eq!(rows(&high).to_string(), passing[0], "reward filter");
    assert!(rows(&high) > 0 && rows(&high) < 49);
    let with_gold = page(
        &hone,
        &format!("/ui/episodes?agent=story&signal=gold&until={traffic_from}"),
    )
    .await;
    assert_eq!(rows(&with_gold), 49);
    let none = page(
        &hone,
        &format!("/ui/episodes?agent=story&signal=thumbs&until={traffic_from}"),
    )
    .await;
    assert_eq!(rows(&none), 0);
    let episode = page(&hone, "/ui/episodes/tool-1").await;
    assert!(episode.contains("→ <b>add</b>"), "the tool call is shown");
    assert!(episode.contains("result of call_add"), "the tool result is shown");
    let parts = section(&episode, "reward-parts");
    assert!(parts.contains("answer") && parts.contains("critic"), "{parts}");
    // A reward is said against the agent's pass threshold, not as "passed".
    let reward = section(&episode, "reward");
    assert!(reward.contains("the pass threshold (0.5)"), "{reward}");
    assert!(section(&episode, "signals").contains("gold"));

    // The cycle: its steps in order with timings, candidates with reasons, its datasets.
    let cycles = page(&hone, "/ui/cycles").await;
    assert!(section(&cycles, "cycles").contains("/ui/cycles/story-1"));
    let cycle = page(&hone, "/ui/cycles/story-1").await;
    let steps = section(&cycle, "steps");
    for kind in ["gate", "front"] {
        assert!(steps.contains(kind), "step {kind} missing: {steps}");
    }
    // What the steps decided, readable: times as times, the champion by name.
    let decided = section(&cycle, "decided");
    assert!(
        decided.contains("v1 (") && decided.contains("the first episode →") && decided.contains("49 / 49"),
        "{decided}"
    );
    assert!(!decided.contains("\"since\""), "no raw JSON in the table: {decided}");
    let pruned = query(
        &db,
        "SELECT json_extract(record, '$.reason') FROM candidates WHERE status = 'pruned'",
    );
    let listed = section(&cycle, "cycle-candidates");
    for reason in &pruned {
        assert!(
            listed.contains(&reason.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")),
            "{reason} not in {listed}"
        );
    }
    // Every candidate the gate judged carries the gain it judged, shown
    // with its interval (as the gate's history event words it, too).
    let gains = query(
        &db,
        "SELECT printf('%+.2f [%+.2f, %+.2f]', json_extract(c.record, '$.scores.gate_gain.mean'), \
         json_extract(c.record, '$.scores.gate_gain.low'), json_extract(c.record, '$.scores.gate_gain.high')) \
         || '|' || printf('%+.3f', json_extract(c.record, '$.scores.gate_gain.mean')) \
         || '|' || json_extract(h.record, '$.summary') FROM candidates c JOIN history h \
         ON h.kind = 'gate' AND json_extract(h.record, '$.version_id') = c.version_id \
         AND json_extract(h.record, '$.cycle_id') = c.cycle_id \
         WHERE c.cycle_id = 'story-1' AND json_extract(c.record, '$.scores.gate_gain') IS NOT NULL",
    );
    assert!(!gains.is_empty(), "no candidate of story-1 carries the gate's gain");
    for row in &gains {
        let parts: Vec<&str> = row.splitn(3, '|').collect();
        let [gain, mean, reason] = parts[..] else {
            panic!("unexpected row {row}")
        };
        assert!(listed.contains(gain), "{gain} not in {listed}");
        assert!(reason.contains(mean), "gain {mean} vs the gate's verdict {reason}");
    }
    let target = query(
        &db,
        "SELECT json_extract(record, '$.detail.target') FROM cycles WHERE id = 'story-1'",
    );
    let datasets = page(&hone, "/ui/datasets").await;
    assert!(section(&datasets, "datasets").contains(&format!("/ui/datasets/{}", target[0])));
    let dataset = page(&hone, &format!("/ui/datasets/{}", target[0])).await;
    assert!(
        section(&dataset, "instances").contains("What is"),
        "instances show their input"
    );

    // Evaluation runs, and the champion's run paired with the fronted candidate's.
    let evals = page(&hone, "/ui/evals").await;
    let runs = query(
        &db,
        &format!(
            "SELECT id FROM eval_runs WHERE dataset_id = '{}' ORDER BY created_at",
            target[0]
        ),
    );
    assert!(runs.len() >= 2, "{runs:?}");
    for run in &runs {
        assert!(section(&evals, "evals").contains(&format!("/ui/evals/{run}")));
    }
    let run_of = |version: &str| {
        query(
            &db,
            &format!(
                "SELECT id FROM eval_runs WHERE dataset_id = '{}' AND version_id = '{version}' ORDER BY created_at DESC LIMIT 1",
                target[0]
            ),
        )
        .remove(0)
    };
    let champion = query(
        &db,
        "SELECT json_extract(record, '$.detail.champion') FROM cycles WHERE id = 'story-1'",
    );
    let (a, b) = (run_of(&champion[0]), run_of(&on_front[0]));
    let results = page(&hone, &format!("/ui/evals/{a}")).await;
    assert!(section(&results, "results").contains("transcript"));
    let compared = page(&hone, &format!("/ui/evals/compare?a={a}&b={b}")).await;
    let summary = section(&compared, "summary");
    assert!(summary.contains("paired instances"), "{summary}");
    let pairs = section(&compared, "pairs").matches("<tr").count() - 1;
    assert!(pairs > 0);
    // `weak` gets even sums wrong, `good` none: B is better and A never wins.
    assert!(summary.contains("loses 0"), "{summary}");

    // A bad filter is a page that says why.
    let r = browser()
        .get(hone.url("/ui/episodes?since=yesterday"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("RFC 3339"));
    for bad in ["flag=nonsense", "min_reward=lots&agent=story", "min_reward=1"] {
        let r = browser()
            .get(hone.url(&format!("/ui/episodes?{bad}")))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
}

/// chromedriver on a free port, stopped when dropped.
struct Driver(std::process::Child, String);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromedriver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromedriver is needed (scripts/test installs Debian's chromium and chromium-driver)");
    let url = format!("http://127.0.0.1:{port}");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Driver(child, url)
}

/// chromedriver's browser log (`goog:loggingPrefs`), read through its
/// Selenium endpoint, which fantoccini has no method for.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}

/// Console messages at level SEVERE since the last read.
async fn console_errors(browser: &fantoccini::Client) -> Vec<String> {
    let log = browser.issue_cmd(BrowserLog).await.unwrap();
    log.as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["level"] == "SEVERE")
        .map(|entry| entry["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Where screenshots go: an artefact directory under the target directory.
fn screenshots() -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Opens `path`, checks the console stayed clean, and saves a screenshot.
async fn visit(browser: &fantoccini::Client, hone: &Hone, path: &str, shot: &str) {
    browser.goto(&hone.url(path)).await.unwrap();
    let errors = console_errors(browser).await;
    assert!(errors.is_empty(), "console errors on {path}: {errors:?}");
    let png = browser.screenshot().await.unwrap();
    std::fs::write(screenshots().join(format!("{shot}.png")), png).unwrap();
}

async fn click(browser: &fantoccini::Client, css: &str) {
    browser
        .find(fantoccini::Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no `{css}` to click: {e}"))
        .click()
        .await
        .unwrap();
}

/// The path the browser is at once it has left `from` (a click that submits
/// a form returns before the navigation it starts has finished), or `from`
/// if it never leaves within 10 s.
/// A page on another port of this host whose script posts a form to
/// `target` as soon as it loads; its URL.
async fn attacker_page(target: &str) -> String {
    let html = format!(
        "<!doctype html><form id=f method=post action=\"{target}\"><input name=x value=1></form><script>document.getElementById('f').submit()</script>"
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || async move { axum::response::Html(html) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}/")
}

async fn path_after_leaving(browser: &fantoccini::Client, from: &str) -> String {
    let mut path = from.to_owned();
    for _ in 0..200 {
        path = browser.current_url().await.unwrap().path().to_owned();
        if path != from {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    path
}

/// The notice the page of `action` (`approve`, `rollback`) shows, once the
/// browser has navigated to it (the page before may show a notice too).
async fn notice(browser: &fantoccini::Client, action: &str) -> String {
    for _ in 0..200 {
        let here = browser.current_url().await.unwrap();
        if here.path().ends_with(action) {
            if let Ok(element) = browser.find(fantoccini::Locator::Css("#notice")).await {
                if let Ok(text) = element.text().await {
                    return text;
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the {action} page never showed a notice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_real_browser() {
    use fantoccini::Locator;
    let Filled {
        hone,
        _dir,
        db,
        scored,
        on_front,
    } = filled().await;
    let driver = chromedriver();
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({"binary": "/usr/bin/chromium", "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1366,1800"]}),
    );
    capabilities.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
    let browser = fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.1)
        .await
        .expect("chromium starts under chromedriver");

    // Signing in with the admin token through the form.
    browser.goto(&hone.url("/ui")).await.unwrap();
    assert!(browser.current_url().await.unwrap().path().ends_with("/ui/login"));
    browser
        .find(Locator::Css("input[name=token]"))
        .await
        .unwrap()
        .send_keys(ADMIN)
        .await
        .unwrap();
    click(&browser, "button[type=submit]").await;
    assert_eq!(path_after_leaving(&browser, "/ui/login").await, "/ui");

    visit(&browser, &hone, "/ui", "1-overview").await;
    let agents = browser
        .find(Locator::Css("#agents"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(agents.contains("story"), "{agents}");

    visit(&browser, &hone, "/ui/agents/story", "2-agent").await;
    let points = browser.find_all(Locator::Css("#front-chart circle")).await.unwrap();
    assert_eq!(points.len(), scored.len(), "one point per scored candidate");
    let mut titles = Vec::new();
    for point in &points {
        titles.push(
            point
                .find(Locator::Css("title"))
                .await
                .unwrap()
                .html(true)
                .await
                .unwrap(),
        );
    }
    assert!(
        titles.iter().any(|t| t.contains("pruned") && t.contains("dominated")),
        "{titles:?}"
    );

    // Approve, then Roll back, by clicking.
    click(&browser, "button.approve").await;
    let approved = notice(&browser, "approve").await;
    assert!(approved.contains("canary"), "{approved}");
    assert_eq!(
        canary(&hone, Some(&on_front[0])).await.as_deref(),
        Some(on_front[0].as_str())
    );
    let png = browser.screenshot().await.unwrap();
    std::fs::write(screenshots().join("3-approved.png"), png).unwrap();

    // An attacker's page on another port of the same host posts the Roll
    // back form as the signed-in browser: SameSite lets the cookie through
    // (ports do not make sites), the dashboard refuses the post.
    let attacker = attacker_page(&hone.url("/ui/agents/story/rollback")).await;
    browser.goto(&attacker).await.unwrap();
    let refused = path_after_leaving(&browser, "/").await;
    assert_eq!(refused, "/ui/agents/story/rollback", "the attack's form was posted");
    let page = browser.source().await.unwrap();
    assert!(
        page.contains("another site") || page.contains("another origin"),
        "{page}"
    );
    let logged = console_errors(&browser).await;
    assert!(logged.iter().all(|e| e.contains("403")), "only the refusal: {logged:?}");
    assert_eq!(
        canary(&hone, Some(&on_front[0])).await.as_deref(),
        Some(on_front[0].as_str()),
        "the canary is still there"
    );
    browser.goto(&hone.url("/ui/agents/story")).await.unwrap();
    click(&browser, "#rollback").await;
    // A page asks first; nothing changed yet.
    let asked = path_after_leaving(&browser, "/ui/agents/story").await;
    assert_eq!(asked, "/ui/agents/story/rollback");
    let mut question = String::new();
    for _ in 0..100 {
        question = browser.source().await.unwrap();
        if question.contains("confirm-rollback") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(question.contains("Every user then gets the champion"), "{question}");
    assert!(
        canary(&hone, Some(&on_front[0])).await.is_some(),
        "not rolled back by the first click"
    );
    click(&browser, "#confirm-rollback").await;
    assert!(notice(&browser, "rollback").await.contains("roll"));
    assert_eq!(canary(&hone, None).await, None);

    visit(&browser, &hone, "/ui/episodes/tool-1", "4-episode").await;
    let calls = browser.find_all(Locator::Css(".tool-call")).await.unwrap();
    assert!(!calls.is_empty(), "the tool call is shown");
    let parts = browser.find_all(Locator::Css("#reward-parts tr")).await.unwrap();
    assert!(parts.len() >= 2, "a header and the reward's parts");

    visit(&browser, &hone, "/ui/episodes", "5-episodes").await;
    visit(&browser, &hone, "/ui/cycles/story-1", "6-cycle").await;
    visit(&browser, &hone, "/ui/datasets", "7-datasets").await;
    visit(&browser, &hone, "/ui/evals", "8-evals").await;
    visit(&browser, &hone, "/ui/cycles", "9-cycles").await;
    let runs = query(
        &db,
        "SELECT id FROM eval_runs WHERE dataset_id = (SELECT dataset_id FROM eval_runs ORDER BY created_at LIMIT 1) ORDER BY created_at",
    );
    let datasets = query(&db, "SELECT id FROM datasets ORDER BY created_at");
    visit(&browser, &hone, &format!("/ui/evals/{}", runs[0]), "10-eval-run").await;
    visit(
        &browser,
        &hone,
        &format!("/ui/evals/compare?a={}&b={}", runs[0], runs[1]),
        "11-compare",
    )
    .await;
    visit(&browser, &hone, &format!("/ui/datasets/{}", datasets[0]), "12-dataset").await;
    visit(&browser, &hone, "/ui/login", "13-login").await;
    browser.close().await.unwrap();
}

/// hone's own calls (here the judge's) stay out of the overview's table and
/// the default episode list, one link away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hones_own_agents_are_out_of_the_way_but_one_click_away() {
    let upstream = story::upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let text = story::config(&upstream, "[gateway]\nadmin_token_env = \"HONE_TEST_ADMIN\"", "")
        + "[agents.story.reward.judge]\nmode = \"absolute\"\nprovider = \"up\"\nmodel = \"good\"\n";
    let hone = Hone::start_in(dir.path(), &text, &[("HONE_TEST_ADMIN", ADMIN)]);
    story::record(&hone, 2).await;
    // A call recorded under the judge's agent, as the judge's own are.
    let r = reqwest::Client::new()
        .post(hone.url("/v1/chat/completions"))
        .header("x-hone-episode", "judge-1")
        .json(&json!({"model": "hone-judge", "messages": [{"role": "user", "content": "What is 1+1?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    hone.wait_caught_up();

    let overview = page(&hone, "/ui").await;
    let agents = section(&overview, "agents");
    assert!(agents.contains("/ui/agents/story"), "{agents}");
    assert!(!agents.contains("hone-judge"), "{agents}");
    assert!(
        overview.contains("href=\"/ui/episodes?agent=hone-judge\""),
        "{overview}"
    );
    let episodes = page(&hone, "/ui/episodes").await;
    assert!(episodes.contains("s-0"), "the user's episodes are listed");
    assert!(!episodes.contains("judge-1"), "not the judge's by default");
    let judged = page(&hone, "/ui/episodes?agent=hone-judge").await;
    assert!(judged.contains("judge-1"), "asked for by name, they are shown");
}
