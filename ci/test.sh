#!/usr/bin/env bash
# The test command README.md gives: check formatting, build every program and example in the
# `checked` profile (the release's code with debug assertions and overflow checks on, without
# fat LTO; cargo test alone builds a package's binaries only for that package's own
# integration tests), lint every target, then run every test of the workspace on them, so the
# confined runtime tests find the programs they drive in target/checked.
#
# The host is built with its test hooks (`--features link-cli/test-hooks`, the same for all
# three commands so nothing is built twice); `cargo xtask build` builds the release without
# them, and `cargo xtask runtime` refuses to qualify a host that has them.
set -euo pipefail
cd "$(dirname "$0")/.."
hooks=(--features link-cli/test-hooks)
# Every test that skips (libtest shows it as passed) appends a line here; the end says how
# many skipped and why, so a green run full of skips never looks like a full pass.
export LNK_SKIP_LOG="$PWD/target/test-skips.log"
mkdir -p target && : > "$LNK_SKIP_LOG"
report_skips() {
  local n
  n=$(wc -l < "$LNK_SKIP_LOG")
  if [ "$n" -eq 0 ]; then
    echo "ci/test.sh: no test skipped"
  else
    echo "ci/test.sh: $n test(s) SKIPPED (shown by libtest as passed):"
    sed 's/^/  /' "$LNK_SKIP_LOG"
  fi
}
trap report_skips EXIT
cargo fmt --all -- --check
profile=(--profile checked)
cargo build --locked "${profile[@]}" --workspace --bins --examples "${hooks[@]}"
cargo clippy --locked --workspace --all-targets "${profile[@]}" "${hooks[@]}" -- -D warnings
cargo test --locked "${profile[@]}" --workspace "${hooks[@]}"
