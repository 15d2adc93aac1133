//! Waiting for one run under its time limit: poll(2) on its pipes, bwrap's pidfd and the
//! init's, killing the tree at the deadline or on a stop, and reaping what was ours.

use super::output::Reader;
use super::quota::Quota;
use super::{RunError, GRACE};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Signal, WaitId, WaitIdOptions};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// The state of one run: the processes to see gone and the pipes to see closed.
pub(super) struct Watch {
    pub(super) stop: &'static OwnedFd,
    /// bwrap's `argv[0]` ([`crate::leftovers::tag`]), which its init inherits.
    pub(super) tag: std::ffi::OsString,
    pub(super) stop_seen: bool,
    pub(super) deadline: Instant,
    /// bwrap's pidfd until it is reaped, then its status.
    pub(super) bwrap: Option<OwnedFd>,
    pub(super) exit: Option<ExitStatus>,
    pub(super) info: Reader,
    /// A pidfd on the namespace's init, once the info pipe closed (`None` after that when
    /// bwrap failed before creating it, or it was already gone).
    pub(super) init: Option<OwnedFd>,
    pub(super) init_known: bool,
    pub(super) init_gone: bool,
    pub(super) status: Reader,
    pub(super) stdout: Reader,
    pub(super) stderr: Reader,
    /// When the tree was last sent SIGKILL (time limit or stop).
    pub(super) killed: Option<Instant>,
    /// Whether [`Watch::kill_pipe_holders`] ran.
    pub(super) holders_killed: bool,
    pub(super) stopped: bool,
    /// When both processes were found gone (the pipes get [`GRACE`] from then).
    pub(super) quiet_since: Option<Instant>,
    /// The workspace quota, measured while the command runs.
    pub(super) quota: Quota,
    /// The quota limit the command's files passed: it was stopped for it.
    pub(super) over_quota: Option<link_protocol::routes::sandbox::LimitHit>,
}

impl Watch {
    pub(super) fn run(&mut self, child: &mut std::process::Child) -> Result<(), RunError> {
        loop {
            self.learn_init();
            let gone = self.bwrap.is_none() && self.init_known && self.init_gone;
            if gone {
                let since = *self.quiet_since.get_or_insert_with(Instant::now);
                if !self.pipes_open() || since.elapsed() >= GRACE {
                    break;
                }
                if self.killed.is_some() && self.init.is_none() && !self.holders_killed {
                    self.holders_killed = true;
                    self.kill_pipe_holders();
                }
            }
            let mut now = Instant::now();
            // Not once both are gone: a command that ended by itself is not killed after.
            if self.killed.is_none() && !gone {
                if let Some(hit) = self.quota.check(now) {
                    // Stopped as at its time limit, which waits for the init's pid too.
                    self.over_quota.get_or_insert(hit);
                    self.deadline = self.deadline.min(now);
                }
                now = Instant::now();
            }
            if self.should_kill(now) {
                self.kill();
            }
            let timeout = self.poll_timeout(now);
            let ready = self.poll_once(timeout)?;
            if let Some(fd) = &self.bwrap {
                if ready.contains(&fd.as_raw_fd()) {
                    self.exit = Some(child.wait()?);
                    self.bwrap = None;
                }
            }
        }
        self.reap_init();
        Ok(())
    }

    fn pipes_open(&self) -> bool {
        [&self.info, &self.status, &self.stdout, &self.stderr]
            .iter()
            .any(|r| r.fd.is_some())
    }

    /// Once the info pipe closed: a pidfd on the init, if bwrap got as far as creating it.
    fn learn_init(&mut self) {
        if self.init_known || self.info.fd.is_some() {
            return;
        }
        self.init_known = true;
        self.init =
            init_pid(&self.info.kept).and_then(|pid| link_os::process::pidfd(pid).ok().flatten());
        self.init_gone = self.init.is_none();
        if let (Some(fd), Some(_)) = (&self.init, self.killed) {
            let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
        }
    }

