//! The `file` backend: one file per secret under `<data>/secrets/`, mode 0600, in a 0700
//! directory, each write atomic (temporary file, fsync, rename, fsync of the directory).

use link_protocol::files::write_atomic;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Temporary files start with `~`, which no valid secret name contains, so they never
/// collide with a secret.
const TEMP_PREFIX: &str = "~";

pub struct FileStore {
    dir: PathBuf,
    temps: AtomicU64,
}

impl FileStore {
    /// Creates the directory (0700) and removes temporary files a crash left behind.
    pub fn open(dir: PathBuf) -> io::Result<FileStore> {
        fs::create_dir_all(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(FileStore {
            dir,
            temps: AtomicU64::new(0),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `Ok(None)` when there is no such secret. `name` must already be validated.
    pub fn get(&self, name: &str) -> io::Result<Option<String>> {
        match fs::read(self.dir.join(name)) {
            Ok(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn put(&self, name: &str, value: &str) -> io::Result<()> {
        let n = self.temps.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .dir
            .join(format!("{TEMP_PREFIX}{name}.{}.{n}", std::process::id()));
        // 0600 from the start, never wider.
        write_atomic(&self.dir.join(name), &temp, value.as_bytes(), 0o600)
    }

    /// True when the secret existed.
    pub fn delete(&self, name: &str) -> io::Result<bool> {
        match fs::remove_file(self.dir.join(name)) {
            Ok(()) => sync_dir(&self.dir).map(|()| true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Makes a rename or removal durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_delete_and_leftovers() {
        let dir = std::env::temp_dir().join(format!("lnk-secret-file-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("~crashed.1.0"), "x").unwrap();
        let store = FileStore::open(dir.clone()).unwrap();
        assert!(!dir.join("~crashed.1.0").exists(), "leftover removed");
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(store.get("a").unwrap(), None);
        store.put("a", "one").unwrap();
        store.put("a", "two").unwrap();
        assert_eq!(store.get("a").unwrap().as_deref(), Some("two"));
        let mode = fs::metadata(dir.join("a")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary files left"
        );
        assert!(store.delete("a").unwrap());
        assert!(!store.delete("a").unwrap());
        fs::remove_dir_all(&dir).unwrap();
    }
}
