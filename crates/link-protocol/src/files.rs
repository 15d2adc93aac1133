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
