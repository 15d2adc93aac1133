//! Sandboxes whose starter died before bubblewrap could tie them to it.
//!
//! `--die-with-parent` is racy (containers/bubblewrap#633): the sandbox's init, a fork of
//! bwrap inside the new namespaces, arms its parent-death signal after the clone without
//! checking its parent. When the starter and then the outer bwrap die in that moment (kill -9
//! of the host mid start), the init lives on under pid 1, blocked for good. Nothing tied to
//! it is left alive to notice, so whoever starts again on the same state finds such bwraps by
//! the [`tag`] of their owner and kills them: killing a pid namespace's init ends every
//! process in it.
//!
//! (`exec` and the probe, as root, close the window instead: bwrap leads a pid namespace of its
//! own there, `crate::run`.)
//!
//! The tag is bwrap's `argv[0]`, which the init inherits: bwrap reads its options from a
//! descriptor (see [`crate::run`]), so nothing else on its command line names a host path,
//! and the tag names none either (it is a digest of the owner's path).

use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::path::Path;

/// The `argv[0]` of every bwrap started for `owner` (a runtime's state root, a probe's scratch
/// directory): `bwrap@lnk-` and its [`digest`].
pub fn tag(owner: &Path) -> OsString {
    format!("bwrap@lnk-{}", digest(owner)).into()
}

/// What names `owner`'s leftovers: the first 16 hex digits of the sha256 of its canonical path.
pub fn digest(owner: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    // The same directory under another spelling (a trailing slash, `.`, a symlink) from a
    // later start must give the same name.
    let canonical = std::fs::canonicalize(owner)
        .unwrap_or_else(|_| owner.components().collect::<std::path::PathBuf>());
    let digest = Sha256::digest(canonical.as_os_str().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the `argv[0]` of `pid` is `tag`.
pub(crate) fn is_tagged(pid: i32, tag: &std::ffi::OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    cmdline.split(|b| *b == 0).next() == Some(tag.as_bytes())
}

/// SIGKILLs every live `bwrap` process started for `owner` (its `argv[0]` is [`tag`]`(owner)`);
/// → the pids it could signal, with their start times, to wait for.
pub fn kill_bwraps_of(owner: &Path) -> Vec<(i32, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let tag = tag(owner);
    let mut killed = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(start) = live_bwrap(pid) else {
            continue;
        };
        if !is_tagged(pid, &tag) || pid == std::process::id() as i32 {
            continue;
        }
        let signalled = rustix::process::Pid::from_raw(pid).is_some_and(|p| {
            rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok()
        });
        if signalled {
            killed.push((pid, start));
        }
    }
    killed
}

/// The start time of `pid` when it is a live (not zombie) process running `bwrap`.
pub fn live_bwrap(pid: i32) -> Option<u64> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim_end() == "bwrap")
        .then(|| link_os::process::start_time(pid))
        .flatten()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    /// A stand-in named `bwrap` (sh through a symlink in `dir`, so its comm is `bwrap`,
    /// blocked reading its stdin) with `argv0`. Not a copy: another test thread's fork can
    /// hold a copy's write descriptor when it is executed (ETXTBSY).
    pub(crate) fn fake_bwrap(
        dir: &std::path::Path,
        argv0: impl AsRef<std::ffi::OsStr>,
    ) -> std::process::Child {
        let bwrap = dir.join("bwrap");
        if bwrap.symlink_metadata().is_err() {
            std::os::unix::fs::symlink("/bin/sh", &bwrap).unwrap();
        }
        Command::new(&bwrap)
            .arg0(argv0)
            .args(["-c", "read x"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap()
    }

    #[test]
    fn only_bwraps_tagged_for_the_owner_are_killed() {
        let dir = std::env::temp_dir().join(format!("lnk-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = dir.join("lnk");
        let mut tagged = fake_bwrap(&dir, tag(&root));
        let mut other = fake_bwrap(&dir, tag(&dir.join("lnkb")));
        // The tag of the root as a later argument: not what bwrap was started as, left alone.
        let mut later = Command::new(dir.join("bwrap"))
            .args(["-c", "read x", "bwrap"])
            .arg(tag(&root))
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        // Not bwrap, started as the tag: left alone.
        let mut sleeper = Command::new("/bin/sh")
            .arg0(tag(&root))
            .args(["-c", "read x"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(live_bwrap(tagged.id() as i32).is_some());
        let killed = kill_bwraps_of(&root);
        let pids: Vec<i32> = killed.iter().map(|(pid, _)| *pid).collect();
        assert_eq!(pids, vec![tagged.id() as i32]);
        let status = tagged.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert!(
            other.try_wait().unwrap().is_none(),
            "another root's bwrap was killed"
        );
        assert!(
            sleeper.try_wait().unwrap().is_none(),
            "a process not bwrap was killed"
        );
        assert!(
            later.try_wait().unwrap().is_none(),
            "an untagged bwrap was killed"
        );
        for mut child in [other, later, sleeper] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        assert!(
            !tag(&root).to_string_lossy().contains("lnk-leftovers"),
            "the tag names no path"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
