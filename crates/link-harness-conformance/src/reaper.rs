//! The supervisor and reaper: one place that owns every wait of this process.
//!
//! The runner makes itself a child subreaper, so descendants whose parent dies are re-parented
//! to it instead of to PID 1 (which, in a container, may never reap them). Children the kit
//! starts itself are *owned*: they are spawned through [`Reaper::spawn`] under a lock and waited
//! for by their [`Owned`] handle only. A background thread reaps every other zombie child
//! (adopted orphans) by its exact pid, so it never steals an owned child's exit status. The
//! cheap `waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT)` peek tells whether any zombie exists before
//! `/proc` is scanned. An unowned zombie is left alone for [`GRACE`] first, so code in the
//! same process that waits for its own `std::process` child (a test, say) still collects it.
//!
//! [`snapshot`] and [`leftovers`] identify processes by pid *and* start time from `/proc`, so
//! a recycled pid is never mistaken for a process the runtime started.

use link_os::sample::descendants;
use rustix::process::{Pid, Signal, WaitOptions};
use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How often the background thread looks for zombies.
const REAP_EVERY: Duration = Duration::from_millis(50);

/// How long an unowned zombie is left for a waiter of its own before it is reaped.
pub const GRACE: Duration = Duration::from_millis(200);

/// An adopted orphan the reaper collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub pid: i32,
    /// With the pid, which process it was (a caller that recorded it can name it).
    pub start_time_ticks: u64,
    /// The kernel's name for it, cut at 15 characters.
    pub comm: String,
    pub status: String,
}

/// The process-wide supervisor of children.
pub struct Reaper {
    owned: Mutex<HashSet<i32>>,
    reaped: Mutex<Vec<Reaped>>,
    /// Unowned zombies (pid, start time) and when they were first seen.
    pending: Mutex<HashMap<(i32, u64), Instant>>,
    thread: OnceLock<()>,
}

static REAPER: OnceLock<Reaper> = OnceLock::new();

/// The one reaper of this process.
pub fn global() -> &'static Reaper {
    REAPER.get_or_init(|| Reaper {
        owned: Mutex::new(HashSet::new()),
        reaped: Mutex::new(Vec::new()),
        pending: Mutex::new(HashMap::new()),
        thread: OnceLock::new(),
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Reaper {
    /// Makes this process a child subreaper and checks it with the getter; starts reaping.
    pub fn become_subreaper(&'static self) -> std::io::Result<()> {
        link_os::reaper::become_subreaper()?;
        match link_os::reaper::is_subreaper()? {
            true => {
                self.start();
                Ok(())
            }
            false => Err(std::io::Error::other(
                "PR_GET_CHILD_SUBREAPER reads 0 right after PR_SET_CHILD_SUBREAPER",
            )),
        }
    }

    /// Whether this process is a child subreaper now.
    pub fn is_subreaper() -> bool {
        matches!(link_os::reaper::is_subreaper(), Ok(true))
    }

    fn start(&'static self) {
        self.thread.get_or_init(|| {
            let spawned = std::thread::Builder::new()
                .name("lnk-reaper".into())
                .spawn(move || loop {
                    self.reap_orphans();
                    std::thread::sleep(REAP_EVERY);
                });
            if let Err(e) = spawned {
                link_protocol::errln!("warning: cannot start the reaper thread: {e}");
            }
        });
    }

    /// Starts `cmd` as an owned child: only its handle will wait for it.
    pub fn spawn(&'static self, cmd: &mut Command) -> std::io::Result<Owned> {
        self.start();
        // Holding the lock across spawn means the reaper never sees this child unregistered.
        let mut owned = lock(&self.owned);
        let child = cmd.spawn()?;
        let pid = child.id() as i32;
        owned.insert(pid);
        Ok(Owned {
            child,
            pid,
            status: None,
        })
    }

    /// Runs `cmd` to completion as an owned child, collecting its output.
    pub fn output(&'static self, cmd: &mut Command, timeout: Duration) -> std::io::Result<Output> {
        use std::io::Read;
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut owned = self.spawn(cmd)?;
        let mut out = owned.child.stdout.take().expect("piped stdout");
        let mut err = owned.child.stderr.take().expect("piped stderr");
        let reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf);
            buf
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
        let status = match owned.wait_timeout(timeout)? {
            Some(s) => s,
            None => {
                owned.kill_and_wait();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{:?} did not finish within {timeout:?}", cmd.get_program()),
                ));
            }
        };
        let stdout = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
        let stderr = reader.join().unwrap_or_default();
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    fn release(&self, pid: i32) {
        lock(&self.owned).remove(&pid);
    }

    /// One pass: reaps every zombie child that is not owned and has waited out [`GRACE`].
    /// Returns what it reaped.
    pub fn reap_orphans(&self) -> Vec<Reaped> {
        if !link_os::reaper::zombie_child() {
            lock(&self.pending).clear();
            return Vec::new();
        }
        let owned = lock(&self.owned);
        let mut pending = lock(&self.pending);
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let now = Instant::now();
        let zombies: Vec<_> = zombie_children(me)
            .into_iter()
            .filter(|z| !owned.contains(&z.0))
            .collect();
        pending.retain(|key, _| zombies.iter().any(|z| (z.0, z.2) == *key));
        let mut out = Vec::new();
        for (pid, comm, start) in zombies {
            let first_seen = *pending.entry((pid, start)).or_insert(now);
            if now.duration_since(first_seen) < GRACE {
                continue;
            }
            let Some(p) = Pid::from_raw(pid) else {
                continue;
            };
            if let Ok(Some((_, status))) = rustix::process::waitpid(Some(p), WaitOptions::NOHANG) {
                pending.remove(&(pid, start));
                out.push(Reaped {
                    pid,
                    start_time_ticks: start,
                    comm,
                    status: describe_wait(status),
                });
            }
        }
        drop(pending);
        drop(owned);
        if !out.is_empty() {
            lock(&self.reaped).extend(out.iter().cloned());
        }
        out
    }

    /// Every orphan reaped so far.
    pub fn reaped(&self) -> Vec<Reaped> {
        lock(&self.reaped).clone()
    }

    /// Zombie children of this process that no [`Owned`] handle waits for: adopted orphans
    /// the reaper has not collected yet (it leaves each alone for [`GRACE`] first).
    pub fn unreaped(&self) -> Vec<ProcInfo> {
        if !link_os::reaper::zombie_child() {
            return Vec::new();
        }
        let owned = lock(&self.owned).clone();
        let me = rustix::process::getpid().as_raw_nonzero().get();
        zombie_children(me)
            .into_iter()
            .filter(|(pid, _, _)| !owned.contains(pid))
            .filter_map(|(pid, _, _)| read_proc(pid))
            .filter(|p| p.state == 'Z')
            .collect()
    }
}

