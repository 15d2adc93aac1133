//! This process's own children: parent death between fork and exec, the subreaper, the last
//! reap of orphans, and a wait for a child with a time limit (through [`link_protocol::exit`]).

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use std::io::Read;
use std::process::ExitStatus;
use std::time::Duration;

/// Between fork and exec: SIGKILL this child when the thread that forked it exits
/// (`PR_SET_PDEATHSIG`, kept across exec), and fail the spawn, ending the child, if
/// `parent` already died before the signal was armed.
pub fn die_with_parent(parent: Pid) -> std::io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
    if rustix::process::getppid() != Some(parent) {
        return Err(std::io::Error::from_raw_os_error(
            Errno::SRCH.raw_os_error(),
        ));
    }
    Ok(())
}

/// Makes this process the reaper of orphans below it, so a namespace init orphaned by bwrap
/// is reaped by [`run_blocking`](super::run_blocking) rather than by whoever started us. Process-wide: binaries
/// call it once at start; a library caller decides for itself.
pub fn become_subreaper() -> std::io::Result<()> {
    let me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me))?;
    Ok(())
}

/// Kills and reaps any child this process still has: a last check before exiting, when every
/// child we started has already been waited for. Costs one system call when there is none.
pub fn reap_orphans() {
    let any = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    loop {
        match rustix::process::waitid(WaitId::All, any) {
            Err(_) => return,
            Ok(Some(_)) => {
                let _ = rustix::process::wait(rustix::process::WaitOptions::empty());
            }
            Ok(None) => {
                let left = children();
                tracing::warn!(?left, "killing processes left behind");
                for pid in left {
                    if let Ok(Some(fd)) = link_protocol::exit::pidfd(pid as i32) {
                        let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
                    }
                }
                let _ = rustix::process::wait(rustix::process::WaitOptions::empty());
            }
        }
    }
}

/// This process's children, from `/proc/<pid>/stat` (the kernel may lack `task/*/children`).
pub(super) fn children() -> Vec<u32> {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mut stat = String::new();
        let ok = std::fs::File::open(entry.path().join("stat"))
            .and_then(|mut f| f.read_to_string(&mut stat))
            .is_ok();
        // Fields after the command name (which may hold spaces): state, ppid, ...
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1));
        if ok && ppid == Some(me.as_str()) {
            found.push(pid);
        }
    }
    found
}

/// Waits for `child` up to `timeout`; past it, kills and reaps it and returns `None`.
pub fn wait_timeout(
    child: &mut std::process::Child,
    timeout: Duration,
) -> std::io::Result<Option<ExitStatus>> {
    if let Some(status) = link_protocol::exit::wait_child(child, timeout)? {
        return Ok(Some(status));
    }
    // Past the limit: kill it and reap it.
    let _ = child.kill();
    child.wait()?;
    Ok(None)
}
