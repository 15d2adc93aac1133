#!/usr/bin/env bash
# The test command README.md gives: every test of the workspace, on release builds, so the
# spec's confined runtime tests find the programs they drive in target/release.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked --release --workspace
