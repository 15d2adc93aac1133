//! Starting bwrap for one run: the descriptors it inherits, its arguments in a memfd, and
//! whether it dies with this process from the fork on or leads a pid namespace of its own.

use super::output::{cloexec_pipe, Reader};
use super::quota::Quota;
use super::stop::{stop_pipe, STOPPED};
use super::watch::Watch;
use super::{outcome, Outcome, Output, RunError, Spec};
use crate::identity::Identity;
use crate::policy::Fds;
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(super) fn run_confined(spec: &Spec, quota: Quota) -> Result<Outcome, RunError> {
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
    if let Some(cgroup) = spec.cgroup.clone() {
        // SAFETY: write(2) calls on descriptors the cgroup keeps open; nothing is allocated.
        unsafe { cmd.pre_exec(move || cgroup.join()) };
    }
    let mut bwrap_leads = false;
    if SINGLE_THREADED.load(Ordering::Relaxed) {
        // No other thread can spawn meanwhile: the descriptors may be inheritable for the
        // moment of the spawn, which lets std use posix_spawn (vfork), cheaper than fork.
        // bwrap's own `--die-with-parent` ties it to this command-line process.
        for fd in &inherited {
            link_os::reaper::inherit(*fd)?;
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
                link_os::reaper::die_with_parent(parent)?;
                inherited
                    .iter()
                    .try_for_each(|fd| link_os::reaper::inherit(*fd))
            })
        };
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| RunError::Spawn(spec.bwrap.clone(), e))?;
    drop((info_w, status_w, args, seccomp, helper, userns));
    // An uncollected child's pid names it: no process there is as fatal as no pidfds.
    let pidfd = link_os::process::pidfd(child.id() as i32)
        .and_then(|fd| fd.ok_or_else(|| std::io::Error::from_raw_os_error(libc::ESRCH)));
    let pidfd = match pidfd {
        Ok(fd) => fd,
        Err(e) => {
            // Without a pidfd nothing can be watched: end it here rather than lose it.
            let _ = child.kill();
            let _ = child.wait();
            return Err(RunError::Io(e));
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
        quota,
        over_quota: None,
    };
    if let Err(e) = watch.run(&mut child) {
        watch.abandon(&mut child);
        return Err(e);
    }
    let duration = started.elapsed();
    outcome(watch, duration, spec)
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

static SINGLE_THREADED: AtomicBool = AtomicBool::new(false);

/// Declares that this process has one thread (the `exec` and `probe` commands): bwrap is
/// then started without a fork. Never call it where another thread may start processes,
/// which could then inherit a sandbox's pipes.
pub fn set_single_threaded() {
    SINGLE_THREADED.store(true, Ordering::Relaxed);
}
