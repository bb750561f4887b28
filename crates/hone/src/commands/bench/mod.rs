//! `hone bench engine|train|dataset`: measurements of hone's parts that print
//! a table with ratios against a baseline measured in the same run; not
//! tests. `support` holds what the benchmarks share and no command.

pub mod dataset;
pub mod engine;
mod support;
pub mod train;
pub mod ui;
