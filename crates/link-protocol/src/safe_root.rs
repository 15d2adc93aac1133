//! A state root the host may trust, and what it makes there opened without following a link.
//!
//! Issue 42: `link up` as root on a state root another user had made followed that user's
//! symlinks, so root made log files in a directory of the user's choosing and appended a
//! plugin's stderr to a root-owned file. Two rules close it:
//!
//! - [`check`]: every existing directory on the state root's path is owned by the caller or
//!   root and writable by nobody else unless sticky (like `/tmp`), and the state root itself,
//!   when it exists, is the caller's. Anyone else who could change one of them could swap what
//!   the host is about to open, or, for the client verbs (`link down`, `status`, `token`...),
//!   plant the socket they connect to, the control key they read or the token store they
//!   write. `link up` and every client verb run it before anything else.
//! - [`RootDir`]: what the host makes or opens under the state root it reaches from the
//!   root's descriptor one component at a time, each opened `O_NOFOLLOW` (a relative path of
//!   plain names only: no `..`, nothing absolute), so a symlink planted anywhere below the
//!   root, by a plugin in its own area or by anyone earlier, is refused (`ELOOP`, `ENOTDIR`),
//!   never followed. Per component rather than `openat2`'s `RESOLVE_NO_SYMLINKS`: the
//!   directories are made one by one anyway, and `openat` with `O_NOFOLLOW` works on every
//!   kernel the runtime supports, so there is one path, not a fallback seldom run.

use rustix::fs::{Mode, OFlags};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Why `link` (`up` or any client verb) will not use a state root.
#[derive(Debug, thiserror::Error)]
pub enum UnsafeRoot {
    #[error(
        "state root {root}: {dir} belongs to {owner}, not to {trusted}, so that user could \
         put what `link` opens there anywhere; choose a state root whose directories are \
         yours (for example $HOME/lnk), or run `link` as that user"
    )]
    OwnedByOther {
        root: PathBuf,
        dir: PathBuf,
        owner: String,
        /// Who may own it: "root", or "you (user NAME (uid N)) or root".
        trusted: String,
    },
    #[error(
        "state root {root}: {dir} (mode {mode:04o}) may be changed by users other than its \
         owner, who could swap what `link` opens there; run `chmod go-w {dir}` or choose \
         another state root"
    )]
    WritableByOthers {
        root: PathBuf,
        dir: PathBuf,
        mode: u32,
    },
    #[error(
        "state root {root} is a symlink; pass the directory itself ({target}), so nobody who \
         may change the link can move the runtime"
    )]
    RootIsSymlink { root: PathBuf, target: PathBuf },
    #[error("state root {root}: reading {dir}: {source}")]
    Unreadable {
        root: PathBuf,
        dir: PathBuf,
        source: io::Error,
    },
}

/// Checks the state root's path as the caller (the effective uid) will use it: see the
/// module's rules. A path that does not exist yet is checked up to its last existing
/// directory, which is what the missing ones will be made in.
pub fn check(root: &Path) -> Result<(), UnsafeRoot> {
    check_as(root, rustix::process::geteuid().as_raw())
}

