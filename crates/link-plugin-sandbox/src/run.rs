//! Running one confined command: spawn bwrap with the policy's arguments, enforce the time
//! limit on the whole process tree, cap the output, and read the helper's status.
//!
//! On timeout the namespace's init (its pid comes from bwrap's `--info-fd`) is killed through
//! a pidfd: the kernel then kills every process of the PID namespace, and the pidfd becomes
//! readable only once they are all gone, so nothing outlives [`run`]. bwrap itself is killed
//! too; the init it leaves behind is reaped here when this process is a child subreaper
//! ([`become_subreaper`]), otherwise by whoever adopts it.

use crate::helper::Status;
use crate::policy::Policy;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};

/// How long to wait for the tree to disappear and the pipes to close after a kill.
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
    #[error("cannot start bubblewrap {0}: {1}")]
    Spawn(PathBuf, std::io::Error),
    #[error("i/o error running the sandbox: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs `spec` to completion or its time limit.
pub async fn run(spec: &Spec) -> Result<Outcome, RunError> {
    let (info_r, info_w) = cloexec_pipe()?;
    let (status_r, status_w) = cloexec_pipe()?;
    let (iw, sw) = (info_w.as_raw_fd(), status_w.as_raw_fd());
    let mut cmd = tokio::process::Command::new(&spec.bwrap);
    cmd.args(spec.policy.bwrap_args(Some(iw), Some(sw), &spec.argv))
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let (capture, cap) = match spec.output {
        Output::Capture { cap } => (true, cap),
        Output::Inherit => (false, 0),
    };
    if capture {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    } else {
        // bwrap's own errors must still be readable for the diagnosis.
        cmd.stderr(Stdio::piped());
    }
    // SAFETY: only fcntl on two descriptors we own; no allocation between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            inherit(iw)?;
            inherit(sw)
        })
    };
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| RunError::Spawn(spec.bwrap.clone(), e))?;
    drop((info_w, status_w));

    let stdout = child
        .stdout
        .take()
        .map(|s| tokio::spawn(read_capped(s, cap)));
    let stderr_pipe = child.stderr.take();
    let stderr = if capture {
        stderr_pipe.map(|s| tokio::spawn(read_capped(s, cap)))
    } else {
        stderr_pipe.map(|s| tokio::spawn(tee_stderr(s)))
    };
    let status_text = tokio::spawn(read_all(status_r));
    let deadline = tokio::time::Instant::from_std(started + spec.timeout);

    let init = tokio::time::timeout_at(deadline, read_all(info_r))
        .await
        .ok()
        .and_then(|text| init_pidfd(&text));
    let waited = tokio::time::timeout_at(deadline, child.wait()).await;
    let (exit, timed_out) = match waited {
        Ok(status) => (Some(status?), false),
        Err(_) => {
            kill_tree(&mut child, init.as_ref()).await;
            (None, true)
        }
    };
    if let Some(pidfd) = &init {
        wait_gone(pidfd).await;
    }
    let duration = started.elapsed();

    let (stdout, stdout_truncated) = join_capped(stdout).await;
    let (stderr, stderr_truncated) = join_capped(stderr).await;
    let status_text = tokio::time::timeout(GRACE, status_text)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let (landlock_abi, status) = Status::parse(&status_text);

    let code = exit.and_then(|s| s.code());
    match status {
        Some(Status::Refused(reason)) => return Err(RunError::Landlock(reason)),
        None if !timed_out => {
            return Err(RunError::Bwrap {
                code,
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            })
        }
        _ => {}
    }
    let signal = if timed_out {
        Some(9)
    } else {
        use std::os::unix::process::ExitStatusExt;
        exit.and_then(|s| s.signal()).or_else(|| {
            code.filter(|c| (129..=128 + 64).contains(c))
                .map(|c| c - 128)
        })
    };
    Ok(Outcome {
        exit_code: code,
        signal,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        duration,
        timed_out,
        missing_command: code == Some(crate::helper::EXIT_MISSING),
        landlock_abi,
    })
}

fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Clears close-on-exec in the child so bwrap inherits the descriptor.
fn inherit(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: the descriptor is open in the child (inherited from the parent's copy).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
    Ok(())
}

/// Opens a pidfd on the namespace's init from bwrap's info JSON.
fn init_pidfd(info: &str) -> Option<OwnedFd> {
    let v: serde_json::Value = serde_json::from_str(info).ok()?;
    let pid = i32::try_from(v["child-pid"].as_i64()?).ok()?;
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Kills the namespace's init (which takes every process of the namespace with it), then
/// bwrap, and reaps bwrap.
async fn kill_tree(child: &mut tokio::process::Child, init: Option<&OwnedFd>) {
    if let Some(pidfd) = init {
        let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL);
    }
    let _ = child.start_kill();
    let _ = tokio::time::timeout(GRACE, child.wait()).await;
}

/// Waits until the process behind `pidfd` has exited: for a namespace's init, that is after
/// every other process of the namespace is gone.
async fn wait_gone(pidfd: &OwnedFd) {
    wait_readable(pidfd).await;
    // Reap it if it was reparented to us (we are a subreaper and bwrap died first); ECHILD
    // otherwise, which is fine.
    let _ = rustix::process::waitid(
        rustix::process::WaitId::PidFd(std::os::fd::AsFd::as_fd(pidfd)),
        rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG,
    );
}

/// Makes this process the reaper of orphans below it, so a namespace init orphaned by a
/// time-limit kill is reaped by [`run`] rather than left to PID 1. Process-wide: binaries call
/// it once at start; a library caller decides for itself.
pub fn become_subreaper() -> std::io::Result<()> {
    let me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me))?;
    Ok(())
}

async fn wait_readable(pidfd: &OwnedFd) {
    // SAFETY: the pidfd outlives this registration, which ends when `fd` drops below.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            pidfd.as_raw_fd(),
            tokio::io::Interest::READABLE,
        )
    };
    let Ok(fd) = registered else {
        return;
    };
    let _ = tokio::time::timeout(GRACE, fd.readable()).await;
}

async fn read_all(fd: OwnedFd) -> String {
    let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return String::new();
    };
    let mut buf = Vec::new();
    let _ = pipe.read_to_end(&mut buf).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// Keeps up to `cap` bytes and drains the rest, so the writer never blocks on a full pipe.
async fn read_capped(mut r: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
        truncated |= n > room;
    }
    (kept, truncated)
}

/// Copies bwrap's stderr to ours while keeping a bounded copy for the diagnosis.
async fn tee_stderr(mut r: impl AsyncRead + Unpin) -> (Vec<u8>, bool) {
    use std::io::Write;
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = std::io::stderr().write_all(&buf[..n]);
        if kept.len() < 64 * 1024 {
            kept.extend_from_slice(&buf[..n]);
        }
    }
    (kept, false)
}

async fn join_capped(task: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>) -> (Vec<u8>, bool) {
    let Some(task) = task else {
        return (Vec::new(), false);
    };
    match tokio::time::timeout(GRACE, task).await {
        Ok(Ok(v)) => v,
        _ => (Vec::new(), true),
    }
}
