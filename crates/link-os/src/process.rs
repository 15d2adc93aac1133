//! One process, named by its pid or held by a pidfd: opening a pidfd, waiting for the process
//! to exit with a deadline (its pidfd becomes readable the moment it exits, as a zombie,
//! before anyone collects it), signalling it without hitting a reused pid, and its start
//! time. The one owner of waiting for a process with a deadline; the xtask, the kit, the
//! sandbox and the host all wait through it.

use rustix::process::Signal;
use std::os::fd::OwnedFd;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A pidfd for `pid`: `Ok(None)` when no such process exists any more, `Err` when pidfds are
/// unavailable here (Linux before 5.3).
///
/// For a child of the caller that has not been collected, the pid cannot be reused, so the
/// pidfd is that child's; for any other process it is the process holding `pid` now.
pub fn pidfd(pid: i32) -> std::io::Result<Option<OwnedFd>> {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return Ok(None);
    };
    match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::SRCH) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Sends `signal` to `pid` through a pidfd if `still(pid)` holds once that pidfd is open, so
/// a pid reused before the check is never signalled; returns the pidfd, to wait on.
pub fn signal_checked(pid: i32, signal: Signal, still: impl Fn(i32) -> bool) -> Option<OwnedFd> {
    let fd = pidfd(pid).ok()??;
    if !still(pid) {
        return None;
    }
    rustix::process::pidfd_send_signal(&fd, signal).ok()?;
    Some(fd)
}

/// Waits up to `timeout` for the process behind `fd` to exit; true once it has.
pub fn wait(fd: &OwnedFd, timeout: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

/// True while the process behind `fd` has not exited, by one look that does not wait. Any
/// doubt (an error) counts as exited.
pub fn still_running(fd: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&now)), Ok(0))
}

/// Waits up to `timeout` for process `pid` to exit; true once it has (or was already gone).
/// Where pidfds are unavailable, checks `/proc` every 10 ms instead.
pub fn wait_pid(pid: i32, timeout: Duration) -> bool {
    match pidfd(pid) {
        Ok(Some(fd)) => wait(&fd, timeout),
        Ok(None) => true,
        Err(_) => {
            let deadline = Instant::now() + timeout;
            while running(pid) {
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            true
        }
    }
}

/// Waits up to `timeout` for a child of this process to exit and collects it; `None` if it
/// still runs. Sleeps on the child's pidfd (uncollected, its pid cannot be reused), so it
/// returns the moment the child exits; where pidfds are unavailable, checks every 20 ms.
pub fn wait_child(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    let fd = pidfd(child.id() as i32).ok().flatten();
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(Some(s));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match &fd {
            // Readable once it exited; a moment's nap in case it is not yet collectable.
            Some(fd) if wait(fd, left) => std::thread::sleep(Duration::from_micros(100)),
            Some(_) => {}
            None => std::thread::sleep(left.min(Duration::from_millis(20))),
        }
    }
}

/// Waits for `child` up to `timeout` ([`wait_child`]); past it, kills and reaps it and
/// returns `None`.
pub fn wait_or_kill(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    if let Some(status) = wait_child(child, timeout)? {
        return Ok(Some(status));
    }
    // Past the limit: kill it and reap it.
    let _ = child.kill();
    child.wait()?;
    Ok(None)
}

/// True while `pid` exists and is not a zombie.
pub fn running(pid: i32) -> bool {
    start_time(pid).is_some()
}

/// The start time (clock ticks after boot) of `pid` while it is alive and not a zombie: with
/// the pid, it names one process, which a reused pid is not.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = procfs::process::Process::new(pid).ok()?.stat().ok()?;
    (!matches!(stat.state, 'Z' | 'X')).then_some(stat.starttime)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that sleeps `secs` seconds.
    fn sleeper(secs: &str) -> Child {
        std::process::Command::new("sleep")
            .arg(secs)
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_wait_ends_when_the_process_exits_not_at_the_timeout() {
        let mut child = sleeper("0.2");
        let pid = child.id() as i32;
        let fd = pidfd(pid).unwrap().expect("a live child has a pidfd");
        assert!(!wait(&fd, Duration::from_millis(1)), "still running");
        assert!(still_running(&fd));
        let started = Instant::now();
        assert!(wait(&fd, Duration::from_secs(30)));
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "woke at exit, not at timeout"
        );
        assert!(!still_running(&fd));
        // Exited but not collected (a zombie): still readable, and `wait_pid` agrees.
        assert!(wait_pid(pid, Duration::from_millis(1)));
        assert!(!running(pid), "a zombie does not run");
        child.wait().unwrap();
        assert!(wait_pid(pid, Duration::ZERO), "a collected pid is gone");
    }

    #[test]
    fn a_child_wait_collects_the_child_or_says_it_still_runs() {
        let mut child = sleeper("0.2");
        assert!(wait_child(&mut child, Duration::from_millis(1))
            .unwrap()
            .is_none());
        let status = wait_child(&mut child, Duration::from_secs(30)).unwrap();
        assert!(status.is_some_and(|s| s.success()));
    }

    #[test]
    fn a_child_past_its_time_is_killed_and_collected() {
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        let status = wait_or_kill(&mut quick, Duration::from_secs(30)).unwrap();
        assert!(status.is_some_and(|s| s.success()));
        let mut slow = sleeper("30");
        assert_eq!(wait_or_kill(&mut slow, Duration::ZERO).unwrap(), None);
        assert!(!running(slow.id() as i32), "killed and collected");
    }

    #[test]
    fn a_signal_goes_only_to_the_process_still_names() {
        let mut child = sleeper("30");
        let pid = child.id() as i32;
        let started = start_time(pid).expect("a live child has a start time");
        assert!(
            signal_checked(pid, Signal::KILL, |p| start_time(p) == Some(started + 1)).is_none()
        );
        assert!(
            running(pid),
            "a pid recorded with another start time is not signalled"
        );
        let fd = signal_checked(pid, Signal::KILL, |p| start_time(p) == Some(started))
            .expect("signalled");
        assert!(wait(&fd, Duration::from_secs(30)));
        child.wait().unwrap();
        assert_eq!(start_time(pid), None);
    }
}
