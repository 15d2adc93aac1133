//! link-harness-conformance: the testing kit of the runtime comparison, and its runner.
//!
//! It owns, one module each:
//! - [`fixture`]: short per-run state roots outside temporary folders, removed on drop, and
//!   the isolated environment (HOME, XDG_*, `LNK_KEYCHAIN=off`) children get;
//! - [`probe`]: the sandbox probe (the built `link-plugin-sandbox probe`) and the native probe
//!   (child subreaper, pidfd, `/proc`), and the skip/fail decision (`LNK_REQUIRE_*`);
//! - [`reaper`]: the supervisor that owns every wait of the process, adopts and reaps orphans,
//!   and identifies processes by pid and start time;
//! - [`programs`]: the built programs a profile needs, their sizes and hashes;
//! - [`client`]: the HTTP connection service and the host's control socket;
//! - `child`: a started child's first line, wait with a timeout, signal and kill, for both
//!   the plugin and the runtime processes;
//! - [`plugin_process`]: one plugin binary started as the host would, the test its parent;
//! - [`runtime_process`]: the one way to start `link up` (integration tests, the scenario,
//!   the `link-cli` bench), with HOME isolated inside the state root, and its clients; and the
//!   process's turns ([`runtime_process::exclusive`]): a scenario run never overlaps a runtime
//!   of the same process;
//! - [`scenario`]: [`run_scenario`], one whole run producing the shared
//!   [`Report`](link_report::Report), one module per phase;
//! - [`interrupt`]: SIGINT/SIGTERM turned into a flag, so an interrupted run still cleans up;
//! - [`trace`]: per-phase exec counts from an strace file (`runtime report`): parse, track,
//!   count;
//! - [`syscalls`]: the raw system calls a compromised plugin tries, and their twins;
//! - [`vm`]: one test run again in a virtual machine whose only cgroup hierarchy is v2.
//!
//! The example `runtime` is the standalone runner; the `runtime::` tests of
//! `link-plugin-link-harness` call [`run_scenario`] too. It never builds or downloads programs.
// The docs describe how the code works, private parts included (read them with
// `cargo doc --document-private-items`): a link to a private item is meant.
#![allow(rustdoc::private_intra_doc_links)]

mod child;
pub mod client;
pub mod fixture;
pub mod interrupt;
pub mod plugin_process;
pub mod probe;
pub mod programs;
pub mod reaper;
pub mod runtime_process;
pub mod scenario;
pub mod stand_in;
pub mod syscalls;
pub mod trace;
pub mod vm;

pub use scenario::{
    preflight, read_report, run_scenario, write_report, InputError, ScenarioConfig, COLD_AGENTS,
};
