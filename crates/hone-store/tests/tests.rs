//! hone-store's integration tests, one binary:
//! Each story runs on SQLite and on a real PostgreSQL server (`backends`).
//! - `story`: a scripted story over the Store trait.
//! - `learn_story`, `cycle_story`: the learner's traits — rewards, immutable
//!   snapshots, evaluation runs; cycles, compare-and-swap deployments,
//!   append-only history, the learner's lead, races between connections.
//! - `recorder`: group commit, durability across reopen, spool and replay
//!   while another connection holds the database locked.
//! - `copy`: a whole store copied SQLite → PostgreSQL → SQLite, hashes equal.
//! - `journal`: property tests of the journal reader over torn and corrupt lines.
//! - `late_feedback`: a signal after an episode's reward marks it for re-scoring.
//! - `tls`: TLS to PostgreSQL from the URL, the server always verified.

// Test servers and load run detached for the life of a test; the test ends them.
#![allow(clippy::disallowed_methods)]
// Helpers outside #[test] functions unwrap too: a failing test should say where.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

mod backends;
mod common;
mod copy;
mod cycle_story;
mod journal;
mod late_feedback;
mod learn_story;
mod recorder;
mod story;
mod tls;
