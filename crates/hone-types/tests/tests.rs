//! hone-types' integration tests, one binary:
//! - `parsers`: property tests of the request parser and the streamed
//!   tool-call parser (arbitrary input never panics; valid input round-trips;
//!   deltas split anywhere reassemble to the same call).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod parsers;
