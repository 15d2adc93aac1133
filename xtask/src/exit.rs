//! Every exit status of `cargo xtask`, one place: the commands' help texts, the README and the
//! tests (`xtask/tests/cli.rs`) name these numbers, so no command writes a literal of its own.

/// Done: both sides passed (runtime), measured (bench-sandbox, load), no machine failed (fleet).
pub const PASSED: u8 = 0;
/// A side failed, the trace pass was unusable, a phase regressed significantly, a machine
/// failed, or nothing could be done (an error).
pub const FAILED: u8 = 1;
/// `runtime`: a side was skipped (0 with `--allow-skip`).
pub const SKIPPED: u8 = 2;
/// `fleet`, `bench-sandbox`, `load`: bad input (clap's own usage errors are 2 as well); nothing written.
pub const USAGE: u8 = 2;
/// Confined mode, and the sandbox probe says confinement is unavailable here (or, for
/// `bench-sandbox` and `load`, bwrap is missing): nothing was measured (`--allow-skip` does not change it).
pub const UNCONFINABLE: u8 = 3;

/// `PASSED` or `FAILED`.
pub fn from_ok(ok: bool) -> u8 {
    if ok {
        PASSED
    } else {
        FAILED
    }
}
