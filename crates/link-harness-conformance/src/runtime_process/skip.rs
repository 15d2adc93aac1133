//! A plugin's runtime test: full Link from the programs beside the test executable, or a loud
//! skip when they are not all built, unless [`ENV_REQUIRE_RUNTIME`] makes that a failure.

use super::{RuntimeProcess, RuntimeSpec};
use crate::probe::ENV_REQUIRE_RUNTIME;
use crate::programs::{test_programs, HOST};
use link_protocol::plugin::{Mode, Profile};
use std::time::Duration;

/// Full Link in `mode` for a plugin's runtime test, with test hooks on and the programs
/// beside the test. `None` (skipped loudly) when it cannot come up because a program is
/// missing or still a placeholder, unless `LNK_REQUIRE_RUNTIME=1` makes that a failure; any
/// other start-up failure fails the test with the host's output.
pub fn up_or_skip(mode: Mode) -> Option<RuntimeProcess> {
    let programs = test_programs();
    if !programs.join(HOST).is_file() {
        return skip(&format!(
            "no `link` in {}; build it for tests with `cargo build --release --workspace --bins \
             --examples --features link-cli/test-hooks` (what `bash ci/test.sh` does)",
            programs.display()
        ));
    }
    let spec = RuntimeSpec::new(programs, Profile::Link, mode)
        .with_test_hooks()
        .ready_within(Duration::from_secs(180));
    match spec.up() {
        Ok(rt) => Some(rt),
        Err(f) if f.output().contains("missing programs") || !f.placeholders.is_empty() => skip(
            &format!("{} {}", f.output().trim(), f.placeholders.join(" ")),
        ),
        Err(f) => panic!("link up failed:\n{}", f.output()),
    }
}

fn skip(reason: &str) -> Option<RuntimeProcess> {
    // Not starting is a skip (or, with `LNK_REQUIRE_RUNTIME=1`, a failure), decided where
    // every probe's is.
    let run = crate::probe::require_or_skip(
        "runtime",
        crate::probe::ProbeStatus::Unavailable,
        reason,
        ENV_REQUIRE_RUNTIME,
    );
    debug_assert!(!run, "an unavailable runtime never runs");
    None
}
