//! Logs as files of a directory of agents: durable creation and loading with per-agent
//! damage isolation.

use crate::{sync, Error, Log};
use std::path::{Path, PathBuf};

/// Creates an empty log at `path` with owner-only permissions, keeping an existing one, and
/// the directories above it that are missing. The log is fsync'd, and so is every directory
/// whose entries this changed (the log's own directory always), so the log exists after a
/// crash once this returns.
///
/// A new log starts with no acknowledged count: one left beside it (by a delete that did not
/// finish) is removed, so the new log is not taken for a cut one.
pub fn create(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = parent(path);
    create_dirs(&dir)?;
    let existed = path.exists();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io(path, e))?;
    if !existed {
        let acked = Log::new(path.to_owned()).acked_path();
        match std::fs::remove_file(&acked) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&acked, e)),
        }
    }
    sync::all(&file).map_err(|e| io(path, e))?;
    sync::dir(&dir).map_err(|e| io(&dir, e))
}

/// `path`'s directory (`.` for a bare name).
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Creates `dir` and its missing ancestors top-down, fsyncing the parent of each one made.
fn create_dirs(dir: &Path) -> Result<(), Error> {
    let mut missing = Vec::new();
    let mut at = dir.to_owned();
    loop {
        match std::fs::metadata(&at) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(io(
                    &at,
                    std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let up = parent(&at);
                missing.push(at);
                if up == Path::new(".") {
                    break;
                }
                at = up;
            }
            Err(e) => return Err(io(&at, e)),
        }
    }
    for d in missing.iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => {
                let up = parent(d);
                sync::dir(&up).map_err(|e| io(&up, e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(d, e)),
        }
    }
    Ok(())
}

/// An I/O error on creation: a missing path here is not a missing log.
fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_owned(),
        source,
    }
}

/// The log `<dir>/<id>/<file_name>` of every agent directory in `dir`, sorted by id, none
/// read yet; names starting with `.` (temporary files) are skipped. `Err` only when `dir`
/// itself cannot be listed: each agent's log is then read (or found damaged) on its own.
pub fn agent_logs(dir: &Path, file_name: &str) -> std::io::Result<Vec<(String, Log)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let id = entry.file_name().to_string_lossy().into_owned();
        if id.starts_with('.') {
            continue;
        }
        found.push((id, Log::new(entry.path().join(file_name))));
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}
