//! Files inside one agent's workspace, reached only through directory file descriptors.
//!
//! Every path goes through [`crate::paths::check`] first. The walker then opens one
//! component at a time with `O_NOFOLLOW`, so a directory swapped for a symlink mid-walk makes
//! the open fail instead of being followed. A symlink met on the way is resolved by hand: its
//! target is joined with the parts walked so far and checked again, so a link that leads
//! out of the workspace (or onto the conversation log) is refused like the equivalent `..`
//! path, while links that stay inside work. Writes are atomic: a temporary file in the same
//! directory, fsync, rename over the target, fsync of the directory.

use crate::paths::{self, RefusalError, MAX_FILE};
use link_protocol::{ErrorCode, RemoteError};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most entries one list answers with.
pub const MAX_LIST: usize = 10_000;
const MAX_SYMLINK_HOPS: usize = 40;

/// One agent's workspace, and the agent directory that holds its conversation log (apart
/// from the workspace: [`link_protocol::layout`]).
pub struct Workspace {
    pub agent_dir: PathBuf,
    pub root: PathBuf,
    /// The runtime's state root, named when the disk holding it is full.
    pub state_root: PathBuf,
}

/// Where a path leads: the open directory holding it and its name there (`None`: the
/// workspace itself).
struct Target {
    dir: OwnedFd,
    name: Option<String>,
}

pub use link_protocol::routes::store::ListEntry as Entry;

impl Workspace {
    /// The wire error for a failed file operation: a full disk (or quota) names the state
    /// root and says nothing was written (writes are atomic); anything else is internal.
    fn io_error(&self, e: Errno, path: &str) -> RemoteError {
        if e == Errno::NOSPC || e == Errno::DQUOT {
            RemoteError::insufficient_storage(
                &self.state_root,
                format!("writing {path:?} in the workspace: {e}"),
            )
        } else {
            io_error(e, path)
        }
    }

    /// Reads a UTF-8 text file of at most [`MAX_FILE`] bytes.
    pub fn read(&self, path: &str) -> Result<String, RemoteError> {
        let target = self.resolve(path, false)?;
        let name = file_name(&target, path)?;
        let fd = rustix::fs::openat(
            &target.dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| open_error(e, path))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| self.io_error(e, path))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(is_dir(path)),
            _ => {
                return Err(RemoteError::bad_request(format!(
                    "{path:?} is not a regular file"
                )))
            }
        }
        if stat.st_size as u64 > MAX_FILE as u64 {
            return Err(too_large(path, stat.st_size as u64));
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(MAX_FILE as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| RemoteError::internal(format!("reading {path:?}: {e}")))?;
        if bytes.len() > MAX_FILE {
            return Err(too_large(path, bytes.len() as u64));
        }
        String::from_utf8(bytes).map_err(|_| {
            RemoteError::bad_request(format!(
                "{path:?} is not UTF-8 text; the store reads text only"
            ))
        })
    }

    /// Replaces (or creates) a file atomically, creating missing parent directories.
    pub fn write(&self, path: &str, content: &str) -> Result<u64, RemoteError> {
        if content.len() > MAX_FILE {
            return Err(too_large(path, content.len() as u64));
        }
        let target = self.resolve(path, true)?;
        let name = file_name(&target, path)?;
        let mode = match rustix::fs::statat(&target.dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                return Err(is_dir(path))
            }
            Ok(st) => Mode::from_raw_mode(st.st_mode) & Mode::from_raw_mode(0o777),
            Err(Errno::NOENT) => Mode::from_raw_mode(0o644),
            Err(e) => return Err(self.io_error(e, path)),
        };
        // A name taken already (by a command in the workspace, say) just means another try.
        for _ in 0..8 {
            let tmp = temp_name();
            match write_then_rename(&target.dir, &tmp, name, mode, content.as_bytes()) {
                Ok(()) => return Ok(content.len() as u64),
                Err(Step::Create(Errno::EXIST)) => continue,
                Err(Step::Create(e)) => return Err(self.io_error(e, path)),
                Err(Step::Write(e)) => {
                    let _ = rustix::fs::unlinkat(&target.dir, tmp.as_str(), AtFlags::empty());
                    return Err(self.io_error(e, path));
                }
            }
        }
        Err(RemoteError::internal(format!(
            "{path:?}: no free temporary file name in its directory"
        )))
    }

    /// Lists one directory (not recursive), sorted by name, hiding the store's temp files.
    pub fn list(&self, path: &str) -> Result<(Vec<Entry>, bool), RemoteError> {
        let target = self.resolve(path, false)?;
        let dir = match &target.name {
            None => target.dir,
            Some(name) => rustix::fs::openat(
                &target.dir,
                name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| match e {
                Errno::NOTDIR => RemoteError::bad_request(format!("{path:?} is not a directory")),
                e => open_error(e, path),
            })?,
        };
        let mut entries = Vec::new();
        let mut truncated = false;
        for item in rustix::fs::Dir::read_from(&dir).map_err(|e| self.io_error(e, path))? {
            let item = item.map_err(|e| self.io_error(e, path))?;
            let name = item.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." || paths::is_temp_name(&name) {
                continue;
            }
            if entries.len() == MAX_LIST {
                truncated = true;
                break;
            }
            let Ok(st) = rustix::fs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue; // removed while listing
            };
            let kind = match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => "file",
                FileType::Directory => "dir",
                FileType::Symlink => "symlink",
                _ => "other",
            };
            let bytes = if kind == "file" { st.st_size as u64 } else { 0 };
            entries.push(Entry {
                name,
                kind: kind.to_owned(),
                bytes,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((entries, truncated))
    }

    fn open_root(&self) -> Result<OwnedFd, RemoteError> {
        rustix::fs::openat(
            rustix::fs::CWD,
            &self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            RemoteError::internal(format!(
                "cannot open workspace {}: {e}",
                self.root.display()
            ))
        })
    }

    /// Parts of a caller's path ([`paths::check`]).
    fn parts(&self, path: &str) -> Result<Vec<String>, RemoteError> {
        paths::check(path, &self.agent_dir, &self.root).map_err(|r| r.error(path))
    }

    /// Walks `path` from the workspace root without following symlinks blindly.
    fn resolve(&self, path: &str, create_dirs: bool) -> Result<Target, RemoteError> {
        let mut parts = self.parts(path)?;
        let mut hops = 0;
        'restart: loop {
            let mut dir = self.open_root()?;
            for i in 0..parts.len() {
                let name = parts[i].as_str();
                let last = i + 1 == parts.len();
                let kind = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => Some(FileType::from_raw_mode(st.st_mode)),
                    Err(Errno::NOENT) => None,
                    Err(e) => return Err(self.io_error(e, path)),
                };
                match kind {
                    Some(FileType::Symlink) => {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(RemoteError::bad_request(format!(
                                "{path:?}: too many levels of symlinks"
                            )));
                        }
                        parts = self.follow(&dir, &parts, i, path)?;
                        continue 'restart;
                    }
                    _ if last => {
                        return Ok(Target {
                            dir,
                            name: Some(name.to_owned()),
                        })
                    }
                    Some(FileType::Directory) => dir = open_dir(&dir, name, path)?,
                    None if create_dirs => {
                        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                            Ok(()) | Err(Errno::EXIST) => {}
                            Err(e) => return Err(self.io_error(e, path)),
                        }
                        dir = open_dir(&dir, name, path)?;
                    }
                    None => {
                        return Err(RemoteError::not_found(format!(
                            "{path:?}: directory {:?} does not exist in the workspace",
                            parts[..=i].join("/")
                        )))
                    }
                    Some(_) => {
                        return Err(RemoteError::bad_request(format!(
                            "{path:?}: {:?} is not a directory",
                            parts[..=i].join("/")
                        )))
                    }
                }
            }
            return Ok(Target { dir, name: None });
        }
    }

    /// The path that results from replacing the symlink `parts[i]` by its target.
    fn follow(
        &self,
        dir: &OwnedFd,
        parts: &[String],
        i: usize,
        path: &str,
    ) -> Result<Vec<String>, RemoteError> {
        let target = rustix::fs::readlinkat(dir, parts[i].as_str(), Vec::new())
            .map_err(|e| self.io_error(e, path))?;
        let target = target.to_string_lossy().into_owned();
        let rest = parts[i + 1..].join("/");
        let resolved = if target.starts_with('/') {
            let joined = PathBuf::from(&target).join(&rest);
            paths::classify_absolute(&joined, &self.agent_dir, &self.root)
        } else {
            let mut joined = parts[..i].to_vec();
            joined.push(target.clone());
            joined.push(rest);
            paths::check(&joined.join("/"), &self.agent_dir, &self.root)
        };
        resolved.map_err(|r| {
            let mut e = r.error(path);
            e.message = format!(
                "{} (symlink {:?} points to {target:?})",
                e.message,
                parts[..=i].join("/")
            );
            e
        })
    }
}