fn check_as(root: &Path, caller: u32) -> Result<(), UnsafeRoot> {
    let unreadable = |dir: &Path, source| UnsafeRoot::Unreadable {
        root: root.to_owned(),
        dir: dir.to_owned(),
        source,
    };
    // The root itself: the caller's own, a directory, never a link.
    match std::fs::symlink_metadata(root) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(UnsafeRoot::RootIsSymlink {
                root: root.to_owned(),
                target: std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned()),
            })
        }
        Ok(meta) => {
            if meta.uid() != caller {
                return Err(owned_by_other(root, root, meta.uid(), caller));
            }
            writable_by_others(root, root, meta.mode())?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(unreadable(root, e)),
    }
    // Every directory it lies in, as the kernel resolves them: each prefix of the path and,
    // where a prefix is a link, the link itself (whose owner may replace it in a sticky
    // directory) and every directory of what it resolves to.
    let mut seen = std::collections::HashSet::new();
    let trusted = |uid: u32| uid == caller || uid == 0;
    for prefix in root.ancestors().skip(1) {
        let meta = match std::fs::symlink_metadata(prefix) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(unreadable(prefix, e)),
        };
        if meta.file_type().is_symlink() && !trusted(meta.uid()) {
            return Err(owned_by_other(root, prefix, meta.uid(), caller));
        }
        let real = std::fs::canonicalize(prefix).map_err(|e| unreadable(prefix, e))?;
        for dir in real.ancestors() {
            if !seen.insert(dir.to_owned()) {
                continue;
            }
            let meta = std::fs::metadata(dir).map_err(|e| unreadable(dir, e))?;
            if !trusted(meta.uid()) {
                return Err(owned_by_other(root, dir, meta.uid(), caller));
            }
            writable_by_others(root, dir, meta.mode())?;
        }
    }
    Ok(())
}

