//! The wire protocol and the shared vocabulary of every Link process.
//!
//! This crate owns, in one place each:
//! - [`agent`]: the agent id rule, checked once where an id enters;
//! - `frame`: length-prefixed JSON frames over Unix stream sockets, with a size limit;
//! - [`message`]: requests and responses with ids, and the typed [`message::ErrorCode`];
//! - [`routes`]: the names of every internal route;
//! - [`model`]: the model an agent runs on, and the model service's one client;
//! - [`manifest`]: every plugin, declared once: its profiles, grants, confinement;
//! - [`layout`]: where things live under a state root, and the socket-length rule;
//! - [`paths`]: the lexical rules for paths an agent names inside its workspace;
//! - [`tokens`]: the bearer-token store (only sha256 hashes are written);
//! - [`control_key`]: the per-runtime secret that opens the host's control socket;
//! - `plugin`: the contract between the host and a plugin (environment, readiness);
//! - `server` and `client`: serving and calling routes over the frames;
//! - `http`: a small HTTP/1.1 client over a Unix socket;
//! - [`files`]: replacing a file atomically (temp file, fsync, rename, fsync of the directory);
//! - [`digest`]: the sha256 a program or report is named by;
//! - [`text`]: cutting text on a character boundary;
//! - [`clock`]: milliseconds since the Unix epoch.
//!
//! # The `runtime` feature
//!
//! `frame`, `client`, `server`, `plugin`, `http` and `model_service` (and the `Client` re-export and
//! `Error::FrameTooLarge`) exist only with the `runtime` feature, which is on by default and
//! brings in tokio, hyper, hyper-util, http-body-util, rustix, tracing and tracing-subscriber.
//! Without it the crate is the plain vocabulary — `agent`, `message`, `routes`, `manifest`,
//! `layout`, `paths`, `tokens`, `control_key`, `files`, `digest`, `clock` and [`Error`] — on
//! serde, sha2, subtle and getrandom
//! only; that is how the xtask depends on it (`default-features = false`), so `cargo xtask`
//! never builds the async stack.
//!
//! The [`manifest`] declares what each plugin may do; the host enforces it (its router, its
//! confinement), so a plugin linking another version of this crate changes nothing.
// The docs describe how the code works, private parts included (read them with
// `cargo doc --document-private-items`): a link to a private item is meant.
#![allow(rustdoc::private_intra_doc_links)]

/// What `link --version` adds when the host was built with its test hooks (`link-cli`'s
/// `test-hooks` feature), which a release must not be: the xtask refuses to qualify such a
/// host, and the testing kit refuses to test without one.
pub const TEST_HOOKS_MARK: &str = "(test hooks built in)";

/// Whether the host program at `host` says, in its `--version`, that it was built with test
/// hooks; an error when it cannot be run or its `--version` fails.
pub fn built_with_test_hooks(host: &std::path::Path) -> std::io::Result<bool> {
    let out = std::process::Command::new(host).arg("--version").output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{} --version failed ({})",
            host.display(),
            out.status
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).contains(TEST_HOOKS_MARK))
}

pub mod agent;
#[cfg(feature = "runtime")]
pub mod client;
pub mod clock;
pub mod control_key;
pub mod digest;
pub mod files;
#[cfg(feature = "runtime")]
pub mod frame;
#[cfg(feature = "runtime")]
pub mod http;
pub mod layout;
pub mod manifest;
pub mod message;
pub mod model;
#[cfg(feature = "runtime")]
pub mod model_service;
pub mod paths;
pub mod pids;
#[cfg(feature = "runtime")]
pub mod plugin;
pub mod routes;
#[cfg(feature = "runtime")]
pub mod safe_root;
pub mod say;
#[cfg(feature = "runtime")]
pub mod server;
pub mod text;
pub mod tokens;

pub use agent::AgentId;
#[cfg(feature = "runtime")]
pub use client::Client;
pub use message::{ErrorCode, RemoteError, Request, Response};

/// Everything that can go wrong talking the protocol.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A frame longer than `frame::MAX_FRAME`; only frames produce it.
    #[cfg(feature = "runtime")]
    #[error("frame of {0} bytes exceeds the {max} byte limit", max = frame::MAX_FRAME)]
    FrameTooLarge(usize),
    #[error("malformed message: {0}")]
    Json(#[from] serde_json::Error),
    #[error("connection closed by peer")]
    Closed,
    #[error("{0}")]
    Remote(#[from] RemoteError),
    #[error("response id {got} does not match request id {want}")]
    IdMismatch { want: u64, got: u64 },
    /// The process serving a socket is not the one that owns it (SO_PEERCRED).
    #[error(
        "{} is served by pid {}, not by its owner (pid {want}); something replaced the \
         socket, so nothing was sent",
        socket.display(),
        got.map_or("unknown".to_owned(), |p| p.to_string())
    )]
    WrongPeer {
        socket: std::path::PathBuf,
        want: i32,
        got: Option<i32>,
    },
    /// The control key, needed before the host's control socket answers more than its
    /// status, could not be read.
    #[error(transparent)]
    ControlKey(#[from] control_key::ControlKeyError),
    /// Refused before sending: the id breaks the rule every owner would refuse it by.
    #[error(transparent)]
    InvalidAgent(#[from] agent::InvalidAgentId),
}

impl Error {
    /// The remote error code when this is a refusal or failure reported by the peer.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Remote(e) => Some(e.code),
            Error::InvalidAgent(_) => Some(ErrorCode::BadRequest),
            _ => None,
        }
    }
}
