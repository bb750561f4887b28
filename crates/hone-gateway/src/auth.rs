//! Who may call what. Data-plane keys (stored as SHA-256 hashes in config,
//! scoped to agents) guard chat and feedback; a separate admin token guards
//! control endpoints. With no keys configured the data plane is open (any
//! bearer token), which is only safe on loopback — `hone serve` warns.

use crate::error::{ApiError, ErrorKind};
use axum::http::HeaderMap;
use hone_config::Config;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The caller, once authenticated.
#[derive(Debug, Clone)]
pub enum Principal {
    /// No keys are configured: anyone, for any agent.
    Open,
    /// A data-plane key; `None` agents means every agent.
    Key {
        name: String,
        agents: Option<Vec<String>>,
    },
    Admin,
}

impl Principal {
    pub fn may_use_agent(&self, agent: &str) -> bool {
        match self {
            Principal::Open | Principal::Admin => true,
            Principal::Key { agents: None, .. } => true,
            Principal::Key { agents: Some(list), .. } => list.iter().any(|a| a == agent),
        }
    }

    /// The agents this caller may read, `None` meaning all.
    pub fn agent_scope(&self) -> Option<&[String]> {
        match self {
            Principal::Key { agents: Some(list), .. } => Some(list),
            _ => None,
        }
    }

    pub fn check_agent(&self, agent: &str) -> Result<(), ApiError> {
        if self.may_use_agent(agent) {
            return Ok(());
        }
        let name = match self {
            Principal::Key { name, .. } => name.as_str(),
            _ => "this key",
        };
        Err(ApiError::new(
            ErrorKind::Forbidden,
            "agent_not_allowed",
            format!("API key `{name}` is not allowed to use agent `{agent}`"),
        ))
    }
}

pub struct Auth {
    /// SHA-256 hex → (key name, agents).
    keys: HashMap<String, (String, Option<Vec<String>>)>,
    admin_token_hash: Option<String>,
    /// The variable `gateway.admin_token_env` names when it is not set:
    /// the operator meant `/admin/*` to need a token, so it stays shut.
    admin_token_missing: Option<String>,
}

pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The caller's key: `Authorization: Bearer <key>`, or `x-api-key: <key>`
/// as the Anthropic SDK sends it.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    match headers.get(axum::http::header::AUTHORIZATION) {
        Some(value) => {
            let (scheme, token) = value.to_str().ok()?.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        }
        None => headers.get("x-api-key")?.to_str().ok().map(str::trim),
    }
}

impl Auth {
    pub fn from_config(config: &Config) -> Self {
        let keys = config
            .gateway
            .api_keys
            .iter()
            .map(|k| (k.sha256.clone(), (k.name.clone(), k.agents.clone())))
            .collect();
        let token = config
            .gateway
            .admin_token_env
            .as_ref()
            .map(|name| (name, std::env::var(name).ok().filter(|t| !t.is_empty())));
        let admin_token_hash = token.as_ref().and_then(|(_, t)| t.as_deref().map(sha256_hex));
        let admin_token_missing = token.and_then(|(name, t)| t.is_none().then(|| name.clone()));
        if let Some(name) = &admin_token_missing {
            tracing::warn!(variable = %name, "gateway.admin_token_env names a variable that is not set; admin endpoints and the dashboard are refused until it is");
        }
        Self {
            keys,
            admin_token_hash,
            admin_token_missing,
        }
    }

    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether pages and actions need a credential: whenever the data plane
    /// has keys or an admin token is set. Only a gateway with neither (which
    /// [`Auth::check_exposure`] keeps on loopback unless told otherwise) has
    /// an open dashboard.
    pub fn needs_credential(&self) -> bool {
        !self.is_open() || self.admin_token_hash.is_some() || self.admin_token_missing.is_some()
    }

    /// Who `token` is — the admin, or the agents of a data-plane key — or
    /// `None` for a token this gateway does not know.
    pub fn identify(&self, token: &str) -> Option<Principal> {
        let hash = sha256_hex(token);
        if self.admin_token_hash.as_deref() == Some(hash.as_str()) {
            return Some(Principal::Admin);
        }
        self.keys.get(&hash).map(|(name, agents)| Principal::Key {
            name: name.clone(),
            agents: agents.clone(),
        })
    }

