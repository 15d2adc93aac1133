//! Who connected to the host's control socket, decided once, at accept.
//!
//! `SO_PEERCRED` gives the uid and pid of the process that called `connect(2)`, recorded then.
//! The uid holds; the pid does not: that process may have exited and been reaped, and its pid
//! taken by another, before the host looks. So the host takes a pidfd for the connecting
//! process itself (`SO_PEERPIDFD`, Linux 6.5), reads its ancestry from `/proc` twice, and
//! trusts what it read only if both reads agree and the process still runs after them; where
//! anything of that fails, the caller is [`Caller::Undetermined`] and refused, never promoted.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use tokio::net::UnixStream;

/// `SO_PEERPIDFD` (Linux 6.5): 77 in the generic socket options, which every architecture
/// Link builds for uses (alpha, mips, parisc and sparc have their own numbers).
const SO_PEERPIDFD: libc::c_int = 77;

/// More ancestors than any real process tree has: a longer walk followed reused pids.
const MAX_DEPTH: usize = 4096;

/// Who connected, as far as the host can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A process of the host's uid that the host did not start, directly or through a plugin.
    Outside,
    /// A plugin, or anything a plugin started (orphans are re-parented to the host, its
    /// subreaper, so they count too).
    Runtime,
    /// Of the host's uid, but which process it is could not be told.
    Undetermined(Undetermined),
}

/// Why a caller could not be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undetermined {
    /// The process that connected had exited (or been reaped) when the host looked.
    Exited,
    /// The connecting process is in a pid namespace the host cannot see into.
    Unseen,
    /// The kernel gave no pidfd for it.
    NoPidfd,
    /// Its ancestry changed while the host read it (an ancestor exited meanwhile).
    LineageChanged,
}

impl Undetermined {
    /// Why, and what the caller can do, for the refusal it is answered.
    pub fn reason(self) -> &'static str {
        match self {
            Undetermined::Exited => {
                "the process that connected had exited before the host could tell which \
                 process it was; call from a process that stays until it is answered"
            }
            Undetermined::Unseen => {
                "the process that connected is in a pid namespace the host cannot see into; \
                 call from the host's own pid namespace"
            }
            Undetermined::NoPidfd => {
                "the kernel gave no pidfd for the process that connected (Linux 5.3 or later \
                 is needed)"
            }
            Undetermined::LineageChanged => {
                "the ancestry of the process that connected changed while the host read it; \
                 call again"
            }
        }
    }
}

/// Who connected on `stream`; `None` for a process of another uid, or one whose credentials
/// cannot be read: those connections are closed unanswered.
pub fn identify(stream: &UnixStream) -> Option<Caller> {
    let cred = stream.peer_cred().ok()?;
    // As root the plugins run as uids of their own (issue 42): a process of another uid is
    // heard only as the runtime, never as [`Caller::Outside`].
    let same_uid = cred.uid() == rustix::process::getuid().as_raw();
    if !same_uid && !rustix::process::geteuid().is_root() {
        return None;
    }
    let host = std::process::id() as i32;
    let lineage = match cred.pid().filter(|pid| *pid > 0) {
        None => Err(Undetermined::Unseen),
        Some(pid) => peer_pidfd(stream, pid).and_then(|pidfd| lineage(pid, &pidfd, host)),
    };
    Some(match lineage {
        Ok(ancestors) if ancestors.contains(&host) => Caller::Runtime,
        Ok(_) if same_uid => Caller::Outside,
        Ok(_) => return None,
        Err(why) if same_uid => Caller::Undetermined(why),
        Err(_) => return None,
    })
}

/// A pidfd for the process that connected. `SO_PEERPIDFD` names that very process, whatever
/// became of its pid since; where the kernel lacks it, a pidfd opened now for the pid
/// `SO_PEERCRED` recorded, which a pid reused in between fools (the control key, which no
/// plugin holds, still gates the full handler).
fn peer_pidfd(stream: &UnixStream, pid: i32) -> Result<OwnedFd, Undetermined> {
    match so_peerpidfd(stream) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {
            match link_os::process::pidfd(pid) {
                Ok(Some(fd)) => Ok(fd),
                Ok(None) => Err(Undetermined::Exited),
                Err(_) => Err(Undetermined::NoPidfd),
            }
        }
        // A peer that was reaped has no process left to make a pidfd for.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ESRCH | libc::EINVAL)) => {
            Err(Undetermined::Exited)
        }
        Err(_) => Err(Undetermined::NoPidfd),
    }
}

fn so_peerpidfd(stream: &UnixStream) -> std::io::Result<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int-sized buffer and its length, on a socket this process holds.
    let ret = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if ret != 0 || fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just made this descriptor for this process, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `pid` and its ancestors, nearest first, up to `host` or the top, read twice.
///
/// Why twice is enough: a process's parent changes only when the parent exits (it is then
/// re-parented to a subreaper or init, never back). So when a process shows the same parent
/// in both reads, that parent lived through the time between them, which holds the first
/// read of the parent itself: that read was of the real parent, not of a process that took
/// its pid. And `pid` itself is the connecting process as long as its pidfd says it still
/// runs after the second read.
fn lineage(pid: i32, pidfd: &OwnedFd, host: i32) -> Result<Vec<i32>, Undetermined> {
    let first = ancestors(pid, host)?;
    let second = ancestors(pid, host)?;
    if !link_os::process::still_running(pidfd) {
        return Err(Undetermined::Exited);
    }
    if first != second {
        return Err(Undetermined::LineageChanged);
    }
    Ok(first)
}

fn ancestors(pid: i32, host: i32) -> Result<Vec<i32>, Undetermined> {
    let mut chain = vec![pid];
    let mut current = pid;
    while current > 1 && current != host {
        if chain.len() > MAX_DEPTH {
            return Err(Undetermined::LineageChanged);
        }
        let stat = procfs::process::Process::new(current).and_then(|p| p.stat());
        current = stat.map_err(|_| Undetermined::Exited)?.ppid;
        chain.push(current);
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real socket: this process connecting to itself is the host's own (Runtime), its
    /// lineage read to the top; a forked child that connected and was reaped before the look
    /// is Undetermined, never promoted.
    #[tokio::test]
    async fn a_peer_that_exited_before_the_look_is_undetermined() {
        let dir = std::path::PathBuf::from(std::env::var("HOME").unwrap())
            .join(format!(".cache/lnk-t/caller-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();

        let own = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let pid = std::process::id() as i32;
        let pidfd = peer_pidfd(&accepted, pid).unwrap();
        let walked = lineage(pid, &pidfd, -1).unwrap();
        assert_eq!(walked.first(), Some(&pid));
        assert!(walked.last().is_some_and(|top| *top <= 1), "{walked:?}");
        assert_eq!(identify(&accepted), Some(Caller::Runtime));
        drop(own);

        for _ in 0..20 {
            let _kept = link_harness_conformance::syscalls::connect_in_reaped_child(&path).unwrap();
            let (accepted, _) = listener.accept().await.unwrap();
            assert_eq!(
                identify(&accepted),
                Some(Caller::Undetermined(Undetermined::Exited))
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
