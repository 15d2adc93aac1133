//! The agent plugin's integration tests: standalone, and in a real full Link runtime.
//!
//! The crate's one integration-test binary (`cargo test -p link-plugin-agent --test integration`):
//! each file is a module, so the tests link once. `autotests = false` in Cargo.toml: a new
//! test file is a `mod` line here.

mod runtime;
mod standalone;
