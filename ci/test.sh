#!/usr/bin/env bash
# The test command README.md gives: check formatting, build every program and example in
# release (cargo test alone builds a package's binaries only for that package's own
# integration tests), lint every target, then run every test of the workspace on them, so the
# confined runtime tests find the programs they drive in target/release.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo build --locked --release --workspace --bins --examples
cargo clippy --locked --workspace --all-targets --release -- -D warnings
cargo test --locked --release --workspace
