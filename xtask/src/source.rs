//! The source the measured programs were built from, as the reports record it.

use anyhow::{Context, Result};
use std::path::Path;
use xshell::{cmd, Shell};

/// `git rev-parse HEAD`, with `-dirty` when the work tree has changes.
pub fn source(root: &Path) -> Result<String> {
    let sh = Shell::new()?;
    sh.change_dir(root);
    let head = cmd!(sh, "git rev-parse HEAD")
        .quiet()
        .read()
        .context("cannot name the source: `git rev-parse HEAD` failed (run from a git checkout)")?;
    let status = cmd!(sh, "git status --porcelain")
        .quiet()
        .read()
        .context("`git status --porcelain` failed")?;
    Ok(with_dirty(head.trim(), &status))
}

fn with_dirty(head: &str, porcelain: &str) -> String {
    if porcelain.trim().is_empty() {
        head.to_string()
    } else {
        format!("{head}-dirty")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_sources_are_marked() {
        assert_eq!(with_dirty("abc", ""), "abc");
        assert_eq!(with_dirty("abc", " M x.rs\n"), "abc-dirty");
    }
}