    fn should_kill(&mut self, now: Instant) -> bool {
        if let Some(at) = self.killed {
            // Still here long after SIGKILL: say so, and send it again.
            if at.elapsed() >= GRACE && !(self.bwrap.is_none() && self.init_gone) {
                tracing::warn!("sandbox processes outlive SIGKILL");
                return true;
            }
            return false;
        }
        if self.stop_seen {
            self.stopped = true;
            return true;
        }
        if now < self.deadline {
            return false;
        }
        // bwrap writes the init's pid right after creating it: wait for it (a little) so the
        // kill reaches the init, whose pid nobody could learn once bwrap is dead.
        self.init_known || now >= self.deadline + GRACE
    }

    /// Kills the init (which takes every process of the namespace with it), then bwrap.
    fn kill(&mut self) {
        if let (Some(fd), false) = (&self.init, self.init_gone) {
            let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
        }
        if let Some(fd) = &self.bwrap {
            let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
        }
        self.killed = Some(Instant::now());
    }

    fn poll_timeout(&self, now: Instant) -> Duration {
        if let Some(since) = self.quiet_since {
            return GRACE.saturating_sub(since.elapsed());
        }
        let quota = match self.over_quota {
            None => self.quota.due_in(now),
            Some(_) => Duration::MAX,
        };
        match self.killed {
            None if now < self.deadline => (self.deadline - now).min(quota),
            // Past the deadline, waiting for the init's pid: look again shortly.
            None => Duration::from_millis(10),
            Some(_) => GRACE,
        }
    }

