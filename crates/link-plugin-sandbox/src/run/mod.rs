//! Running one confined command: spawn bwrap with the policy's arguments, enforce the time
//! limit on the whole process tree, cap the output, read the helper's status, and reap every
//! process started on the way.
//!
//! bwrap with `--unshare-pid` runs two processes: bwrap itself, and the namespace's init
//! (its child, also `bwrap`, whose pid comes from `--info-fd`). bwrap exits as soon as the
//! init reports the command's status, *without waiting for the init*; the init is then
//! orphaned, killed by its `--die-with-parent` death signal, and reparented to the nearest
//! child subreaper. So [`run_blocking`] never returns while either is alive: it watches both
//! through pidfds, kills both on the time limit or [`stop_all`] (killing the init takes every
//! process of the namespace with it), and reaps the init when it was reparented to this
//! process, which it is when the process is a child subreaper ([`become_subreaper`]; every
//! mode of the binary is one). [`reap_orphans`] is the last line: binaries call it before
//! exiting.
//!
//! The loop is synchronous (poll(2) on pipes and pidfds) so the `exec` command needs no async
//! runtime; the plugin runs it on tokio's blocking pool ([`run`]).

use crate::helper::Status;
use crate::identity::Identity;
use crate::policy::{Fds, Policy};
use link_protocol::routes::sandbox::LimitHit;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long to wait, after a kill or after the processes are gone, before saying so in the log
/// (processes) or giving up on a pipe (output still open without a writer we know of).
const GRACE: Duration = Duration::from_secs(10);

/// What to do with the command's output.
#[derive(Debug, Clone, Copy)]
pub enum Output {
    /// Keep up to `cap` bytes of each stream; the rest is drained and reported as truncated.
    Capture { cap: usize },
    /// Pass our stdout and stderr through (the `exec` subcommand).
    Inherit,
}

/// One confined command.
#[derive(Debug, Clone)]
pub struct Spec {
    pub bwrap: PathBuf,
    /// What the sandbox belongs to (a runtime's state root, a probe's scratch directory):
    /// bwrap runs under its [`crate::leftovers::tag`], by which a later start finds it.
    pub owner: PathBuf,
    pub policy: Policy,
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub timeout: Duration,
    pub output: Output,
}

/// What happened to a command that ran confined.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The exit status; `None` when it was killed for its time limit.
    pub exit_code: Option<i32>,
    /// The signal that ended it: `9` on a time-limit kill, else inferred from bwrap's `128+N`.
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration: Duration,
    pub timed_out: bool,
    /// Exit status 127: the command (or one the shell looked up) does not exist.
    pub missing_command: bool,
    /// The kernel Landlock ABI the helper enforced.
    pub landlock_abi: Option<u32>,
    /// The limit that ended it, when the time limit or a signal names one.
    pub limit_hit: Option<LimitHit>,
}

/// Why a command did not run confined.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// bwrap failed before the helper ran (namespaces, mounts); `stderr` is bwrap's message.
    #[error("bubblewrap failed (exit {code:?}): {}", stderr.trim())]
    Bwrap { code: Option<i32>, stderr: String },
    /// The helper refused: Landlock could not be fully enforced. Nothing ran.
    #[error("Landlock not enforced inside the sandbox: {0}")]
    Landlock(String),
    /// The workspace or home could not be measured or handed to the dedicated identity;
    /// nothing ran.
    #[error("cannot prepare {} for the command: {error}", dir.display())]
    Prepare { dir: PathBuf, error: std::io::Error },
    /// The command ran, but setuid or setgid bits could not be cleared after it.
    #[error("cannot clear setuid/setgid bits under {}: {error}", dir.display())]
    Cleanup { dir: PathBuf, error: std::io::Error },
    /// The user namespace of a dedicated identity could not be made; nothing ran.
    #[error("no user namespace for {identity}: {error}")]
    UserNamespace {
        identity: String,
        error: crate::identity::UserNamespaceError,
    },
    #[error("cannot start bubblewrap {0}: {1}")]
    Spawn(PathBuf, std::io::Error),
    /// [`stop_all`] was called: the process is shutting down and starts nothing more.
    #[error("the sandbox is shutting down")]
    Stopped,
    #[error("i/o error running the sandbox: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs `spec` on tokio's blocking pool (see [`run_blocking`]).
