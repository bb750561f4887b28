//! Identifiers: episode ids (chosen by clients or created as UUIDv7), call ids
//! (always UUIDv7, created by the gateway) and content-addressed version ids.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a client-supplied identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("is empty")]
    Empty,
    #[error("is longer than {max} characters")]
    TooLong { max: usize },
    #[error("contains `{0}`; use letters, digits and `-_.:` only")]
    BadCharacter(char),
}

/// How the ids of evaluation episodes begin (see [`EpisodeId::is_evaluation`]).
pub const EVALUATION_PREFIX: &str = "eval.";

/// What joins a client's episode id and its agent in a stored id.
const AGENT_MARK: char = '@';

/// The longest episode id a client may choose.
pub const MAX_EPISODE_ID_LEN: usize = 128;

/// Names one episode: the value of the `X-Hone-Episode` header.
///
/// Clients may choose their own ids (their conversation or ticket id) so that
/// related calls group without a round-trip; hone creates a UUIDv7 when absent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EpisodeId(String);

impl EpisodeId {
    /// Checks a client-chosen id.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        if raw.is_empty() {
            return Err(IdError::Empty);
        }
        if raw.len() > MAX_EPISODE_ID_LEN {
            return Err(IdError::TooLong {
                max: MAX_EPISODE_ID_LEN,
            });
        }
        if let Some(bad) = raw
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')))
        {
            return Err(IdError::BadCharacter(bad));
        }
        Ok(Self(raw.to_owned()))
    }

    /// An id as the store keeps it: a client's id, or one followed by
    /// `@agent` (see [`EpisodeId::for_agent`]).
    pub fn parse_stored(raw: &str) -> Result<Self, IdError> {
        let Some((client, agent)) = raw.split_once(AGENT_MARK) else {
            return Self::parse(raw);
        };
        Self::parse(client)?;
        if agent.is_empty() {
            return Err(IdError::Empty);
        }
        if let Some(bad) = agent
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')))
        {
            return Err(IdError::BadCharacter(bad));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The id `agent`'s episode is stored under when another agent already
    /// holds this one: `id@agent`. Episode ids are chosen by clients, so two
    /// agents may choose the same; each gets an episode of its own, and no
    /// client can choose this form (`@` is not allowed in a client's id).
    pub fn for_agent(&self, agent: &str) -> Self {
        Self(format!("{}{AGENT_MARK}{agent}", self.client_part()))
    }

    /// The id as its client chose it (without an `@agent`).
    pub fn client_part(&self) -> &str {
        self.0
            .split_once(AGENT_MARK)
            .map_or(self.0.as_str(), |(client, _)| client)
    }

    /// A fresh, time-ordered id.
    pub fn new_v7() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    /// The id of one attempt at one instance of an evaluation run.
    pub fn evaluation(run: &str, instance: usize, attempt: &str) -> Result<Self, IdError> {
        Self::parse(&format!("{EVALUATION_PREFIX}{run}.{instance}.{attempt}"))
    }

    /// Whether the episode is an evaluation replay rather than production
    /// traffic (rewards, monitors and datasets of traffic leave these out).
    pub fn is_evaluation(&self) -> bool {
        self.0.starts_with(EVALUATION_PREFIX)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EpisodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Names one call; always a UUIDv7 made by the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(uuid::Uuid);

impl CallId {
    pub fn new_v7() -> Self {
        Self(uuid::Uuid::now_v7())
    }

    /// Parses the hyphenated or the 32-hex-digit form.
    pub fn parse(raw: &str) -> Option<Self> {
        uuid::Uuid::parse_str(raw).ok().map(Self)
    }

    pub fn from_uuid(id: uuid::Uuid) -> Self {
        Self(id)
    }

    /// The 32 hex digits without hyphens (the tail of `resp_…`/`msg_…` ids).
    pub fn hex(&self) -> String {
        self.0.simple().to_string()
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A version's id: the first 16 hex digits of the SHA-256 of its canonical
/// form (see [`crate::version::VersionSpec::id`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VersionId(String);

impl VersionId {
    pub const LEN: usize = 16;

    /// Accepts a string that looks like a version id (16 lowercase hex digits).
    pub fn parse(raw: &str) -> Option<Self> {
        (raw.len() == Self::LEN && raw.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(raw.to_owned()))
    }

    pub(crate) fn from_digest_hex(hex: &str) -> Self {
        Self(hex[..Self::LEN].to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn episode_ids_accept_uuids_and_ticket_ids_and_refuse_the_rest() {
        assert!(EpisodeId::parse(&uuid::Uuid::now_v7().to_string()).is_ok());
        assert!(EpisodeId::parse("ticket:4711_a.b").is_ok());
        assert_eq!(EpisodeId::parse(""), Err(IdError::Empty));
        assert_eq!(EpisodeId::parse("a b"), Err(IdError::BadCharacter(' ')));
        assert_eq!(EpisodeId::parse(&"x".repeat(129)), Err(IdError::TooLong { max: 128 }));
    }

    #[test]
    fn an_agents_own_form_of_an_id_is_stored_never_chosen() {
        let ticket = EpisodeId::parse("ticket-1").unwrap();
        let beta = ticket.for_agent("beta");
        assert_eq!(beta.as_str(), "ticket-1@beta");
        assert_eq!(beta.client_part(), "ticket-1");
        assert_eq!(ticket.client_part(), "ticket-1");
        assert_eq!(EpisodeId::parse("ticket-1@beta"), Err(IdError::BadCharacter('@')));
        assert_eq!(EpisodeId::parse_stored("ticket-1@beta"), Ok(beta));
        assert_eq!(EpisodeId::parse_stored("ticket-1"), Ok(ticket));
        assert!(EpisodeId::parse_stored("ticket-1@").is_err());
        assert!(EpisodeId::parse_stored("t@a b").is_err());
    }

    #[test]
    fn version_ids_are_sixteen_lowercase_hex_digits() {
        assert!(VersionId::parse("0123456789abcdef").is_some());
        assert!(VersionId::parse("0123456789ABCDEF").is_none());
        assert!(VersionId::parse("v1").is_none());
    }
}
