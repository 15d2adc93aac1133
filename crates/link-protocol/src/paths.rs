//! Lexical rules for paths an agent names inside its workspace, shared by the file store
//! (which applies them to the real files, symlink targets included) and the file tool (which
//! applies them before it forwards anything to the store).
//!
//! A path is relative to the workspace. It is split on `/`, `.` and empty parts are dropped,
//! and `..` pops a part. A path that leaves the workspace at any point is refused: as
//! `protected` when it lands on the agent's own directory (which holds its conversation log,
//! apart from the workspace: [`crate::layout`]) or the conversation log's files in it (the
//! log, its repair record, temporary files named after it), as `forbidden` otherwise. Each
//! service words its own errors for a [`Refusal`].

use std::path::{Component, Path, PathBuf};

/// Why a path was refused, before any file is touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Names the agent directory itself or something in it outside the workspace.
    Protected,
    /// Leaves the workspace (absolute, or `..` past its root).
    Escapes,
    /// Not a usable path at all (NUL byte, too long).
    Invalid(&'static str),
}

/// A caller's path, relative to `workspace`: its parts inside it, or why it is refused
/// (absolute paths always are, even inside the workspace: callers name paths relative to it).
pub fn check(path: &str, agent_dir: &Path, workspace: &Path) -> Result<Vec<String>, Refusal> {
    match normalize(path) {
        // Where it lands tells the kind of refusal (an absolute `path` replaces the join).
        Err(Refusal::Escapes) => Err(refuse_absolute(&workspace.join(path), agent_dir, workspace)),
        checked => checked,
    }
}

/// Splits a workspace-relative path into its parts, with `.` and `..` resolved lexically.
/// An empty result is the workspace itself. A path that leaves the workspace (absolute, or
/// `..` past its root) is [`Refusal::Escapes`]; [`check`] tells where it lands.
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
    let mut out: Vec<String> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if out.is_empty() => return Err(Refusal::Escapes),
            ".." => {
                out.pop();
            }
            name => out.push(name.to_owned()),
        }
    }
    Ok(out)
}

/// Classifies an absolute path (a symlink target, say) against the agent's directory:
/// `Ok(parts)` when it lies inside the workspace.
pub fn classify_absolute(
    target: &Path,
    agent_dir: &Path,
    workspace: &Path,
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

/// A path that left the workspace, or a caller's absolute path (refused even inside the
/// workspace): [`Refusal::Protected`] when it lands on the agent directory or the
/// conversation log's files, [`Refusal::Escapes`] otherwise (back in the workspace too).
pub fn refuse_absolute(path: &Path, agent_dir: &Path, workspace: &Path) -> Refusal {
    match classify_absolute(path, agent_dir, workspace) {
        Err(Refusal::Protected) => Refusal::Protected,
        _ => Refusal::Escapes,
    }
}

/// `path` made absolute from `/` with `..` resolved lexically (no symlinks followed).
fn lexical_absolute(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout's geometry: the workspace apart from the agent directory and its log.
    const AGENT: &str = "/s/data/file-store/agents/a";
    const WORKSPACE: &str = "/s/data/file-store/workspaces/a";

    fn checked(path: &str) -> Result<Vec<String>, Refusal> {
        check(path, Path::new(AGENT), Path::new(WORKSPACE))
    }

    #[test]
    fn relative_paths_normalize() {
        assert_eq!(normalize("a/b.txt").unwrap(), ["a", "b.txt"]);
        assert_eq!(normalize("./a//b/../c").unwrap(), ["a", "c"]);
        for empty in ["", ".", "a/.."] {
            assert!(normalize(empty).unwrap().is_empty(), "{empty}");
        }
        assert!(matches!(normalize("a\0b"), Err(Refusal::Invalid(_))));
    }

    #[test]
    fn a_path_that_leaves_the_workspace_is_refused_by_where_it_lands() {
        for ok in ["a.txt", "d/e/f", "./a", "a/../b", "", ".", "a/.."] {
            assert!(checked(ok).is_ok(), "{ok}");
        }
        for (path, want) in [
            ("../x", Refusal::Escapes),
            ("/etc/passwd", Refusal::Escapes),
            ("a/../../x", Refusal::Escapes),
            ("..", Refusal::Escapes),
            ("../a/x", Refusal::Escapes),
            ("../b/x", Refusal::Escapes),
            ("../conversation.jsonl", Refusal::Escapes),
            ("/s/data/file-store/workspaces/a/x", Refusal::Escapes),
            ("../../agents/a/conversation.jsonl", Refusal::Protected),
            (
                "x/../../../agents/a/conversation.jsonl.tmp",
                Refusal::Protected,
            ),
            ("../../agents/a/.conversation.tmp", Refusal::Protected),
            (
                "../../agents/a/conversation.repairs.jsonl",
                Refusal::Protected,
            ),
            ("../../agents/a", Refusal::Protected),
            ("../../agents/a/other", Refusal::Escapes),
            ("../../agents/b/conversation.jsonl", Refusal::Escapes),
            (
                "/s/data/file-store/agents/a/conversation.jsonl",
                Refusal::Protected,
            ),
            ("/s/data/file-store/agents/a", Refusal::Protected),
        ] {
            assert_eq!(checked(path), Err(want), "{path}");
        }
    }

    #[test]
    fn an_absolute_target_inside_the_workspace_gives_its_parts() {
        let (agent, ws) = (Path::new(AGENT), Path::new(WORKSPACE));
        let inside = Path::new("/s/data/file-store/workspaces/a/x/../y");
        assert_eq!(
            classify_absolute(inside, agent, ws),
            Ok(vec!["y".to_owned()])
        );
        let log = Path::new("/s/data/file-store/workspaces/a/../../agents/a/conversation.jsonl");
        assert_eq!(classify_absolute(log, agent, ws), Err(Refusal::Protected));
        let other = Path::new("/s/data/file-store/workspaces/b/x");
        assert_eq!(classify_absolute(other, agent, ws), Err(Refusal::Escapes));
    }
}
