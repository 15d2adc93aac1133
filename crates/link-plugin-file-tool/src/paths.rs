//! The file tool's own path check, done before anything is asked of the file store (which
//! checks again, on the real files, symlinks included).
//!
//! The lexical rules of [`link_protocol::paths`], which the store applies too: paths are
//! relative to the workspace; `.` and empty parts are dropped and `..` pops a part. Leaving
//! the workspace is `forbidden`, unless the path lands on the agent directory itself or the
//! conversation log's files in it, which is `protected`. Absolute paths are `forbidden`
//! (`protected` when they name the agent's conversation log or directory). The wording of
//! the errors is the tool's own.

use link_protocol::{ErrorCode, RemoteError};
use std::path::Path;

pub use link_protocol::paths::Refusal;

/// The file tool's wire error for a refused path.
pub trait RefusalError {
    fn error(self, path: &str) -> RemoteError;
}

impl RefusalError for Refusal {
    fn error(self, path: &str) -> RemoteError {
        match self {
            Refusal::Protected => RemoteError::new(
                ErrorCode::Protected,
                format!(
                    "path {path:?} resolves to the agent's conversation log or its directory, \
                     which the file tool never touches; use a path inside the workspace"
                ),
            ),
            Refusal::Escapes => RemoteError::forbidden(format!(
                "path {path:?} leaves the agent workspace; use a relative path inside it \
                 (no absolute paths, no `..` escapes)"
            )),
            Refusal::Invalid(why) => RemoteError::bad_request(format!("path {path:?}: {why}")),
        }
    }
}

/// Checks `path` for an agent whose conversation log lies in `agent_dir` and whose files lie
/// in `workspace` ([`link_protocol::paths::check`], whose tests hold the cases).
pub fn check(path: &str, agent_dir: &Path, workspace: &Path) -> Result<(), Refusal> {
    link_protocol::paths::check(path, agent_dir, workspace).map(drop)
}
