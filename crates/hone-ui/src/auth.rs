//! The dashboard is an admin page: with an admin token configured
//! (`gateway.admin_token_env`) every page needs it — as the `hone_admin`
//! cookie the login form sets (HttpOnly, SameSite=Strict, so another site
//! cannot post the Approve or Roll back forms with it), or as
//! `Authorization: Bearer` for scripts. Without one the dashboard is open,
//! which the gateway allows on loopback only.

use crate::Ui;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use sha2::{Digest, Sha256};
use std::sync::Arc;

const COOKIE: &str = "hone_admin";

/// Compares digests, so the time taken does not tell how much matched.
fn same(given: &str, token: &str) -> bool {
    Sha256::digest(given.as_bytes()) == Sha256::digest(token.as_bytes())
}

fn presented(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    bearer.or_else(|| {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|pair| pair.trim().strip_prefix(&format!("{COOKIE}=")).map(str::to_owned))
    })
}

pub async fn require(State(ui): State<Arc<Ui>>, request: Request, next: Next) -> Response {
    let Some(token) = &ui.admin_token else {
        return next.run(request).await;
    };
    if presented(request.headers()).is_some_and(|given| same(&given, token)) {
        return next.run(request).await;
    }
    if request.method() == axum::http::Method::GET {
        Redirect::to("/ui/login").into_response()
    } else {
        (StatusCode::UNAUTHORIZED, "the admin token is needed").into_response()
    }
}

pub async fn login_form() -> Response {
    match crate::render::page("login.html", minijinja::context! { title => "Sign in" }) {
        Ok(html) => Html(html).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(serde::Deserialize)]
pub struct Login {
    token: String,
}

pub async fn login(State(ui): State<Arc<Ui>>, Form(login): Form<Login>) -> Response {
    let accepted = match &ui.admin_token {
        Some(token) => same(login.token.trim(), token),
        None => true,
    };
    if !accepted {
        let page = crate::render::page("login.html", minijinja::context! { title => "Sign in", failed => true });
        return match page {
            Ok(html) => (StatusCode::UNAUTHORIZED, Html(html)).into_response(),
            Err(e) => e.into_response(),
        };
    }
    let mut response = Redirect::to("/ui").into_response();
    if let Ok(cookie) = format!("{COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict", login.token.trim()).parse() {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}
