//! The standalone runner's exit statuses (`link-harness-conformance`'s `runtime` example): the
//! runner returns them, its tests and `cargo xtask runtime` read them. Here, beside the report
//! the runner writes, so the xtask needs none of the runtime's dependencies to name them.
//!
//! The exit status says only how the run ended; what it found is in the report, which is what
//! a caller reads (never the runner's stderr).

/// A run passed; `runtime report`: the trace's counts are in the report.
pub const PASSED: u8 = 0;
/// A run failed.
pub const FAILED: u8 = 1;
/// Bad input: nothing started, nothing left behind (`runtime report`: the report is as it was).
pub const BAD_INPUT: u8 = 2;
/// A run skipped: a capability is missing (the report says which, and why).
pub const SKIPPED: u8 = 3;
/// `runtime report`: the trace gave no counts; the report says so, and why (never zero).
pub const TRACE_UNAVAILABLE: u8 = 4;

/// Set to `1` by a caller that prints each run's checks from the report itself: the runner
/// then leaves its per-run check list off its stderr, which the caller relays untouched.
pub const ENV_NO_CHECK_LIST: &str = "LNK_RUNNER_NO_CHECK_LIST";
