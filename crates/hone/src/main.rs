//! The `hone` command line: parses arguments and calls into the library
//! crates. Nothing else lives here.

mod bench_dataset;
mod bench_engine;
mod bench_support;
mod bench_train;
mod cli;
mod cycle;
mod learn;
mod progress;
mod train;

fn main() -> std::process::ExitCode {
    cli::main()
}
