//! Who may see the dashboard and act through it.
//!
//! Pages need a credential whenever the gateway has data-plane keys or an
//! admin token ([`hone_gateway::auth::Auth::needs_credential`]): the admin token sees every
//! agent, a data-plane key sees only its agents' pages, episodes, cycles,
//! datasets and evaluation runs, and may act only on them. A browser signs
//! in once at `/ui/login` and gets a session: a random id in an HttpOnly,
//! `SameSite=Strict` cookie (never the token itself) that expires after
//! [`SESSION_LIFETIME`], is `Secure` when the request came over TLS (a
//! proxy's `X-Forwarded-Proto: https`), and ends at **Sign out**. Scripts
//! send `Authorization: Bearer` instead. Failed sign-ins are limited per
//! client address.
//!
//! A state-changing request must come from the dashboard itself: its
//! `Sec-Fetch-Site` (when sent) is `same-origin`, its `Origin` (when sent)
//! is this host, and a form carries the session's CSRF token — so a page on
//! another port of the same host, which `SameSite` does not stop, cannot
//! post a rollback. Every answer carries headers that forbid framing,
//! scripts and content sniffing.

use crate::Ui;
use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use hone_gateway::auth::Principal;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const COOKIE: &str = "hone_session";
/// How long a session lasts after sign-in.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Most sessions kept at once; signing in beyond it ends the oldest.
const MAX_SESSIONS: usize = 10_000;
/// Failed sign-ins one client address may make per [`FAILURE_WINDOW`].
const MAX_FAILURES: u32 = 5;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Largest form body read to find its CSRF token.
const MAX_FORM_BYTES: usize = 64 << 10;

const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The signed-in reader of a page.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub principal: Principal,
    /// The token a form must carry; `None` when the credential came in a
    /// header (scripts), which no other site can make a browser send.
    pub csrf: Option<String>,
    /// Whether the viewer signed in (and so may sign out).
    pub session: bool,
}

impl Viewer {
    /// Whether this viewer may see and act on `agent`.
    pub fn sees(&self, agent: &str) -> bool {
        self.principal.may_use_agent(agent)
    }

    /// The agents this viewer is limited to, `None` meaning all.
    pub fn scope(&self) -> Option<&[String]> {
        self.principal.agent_scope()
    }
}

struct Session {
    principal: Principal,
    csrf: String,
    started: Instant,
}

struct Failures {
    since: Instant,
    count: u32,
}

/// Sessions and sign-in failures, in this process's memory: a restart signs
/// everyone out.
pub struct Sessions {
    sessions: Mutex<HashMap<String, Session>>,
    failures: Mutex<HashMap<IpAddr, Failures>>,
    /// The CSRF token of an open dashboard (no credential configured).
    open_csrf: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Sessions are keyed by the digest of their id, so the map never holds a
/// usable cookie.
fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Compares digests, so the time taken does not tell how much matched.
fn same(given: &str, expected: &str) -> bool {
    Sha256::digest(given.as_bytes()) == Sha256::digest(expected.as_bytes())
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            open_csrf: random_token(),
        }
    }
}