pub async fn run(spec: &Spec) -> Result<Outcome, RunError> {
    let spec = spec.clone();
    tokio::task::spawn_blocking(move || run_blocking(&spec))
        .await
        .map_err(|e| RunError::Io(std::io::Error::other(e)))?
}

/// Runs `spec` to completion or its time limit; returns once bwrap and the namespace's init
/// are gone (and reaped, when they were ours to reap). Before, the workspace and home are
/// measured and handed to a dedicated identity; after, no file there is left setuid or setgid.
pub fn run_blocking(spec: &Spec) -> Result<Outcome, RunError> {
    let dirs: Vec<&std::path::Path> = std::iter::once(spec.policy.workspace.as_path())
        .chain(spec.policy.home.as_deref())
        .collect();
    let owner = match spec.policy.identity {
        Identity::Dedicated { uid, gid } => Some((uid, gid)),
        Identity::Caller { .. } => None,
    };
    let mut used = 0;
    for (i, dir) in dirs.iter().enumerate() {
        let bytes = crate::identity::prepare(dir, owner).map_err(|e| RunError::Prepare {
            dir: dir.to_path_buf(),
            error: e,
        })?;
        if i == 0 {
            used = bytes;
        }
    }
    // What is left of the workspace quota bounds every file the command writes.
    let limits = spec.policy.limits;
    let left = limits.workspace_bytes.saturating_sub(used);
    let by_quota = left < limits.file_size_bytes;
    let mut spec = spec.clone();
    spec.policy.limits.file_size_bytes = left.min(limits.file_size_bytes);
    let mut outcome = run_confined(&spec);
    if let Ok(o) = &mut outcome {
        if by_quota && o.signal == Some(libc::SIGXFSZ) {
            o.limit_hit = Some(LimitHit::WorkspaceQuota {
                bytes: limits.workspace_bytes,
            });
        }
    }
    for dir in &dirs {
        match crate::identity::clear_setid(dir) {
            Ok(0) => {}
            Ok(n) => tracing::warn!(n, dir = %dir.display(), "cleared setuid/setgid bits"),
            Err(e) => {
                return Err(RunError::Cleanup {
                    dir: dir.to_path_buf(),
                    error: e,
                })
            }
        }
    }
    outcome
}