    /// One poll(2) over everything still open; reads the pipes that are ready and notes the
    /// processes that are gone. Returns the ready descriptors.
    fn poll_once(&mut self, timeout: Duration) -> Result<Vec<RawFd>, RunError> {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(8);
        for r in [&self.info, &self.status, &self.stdout, &self.stderr] {
            if let Some(fd) = &r.fd {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
        }
        if let Some(fd) = &self.bwrap {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        // A pidfd stays readable once its process is gone: only until then.
        if let (Some(fd), false) = (&self.init, self.init_gone) {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        if self.killed.is_none() {
            fds.push(PollFd::new(self.stop, PollFlags::IN));
        }
        let ts = Timespec::try_from(timeout).unwrap_or(Timespec {
            tv_sec: i64::MAX,
            tv_nsec: 0,
        });
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(RunError::Io(e.into())),
        }
        let ready: Vec<RawFd> = fds
            .iter()
            .filter(|p| !p.revents().is_empty())
            .map(|p| p.as_fd().as_raw_fd())
            .collect();
        drop(fds);
        let is_ready = |fd: &Option<OwnedFd>| {
            fd.as_ref()
                .is_some_and(|fd| ready.contains(&fd.as_raw_fd()))
        };
        for r in [
            &mut self.info,
            &mut self.status,
            &mut self.stdout,
            &mut self.stderr,
        ] {
            if is_ready(&r.fd) {
                r.read_once();
            }
        }
        self.init_gone |= is_ready(&self.init);
        self.stop_seen |= ready.contains(&self.stop.as_raw_fd());
        Ok(ready)
    }

    /// After an error of the loop itself: kill both processes and wait for them, [`GRACE`] at
    /// most (a process in uninterruptible sleep outlives SIGKILL), so the error reaches the
    /// caller whatever became of them.
    pub(super) fn abandon(&mut self, child: &mut std::process::Child) {
        self.kill();
        let init = self.init.as_ref().filter(|_| !self.init_gone);
        if wait_gone(child, init, GRACE) {
            self.reap_init();
        } else {
            tracing::warn!("sandbox processes outlive SIGKILL by {GRACE:?}: left to the reaper");
        }
    }

    /// Kills and reaps each child of this process that is a bwrap of this run's tag and holds
    /// one of the run's pipes.
    ///
    /// bwrap killed after creating the init but before writing its pid
    /// (containers/bubblewrap#633; see [`crate::leftovers`]) leaves that init alive, blocked
    /// for good, its parent-death signal not yet armed. Reparented to this process, our
    /// children's subreaper ([`link_os::reaper::become_subreaper`]), it keeps the output pipes open,
    /// and only they name it: without this the run would wait [`GRACE`] for them, and leave
    /// it. The
    /// tag leaves out a child another thread forked and has not yet exec'd, which holds
    /// copies of every descriptor until then; the check is made again on the pidfd, so the
    /// process signalled is the one checked.
    fn kill_pipe_holders(&self) {
        let pipes: Vec<String> = [&self.status, &self.stdout, &self.stderr]
            .iter()
            .filter_map(|r| r.fd.as_ref())
            .filter_map(|fd| rustix::fs::fstat(fd).ok())
            .map(|st| format!("pipe:[{}]", st.st_ino))
            .collect();
        let ours = |pid: i32| {
            crate::leftovers::is_tagged(pid, &self.tag)
                && std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                    .any(|target| pipes.iter().any(|p| target.as_os_str() == p.as_str()))
        };
        let me = std::process::id() as i32;
        for pid in link_os::sample::children(me)
            .into_iter()
            .filter(|&pid| ours(pid))
        {
            let Ok(Some(fd)) = link_os::process::pidfd(pid) else {
                continue;
            };
            if !ours(pid) {
                continue;
            }
            tracing::warn!(pid, "killing a sandbox init its killed bwrap left behind");
            let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
            if link_os::process::wait(&fd, GRACE) {
                let _ = rustix::process::waitid(
                    WaitId::PidFd(fd.as_fd()),
                    WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
                );
            }
        }
    }

    /// Reaps the init if it was reparented to us; ECHILD (not ours) is fine. Called once bwrap
    /// is reaped, so whoever the init's parent was going to be, it is now.
    fn reap_init(&mut self) {
        if let Some(fd) = &self.init {
            let _ = rustix::process::waitid(WaitId::PidFd(fd.as_fd()), WaitIdOptions::EXITED);
        }
    }
}

/// Waits up to `limit` for bwrap (`child`, collected) and then the init (by its pidfd) to be
/// gone; false if either is still there.
fn wait_gone(child: &mut std::process::Child, init: Option<&OwnedFd>, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let bwrap_gone = link_os::process::wait_child(child, limit).is_ok_and(|s| s.is_some());
    let left = deadline.saturating_duration_since(Instant::now());
    bwrap_gone && init.is_none_or(|fd| link_os::process::wait(fd, left))
}

/// The `child-pid` of bwrap's info JSON.
fn init_pid(info: &[u8]) -> Option<i32> {
    let v: serde_json::Value = serde_json::from_slice(info).ok()?;
    i32::try_from(v["child-pid"].as_i64()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A killed bwrap is collected at once; a process that stays (process 1 stands in for one
    /// in uninterruptible sleep, which SIGKILL does not end) costs the wait its limit, not
    /// forever.
    #[test]
    fn abandoning_waits_for_what_outlives_sigkill_no_longer_than_its_limit() {
        let mut bwrap = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        bwrap.kill().unwrap();
        let started = Instant::now();
        assert!(wait_gone(&mut bwrap, None, Duration::from_secs(30)));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );

        let mut bwrap = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        bwrap.kill().unwrap();
        let init = link_os::process::pidfd(1).unwrap().expect("process 1");
        let limit = Duration::from_millis(300);
        let started = Instant::now();
        assert!(!wait_gone(&mut bwrap, Some(&init), limit));
        assert!(started.elapsed() >= limit, "{:?}", started.elapsed());
        assert!(
            link_os::process::still_running(&init),
            "process 1 is still there"
        );
        assert!(bwrap.try_wait().unwrap().is_some(), "bwrap was collected");
    }
}
