//! What hone's tests share and no user needs, kept out of every product
//! crate's public API (`publish = false`; only `[dev-dependencies]` name
//! it):
//! - [`postgres`]: a fresh PostgreSQL database per test;
//! - [`s3`]: a throwaway S3-compatible server (moto's) on loopback.

pub mod postgres;
pub mod s3;

pub use postgres::{test_database, TestDatabase};
pub use s3::LocalS3;