impl Sessions {
    /// Starts a session; returns its id (the cookie's value).
    fn start(&self, principal: Principal) -> String {
        let id = random_token();
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| s.started.elapsed() < SESSION_LIFETIME);
        if sessions.len() >= MAX_SESSIONS {
            if let Some(oldest) = sessions.iter().min_by_key(|(_, s)| s.started).map(|(k, _)| k.clone()) {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(
            digest(&id),
            Session {
                principal,
                csrf: random_token(),
                started: Instant::now(),
            },
        );
        id
    }

    fn find(&self, id: &str) -> Option<Viewer> {
        let key = digest(id);
        let mut sessions = lock(&self.sessions);
        let session = sessions.get(&key)?;
        if session.started.elapsed() >= SESSION_LIFETIME {
            sessions.remove(&key);
            return None;
        }
        Some(Viewer {
            principal: session.principal.clone(),
            csrf: Some(session.csrf.clone()),
            session: true,
        })
    }

    fn end(&self, id: &str) {
        lock(&self.sessions).remove(&digest(id));
    }

    /// How long `address` must wait before trying again, if it must.
    fn blocked_for(&self, address: IpAddr) -> Option<Duration> {
        let failures = lock(&self.failures);
        let f = failures.get(&address)?;
        let elapsed = f.since.elapsed();
        (f.count >= MAX_FAILURES && elapsed < FAILURE_WINDOW).then(|| FAILURE_WINDOW - elapsed)
    }

    fn failed(&self, address: IpAddr) {
        let mut failures = lock(&self.failures);
        failures.retain(|_, f| f.since.elapsed() < FAILURE_WINDOW);
        let f = failures.entry(address).or_insert(Failures {
            since: Instant::now(),
            count: 0,
        });
        f.count += 1;
    }
}

fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// Who is asking, if anyone this gateway knows.
fn viewer(ui: &Ui, headers: &HeaderMap) -> Option<Viewer> {
    if !ui.auth.needs_credential() {
        return Some(Viewer {
            principal: Principal::Open,
            csrf: Some(ui.sessions.open_csrf.clone()),
            session: false,
        });
    }
    if let Some(token) = hone_gateway::auth::bearer(headers) {
        return ui.auth.identify(token).map(|principal| Viewer {
            principal,
            csrf: None,
            session: false,
        });
    }
    ui.sessions.find(cookie(headers)?)
}

/// Whether a state-changing request comes from a page of this dashboard:
/// what the browser says of the request's origin must name this host (the
/// `Host` header, or over HTTP/2 the request's authority).
fn same_origin(request: &Request) -> Result<(), &'static str> {
    let authority = request.uri().authority().map(|a| a.as_str());
    origin_matches(request.headers(), authority)
}

fn origin_matches(headers: &HeaderMap, authority: Option<&str>) -> Result<(), &'static str> {
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.to_str(), Ok("same-origin" | "none")) {
            return Err("the request came from another site (Sec-Fetch-Site)");
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).or(authority);
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, rest)| rest.trim_end_matches('/'));
        if host.is_none() || origin_host != host {
            return Err("the request came from another origin (Origin)");
        }
    }
    Ok(())
}

fn refused(status: StatusCode, message: &str) -> Response {
    crate::UiError {
        status,
        message: message.to_owned(),
    }
    .into_response()
}

