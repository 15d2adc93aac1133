//! Lexical rules for paths an agent names inside its workspace, shared by the file store
//! (which applies them to the real files, symlink targets included) and the file tool (which
//! applies them before it forwards anything to the store).
//!
//! A path is relative to the workspace (`<agent dir>/workspace`). It is split on `/`, `.`
//! and empty parts are dropped, and `..` pops a part. A path that leaves the workspace at any
//! point is refused: as `protected` when it lands on the agent's own directory or the
//! conversation log's files in it (the log, its repair record, temporary files named after
//! it), as `forbidden` otherwise. Each service words its own errors for a [`Refusal`].

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

/// Splits a workspace-relative path into its parts, with `.` and `..` resolved lexically.
/// An empty result is the workspace itself. Absolute paths are [`Refusal::Escapes`].
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

/// A caller's absolute path is always refused, even inside the workspace (callers name
/// paths relative to it): [`Refusal::Protected`] when it names the agent directory or the
/// conversation log's files, [`Refusal::Escapes`] otherwise.
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