fn run_confined(spec: &Spec) -> Result<Outcome, RunError> {
    let stop = &stop_pipe()?.0;
    if STOPPED.load(Ordering::SeqCst) {
        return Err(RunError::Stopped);
    }
    let (info_r, info_w) = cloexec_pipe()?;
    let (status_r, status_w) = cloexec_pipe()?;
    let seccomp = memfd("lnk-seccomp", crate::seccomp::filter().program)?;
    let helper = crate::helper::image()?;
    let userns = match spec.policy.identity {
        Identity::Dedicated { uid, gid } => Some(
            crate::identity::shared_user_namespace(uid, gid).map_err(|e| {
                RunError::UserNamespace {
                    identity: spec.policy.identity.describe(),
                    error: e,
                }
            })?,
        ),
        Identity::Caller { .. } => None,
    };
    let fds = Fds {
        info: Some(info_w.as_raw_fd()),
        status: Some(status_w.as_raw_fd()),
        seccomp: seccomp.as_raw_fd(),
        helper: helper.as_raw_fd(),
        userns: userns.as_ref().map(|f| f.as_raw_fd()),
    };
    // bwrap reads its options (the host's paths among them) from a descriptor, so they
    // never appear on the command line of the namespace's init, which every process inside
    // can read; only `--` and the helper's command line, inside paths alone, follow.
    let mut options = spec.policy.bwrap_args(&fds, &spec.argv);
    let command = options.split_off(options.iter().position(|a| a == "--").unwrap_or(0));
    let args = memfd("lnk-bwrap-args", &nul_separated(&options)?)?;
    let mut inherited = vec![
        info_w.as_raw_fd(),
        status_w.as_raw_fd(),
        args.as_raw_fd(),
        fds.seccomp,
        fds.helper,
    ];
    inherited.extend(fds.userns);
    let tag = crate::leftovers::tag(&spec.owner);
    let mut cmd = std::process::Command::new(&spec.bwrap);
    cmd.arg0(&tag)
        .arg("--args")
        .arg(args.as_raw_fd().to_string())
        .args(&command)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        // bwrap's own errors must stay readable for the diagnosis, whatever the mode.
        .stderr(Stdio::piped());
    let cap = match spec.output {
        Output::Capture { cap } => {
            cmd.stdout(Stdio::piped());
            Some(cap)
        }
        Output::Inherit => None,
    };
    if spec.policy.session == crate::policy::Session::Own {
        // Sharing the plugin's session, each command still gets a process group of its own,
        // so a `kill(0, ...)` inside reaches no other agent's sandbox. (With --new-session,
        // bwrap's setsid makes one, and would fail in a group leader.)
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    }
    let mut bwrap_leads = false;
    if SINGLE_THREADED.load(Ordering::Relaxed) {
        // No other thread can spawn meanwhile: the descriptors may be inheritable for the
        // moment of the spawn, which lets std use posix_spawn (vfork), cheaper than fork.
        // bwrap's own `--die-with-parent` ties it to this command-line process.
        for fd in &inherited {
            inherit(*fd)?;
        }
        bwrap_leads = bwrap_leads_a_pid_namespace();
    } else {
        // The plugin: bwrap dies with it from the fork on, not only once bwrap has run its
        // own `--die-with-parent` (this thread outlives bwrap: it waits for it below).
        let parent = rustix::process::getpid();
        // SAFETY: prctl, getppid and fcntl on descriptors we own; no allocation between
        // fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                die_with_parent(parent)?;
                inherited.iter().try_for_each(|fd| inherit(*fd))
            })
        };
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| RunError::Spawn(spec.bwrap.clone(), e))?;
    drop((info_w, status_w, args, seccomp, helper, userns));
    let pidfd = match pidfd_of(child.id() as i32) {
        Ok(fd) => fd,
        Err(e) => {
            // Without a pidfd nothing can be watched: end it here rather than lose it.
            let _ = child.kill();
            let _ = child.wait();
            return Err(RunError::Io(e.into()));
        }
    };
    // A time limit past any real one (the CLI takes any number of seconds) must not overflow.
    let deadline = started
        .checked_add(spec.timeout)
        .unwrap_or(started + Duration::from_secs(100 * 365 * 24 * 3600));
    let mut watch = Watch {
        stop,
        tag,
        deadline,
        stop_seen: false,
        bwrap: Some(pidfd),
        exit: None,
        info: Reader::new(Some(info_r), 64 * 1024, false),
        init: None,
        // bwrap's end is the end of everything below it: no init to learn or wait for.
        init_known: bwrap_leads,
        init_gone: bwrap_leads,
        status: Reader::new(Some(status_r), 64 * 1024, false),
        stdout: Reader::new(
            child.stdout.take().map(OwnedFd::from),
            cap.unwrap_or(0),
            false,
        ),
        stderr: Reader::new(
            child.stderr.take().map(OwnedFd::from),
            cap.unwrap_or(64 * 1024),
            cap.is_none(),
        ),
        killed: None,
        holders_killed: false,
        stopped: false,
        quiet_since: None,
    };
    if let Err(e) = watch.run(&mut child) {
        watch.abandon(&mut child);
        return Err(e);
    }
    let duration = started.elapsed();
    outcome(watch, duration, spec)
}