fn writable_by_others(root: &Path, dir: &Path, mode: u32) -> Result<(), UnsafeRoot> {
    const STICKY: u32 = 0o1000;
    if mode & 0o022 != 0 && mode & STICKY == 0 {
        return Err(UnsafeRoot::WritableByOthers {
            root: root.to_owned(),
            dir: dir.to_owned(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

fn owned_by_other(root: &Path, dir: &Path, uid: u32, caller: u32) -> UnsafeRoot {
    UnsafeRoot::OwnedByOther {
        root: root.to_owned(),
        dir: dir.to_owned(),
        owner: user_name(uid),
        trusted: match caller {
            0 => "root".to_owned(),
            _ => format!("you ({}) or root", user_name(caller)),
        },
    }
}

/// `name (uid N)` from `/etc/passwd`, or `uid N` where it names nobody.
fn user_name(uid: u32) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2].parse() == Ok(uid))
        .map(|f| format!("user {} (uid {uid})", f[0]))
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// A state root opened once, through which everything beneath it is made and opened without
/// following a symlink.
#[derive(Debug)]
pub struct RootDir {
    path: PathBuf,
    fd: OwnedFd,
}

impl RootDir {
    /// Opens `root`, which must be a directory and not a link (its missing parents and itself
    /// are made owner-only first).
    pub fn open(root: &Path) -> io::Result<RootDir> {
        crate::files::private_dir_all(root).map_err(|e| at(root, e))?;
        let fd =
            rustix::fs::open(root, dir_flags(), Mode::empty()).map_err(|e| at(root, e.into()))?;
        Ok(RootDir {
            path: root.to_owned(),
            fd,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory `rel` (relative to the root, or absolute beneath it), made owner-only
    /// where missing with its missing parents, none of them a link.
    pub fn dir_all(&self, rel: &Path) -> io::Result<OwnedFd> {
        let names = self.names(rel)?;
        let mut dir = rustix::io::dup(&self.fd)?;
        for (i, name) in names.iter().enumerate() {
            let so_far = self.path.join(names[..=i].iter().collect::<PathBuf>());
            match rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(at(&so_far, e.into())),
            }
            dir = rustix::fs::openat(&dir, *name, dir_flags(), Mode::empty())
                .map_err(|e| refused_link(&so_far, e))?;
        }
        Ok(dir)
    }

    /// [`dir_all`](Self::dir_all), then the directory made owner-only (0700) if an earlier
    /// run or another program left it open; `rel` empty is the root itself.
    pub fn private_dir(&self, rel: &Path) -> io::Result<()> {
        let dir = self.dir_all(rel)?;
        rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o700))
            .map_err(|e| at(&self.path.join(rel), e.into()))
    }

    /// The file `rel` opened for appending, made with `mode` (under the umask) if missing; it
    /// and every directory to it must not be a link, and it must be a regular file.
    pub fn append(&self, rel: &Path, mode: u32) -> io::Result<std::fs::File> {
        let full = self.path.join(rel);
        let Some((file, parent)) = self.names(rel)?.split_last().map(|(f, p)| {
            let parent: PathBuf = p.iter().collect();
            (f.to_owned(), parent)
        }) else {
            return Err(at(&full, io::ErrorKind::InvalidInput.into()));
        };
        let dir = self.dir_all(&parent)?;
        let flags = OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY
            | OFlags::NONBLOCK;
        let fd = rustix::fs::openat(&dir, file, flags, Mode::from_raw_mode(mode))
            .map_err(|e| refused_link(&full, e))?;
        let file = std::fs::File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(at(
                &full,
                io::Error::other("not a regular file; remove it and start again"),
            ));
        }
        // Non-blocking only so a FIFO planted there could not hold the open; writes block.
        rustix::fs::fcntl_setfl(&file, OFlags::APPEND)?;
        Ok(file)
    }

    /// `rel`'s components, each a plain name: the root's own prefix may be given.
    fn names<'a>(&self, rel: &'a Path) -> io::Result<Vec<&'a std::ffi::OsStr>> {
        let rel = rel.strip_prefix(&self.path).unwrap_or(rel);
        rel.components()
            .map(|c| match c {
                Component::Normal(name) => Ok(name),
                _ => Err(at(
                    &self.path.join(rel),
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "not a plain path beneath the state root",
                    ),
                )),
            })
            .collect()
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// What opening `path` without following links returned, said plainly when the reason is a
/// link (`ELOOP` for the last component, `ENOTDIR` for a link to something not a directory).
/// Also the token store's (`tokens`), so a link anywhere under a state root is named alike.
pub(crate) fn refused_link(path: &Path, e: impl Into<io::Error>) -> io::Error {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link {
        return io::Error::other(format!(
            "{} is a symlink, which Link never follows under a state root (someone put it \
             there: remove it and start again)",
            path.display()
        ));
    }
    at(path, e.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lnk-safe-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn links_beneath_the_root_are_refused_and_plain_paths_made() {
        let root = scratch("links");
        let outside = root.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("f"), "kept").unwrap();
        let state = root.join("state");
        let dir = RootDir::open(&state).unwrap();
        dir.private_dir(Path::new("home/p")).unwrap();
        let mut log = dir.append(Path::new("log/p.log"), 0o600).unwrap();
        std::io::Write::write_all(&mut log, b"x").unwrap();
        assert_eq!(std::fs::read(state.join("log/p.log")).unwrap(), b"x");
        // A link as a directory on the way and as the file itself.
        std::os::unix::fs::symlink(&outside, state.join("data")).unwrap();
        let err = dir.dir_all(Path::new("data/p")).unwrap_err();
        assert!(err.to_string().contains("is a symlink"), "{err}");
        std::fs::remove_file(state.join("log/p.log")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), state.join("log/p.log")).unwrap();
        let err = dir.append(Path::new("log/p.log"), 0o600).unwrap_err();
        assert!(err.to_string().contains("is a symlink"), "{err}");
        assert!(dir.append(Path::new("../x"), 0o600).is_err());
        assert_eq!(std::fs::read(outside.join("f")).unwrap(), b"kept");
        assert!(!outside.join("p").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_root_of_another_owner_or_open_to_others_is_refused_and_ones_own_allowed() {
        let root = scratch("owner");
        let state = root.join("state");
        std::fs::create_dir(&state).unwrap();
        let me = rustix::process::geteuid().as_raw();
        check_as(&state, me).unwrap();
        check_as(&state.join("not-yet/made"), me).unwrap();
        let err = check_as(&state, me + 1).unwrap_err();
        assert!(matches!(err, UnsafeRoot::OwnedByOther { .. }), "{err}");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_as(&state, me).unwrap_err();
        assert!(err.to_string().contains("chmod go-w"), "{err}");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o1777)).unwrap();
        check_as(&state, me).unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        let err = check_as(&link, me).unwrap_err();
        assert!(matches!(err, UnsafeRoot::RootIsSymlink { .. }), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
