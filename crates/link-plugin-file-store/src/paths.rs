//! Paths an agent names inside its workspace: the shared lexical rules of
//! [`link_protocol::paths`], the store's wording of a refusal, and the store's own names.
//! Symlinks are dealt with by the walker in `workspace.rs`, which feeds their targets back
//! through [`normalize`] and [`classify_absolute`].

use link_protocol::{ErrorCode, RemoteError};

pub use link_protocol::paths::{classify_absolute, normalize, refuse_absolute, Refusal};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn relative_paths_normalize() {
        assert_eq!(normalize("a/b.txt").unwrap(), ["a", "b.txt"]);
        assert_eq!(normalize("./a//b/../c").unwrap(), ["a", "c"]);
        assert!(normalize("").unwrap().is_empty());
        assert!(normalize(".").unwrap().is_empty());
        assert!(normalize("a/..").unwrap().is_empty());
    }

    #[test]
    fn escapes_and_protected() {
        assert_eq!(normalize("../x"), Err(Refusal::Escapes));
        assert_eq!(normalize("/etc/passwd"), Err(Refusal::Escapes));
        assert_eq!(normalize("a/../../x"), Err(Refusal::Escapes));
        assert_eq!(normalize("../../other/workspace/x"), Err(Refusal::Escapes));
        assert_eq!(normalize("../workspace/x"), Err(Refusal::Escapes));
        assert_eq!(normalize("../conversation.jsonl"), Err(Refusal::Protected));
        assert_eq!(
            normalize("a/../../conversation.jsonl"),
            Err(Refusal::Protected)
        );
        assert_eq!(normalize(".."), Err(Refusal::Protected));
        assert_eq!(normalize("../"), Err(Refusal::Protected));
        assert_eq!(normalize("../.conversation.tmp"), Err(Refusal::Protected));
        assert_eq!(
            normalize("../conversation.jsonl.tmp"),
            Err(Refusal::Protected)
        );
        assert_eq!(
            normalize("../conversation.repairs.jsonl"),
            Err(Refusal::Protected)
        );
        assert_eq!(normalize("../other"), Err(Refusal::Escapes));
        assert_eq!(
            normalize("../workspace/../conversation.jsonl"),
            Err(Refusal::Protected)
        );
        assert!(matches!(normalize("a\0b"), Err(Refusal::Invalid(_))));
    }

    #[test]
    fn absolute_targets() {
        let agent = Path::new("/s/data/file-store/agents/a");
        let ws = Path::new("/s/data/file-store/agents/a/workspace");
        assert_eq!(
            classify_absolute(
                Path::new("/s/data/file-store/agents/a/workspace/x/y"),
                agent,
                ws
            ),
            Ok(vec!["x".to_owned(), "y".to_owned()])
        );
        assert_eq!(
            classify_absolute(
                Path::new("/s/data/file-store/agents/a/conversation.jsonl"),
                agent,
                ws
            ),
            Err(Refusal::Protected)
        );
        assert_eq!(
            classify_absolute(
                Path::new("/s/data/file-store/agents/a/workspace/../conversation.jsonl"),
                agent,
                ws
            ),
            Err(Refusal::Protected)
        );
        assert_eq!(
            classify_absolute(Path::new("/etc/passwd"), agent, ws),
            Err(Refusal::Escapes)
        );
        assert_eq!(classify_absolute(agent, agent, ws), Err(Refusal::Protected));
        assert_eq!(
            classify_absolute(Path::new("/s/data/file-store/agents/a/x"), agent, ws),
            Err(Refusal::Escapes)
        );
        assert_eq!(
            classify_absolute(
                Path::new("/s/data/file-store/agents/b/workspace/x"),
                agent,
                ws
            ),
            Err(Refusal::Escapes)
        );
    }
}
