//! hone's benchmarks, in one crate: what `hone bench engine|train|dataset|ui|learn`
//! (and `canary`, the online test's error and power by simulation)
//! runs (the binary only parses their arguments), and the gateway benchmark
//! (`hone-bench gateway`, this crate's own binary, which starts `hone serve`
//! as a separate process). Each prints a table with ratios against a
//! baseline measured in the same run (`learn`: hone against TRL on the same
//! task and budget); none is a test. The Python side of the comparisons is
//! in `python/`, embedded in the binary and run with the interpreter the
//! user names; `scripts/` holds the shell entry points (the gateway run,
//! the GPU check). `support` holds what the benchmarks share, `report`
//! the result file `--out FILE` writes.

pub mod canary;
pub mod dataset;
pub mod engine;
pub mod learn;
mod report;
pub mod roofline;
mod side_by_side;
mod support;
pub mod train;
pub mod ui;
