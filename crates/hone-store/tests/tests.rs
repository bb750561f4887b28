//! hone-store's integration tests, one binary:
//! - `story`: a scripted story over the Store trait (SQLite file on disk).
//! - `recorder`: group commit, durability across reopen, spool and replay
//!   while another connection holds the database locked.

mod common;
mod recorder;
mod story;