/// Turns what was watched into the outcome or the reason nothing ran confined.
fn outcome(w: Watch, duration: Duration, spec: &Spec) -> Result<Outcome, RunError> {
    let status_text = String::from_utf8_lossy(&w.status.kept).into_owned();
    let (landlock_abi, status) = Status::parse(&status_text);
    let code = w.exit.and_then(|s| s.code());
    let killed = w.killed.is_some();
    match status {
        Some(Status::Refused(reason)) => return Err(RunError::Landlock(reason)),
        None if w.stopped => return Err(RunError::Stopped),
        None if !killed => {
            return Err(RunError::Bwrap {
                code,
                stderr: String::from_utf8_lossy(&w.stderr.kept).into_owned(),
            })
        }
        _ => {}
    }
    let signal = if killed {
        Some(9)
    } else {
        w.exit.and_then(|s| s.signal()).or_else(|| {
            code.filter(|c| (129..=128 + 64).contains(c))
                .map(|c| c - 128)
        })
    };
    let timed_out = killed && !w.stopped;
    let limit_hit = if timed_out {
        Some(LimitHit::Time {
            ms: spec.timeout.as_millis() as u64,
        })
    } else {
        signal.and_then(|s| spec.policy.limits.hit_by_signal(s))
    };
    Ok(Outcome {
        exit_code: if killed { None } else { code },
        signal,
        stdout: w.stdout.kept,
        stderr: w.stderr.kept,
        stdout_truncated: w.stdout.truncated,
        stderr_truncated: w.stderr.truncated,
        duration,
        timed_out,
        missing_command: !killed && code == Some(crate::helper::EXIT_MISSING),
        landlock_abi,
        limit_hit,
    })
}

/// One pipe read to its end, keeping up to `cap` bytes (and copying to our stderr if `tee`).
struct Reader {
    fd: Option<OwnedFd>,
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
    tee: bool,
}

impl Reader {
    fn new(fd: Option<OwnedFd>, cap: usize, tee: bool) -> Reader {
        Reader {
            fd,
            kept: Vec::new(),
            cap,
            truncated: false,
            tee,
        }
    }

    /// Reads what is there; drops the descriptor at end of file (or on error).
    fn read_once(&mut self) {
        let Some(fd) = &self.fd else { return };
        let mut buf = [0u8; 16 * 1024];
        let n = match rustix::io::read(fd, &mut buf) {
            Ok(0) => {
                self.fd = None;
                return;
            }
            Ok(n) => n,
            Err(Errno::INTR) | Err(Errno::AGAIN) => return,
            Err(_) => {
                self.fd = None;
                return;
            }
        };
        if self.tee {
            let _ = std::io::stderr().write_all(&buf[..n]);
        }
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&buf[..n.min(room)]);
        // A tee keeps a bounded copy for the diagnosis only: never report it truncated.
        self.truncated |= n > room && !self.tee;
    }
}

/// The state of one run: the processes to see gone and the pipes to see closed.
struct Watch {
    stop: &'static OwnedFd,
    /// bwrap's `argv[0]` ([`crate::leftovers::tag`]), which its init inherits.
    tag: std::ffi::OsString,
    stop_seen: bool,
    deadline: Instant,
    /// bwrap's pidfd until it is reaped, then its status.
    bwrap: Option<OwnedFd>,
    exit: Option<ExitStatus>,
    info: Reader,
    /// A pidfd on the namespace's init, once the info pipe closed (`None` after that when
    /// bwrap failed before creating it, or it was already gone).
    init: Option<OwnedFd>,
    init_known: bool,
    init_gone: bool,
    status: Reader,
    stdout: Reader,
    stderr: Reader,
    /// When the tree was last sent SIGKILL (time limit or stop).
    killed: Option<Instant>,
    /// Whether [`Watch::kill_pipe_holders`] ran.
    holders_killed: bool,
    stopped: bool,
    /// When both processes were found gone (the pipes get [`GRACE`] from then).
    quiet_since: Option<Instant>,
}

