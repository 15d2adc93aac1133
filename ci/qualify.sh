#!/usr/bin/env bash
# The release qualification step: one timed Mini + full Link comparison plus the strace pass.
# Fails on any failed or skipped side. Then every output it wrote is checked against its
# published schema (schemas/, `cargo xtask schemas`).
set -euo pipefail
cd "$(dirname "$0")/.."
export LNK_TEST_STATE_DIR="${LNK_TEST_STATE_DIR:-$HOME/lnk-tests}"
cargo xtask runtime --build --trace
check-jsonschema --schemafile schemas/runtime-comparison.schema.json target/runtime-comparison.json
check-jsonschema --schemafile schemas/run-report.schema.json \
  target/runtime-mini.json target/runtime-link.json \
  target/runtime-mini-traced.json target/runtime-link-traced.json
