//! `hone bench engine|train|dataset|ui|learn`: measurements of hone's parts
//! that print a table with ratios against a baseline measured in the same
//! run (`learn`: hone against TRL on the same task and budget); not tests. `support` holds what the benchmarks share and no command.

pub mod dataset;
pub mod engine;
pub mod learn;
mod support;
pub mod train;
pub mod ui;