/// Where an atomic write failed: creating the temporary file, or after it existed.
enum Step {
    Create(Errno),
    Write(Errno),
}

fn write_then_rename(
    dir: &OwnedFd,
    tmp: &str,
    name: &str,
    mode: Mode,
    bytes: &[u8],
) -> Result<(), Step> {
    let fd = rustix::fs::openat(
        dir,
        tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        mode,
    )
    .map_err(Step::Create)?;
    let write = || -> rustix::io::Result<()> {
        rustix::fs::fchmod(&fd, mode)?; // the umask may have narrowed it
        let mut file = std::fs::File::from(fd.try_clone().map_err(|_| Errno::IO)?);
        file.write_all(bytes)
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
        rustix::fs::fsync(&file)?;
        rustix::fs::renameat(dir, tmp, dir, name)?;
        rustix::fs::fsync(dir)
    };
    write().map_err(Step::Write)
}

fn temp_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        ".lnk-tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn open_dir(dir: &OwnedFd, name: &str, path: &str) -> Result<OwnedFd, RemoteError> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| open_error(e, path))
}

fn file_name<'a>(target: &'a Target, path: &str) -> Result<&'a str, RemoteError> {
    target.name.as_deref().ok_or_else(|| is_dir(path))
}

fn open_error(e: Errno, path: &str) -> RemoteError {
    match e {
        Errno::NOENT => RemoteError::not_found(format!("no file {path:?} in the workspace")),
        // O_NOFOLLOW met a symlink that was not there when the path was checked.
        Errno::LOOP | Errno::NOTDIR => RemoteError::new(
            ErrorCode::Conflict,
            format!("{path:?} changed while it was being opened; try again"),
        ),
        Errno::ISDIR => is_dir(path),
        e => io_error(e, path),
    }
}

fn io_error(e: Errno, path: &str) -> RemoteError {
    RemoteError::internal(format!("{path:?}: {e}"))
}

fn is_dir(path: &str) -> RemoteError {
    RemoteError::bad_request(format!(
        "{path:?} is a directory; name a file (use list for directories)"
    ))
}

fn too_large(path: &str, bytes: u64) -> RemoteError {
    RemoteError::new(
        ErrorCode::TooLarge,
        format!("{path:?} is {bytes} bytes, over the {MAX_FILE} byte file limit"),
    )
}
