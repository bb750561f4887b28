#!/usr/bin/env bash
# Gateway overhead benchmark (not a test): builds hone in release, starts a
# fast fake upstream and hone (recording on, durable), and prints direct vs.
# through-hone latency, overhead p50/p99 at 500/1000/2000 req/s, hone's CPU
# time per request, and rows written vs. responses received.
#   crates/hone-bench/scripts/gateway.sh [--seconds N] [--rates 500,1000,2000] [--stores sqlite,postgres]
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build --release -p hone -p hone-bench
exec target/release/hone-bench gateway --hone target/release/hone "$@"