/// Zombie children of `me`: pid, command name, start time.
fn zombie_children(me: i32) -> Vec<(i32, String, u64)> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|s| s.ppid == me && s.state == 'Z')
        .map(|s| (s.pid, s.comm, s.starttime))
        .collect()
}

fn describe_wait(status: rustix::process::WaitStatus) -> String {
    if let Some(code) = status.exit_status() {
        format!("exit status {code}")
    } else if let Some(sig) = status.terminating_signal() {
        format!("killed by signal {sig}")
    } else {
        "stopped".into()
    }
}

/// A child the kit started; only this handle waits for it. Dropping an unfinished child kills it.
pub struct Owned {
    pub child: Child,
    pid: i32,
    status: Option<ExitStatus>,
}

impl Owned {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The exit status if it has exited (collected once, remembered after).
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            if let Some(s) = self.child.try_wait()? {
                self.status = Some(s);
                global().release(self.pid);
            }
        }
        Ok(self.status)
    }

    /// Waits up to `timeout`, so the caller can give up; wakes when the child exits.
    pub fn wait_timeout(&mut self, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        let s = link_os::process::wait_child(&mut self.child, timeout)?;
        if s.is_some() {
            self.status = s;
            global().release(self.pid);
        }
        Ok(s)
    }

    /// Sends `sig` unless the child has already been waited for (its pid may be reused).
    pub fn signal(&mut self, sig: Signal) -> std::io::Result<()> {
        if self.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = Pid::from_raw(self.pid).expect("child pid is positive");
        rustix::process::kill_process(pid, sig).map_err(Into::into)
    }

    /// SIGKILLs the child and collects it.
    pub fn kill_and_wait(&mut self) {
        if self.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            if let Ok(s) = self.child.wait() {
                self.status = Some(s);
            }
            global().release(self.pid);
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.kill_and_wait();
    }
}

/// A process seen in `/proc`, identified by pid and start time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    pub start_time_ticks: u64,
    pub comm: String,
    pub exe: String,
    pub argv: Vec<String>,
    pub state: char,
}

impl ProcInfo {
    /// "pid 42 (sleep 300; ppid 1, started at tick 123)".
    pub fn describe(&self) -> String {
        let cmd = if self.argv.is_empty() {
            self.comm.clone()
        } else {
            self.argv.join(" ")
        };
        format!(
            "pid {} ({cmd}; ppid {}, state {}, started at tick {})",
            self.pid, self.ppid, self.state, self.start_time_ticks
        )
    }
}

/// Reads one process; `None` when it is gone.
pub fn read_proc(pid: i32) -> Option<ProcInfo> {
    let p = procfs::process::Process::new(pid).ok()?;
    let stat = p.stat().ok()?;
    Some(ProcInfo {
        pid,
        ppid: stat.ppid,
        start_time_ticks: stat.starttime,
        comm: stat.comm,
        exe: p.exe().map(|e| e.display().to_string()).unwrap_or_default(),
        argv: p.cmdline().unwrap_or_default(),
        state: stat.state,
    })
}

/// Whether the process `pid` started at `start_time_ticks` is still alive (not a zombie).
pub fn is_alive(pid: i32, start_time_ticks: u64) -> bool {
    link_os::process::start_time(pid) == Some(start_time_ticks)
}

