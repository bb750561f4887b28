//! hone-envs' integration tests, one binary. The only fake is the model: a
//! scripted OpenAI-compatible server on loopback that speaks the real
//! chat-completions wire format; the runner and the `/run` endpoint are the
//! real ones, over real HTTP.
//! - `environments`: every built-in environment's contract (determinism by
//!   seed, disjoint splits, difficulty levels, prompt round trips,
//!   demonstrations that replay and score 1, wrong answers that score 0).
//! - `calc`: the expression evaluator (precedence, parentheses, division,
//!   errors, a property test against integer arithmetic).
//! - `lookup`: the customer table and its `search` / `read` tools.
//! - `users`: simulated users' reactions, noise rate, feedback bodies.
//! - `runner`: the agent loop and `POST /run` against the fake model.
//! - `support`: the fake model server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod calc;
mod environments;
mod lookup;
mod runner;
mod support;
mod users;
