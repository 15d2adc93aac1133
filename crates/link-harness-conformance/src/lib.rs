//! link-harness-conformance.
pub mod trace;
