//! This process as a parent: the child subreaper (orphans below it are re-parented to it, not
//! to PID 1), death with the parent and inherited descriptors between fork and exec, and a look
//! at its children that collects none of them.

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

/// Makes this process the reaper of orphans below it (`PR_SET_CHILD_SUBREAPER`).
/// Process-wide: binaries call it once at start; a library caller decides for itself.
pub fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

/// Whether this process is a child subreaper now (`PR_GET_CHILD_SUBREAPER`).
pub fn is_subreaper() -> std::io::Result<bool> {
    Ok(rustix::process::child_subreaper()?.is_some())
}

/// Between fork and exec (or before a spawn no other thread can make meanwhile): clears
/// close-on-exec on `fd`, which the caller keeps open, so the program started inherits it.
/// One system call, no allocation.
pub fn inherit(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: the caller owns the descriptor and keeps it open across this call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
    Ok(())
}

/// Between fork and exec: SIGKILL this child when the thread that forked it exits
/// (`PR_SET_PDEATHSIG`, kept across exec), and fail the spawn, ending the child, if
/// `parent` already died before the signal was armed. Two system calls, no allocation.
pub fn die_with_parent(parent: Pid) -> std::io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
    if rustix::process::getppid() != Some(parent) {
        return Err(std::io::Error::from_raw_os_error(
            Errno::SRCH.raw_os_error(),
        ));
    }
    Ok(())
}

/// `waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT)`, which leaves every child unreaped: `Ok(true)`
/// when a child has exited, `Ok(false)` when children run but none has, `Err(CHILD)` when
/// there is no child at all. One system call.
pub fn peek_children() -> rustix::io::Result<bool> {
    let any = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    rustix::process::waitid(WaitId::All, any).map(|status| status.is_some())
}

/// Whether this process has a child, exited or running (any thread's: wait(2) sees them all).
pub fn has_children() -> bool {
    !matches!(peek_children(), Err(Errno::CHILD))
}

/// Whether a child of this process has exited and waits to be collected (a zombie).
pub fn zombie_child() -> bool {
    matches!(peek_children(), Ok(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peek sees a running child, then its exit, and collects neither.
    #[test]
    fn a_peek_at_the_children_collects_none() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        assert!(has_children());
        let fd = crate::process::pidfd(child.id() as i32).unwrap().unwrap();
        assert!(crate::process::wait(
            &fd,
            std::time::Duration::from_secs(30)
        ));
        assert!(zombie_child());
        assert!(zombie_child(), "still there: the peek did not collect it");
        assert!(child.wait().unwrap().success());
    }

    /// A child that arms the death signal with the wrong parent fails its spawn.
    #[test]
    fn a_child_whose_parent_is_not_the_one_named_fails_to_start() {
        use std::os::unix::process::CommandExt;
        let me = rustix::process::getpid();
        let mut cmd = std::process::Command::new("true");
        // SAFETY: die_with_parent makes two system calls and allocates nothing.
        unsafe { cmd.pre_exec(move || die_with_parent(me)) };
        assert!(cmd.status().unwrap().success());
        let other = Pid::from_raw(1).unwrap();
        let mut cmd = std::process::Command::new("true");
        // SAFETY: as above.
        unsafe { cmd.pre_exec(move || die_with_parent(other)) };
        let err = cmd.status().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::SRCH.raw_os_error()));
    }
}
