//! The file tool's own path check, done before anything is asked of the file store (which
//! checks again, on the real files, symlinks included).
//!
//! The lexical rules of [`link_protocol::paths`], which the store applies too: paths are
//! relative to the workspace; `.` and empty parts are dropped and `..` pops a part. Leaving
//! the workspace is `forbidden`, unless the path lands on the agent directory itself or the
//! conversation log's files beside the workspace, which is `protected`. Absolute paths are
//! `forbidden` (`protected` when they name the agent's conversation log or directory). The
//! wording of the errors is the tool's own.

use link_protocol::paths::{normalize, refuse_absolute};
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

/// Checks `path` for an agent whose directory is `agent_dir` (holding `workspace/`).
pub fn check(path: &str, agent_dir: &Path) -> Result<(), Refusal> {
    match normalize(path) {
        // Absolute paths are refused even inside the workspace; only the kind of refusal
        // depends on what they name.
        Err(Refusal::Escapes) if path.starts_with('/') => Err(refuse_absolute(
            Path::new(path),
            agent_dir,
            &agent_dir.join("workspace"),
        )),
        checked => checked.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let dir = Path::new("/s/data/file-store/agents/a");
        for ok in ["a.txt", "d/e/f", "./a", "a/../b", "", ".", "a/.."] {
            assert_eq!(check(ok, dir), Ok(()), "{ok}");
        }
        for (path, want) in [
            ("../x", Refusal::Escapes),
            ("/etc/passwd", Refusal::Escapes),
            ("a/../../x", Refusal::Escapes),
            ("../../b/workspace/x", Refusal::Escapes),
            ("../workspace/x", Refusal::Escapes),
            ("/s/data/file-store/agents/a/workspace/x", Refusal::Escapes),
            ("../conversation.jsonl", Refusal::Protected),
            ("x/../../conversation.jsonl", Refusal::Protected),
            ("../conversation.jsonl.tmp", Refusal::Protected),
            ("..", Refusal::Protected),
            (
                "/s/data/file-store/agents/a/conversation.jsonl",
                Refusal::Protected,
            ),
            (
                "/s/data/file-store/agents/a/workspace/../conversation.jsonl",
                Refusal::Protected,
            ),
            ("/s/data/file-store/agents/a", Refusal::Protected),
        ] {
            assert_eq!(check(path, dir), Err(want), "{path}");
        }
        assert!(matches!(check("a\0", dir), Err(Refusal::Invalid(_))));
    }
}
