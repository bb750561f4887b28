//! hone-demo's integration tests, one binary.
//! - `base_policy`: a recipe builds a loadable checkpoint once, with its
//!   hash, and is reused rather than rebuilt while the recipe is unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod base_policy;
