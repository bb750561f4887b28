//! End-to-end tests of the real `hone` binary on loopback, one test binary:
//! - `e2e`: chat (JSON, SSE, tools), retries, fallback, Anthropic, episodes, feedback, metrics
//! - `bad_input`: every kind of bad request gets a clear OpenAI-style error and writes nothing
//! - `local`: the embedded engine behind the gateway (`examples/local.toml`), adapters via the admin API
//! - `hardening`: one regression test per finding of the first hostile review
//! - `doors`: one per finding of the second: the dashboard behind keys, answers that cannot jam the store, ttft, token limits, h2c
//! - `crash`: `kill -9` under load loses no call whose response was delivered
//! - `python_sdk`: real client libraries drive every door (openai, the Agents SDK, anthropic)
//! - `otel`: OpenTelemetry GenAI traces become episodes; hone's own spans go out over OTLP
//! - `cli`: `hone config check` on good and bad configs, `hone key new`
//! - `demo`: a short `hone demo` writes its config, summary and plots; hone hears only implicit signals; `hone demo --quick` learns significantly
//! - `readme`: every command, Python and TOML snippet of the README, run in order against the binary
//! - `ui`: the dashboard on a store filled by a real cycle: pages, login, Approve and Roll back
//! - `replicas`: two gateways on one PostgreSQL — deployments, sticky splits, feedback, no loss through kill -9 and a 30 s outage; `hone store migrate`
//! - `layering`: every crate depends only on lower layers; the demo and the benchmarks sit on top; environments need no trainer or candle
//! - `real_model`: SmolLM2-135M-Instruct's GGUF file imported and served, checked against transformers' own GGUF loader
//! - `learn_crash`: `kill -9` in every step of a learning cycle, then one consistent outcome

// Test servers and load run detached for the life of a test; the test ends them.
#![allow(clippy::disallowed_methods)]
// Helpers outside #[test] functions unwrap too: a failing test should say where.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

mod bad_input;
mod cli;
mod crash;
mod demo;
mod doors;
mod e2e;
mod hardening;
mod layering;
mod learn_crash;
mod local;
mod otel;
mod python_sdk;
mod readme;
mod real_model;
mod replicas;
mod support;
mod ui;