/// Every live (non-zombie) descendant of this process.
pub fn snapshot() -> Vec<ProcInfo> {
    let me = std::process::id() as i32;
    descendants(me)
        .into_iter()
        .filter_map(read_proc)
        .filter(|p| !matches!(p.state, 'Z' | 'X'))
        .collect()
}

/// What is still alive: live descendants of this process, plus any of `recorded`
/// (pid, start time) that survive elsewhere, minus the owned children in `ignore`.
pub fn leftovers(recorded: &[(i32, u64)], ignore: &HashSet<i32>) -> Vec<ProcInfo> {
    let mut out: Vec<ProcInfo> = snapshot()
        .into_iter()
        .filter(|p| !ignore.contains(&p.pid))
        .collect();
    for &(pid, start) in recorded {
        if out.iter().any(|p| p.pid == pid) || ignore.contains(&pid) {
            continue;
        }
        if let Some(p) = read_proc(pid) {
            if p.start_time_ticks == start && !matches!(p.state, 'Z' | 'X') {
                out.push(p);
            }
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// SIGKILLs a process through a pidfd after re-checking its start time, so a recycled pid
/// is never hit.
pub fn kill_exact(pid: i32, start_time_ticks: u64) -> bool {
    link_os::process::signal_checked(pid, Signal::KILL, |pid| is_alive(pid, start_time_ticks))
        .is_some()
}

/// Polls until `cond` holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn owned_exit_status_is_never_stolen() {
        let reaper = global();
        reaper.become_subreaper().unwrap();
        for code in [0, 7, 42] {
            let mut child = reaper
                .spawn(Command::new("sh").args(["-c", &format!("exit {code}")]))
                .unwrap();
            // Hammer the reaper while the owned child turns into a zombie.
            for _ in 0..20 {
                reaper.reap_orphans();
                std::thread::sleep(Duration::from_millis(5));
            }
            let status = child
                .wait_timeout(Duration::from_secs(30))
                .unwrap()
                .unwrap();
            assert_eq!(status.code(), Some(code));
        }
        let out = reaper
            .output(
                Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
                Duration::from_secs(30),
            )
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_child_waited_for_elsewhere_keeps_its_status_through_the_grace() {
        global().become_subreaper().unwrap();
        // Not spawned through the reaper: someone else in this process waits for it.
        let mut child = Command::new("sh").args(["-c", "exit 5"]).spawn().unwrap();
        std::thread::sleep(GRACE / 2);
        global().reap_orphans();
        assert_eq!(child.wait().unwrap().code(), Some(5));
    }

    #[test]
    fn adopts_names_and_reaps_a_double_forked_orphan() {
        let reaper = global();
        reaper.become_subreaper().unwrap();
        assert!(Reaper::is_subreaper());
        // The subshell forks `sleep` and exits, and so does sh: the sleep is orphaned.
        let out = reaper
            .output(
                Command::new("sh").args(["-c", "(sleep 300 >/dev/null 2>&1 & echo $!) ; exit 0"]),
                Duration::from_secs(30),
            )
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let orphan: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let me = std::process::id() as i32;
        let adopted = wait_until(Duration::from_secs(10), || {
            read_proc(orphan).is_some_and(|p| p.ppid == me)
        });
        assert!(
            adopted,
            "orphan {orphan} was not re-parented to the subreaper"
        );
        let info = read_proc(orphan).unwrap();

        // Still alive: the leftover check names it, by pid and by recorded identity.
        let left = leftovers(&[(orphan, info.start_time_ticks)], &HashSet::new());
        let named = left.iter().find(|p| p.pid == orphan).expect("orphan named");
        assert!(
            named.describe().contains("sleep 300"),
            "{}",
            named.describe()
        );
        // A wrong start time is a different process: not matched by identity alone.
        assert!(!is_alive(orphan, info.start_time_ticks + 1));

        assert!(kill_exact(orphan, info.start_time_ticks));
        let gone = wait_until(Duration::from_secs(10), || read_proc(orphan).is_none());
        assert!(
            gone,
            "killed orphan {orphan} was not reaped: {:?}",
            read_proc(orphan)
        );
        let reaped = reaper.reaped();
        let entry = reaped.iter().find(|r| r.pid == orphan).expect("recorded");
        assert_eq!(entry.comm, "sleep");
        assert!(entry.status.contains("signal 9"), "{}", entry.status);
        let left = leftovers(&[(orphan, info.start_time_ticks)], &HashSet::new());
        assert!(left.iter().all(|p| p.pid != orphan));
    }

    #[test]
    fn dropping_an_owned_child_kills_and_collects_it() {
        let mut child = global().spawn(Command::new("sleep").arg("300")).unwrap();
        let pid = child.pid();
        let start = read_proc(pid).unwrap().start_time_ticks;
        child.signal(Signal::TERM).unwrap();
        let status = child
            .wait_timeout(Duration::from_secs(30))
            .unwrap()
            .unwrap();
        assert_eq!(status.signal(), Some(15));
        drop(child);
        let child = global().spawn(Command::new("sleep").arg("300")).unwrap();
        let pid2 = child.pid();
        drop(child);
        assert!(read_proc(pid2).is_none());
        assert!(!is_alive(pid, start));
    }
}
