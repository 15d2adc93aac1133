//! Paths an agent names inside its workspace: the shared lexical rules of
//! [`link_protocol::paths`], the store's wording of a refusal, and the store's own names.
//! Symlinks are dealt with by the walker in `workspace.rs`, which feeds their targets back
//! through [`check`] and [`classify_absolute`] (whose tests, in `link_protocol::paths`,
//! hold the cases).

use link_protocol::{ErrorCode, RemoteError};

pub use link_protocol::paths::{check, classify_absolute, Refusal};

/// The largest file the store reads or writes.
pub const MAX_FILE: usize = 1024 * 1024;

/// The store's wire error for a refused path.
pub trait RefusalError {
    fn error(&self, path: &str) -> RemoteError;
}

impl RefusalError for Refusal {
    fn error(&self, path: &str) -> RemoteError {
        match self {
            Refusal::Protected => RemoteError::new(
                ErrorCode::Protected,
                format!(
                    "path {path:?} resolves to the agent's conversation log or its directory, \
                     which no tool may touch; use a path inside the workspace"
                ),
            ),
            Refusal::Escapes => RemoteError::forbidden(format!(
                "path {path:?} leaves the agent workspace; use a relative path without `..` \
                 escapes, absolute paths or symlinks pointing outside"
            )),
            Refusal::Invalid(why) => RemoteError::bad_request(format!("path {path:?}: {why}")),
        }
    }
}

/// True for the names the store gives its own temporary files; lists hide them.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with(".lnk-tmp-")
}
