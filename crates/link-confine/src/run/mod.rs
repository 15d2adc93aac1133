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
//! process, which it is when the process is a child subreaper ([`link_os::reaper::become_subreaper`];
//! every mode of the binary is one). [`reap_orphans`] is the last line: binaries call it before
//! exiting.
//!
//! The loop is synchronous (poll(2) on pipes and pidfds) so the `exec` command needs no async
//! runtime; the plugin runs it on tokio's blocking pool ([`run`]).
//!
//! One concept a file: `spawn.rs` starts bwrap, `watch.rs` waits for its processes and pipes
//! under the time limit, `quota.rs` measures the workspace while it runs, `output.rs` makes
//! its pipes and keeps what they give, `stop.rs` ends
//! every run of the process, and `process.rs` the last reap of orphans. Parent death, the
//! subreaper and a child's wait with a time limit are `link_os`'s (`reaper`, `process`).

mod output;
mod process;
mod quota;
mod spawn;
mod stop;
mod watch;

pub use process::reap_orphans;
pub use spawn::set_single_threaded;
pub use stop::{die_of, stop_all, stop_all_on_signals, stopped_by};

use crate::helper::Status;
use crate::identity::{Identity, Usage};
use crate::policy::Policy;
use link_protocol::routes::sandbox::LimitHit;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;
use watch::Watch;

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
    /// The agent's cgroups, which bwrap joins before it runs ([`crate::cgroup`]); `None`
    /// where there are none (an ordinary user, cgroup v2, the `exec` command, the probe).
    pub cgroup: Option<std::sync::Arc<crate::cgroup::AgentCgroup>>,
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

/// bwrap's failure as a person reads it: its exit status (or that a signal ended it) and
/// what it said. The probe's diagnosis and [`RunError::Bwrap`] both say it so.
pub fn bwrap_failed(code: Option<i32>, stderr: &str) -> String {
    let status = match code {
        Some(c) => format!("exit status {c}"),
        None => "ended by a signal".to_string(),
    };
    format!("bubblewrap failed ({status}): {}", stderr.trim())
}

/// Why a command did not run confined.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// bwrap failed before the helper ran (namespaces, mounts); `stderr` is bwrap's message.
    #[error("{}", bwrap_failed(*code, stderr))]
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
/// measured against the quota ([`crate::limits`]) and handed to a dedicated identity; while it
/// runs they are measured again; after, no file there is left setuid or setgid.
pub fn run_blocking(spec: &Spec) -> Result<Outcome, RunError> {
    let dirs: Vec<PathBuf> = std::iter::once(spec.policy.workspace.clone())
        .chain(spec.policy.home.clone())
        .collect();
    let owner = match spec.policy.identity {
        Identity::Dedicated { uid, gid } => Some((uid, gid)),
        Identity::Caller { .. } => None,
    };
    let mut used = Usage::default();
    for dir in &dirs {
        let usage = crate::identity::prepare(dir, owner).map_err(|e| RunError::Prepare {
            dir: dir.to_path_buf(),
            error: e,
        })?;
        used = used.plus(usage);
    }
    // What is left of the quota bounds every file the command writes; a full one takes only
    // removals.
    let limits = spec.policy.limits;
    let left = limits.workspace_bytes.saturating_sub(used.bytes);
    let by_quota = left < limits.file_size_bytes;
    let full = left == 0 || used.entries >= limits.workspace_entries;
    let mut spec = spec.clone();
    spec.policy.limits.file_size_bytes = left.min(limits.file_size_bytes);
    spec.policy.full = full;
    let quota = quota::Quota::new(dirs.clone(), used, &limits, spec.cgroup.clone());
    let mut outcome = spawn::run_confined(&spec, quota);
    if let Ok(o) = &mut outcome {
        if by_quota && o.signal == Some(libc::SIGXFSZ) {
            o.limit_hit = Some(LimitHit::WorkspaceQuota {
                bytes: limits.workspace_bytes,
            });
        }
        if o.limit_hit.is_none() {
            o.limit_hit = spec.cgroup.as_ref().and_then(|c| c.memory_hit());
        }
        if full && o.limit_hit.is_none() {
            o.limit_hit = Some(LimitHit::WorkspaceFull {
                used_bytes: used.bytes,
                bytes: limits.workspace_bytes,
                used_entries: used.entries,
                entries: limits.workspace_entries,
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
    let timed_out = killed && !w.stopped && w.over_quota.is_none();
    let limit_hit = if w.over_quota.is_some() {
        w.over_quota
    } else if timed_out {
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
