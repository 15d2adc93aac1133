//! The host's integration tests: Mini and full Link through the real `link` binary.
//!
//! The crate's one integration-test binary (`cargo test -p link-cli --test integration`):
//! each file is a module, so the tests link once. `autotests = false` in Cargo.toml: a new
//! test file is a `mod` line here.

mod cli;
mod control_socket;
mod deadlines;
mod endpoint_limits;
mod full_disk;
mod host_death;
mod http_conventions;
mod idempotency;
mod leaks;
mod link;
mod long_conversations;
mod mini;
mod models;
mod one_runtime;
mod ordinary_user;
mod plugin_kills;
mod plugin_privileges;
mod private_state;
mod safe_roots;
mod schedule_grant;
mod shortened_logs;
mod support;