impl Watch {
    fn run(&mut self, child: &mut std::process::Child) -> Result<(), RunError> {
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
            let now = Instant::now();
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
        self.init = init_pid(&self.info.kept).and_then(|pid| pidfd_of(pid).ok());
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
        match self.killed {
            None if now < self.deadline => self.deadline - now,
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

    /// After an error of the loop itself: kill both processes and wait for them, blocking.
    fn abandon(&mut self, child: &mut std::process::Child) {
        self.kill();
        let _ = child.wait();
        if let (Some(fd), false) = (&self.init, self.init_gone) {
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let _ = rustix::event::poll(&mut fds, None);
        }
        self.reap_init();
    }

    /// Kills and reaps each child of this process that is a bwrap of this run's tag and holds
    /// one of the run's pipes.
    ///
    /// bwrap killed after creating the init but before writing its pid
    /// (containers/bubblewrap#633; see [`crate::leftovers`]) leaves that init alive, blocked
    /// for good, its parent-death signal not yet armed. Reparented to this process, our
    /// children's subreaper ([`become_subreaper`]), it keeps the output pipes open, and only
    /// they name it: without this the run would wait [`GRACE`] for them, and leave it. The
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
        let ours = |pid: u32| {
            crate::leftovers::is_tagged(pid as i32, &self.tag)
                && std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                    .any(|target| pipes.iter().any(|p| target.as_os_str() == p.as_str()))
        };
        for pid in children().into_iter().filter(|&pid| ours(pid)) {
            let Ok(fd) = pidfd_of(pid as i32) else {
                continue;
            };
            if !ours(pid) {
                continue;
            }
            tracing::warn!(pid, "killing a sandbox init its killed bwrap left behind");
            let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
            if link_protocol::exit::wait(&fd, GRACE) {
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

/// Makes the next child of this process, bwrap, the init of a pid namespace of its own, for
/// a caller that runs one sandbox and then starts no process or thread (`exec`, the probe):
/// after this, a second child fails once bwrap is gone, and a thread cannot be made at all.
///
/// However bwrap then dies (the caller killed, and bwrap with it), the kernel kills every
/// process below it, the sandbox's own init among them: the init bubblewrap's #633 window
/// leaves alive otherwise ([`crate::leftovers`]), blocked for good under pid 1, holding the
/// caller's pipes. A caller killed before bwrap arms `--die-with-parent` is outlived by bwrap
/// only until bwrap writes `--info-fd`, which then fails with SIGPIPE and ends it (and
/// everything below it): keep that descriptor even though its `child-pid` goes unused here.
///
/// Where it cannot be done, the race stays: an ordinary user's `exec` (no CAP_SYS_ADMIN), and
/// a /proc without a process 2 (a container's own pid namespace): bwrap reads the
/// namespaces of its child by the pid it has there, 2, through the caller's /proc, and
/// refuses to run when that is missing.
fn bwrap_leads_a_pid_namespace() -> bool {
    if !std::path::Path::new("/proc/2/ns").exists() {
        return false;
    }
    // SAFETY: a new pid namespace for the children to come; no descriptor table changes.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWPID) }.is_ok()
}

/// The `child-pid` of bwrap's info JSON.
fn init_pid(info: &[u8]) -> Option<i32> {
    let v: serde_json::Value = serde_json::from_slice(info).ok()?;
    i32::try_from(v["child-pid"].as_i64()?).ok()
}

fn pidfd_of(pid: i32) -> rustix::io::Result<OwnedFd> {
    let pid = Pid::from_raw(pid).ok_or(Errno::SRCH)?;
    rustix::process::pidfd_open(pid, PidfdFlags::empty())
}

/// A sealed-off anonymous file holding `bytes`, read from its start by bwrap.
fn memfd(name: &str, bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))?;
    Ok(file.into())
}

/// Arguments as `--args` reads them: each one followed by a NUL (so none may hold one).
fn nul_separated(args: &[OsString]) -> std::io::Result<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for a in args {
        if a.as_bytes().contains(&0) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("an argument holds a NUL byte: {a:?}"),
            ));
        }
        out.extend_from_slice(a.as_bytes());
        out.push(0);
    }
    Ok(out)
}

fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Clears close-on-exec in the child so bwrap inherits the descriptor.
fn inherit(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: the caller owns the descriptor and keeps it open across this call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
    Ok(())
}

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

static SINGLE_THREADED: AtomicBool = AtomicBool::new(false);

/// Declares that this process has one thread (the `exec` and `probe` commands): bwrap is
/// then started without a fork. Never call it where another thread may start processes,
/// which could then inherit a sandbox's pipes.
pub fn set_single_threaded() {
    SINGLE_THREADED.store(true, Ordering::Relaxed);
}

