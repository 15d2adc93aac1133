//! The fixture parent directory (`LNK_TEST_STATE_DIR`, default `$HOME/lnk-tests`).

use anyhow::{bail, Context, Result};
use link_protocol::layout::StateLayout;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The directory the runs will use: the variable's value, or `$HOME/lnk-tests`.
pub fn choose(var: Option<OsString>, home: Option<OsString>) -> Result<PathBuf> {
    if let Some(dir) = var.filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    match home.filter(|h| !h.is_empty()) {
        Some(home) => Ok(Path::new(&home).join("lnk-tests")),
        None => bail!("HOME is not set; set LNK_TEST_STATE_DIR to a short directory outside /tmp"),
    }
}

/// Checks `dir` can hold the runs' state roots, then creates it.
///
/// The runner makes its own child directory inside; a representative child (`r0000`) must
/// pass the same rule every state root does: absolute, outside temporary folders, and short
/// enough for every socket path. Nothing is created when the check fails.
pub fn prepare(dir: &Path) -> Result<PathBuf> {
    StateLayout::new(dir.join("r0000"))
        .check()
        .map_err(|e| anyhow::anyhow!("LNK_TEST_STATE_DIR {} cannot be used: {e}", dir.display()))?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create LNK_TEST_STATE_DIR {}", dir.display()))?;
    Ok(dir.to_path_buf())
}

/// [`choose`] from the environment, then [`prepare`].
pub fn from_env() -> Result<PathBuf> {
    let dir = choose(
        std::env::var_os("LNK_TEST_STATE_DIR"),
        std::env::var_os("HOME"),
    )?;
    prepare(&dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> PathBuf {
        PathBuf::from(std::env::var_os("HOME").expect("HOME"))
    }

    #[test]
    fn default_is_lnk_tests_in_home() {
        let dir = choose(None, Some("/home/u".into())).unwrap();
        assert_eq!(dir, PathBuf::from("/home/u/lnk-tests"));
        let dir = choose(Some("/srv/x".into()), Some("/home/u".into())).unwrap();
        assert_eq!(dir, PathBuf::from("/srv/x"));
        let dir = choose(Some("".into()), Some("/home/u".into())).unwrap();
        assert_eq!(dir, PathBuf::from("/home/u/lnk-tests"));
        assert!(choose(None, None).is_err());
    }

    #[test]
    fn temporary_long_and_relative_dirs_are_refused_before_creation() {
        for bad in [
            "/tmp/lnk-xtask-never",
            "/var/tmp/lnk-xtask-never",
            "rel/dir",
        ] {
            let err = prepare(Path::new(bad)).unwrap_err().to_string();
            assert!(err.contains("cannot be used"), "{err}");
            assert!(!Path::new(bad).exists(), "{bad} must not be created");
        }
        let long = home().join(".cache/lnk-t").join("d".repeat(80));
        let err = prepare(&long).unwrap_err().to_string();
        assert!(err.contains("107 byte"), "{err}");
        assert!(!long.exists());
    }

    #[test]
    fn a_short_dir_is_created() {
        let dir = home()
            .join(".cache/lnk-t")
            .join(format!("xs{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(prepare(&dir).unwrap(), dir);
        assert!(dir.is_dir());
        // Preparing again keeps what is there.
        prepare(&dir).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }
}
