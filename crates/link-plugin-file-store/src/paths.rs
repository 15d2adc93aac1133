//! Lexical rules for paths an agent names inside its workspace.
//!
//! A path is relative to the workspace. It is split on `/`, `.` and empty parts are dropped,
//! and `..` pops a part. A path that leaves the workspace at any point is refused: as
//! `protected` when it lands on the agent's own directory or the conversation log's files in
//! it (the log, its repair record, temporary files named after it), as `forbidden` otherwise.
//! Symlinks are dealt with by the walker in `workspace.rs`, which feeds their targets back
//! through [`normalize`].

use link_protocol::{ErrorCode, RemoteError};

/// The largest file the store reads or writes.
pub const MAX_FILE: usize = 1024 * 1024;

/// Why a path was refused, before any file is touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Names the agent directory itself or something in it outside the workspace.
    Protected,
    /// Leaves the workspace (absolute, or `..` past its root).
    Escapes,
    /// Not a usable path at all (NUL byte, too long).
    Invalid(&'static str),
}

impl Refusal {
    /// The wire error for `path`.
    pub fn error(&self, path: &str) -> RemoteError {
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

/// Splits a workspace-relative path into its parts, with `.` and `..` resolved lexically.
/// An empty result is the workspace itself.
pub fn normalize(path: &str) -> Result<Vec<String>, Refusal> {
    if path.contains('\0') {
        return Err(Refusal::Invalid("contains a NUL byte"));
    }
    if path.len() > 4096 {
        return Err(Refusal::Invalid("longer than 4096 bytes"));
    }
    if path.starts_with('/') {
        return Err(Refusal::Escapes);
    }
    let parts: Vec<&str> = path.split('/').collect();
    let mut out: Vec<String> = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        match *part {
            "" | "." => {}
            ".." if out.is_empty() => return Err(outside(&parts[i + 1..])),
            ".." => {
                out.pop();
            }
            name => out.push(name.to_owned()),
        }
    }
    Ok(out)
}

/// Classifies the rest of a path once it has stepped from the workspace up into the agent
/// directory: the agent directory itself and the conversation log's files in it (the log,
/// its repair record, any temporary file named after it) are protected; anything else —
/// further up, a sibling, or back down into the workspace — is an escape.
fn outside(rest: &[&str]) -> Refusal {
    let mut in_agent_dir: Vec<&str> = Vec::new();
    for part in rest {
        match *part {
            "" | "." => {}
            ".." if in_agent_dir.is_empty() => return Refusal::Escapes,
            ".." => {
                in_agent_dir.pop();
            }
            name => in_agent_dir.push(name),
        }
    }
    match in_agent_dir.first() {
        None => Refusal::Protected,
        Some(name) if is_conversation_name(name) => Refusal::Protected,
        Some(_) => Refusal::Escapes,
    }
}

/// Classifies an absolute path (a symlink target, or a caller's absolute path) against the
/// agent's directory: `Ok(parts)` when it lies inside the workspace.
pub fn classify_absolute(
    target: &std::path::Path,
    agent_dir: &std::path::Path,
    workspace: &std::path::Path,
) -> Result<Vec<String>, Refusal> {
    let lexical = lexical_absolute(target);
    if let Ok(rest) = lexical.strip_prefix(workspace) {
        return normalize(&rest.to_string_lossy());
    }
    match lexical.strip_prefix(agent_dir) {
        Ok(rest) => match rest.components().next() {
            None => Err(Refusal::Protected),
            Some(first) if is_conversation_name(&first.as_os_str().to_string_lossy()) => {
                Err(Refusal::Protected)
            }
            Some(_) => Err(Refusal::Escapes),
        },
        Err(_) => Err(Refusal::Escapes),
    }
}

fn lexical_absolute(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// The conversation log, its repair record and temporary files named after it.
fn is_conversation_name(name: &str) -> bool {
    name.starts_with("conversation") || name.starts_with(".conversation")
}

/// True for the names the store gives its own temporary files; lists hide them.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with(".lnk-tmp-")
}

/// Agent ids name directories: `[a-z0-9][a-z0-9_-]{0,31}`.
pub fn valid_agent_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
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

    #[test]
    fn agent_ids() {
        assert!(valid_agent_id("a"));
        assert!(valid_agent_id("agent-1_x"));
        assert!(valid_agent_id(&"a".repeat(32)));
        assert!(!valid_agent_id(&"a".repeat(33)));
        assert!(!valid_agent_id(""));
        assert!(!valid_agent_id("-a"));
        assert!(!valid_agent_id("A"));
        assert!(!valid_agent_id("../a"));
        assert!(!valid_agent_id("a.b"));
    }
}
