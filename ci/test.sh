#!/usr/bin/env bash
# The test command README.md gives: build every program and example in release (cargo test
# alone builds a package's binaries only for that package's own integration tests), then run
# every test of the workspace on them, so the confined runtime tests find the programs they
# drive in target/release.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release --workspace --bins --examples
cargo test --locked --release --workspace
