//! What hone's tests share and no user needs, kept out of every product
//! crate's public API (`publish = false`; only `[dev-dependencies]` name
//! it):
//! - [`upstream`]: the one fake model server, speaking every wire format
//!   the tests need (OpenAI, Anthropic, embeddings, vLLM's LoRA loading);
//! - [`config`]: a builder for the TOML configs tests start hone with;
//! - [`postgres`]: a fresh PostgreSQL database per test;
//! - [`s3`]: a throwaway S3-compatible server (moto's) on loopback.

// A fake that cannot do what a test asked has failed that test: it panics,
// and its servers live as long as the test's runtime.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)]

pub mod config;
pub mod fine_tuning;
pub mod postgres;
pub mod s3;
pub mod upstream;

pub use config::TestConfig;
pub use postgres::{connect, runtime, test_database, TestDatabase};
pub use s3::LocalS3;
pub use upstream::{Brain, FakeUpstream, Reply};
