//! link-confine: confinement for Link, as a library.
//!
//! This crate owns, in one place each:
//! - [`policy::Policy`]: the one description of a confined command, yielding both the
//!   bubblewrap arguments (`--die-with-parent --unshare-pid --unshare-net --unshare-ipc
//!   --unshare-uts`, and `--new-session` unless the process running bwrap leads a session with
//!   no controlling terminal, as the plugin does: [`policy::Session`]; a user namespace or a
//!   dropped identity, a seccomp filter, system paths read-only, the
//!   state root not bound at all, the workspace the only writable bind, an isolated home) and
//!   the helper's arguments: the Landlock rules it applies inside the namespace before the
//!   command is executed;
//! - [`helper`]: the sandbox helper (`crates/link-sandbox-helper`) this crate's build script
//!   compiles and embeds, and its status lines;
//! - [`identity`]: who the command is on the host (never root);
//! - [`userns`]: the user namespaces made for that identity's commands and for the sandbox
//!   plugin itself;
//! - [`handover`]: the workspace walks that hand files to that identity and clear
//!   setuid/setgid bits;
//! - [`seccomp`]: the system-call filter handed to bwrap;
//! - [`limits`]: processes, memory, CPU time, file size and tmpfs sizes per command;
//! - [`rules`]: the host's Landlock rulesets pinned at [`rules::PINNED_ABI`] and required fully
//!   enforced;
//! - [`host`]: the ruleset the host applies to the plugins it starts (in `pre_exec`);
//! - [`run`]: running one confined command with a time limit that kills its whole tree, and
//!   never returning while a process it started (bwrap, or the namespace's init bwrap leaves
//!   behind) is alive;
//! - [`leftovers`]: the sandboxes a killed starter left (bubblewrap's `--die-with-parent` race),
//!   found by their owner's tag (bwrap's `argv[0]`) and killed;
//! - [`probe`](mod@probe): the capability probe (`enforced` / `unavailable` / `broken`, with reasons);
//! - [`view`]: the plugin's own mount namespace, read-only but what it must write;
//! - [`plugin_ns`]: as root, the plugin's own user namespace (its root an unprivileged uid on
//!   the host) and the tree it sees: only what it serves.
//!
//! The host (`link`) links this library to confine its plugins and clean up after them; the
//! `link-plugin-sandbox` program is a thin binary over it: the plugin (its `sandbox.exec`
//! route), the `probe` and `exec` commands for people, and the probe's inside checks
//! (`probe-inside`, [`probe::inside`]). There is never an unconfined fallback.
// The docs describe how the code works, private parts included (read them with
// `cargo doc --document-private-items`): a link to a private item is meant.
#![allow(rustdoc::private_intra_doc_links)]

pub mod cgroup;
pub mod handover;
pub mod helper;
pub mod host;
pub mod identity;
pub mod leftovers;
pub mod limits;
pub mod plugin_ns;
pub mod policy;
pub mod probe;
pub mod rules;
pub mod run;
pub mod seccomp;
#[cfg(test)]
mod static_elf;
pub mod userns;
pub mod view;

pub use policy::Policy;
pub use probe::{probe, probe_blocking, ProbeReport, ProbeStatus};
pub use rules::{Rules, PINNED_ABI, PINNED_ABI_NUMBER};

/// Why a ruleset or sandbox cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A capability is missing; the message names the cause and the fix.
    #[error("{0}")]
    Unavailable(String),
    #[error("Landlock: {0}")]
    Landlock(String),
    #[error("{0} must exist to be granted in a Landlock rule: {1}")]
    MissingPath(std::path::PathBuf, String),
}
