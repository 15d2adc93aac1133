#!/usr/bin/env bash
# The release qualification step: one timed Mini + full Link comparison plus the strace pass.
# Fails on any failed or skipped side.
set -euo pipefail
cd "$(dirname "$0")/.."
export LNK_TEST_STATE_DIR="${LNK_TEST_STATE_DIR:-$HOME/lnk-tests}"
cargo xtask runtime --build --trace
