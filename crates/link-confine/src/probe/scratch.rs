//! The probe's scratch directory, and the sweep of those that dead probes left.
//!
//! Apart from the checks: a probe killed mid-step leaves its directory and perhaps its
//! bwrap, and telling a live probe's from a dead one's (by a lock, not a pid) is its own
//! concern.

use std::path::{Path, PathBuf};

/// The probe's own scratch directory, removed on drop. It holds an `flock` on the directory
/// for its life, by which a sweep tells it is in use: not by its pid, which another pid
/// namespace sharing the temporary directory would read as another process, or none.
pub(super) struct ProbeDir {
    pub(super) root: PathBuf,
    pub(super) name: String,
    _lock: std::os::fd::OwnedFd,
}

impl ProbeDir {
    pub(super) fn create() -> std::io::Result<ProbeDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("{PROBE_DIR_PREFIX}{}-{nanos}", std::process::id());
        let tmp = std::env::temp_dir();
        sweep_probe_dirs(&tmp);
        // Made and locked under a name no sweep reads, then renamed: a sweep never sees it
        // unlocked.
        let making = tmp.join(format!(".{name}"));
        std::fs::create_dir_all(making.join("workspace"))?;
        let lock = locked(&making)?.ok_or_else(|| std::io::Error::other("lock held"))?;
        let root = tmp.join(&name);
        std::fs::rename(&making, &root)?;
        Ok(ProbeDir {
            root,
            name,
            _lock: lock,
        })
    }
    pub(super) fn workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }
}

/// `dir` opened (not followed) and locked exclusively, or `None` when another holds it.
fn locked(dir: &Path) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty())?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

const PROBE_DIR_PREFIX: &str = "lnk-probe-";

/// `sweep_probe_dirs` in this process's temporary directory, the one its probes use: for a
/// host that has just ended the probe it started (a stop while the probe ran).
pub fn sweep_dead_probe_dirs() {
    sweep_probe_dirs(&std::env::temp_dir());
}

/// Ends what probes that are gone left: a probe killed mid-step (kill -9 of the host takes it
/// down at once, a host stopping mid-probe kills it) cannot remove its scratch directory, and
/// its bwrap may outlive it ([`crate::leftovers`]). A directory whose lock is held is a live
/// probe's, whatever pid namespace it runs in; a link is not followed.
fn sweep_probe_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(PROBE_DIR_PREFIX));
        if !ours || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // Held while it is swept, so no probe can take it meanwhile.
        if let Ok(Some(_held)) = locked(&entry.path()) {
            crate::leftovers::kill_bwraps_of(&entry.path());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for ProbeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe directory nobody holds is swept, with the sandbox left under it; one whose
    /// lock is held is kept with its sandbox, whatever pid its name gives (a dead one here,
    /// as a probe in another pid namespace would seem), and so is a link named like one.
    #[test]
    fn the_scratch_dirs_of_dead_probes_are_swept_and_only_those() {
        let tmp = std::env::temp_dir().join(format!("lnk-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let dead_dir = tmp.join(format!("{PROBE_DIR_PREFIX}{dead}-1"));
        let live_dir = tmp.join(format!("{PROBE_DIR_PREFIX}{dead}-3"));
        let other = tmp.join("lnk-probe-notapid-1");
        let target = tmp.join("kept");
        for d in [&dead_dir, &live_dir, &other, &target] {
            std::fs::create_dir_all(d.join("workspace")).unwrap();
        }
        let held = locked(&live_dir).unwrap().expect("not yet held");
        assert!(
            locked(&live_dir).unwrap().is_none(),
            "a second lock is refused"
        );
        // A link named like a dead probe's directory is not followed.
        let link = tmp.join(format!("{PROBE_DIR_PREFIX}{dead}-2"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // The sandbox a dead probe left (a stand-in named bwrap, under its directory's tag),
        // and a live probe's.
        let sandbox_of =
            |dir: &Path| crate::leftovers::tests::fake_bwrap(&tmp, crate::leftovers::tag(dir));
        let mut left = sandbox_of(&dead_dir);
        let mut running = sandbox_of(&live_dir);
        std::thread::sleep(std::time::Duration::from_millis(50));
        sweep_probe_dirs(&tmp);
        assert!(!dead_dir.exists(), "a dead probe's directory is swept");
        assert!(!other.exists(), "a probe directory nobody holds is swept");
        let status = left.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "a dead probe's sandbox is killed"
        );
        assert!(
            running.try_wait().unwrap().is_none(),
            "a live probe's sandbox was killed"
        );
        running.kill().unwrap();
        running.wait().unwrap();
        for kept in [&live_dir, &target.join("workspace")] {
            assert!(kept.exists(), "{} is kept", kept.display());
        }
        assert!(link.symlink_metadata().is_ok());
        drop(held);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
