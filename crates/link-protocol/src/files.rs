//! Replacing a file atomically, the way every plugin that keeps state on disk does it.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Replaces `path` with `bytes` so a crash leaves either the old or the new content: writes
/// the temporary file `temp` (same directory as `path`, created fresh with `mode`, subject to
/// the umask), fsyncs it, renames it over `path`, then fsyncs the directory so the rename
/// itself survives a crash. On failure `temp` is removed and `path` is untouched.
///
/// The caller names `temp` so it can recognise (and clear) leftovers a crash may leave.
pub fn write_atomic(path: &Path, temp: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let written = write_new(temp, bytes, mode).and_then(|()| std::fs::rename(temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    written?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// Creates `path` with `mode` from the start (a stale file of that name is replaced, never
/// reused with its old permissions), writes `bytes` and fsyncs.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// What a file is, not where it is: device, inode and birth time (the change time where the
/// file system keeps no birth time), so a file made later at the same path, even one that
/// reuses the inode number, is another file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    born: (i64, i64),
}

impl Identity {
    /// The identity of what `path` names now (not followed if it is a symlink).
    pub fn of(path: &Path) -> io::Result<Identity> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path)?;
        let born = match meta.created() {
            Ok(t) => {
                let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                (d.as_secs() as i64, i64::from(d.subsec_nanos()))
            }
            Err(_) => (meta.ctime(), meta.ctime_nsec()),
        };
        Ok(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            born,
        })
    }
}

/// The files this process made and will remove when it stops ([`made`], [`remove_made`]).
static MADE: std::sync::Mutex<Vec<(std::path::PathBuf, Identity)>> =
    std::sync::Mutex::new(Vec::new());

/// Notes that this process made `path` (as it is now), so that [`remove_made`] removes it,
/// and only it: a later file at the same path (another runtime's, once this one's state root
/// was removed and made again) is left alone. Noting a path again replaces its entry.
pub fn made(path: &Path) {
    let Ok(id) = Identity::of(path) else {
        return;
    };
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    made.retain(|(p, _)| p != path);
    made.push((path.to_owned(), id));
}

/// Removes `path` if it is still the file [`made`] noted; true when it removed it.
pub fn remove_made(path: &Path) -> bool {
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(at) = made.iter().position(|(p, _)| p == path) else {
        return false;
    };
    let (path, id) = made.remove(at);
    Identity::of(&path).ok() == Some(id) && std::fs::remove_file(&path).is_ok()
}

/// Removes `dir` and everything under it, whatever modes a command left on the directories
/// there (issue 42: an agent whose command ran `chmod 000` on a directory could never be
/// deleted). Tried as is first; where a directory refuses it, every directory under `dir` is
/// given `u+rwx` (the owner's bits only, so nobody else gains anything), then it is tried again.
/// The walk goes by descriptor and never follows a symlink: each directory is opened
/// `O_PATH | O_NOFOLLOW | O_DIRECTORY` from its parent's descriptor, its mode changed through
/// that descriptor and only then read, so a name swapped for a symlink meanwhile is skipped,
/// never changed or entered. A directory the caller neither owns nor may change (without
/// `CAP_FOWNER`) stays as it was, and the second removal says why. Gone already is success.
#[cfg(feature = "runtime")]
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    let first = match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => e,
        other => return other,
    };
    use std::os::unix::ffi::OsStrExt;
    let Ok(name) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return Err(first);
    };
    // Best effort: the removal after it says what is still in the way.
    let _ = open_up(rustix::fs::CWD, &name, OPEN_UP_DEPTH);
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// How deep [`remove_tree`] restores modes: one descriptor is open per level.
#[cfg(feature = "runtime")]
const OPEN_UP_DEPTH: usize = 256;

