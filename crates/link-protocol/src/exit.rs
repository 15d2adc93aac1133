//! Waiting for a process to exit without polling: its pidfd becomes readable the moment it
//! exits (as a zombie, before anyone collects it). The one owner of waiting for a process
//! with a deadline; tokio-free (feature `exit`), so the xtask waits through it too.

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

/// True while `pid` exists and is not a zombie.
pub fn running(pid: i32) -> bool {
    crate::pids::start_time(pid).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_when_the_process_exits_not_at_the_timeout() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let fd = pidfd(pid).unwrap().expect("a live child has a pidfd");
        assert!(!wait(&fd, Duration::from_millis(1)), "still running");
        let started = Instant::now();
        assert!(wait(&fd, Duration::from_secs(30)));
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "woke at exit, not at timeout"
        );
        // Exited but not collected (a zombie): still readable, and `wait_pid` agrees.
        assert!(wait_pid(pid, Duration::from_millis(1)));
        child.wait().unwrap();
        assert!(wait_pid(pid, Duration::ZERO), "a collected pid is gone");
    }

    #[test]
    fn a_child_wait_collects_the_child_or_says_it_still_runs() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        assert!(wait_child(&mut child, Duration::from_millis(1))
            .unwrap()
            .is_none());
        let status = wait_child(&mut child, Duration::from_secs(30)).unwrap();
        assert!(status.is_some_and(|s| s.success()));
    }
}
