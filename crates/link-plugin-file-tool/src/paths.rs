//! The file tool's own path check, done before anything is asked of the file store (which
//! checks again, on the real files, symlinks included).
//!
//! Lexical rules, the same as the store's: paths are relative to the workspace; `.` and
//! empty parts are dropped and `..` pops a part. Leaving the workspace is `forbidden`, unless
//! the path lands on the agent directory itself or the conversation log's files beside the
//! workspace, which is `protected`. Absolute paths are `forbidden` (`protected` when they
//! name the agent's conversation log or directory).

use link_protocol::{ErrorCode, RemoteError};
use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Protected,
    Escapes,
    Invalid(&'static str),
}

impl Refusal {
    pub fn error(self, path: &str) -> RemoteError {
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
    if path.contains('\0') {
        return Err(Refusal::Invalid("contains a NUL byte"));
    }
    if path.len() > 4096 {
        return Err(Refusal::Invalid("longer than 4096 bytes"));
    }
    if path.starts_with('/') {
        return Err(absolute(Path::new(path), agent_dir));
    }
    let parts: Vec<&str> = path.split('/').collect();
    let mut depth = 0usize;
    for (i, part) in parts.iter().enumerate() {
        match *part {
            "" | "." => {}
            ".." if depth == 0 => return Err(outside(&parts[i + 1..])),
            ".." => depth -= 1,
            _ => depth += 1,
        }
    }
    Ok(())
}

/// The rest of a path that stepped from the workspace up into the agent directory.
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

fn absolute(path: &Path, agent_dir: &Path) -> Refusal {
    let mut lexical = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => lexical.push(n),
            Component::ParentDir => {
                lexical.pop();
            }
            _ => {}
        }
    }
    match lexical.strip_prefix(agent_dir) {
        Ok(rest) => match rest.components().next() {
            None => Refusal::Protected,
            Some(first) if is_conversation_name(&first.as_os_str().to_string_lossy()) => {
                Refusal::Protected
            }
            Some(_) => Refusal::Escapes,
        },
        Err(_) => Refusal::Escapes,
    }
}

fn is_conversation_name(name: &str) -> bool {
    name.starts_with("conversation") || name.starts_with(".conversation")
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
