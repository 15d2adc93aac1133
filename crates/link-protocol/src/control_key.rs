//! The control key: a secret `link up` makes afresh for each runtime and keeps in
//! `<root>/control/key` (owner-only), which a caller of the host's control socket
//! (`run/host.sock`) presents with `host.unlock` before the host answers it anything but
//! `host.status`.
//!
//! The file is outside every plugin's Landlock rules, so no plugin, nor anything a plugin
//! starts, reads it; the host also refuses `host.unlock` to its own descendants whatever key
//! they send. The `link` CLI and the testing kit read it as the user who started `link up`
//! (`client::control`).

use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// One runtime's control key; also the body of `host.unlock` (`{"key": "<hex>"}`).
#[derive(Clone, Serialize, Deserialize)]
pub struct ControlKey {
    key: String,
}

impl std::fmt::Debug for ControlKey {
    // Hand-written so the key never reaches a log line through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlKey(<redacted>)")
    }
}

/// Why the control key of a runtime could not be read, and what to do.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot read the runtime's control key {}: {source}; run this as the user who started \
     the `link up` of that state root, while that runtime runs",
    path.display()
)]
pub struct ControlKeyError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl ControlKey {
    /// A new key: 32 bytes from the kernel's random source, as hex.
    pub fn generate() -> io::Result<ControlKey> {
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(io::Error::other)?;
        Ok(ControlKey {
            key: crate::tokens::hex(&raw),
        })
    }

    /// Makes a new key and writes it to `file` (a state root's
    /// `StateLayout::control_key_file`), owner-only, replacing the one of an earlier runtime
    /// (whose callers must not reach this one). The directory must exist.
    pub fn create(file: &Path) -> io::Result<ControlKey> {
        let key = ControlKey::generate()?;
        let temp = file.with_file_name(".key.tmp");
        crate::files::write_atomic(file, &temp, key.key.as_bytes(), 0o600)?;
        Ok(key)
    }

    /// The key in `file` (a state root's `StateLayout::control_key_file`), as the runtime's
    /// `link up` wrote it.
    pub fn read(file: &Path) -> Result<ControlKey, ControlKeyError> {
        match std::fs::read_to_string(file) {
            Ok(key) => Ok(ControlKey {
                key: key.trim_end().to_owned(),
            }),
            Err(source) => Err(ControlKeyError {
                path: file.to_owned(),
                source,
            }),
        }
    }

    /// Whether `claimed` is this key, in time that does not depend on where they differ.
    pub fn matches(&self, claimed: &ControlKey) -> bool {
        !claimed.key.is_empty() && bool::from(self.key.as_bytes().ct_eq(claimed.key.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The key written is the key read, owner-only; another key, an empty one and a longer one
    /// do not match; a second `create` replaces the first.
    #[test]
    fn a_created_key_is_read_back_owner_only_and_only_it_matches() {
        let home = std::env::var("HOME").unwrap();
        let root =
            PathBuf::from(home).join(format!(".cache/lnk-t/control-key-{}", std::process::id()));
        let file = root.join("control/key");
        std::fs::create_dir_all(root.join("control")).unwrap();
        let made = ControlKey::create(&file).unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let read = ControlKey::read(&file).unwrap();
        assert!(made.matches(&read));
        let other = ControlKey::generate().unwrap();
        assert!(!made.matches(&other));
        let empty = ControlKey { key: String::new() };
        assert!(!made.matches(&empty));
        let longer = ControlKey {
            key: format!("{}0", made.key),
        };
        assert!(!made.matches(&longer));
        let again = ControlKey::create(&file).unwrap();
        assert!(!made.matches(&ControlKey::read(&file).unwrap()));
        assert!(again.matches(&ControlKey::read(&file).unwrap()));
        assert_eq!(format!("{again:?}"), "ControlKey(<redacted>)");
        std::fs::remove_dir_all(&root).unwrap();
        let gone = ControlKey::read(&file).unwrap_err().to_string();
        assert!(gone.contains("run this as the user who started"), "{gone}");
    }
}