/// Gives the directory `name` (relative to `parent`) and every directory under it `u+rwx`.
#[cfg(feature = "runtime")]
fn open_up(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    depth: usize,
) -> io::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::os::fd::{AsFd, AsRawFd};
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC;
    // A symlink or anything but a directory is refused here (ELOOP, ENOTDIR): never followed.
    let at = rustix::fs::openat(parent, name, flags, Mode::empty())?;
    let mode = rustix::fs::fstat(&at)?.st_mode;
    if mode & 0o700 != 0o700 {
        // `fchmod` refuses an `O_PATH` descriptor; its /proc name is the directory itself.
        let by_fd = format!("/proc/self/fd/{}", at.as_raw_fd());
        rustix::fs::chmod(by_fd.as_str(), Mode::from_raw_mode((mode & 0o7777) | 0o700))?;
    }
    if depth == 0 {
        return Ok(());
    }
    let read = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let dir = rustix::fs::openat(&at, c".", read, Mode::empty())?;
    drop(at);
    let mut subdirs = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let child = entry.file_name();
        if child == c"." || child == c".." {
            continue;
        }
        if matches!(entry.file_type(), FileType::Directory | FileType::Unknown) {
            subdirs.push(child.to_owned());
        }
    }
    let mut failed = None;
    for child in subdirs {
        match open_up(dir.as_fd(), &child, depth - 1) {
            // An `Unknown` entry that is not a directory, or one gone meanwhile.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {}
            Err(e) => failed = failed.or(Some(e)),
            Ok(()) => {}
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Creates `dir` and its missing parents owner-only (0700), whatever the umask.
pub fn private_dir_all(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_with_mode_and_leaves_no_temp() {
        let home = std::env::var("HOME").unwrap();
        let dir = Path::new(&home).join(format!(".cache/lnk-t/files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (file, temp) = (dir.join("f"), dir.join(".f.tmp"));
        // A stale, world-readable temp from a crash is not reused with its permissions.
        std::fs::write(&temp, "stale").unwrap();
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic(&file, &temp, b"one", 0o600).unwrap();
        write_atomic(&file, &temp, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!temp.exists());
        // A failed write (the target is a directory) leaves no temp behind.
        let sub = dir.join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("x"), "x").unwrap();
        assert!(write_atomic(&sub, &temp, b"three", 0o600).is_err());
        assert!(!temp.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A tree whose directories were made unreadable and unwritable by their owner is removed
    /// whole; a symlink in it to a directory outside is removed, never followed, and what it
    /// pointed to keeps its mode.
    #[cfg(feature = "runtime")]
    #[test]
    fn a_tree_with_closed_directories_is_removed_without_following_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let home = std::env::var("HOME").unwrap();
        let base = Path::new(&home).join(format!(".cache/lnk-t/tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (tree, outside) = (base.join("tree"), base.join("outside"));
        std::fs::create_dir_all(tree.join("locked/inner/deeper")).unwrap();
        std::fs::write(tree.join("locked/inner/deeper/f"), "f").unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("locked/inner/out")).unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&outside, 0o500);
        mode(&tree.join("locked/inner/deeper"), 0o000);
        mode(&tree.join("locked/inner"), 0o000);
        mode(&tree.join("locked"), 0o000);
        if rustix::process::geteuid().is_root() {
            // Root passes every mode by DAC_OVERRIDE; the walk is exercised all the same.
            assert!(open_up(rustix::fs::CWD, &cstring(&tree), OPEN_UP_DEPTH).is_ok());
            assert_eq!(
                std::fs::metadata(tree.join("locked/inner/deeper"))
                    .unwrap()
                    .permissions()
                    .mode()
                    & 0o777,
                0o700
            );
        } else {
            // The twin: plain removal is refused.
            let refused = std::fs::remove_dir_all(&tree).unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        }
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        let kept = std::fs::metadata(&outside).unwrap().permissions().mode() & 0o777;
        assert_eq!(kept, 0o500, "the symlink's target was changed");
        remove_tree(&tree).unwrap();
        mode(&outside, 0o700);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[cfg(feature = "runtime")]
    fn cstring(p: &Path) -> std::ffi::CString {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    /// A file made again at a path this process noted is not removed: only the one noted is.
    #[test]
    fn only_the_file_made_is_removed() {
        let home = std::env::var("HOME").unwrap();
        let dir = Path::new(&home).join(format!(".cache/lnk-t/made-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (mine, theirs) = (dir.join("mine"), dir.join("theirs"));
        std::fs::write(&mine, "mine").unwrap();
        std::fs::write(&theirs, "first").unwrap();
        made(&mine);
        made(&theirs);
        // Removed and made again by someone else, as when a state root is replaced.
        std::fs::remove_file(&theirs).unwrap();
        std::fs::write(&theirs, "second").unwrap();
        assert!(remove_made(&mine));
        assert!(!remove_made(&theirs));
        assert!(!mine.exists());
        assert_eq!(std::fs::read(&theirs).unwrap(), b"second");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