/// Reads a form body to check its `csrf` field, and puts the body back.
async fn check_csrf(request: Request, expected: &str) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| refused(StatusCode::PAYLOAD_TOO_LARGE, "the form is too large"))?;
    let given = form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned());
    if !given.is_some_and(|g| same(&g, expected)) {
        return Err(refused(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale; reload the page and try again",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// Every dashboard route but sign-in: finds the viewer (or sends them to
/// sign in) and checks that a state-changing request came from the dashboard.
pub async fn require(State(ui): State<Arc<Ui>>, mut request: Request, next: Next) -> Response {
    let Some(viewer) = viewer(&ui, request.headers()) else {
        return if request.method() == Method::GET || request.method() == Method::HEAD {
            Redirect::to("/ui/login").into_response()
        } else {
            refused(
                StatusCode::UNAUTHORIZED,
                "sign in first: the dashboard needs the admin token or an API key",
            )
        };
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        if let Err(why) = same_origin(&request) {
            return refused(StatusCode::FORBIDDEN, why);
        }
        if let Some(expected) = &viewer.csrf {
            request = match check_csrf(request, expected).await {
                Ok(request) => request,
                Err(response) => return response,
            };
        }
    }
    request.extensions_mut().insert(viewer);
    next.run(request).await
}

/// Adds the security headers to every dashboard answer.
pub async fn secure_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: with it a browser sends `Origin: null` on the
        // dashboard's own form posts, which the origin check must refuse.
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn login_page(status: StatusCode, failed: Option<&str>) -> Response {
    match crate::render::bare("login.html", minijinja::context! { title => "Sign in", failed }) {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn login_form() -> Response {
    login_page(StatusCode::OK, None)
}

#[derive(serde::Deserialize)]
pub struct Login {
    token: String,
}

/// Whether the request reached hone over TLS (through a proxy that says so).
fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

fn set_cookie(response: &mut Response, value: &str, max_age: u64, secure: bool) {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!("{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    if let Ok(cookie) = text.parse() {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
}

/// The client's address, as the server loop records it.
fn client_address(request: &Request) -> Option<IpAddr> {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

pub async fn login(State(ui): State<Arc<Ui>>, request: Request) -> Response {
    if let Err(why) = same_origin(&request) {
        return refused(StatusCode::FORBIDDEN, why);
    }
    let address = client_address(&request).unwrap_or(IpAddr::from([0, 0, 0, 0]));
    if let Some(wait) = ui.sessions.blocked_for(address) {
        let mut response = login_page(
            StatusCode::TOO_MANY_REQUESTS,
            Some("Too many failed sign-ins from this address; wait a minute and try again."),
        );
        if let Ok(value) = HeaderValue::from_str(&(wait.as_secs() + 1).to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let secure = over_tls(request.headers());
    let axum::Form(login) = match axum::Form::<Login>::from_request(request, &()).await {
        Ok(form) => form,
        Err(e) => return refused(StatusCode::BAD_REQUEST, &format!("the sign-in form is not valid: {e}")),
    };
    let principal = if ui.auth.needs_credential() {
        ui.auth.identify(login.token.trim())
    } else {
        Some(Principal::Open)
    };
    let Some(principal) = principal else {
        ui.sessions.failed(address);
        tracing::warn!(%address, "a dashboard sign-in failed");
        return login_page(
            StatusCode::UNAUTHORIZED,
            Some("That is neither the admin token nor an API key of this gateway."),
        );
    };
    let id = ui.sessions.start(principal);
    let mut response = Redirect::to("/ui").into_response();
    set_cookie(&mut response, &id, SESSION_LIFETIME.as_secs(), secure);
    response
}

/// Ends the session (under [`require`], so the form's CSRF token was checked).
pub async fn logout(State(ui): State<Arc<Ui>>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers) {
        ui.sessions.end(id);
    }
    let mut response = Redirect::to("/ui/login").into_response();
    set_cookie(&mut response, "", 0, over_tls(&headers));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_this_host_may_post() {
        let check = |h: &HeaderMap| origin_matches(h, None);
        let ok = headers(&[("host", "127.0.0.1:7070"), ("origin", "http://127.0.0.1:7070")]);
        assert!(check(&ok).is_ok());
        assert!(check(&headers(&[("host", "127.0.0.1:7070")])).is_ok());
        let other_port = headers(&[("host", "127.0.0.1:7070"), ("origin", "http://127.0.0.1:9999")]);
        assert!(check(&other_port).is_err());
        let same_site = headers(&[("host", "127.0.0.1:7070"), ("sec-fetch-site", "same-site")]);
        assert!(check(&same_site).is_err());
        assert!(check(&headers(&[("origin", "null"), ("host", "a")])).is_err());
        // Over HTTP/2 the authority stands for the Host header.
        let h2 = headers(&[("origin", "http://127.0.0.1:7070")]);
        assert!(origin_matches(&h2, Some("127.0.0.1:7070")).is_ok());
        assert!(origin_matches(&h2, Some("127.0.0.1:9999")).is_err());
    }

    #[test]
    fn failed_sign_ins_are_limited_per_address() {
        let sessions = Sessions::default();
        let a = IpAddr::from([10, 0, 0, 1]);
        for _ in 0..MAX_FAILURES {
            assert!(sessions.blocked_for(a).is_none());
            sessions.failed(a);
        }
        assert!(sessions.blocked_for(a).is_some());
        assert!(sessions.blocked_for(IpAddr::from([10, 0, 0, 2])).is_none());
    }

    #[test]
    fn a_session_is_found_by_its_id_until_it_ends() {
        let sessions = Sessions::default();
        let id = sessions.start(Principal::Admin);
        assert!(sessions.find(&id).is_some_and(|v| v.csrf.is_some() && v.session));
        assert!(sessions.find("not-a-session").is_none());
        sessions.end(&id);
        assert!(sessions.find(&id).is_none());
    }
}
