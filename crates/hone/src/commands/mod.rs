//! One module per command family. Each exposes the functions `cli.rs` calls
//! (and the clap arguments of its own sub-commands); what several families
//! need lives in `context.rs` or `hone-console`, never in a sibling here.
//! `hone demo` and `hone bench` run from their own crates (`hone-demo`,
//! `hone-bench`).

pub mod artefacts;
pub mod config;
pub mod dataset;
pub mod deploy;
pub mod eval;
pub mod keys;
pub mod learn;
pub mod memory;
pub mod model;
pub mod rewards;
pub mod serve;
pub mod store;
pub mod train;
