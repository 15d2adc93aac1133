//! Sandboxes whose starter died before bubblewrap could tie them to it.
//!
//! `--die-with-parent` is racy (containers/bubblewrap#633): the sandbox's init, a fork of
//! bwrap inside the new namespaces, arms its parent-death signal after the clone without
//! checking its parent. When the starter and then the outer bwrap die in that moment (kill -9
//! of the host mid start), the init lives on under pid 1, blocked for good. Nothing tied to
//! it is left alive to notice, so whoever starts again on the same state finds such bwraps by
//! what their command line names and kills them: killing a pid namespace's init ends every
//! process in it.

/// SIGKILLs every live `bwrap` process one of whose arguments is `dir` or a path under it (a
/// directory only one runtime or probe uses); → the pids it could signal, with their start
/// times, to wait for.
pub fn kill_bwraps_naming(dir: &std::path::Path) -> Vec<(i32, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
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
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let names = cmdline.split(|b| *b == 0).any(|arg| {
            use std::os::unix::ffi::OsStrExt;
            std::path::Path::new(std::ffi::OsStr::from_bytes(arg)).starts_with(dir)
        });
        if !names || pid == std::process::id() as i32 {
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
        .then(|| link_protocol::pids::start_time(pid))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A stand-in named `bwrap` (a copy of sh, blocked reading its stdin) naming `arg`.
    fn fake_bwrap(dir: &std::path::Path, arg: &str) -> std::process::Child {
        let bwrap = dir.join("bwrap");
        if !bwrap.exists() {
            std::fs::copy("/bin/sh", &bwrap).unwrap();
        }
        Command::new(&bwrap)
            .args(["-c", "read x", "bwrap", arg])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap()
    }

    #[test]
    fn only_bwraps_naming_the_marker_are_killed() {
        let dir = std::env::temp_dir().join(format!("lnk-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = dir.join("lnk");
        let marker = format!("{}/", root.display());
        let mut named = fake_bwrap(&dir, &format!("{marker}data/ws"));
        let mut other = fake_bwrap(&dir, &format!("{}/lnkb/data/ws", dir.display()));
        // A root that only ends like this one: another runtime's, left alone.
        let mut suffix = fake_bwrap(&dir, &format!("{}/home/u/lnk/data/ws", dir.display()));
        // Not bwrap, naming the marker: left alone.
        let mut sleeper = Command::new("/bin/sh")
            .args(["-c", "read x", "sh", &marker])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(live_bwrap(named.id() as i32).is_some());
        let killed = kill_bwraps_naming(&root);
        let pids: Vec<i32> = killed.iter().map(|(pid, _)| *pid).collect();
        assert_eq!(pids, vec![named.id() as i32]);
        let status = named.wait().unwrap();
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
            suffix.try_wait().unwrap().is_none(),
            "a root that only ends like it was killed"
        );
        for mut child in [other, suffix, sleeper] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