    /// Refuses to expose an open `/admin/*` (no API keys, no admin token)
    /// beyond loopback unless that is explicitly allowed: anyone reaching
    /// the address could load adapters and read every episode.
    pub fn check_exposure(&self, address: std::net::SocketAddr, allow_open_admin: bool) -> Result<(), String> {
        if address.ip().is_loopback() || allow_open_admin || self.admin_token_hash.is_some() || !self.is_open() {
            return Ok(());
        }
        Err(format!(
            "refusing to serve on {address}: with no API keys and no admin token, anyone who can reach it could call the agents, read every episode and use /admin/*. Configure [[gateway.api_keys]] and gateway.admin_token_env, listen on 127.0.0.1, or pass --insecure-open-admin (gateway.insecure_open_admin = true) on a network you trust"
        ))
    }

    /// Data-plane access: a configured key, or anything when none is configured.
    /// The admin token is accepted too.
    pub fn data_plane(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        let token = bearer(headers);
        if let Some(principal) = token.and_then(|token| self.identify(token)) {
            return Ok(principal);
        }
        if self.is_open() {
            return Ok(Principal::Open);
        }
        Err(ApiError::new(
            ErrorKind::Unauthorized,
            if token.is_some() {
                "invalid_api_key"
            } else {
                "missing_api_key"
            },
            if token.is_some() {
                "the API key is not valid for this gateway"
            } else {
                "this gateway needs an API key: send `Authorization: Bearer <key>`"
            },
        ))
    }

    /// Control endpoints: the admin token; or, on an open gateway with no
    /// admin token configured, anyone (a laptop set-up). An admin token
    /// configured but missing from the environment shuts them.
    pub fn admin(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        match (&self.admin_token_hash, bearer(headers)) {
            (Some(expected), Some(token)) if sha256_hex(token) == *expected => Ok(Principal::Admin),
            (Some(_), token) => Err(ApiError::new(
                ErrorKind::Unauthorized,
                if token.is_some() {
                    "invalid_admin_token"
                } else {
                    "missing_admin_token"
                },
                "admin endpoints need the admin token: send `Authorization: Bearer <token>`",
            )),
            (None, _) if self.admin_token_missing.is_some() => Err(ApiError::new(
                ErrorKind::Forbidden,
                "admin_disabled",
                format!(
                    "admin endpoints are refused: gateway.admin_token_env names `{}`, which is not set in the gateway's environment",
                    self.admin_token_missing.as_deref().unwrap_or_default()
                ),
            )),
            (None, _) if self.is_open() => Ok(Principal::Open),
            (None, _) => Err(ApiError::new(
                ErrorKind::Forbidden,
                "admin_disabled",
                "admin endpoints are disabled: set gateway.admin_token_env and that variable",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(gateway: &str) -> Auth {
        let text = format!(
            "[gateway]\n{gateway}\n[providers.up]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             [agents.a.versions.v1]\nprovider = \"up\"\nmodel = \"m\"\n"
        );
        Auth::from_config(&hone_config::load_str(&text, std::path::Path::new("."), &|_| None).unwrap())
    }

    #[test]
    fn an_admin_token_configured_but_not_set_shuts_admin_rather_than_opening_it() {
        let headers = HeaderMap::new();
        // A laptop set-up: no keys, no admin token: open.
        let open = auth("");
        assert!(matches!(open.admin(&headers), Ok(Principal::Open)));
        assert!(!open.needs_credential());
        // The operator asked for a token and the variable is missing.
        let missing = auth("admin_token_env = \"HONE_TEST_ADMIN_TOKEN_THAT_IS_NEVER_SET\"");
        let refused = missing.admin(&headers).unwrap_err();
        assert_eq!(refused.code, "admin_disabled", "{refused:?}");
        assert!(
            refused.message.contains("HONE_TEST_ADMIN_TOKEN_THAT_IS_NEVER_SET"),
            "{}",
            refused.message
        );
        assert!(missing.needs_credential(), "the dashboard asks for a credential");
        // The data plane stays as configured (no keys: open on loopback).
        assert!(matches!(missing.data_plane(&headers), Ok(Principal::Open)));
    }
}
