//! hone-artefacts' integration tests, one binary:
//! - `artefacts`: publishing and fetching on a shared directory and on an
//!   S3-compatible server — byte for byte, immutable names, corrupt and
//!   half-published adapters refused, URLs cached once, concurrent fetches.

// Helpers outside `#[test]` functions unwrap and print too: a failing test
// should say where, and a skipped one why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

mod artefacts;
