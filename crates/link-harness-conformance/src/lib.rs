//! link-harness-conformance.