static STOPPED: AtomicBool = AtomicBool::new(false);
/// The first signal [`stop_all_on_signals`] handled; 0 for none.
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);
static STOP: OnceLock<(OwnedFd, OwnedFd)> = OnceLock::new();

/// The stop pipe: its read end turns readable (and is never read) once [`stop_all`] was
/// called, which wakes every running [`run_blocking`].
fn stop_pipe() -> std::io::Result<&'static (OwnedFd, OwnedFd)> {
    if let Some(pipe) = STOP.get() {
        return Ok(pipe);
    }
    let pipe = cloexec_pipe()?;
    Ok(STOP.get_or_init(|| pipe))
}

/// Kills every sandbox of this process and makes later runs fail with [`RunError::Stopped`].
/// Each running [`run_blocking`] still reaps its processes before it returns.
pub fn stop_all() {
    // Once: the pipe is never read, and a full one would block a signal handler's write.
    if STOPPED.swap(true, Ordering::SeqCst) {
        return;
    }
    if let Ok((_, w)) = stop_pipe() {
        let _ = rustix::io::write(w, b"x");
    }
}

/// Makes SIGTERM and SIGINT call [`stop_all`]: each running [`run_blocking`] kills and reaps
/// its sandbox and returns, so a process stopped this way leaves nothing for its parent to
/// find; [`stopped_by`] then names the signal. For a blocking caller (the probe, which the
/// host stops with SIGTERM, and `exec`; a Ctrl-C in their terminal sends SIGINT); the plugin
/// stops through its runtime instead. A signal this process started with ignored (as a
/// non-interactive shell's background job starts with SIGINT) stays ignored.
pub fn stop_all_on_signals() -> std::io::Result<()> {
    // Made now: the handler must not allocate or block, only store, swap and write.
    stop_pipe()?;
    for signal in [libc::SIGTERM, libc::SIGINT] {
        if ignored(signal)? {
            continue;
        }
        // SAFETY: an atomic store, then `stop_all`, which swaps an atomic and writes one
        // byte, once, to a pipe that exists: all async-signal-safe.
        unsafe {
            signal_hook_registry::register(signal, move || {
                let _ = STOPPED_BY.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
                stop_all();
            })
        }?;
    }
    Ok(())
}

/// Whether `signal`'s disposition is SIG_IGN.
fn ignored(signal: i32) -> std::io::Result<bool> {
    // SAFETY: reads the disposition into a zeroed struct; changes nothing.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(old.sa_sigaction == libc::SIG_IGN)
}

/// Ends this process by `signal` at its default action, once its runs are over, so that its
/// parent sees what stopped it (a shell stops a script whose command died of SIGINT, and goes
/// on after one that exited 130); 128 + `signal` should the signal not end it.
pub fn die_of(signal: i32) -> ! {
    // SAFETY: resets one disposition and raises the signal at this process.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// The signal that stopped this process's runs ([`stop_all_on_signals`]), if one did.
pub fn stopped_by() -> Option<i32> {
    match STOPPED_BY.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Makes this process the reaper of orphans below it, so a namespace init orphaned by bwrap
/// is reaped by [`run_blocking`] rather than by whoever started us. Process-wide: binaries
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
                    if let Ok(fd) = pidfd_of(pid as i32) {
                        let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
                    }
                }
                let _ = rustix::process::wait(rustix::process::WaitOptions::empty());
            }
        }
    }
}

/// This process's children, from `/proc/<pid>/stat` (the kernel may lack `task/*/children`).
fn children() -> Vec<u32> {
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
    let Ok(fd) = pidfd_of(child.id() as i32) else {
        // Nothing to poll: wait without a limit rather than leave it behind.
        return child.wait().map(Some);
    };
    if link_protocol::exit::wait(&fd, timeout) {
        return child.wait().map(Some);
    }
    // Past the limit (or unable to wait for it): kill it and reap it.
    let _ = child.kill();
    child.wait()?;
    Ok(None)
}
