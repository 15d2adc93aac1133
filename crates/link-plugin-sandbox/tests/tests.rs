//! The sandbox's integration tests (`cargo test -p link-plugin-sandbox --test integration`):
//! each file is a module, so the tests link once. `autotests = false` in Cargo.toml: a new
//! test file is a `mod` line here. `orphans.rs` stays its own binary (`--test orphans`): it
//! makes the test process a child subreaper and asserts it has no child at all, which holds
//! only while no other test runs in that process.

mod common;
mod confinement;
mod hardening;
mod host_confine;
mod plugin;
mod terminal;
