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
}
