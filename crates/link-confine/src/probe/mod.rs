//! The capability probe: proves confinement by kernel operations, never by `which bwrap`.
//!
//! 1. Landlock in a child: the helper ([`crate::helper`]) applies the inside ruleset and must
//!    report it fully enforced (no bubblewrap involved, so a missing Landlock is named as such).
//! 2. bubblewrap is located (with `which`, only to locate it) and its version read.
//! 3. The production arguments run a real command (this binary's `probe-inside`), which
//!    writes inside and outside the workspace, connects to a loopback listener the probe holds
//!    outside, and reports its capabilities and namespaces. The probe then checks the effects
//!    on the host: the inside write landed, the outside write left nothing, no connection came.

use crate::helper::Status;
use crate::identity::Identity;
use crate::limits::Limits;
use crate::policy::Policy;
use crate::run::{Output, RunError, Spec};
use link_report::probe::Cause;
use serde::{Deserialize, Serialize};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod inside;

/// The namespaces the sandbox must not share with the host.
pub use inside::NAMESPACES;

const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// Every check passed: commands can run confined.
    Enforced,
    /// A capability is missing (named in `reason` with its fix); exit status 2.
    Unavailable,
    /// The sandbox ran but a check failed, or failed in an unknown way; exit status 1.
    Broken,
}

impl ProbeStatus {
    pub fn exit_code(self) -> i32 {
        match self {
            ProbeStatus::Enforced => 0,
            ProbeStatus::Broken => 1,
            ProbeStatus::Unavailable => 2,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeStatus::Enforced => "enforced",
            ProbeStatus::Unavailable => "unavailable",
            ProbeStatus::Broken => "broken",
        }
    }
}

/// What the probe found; printed as JSON by `link-plugin-sandbox probe`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeReport {
    pub status: ProbeStatus,
    /// Why it is not `enforced`, with the fix; `None` when enforced.
    pub reason: Option<String>,
    /// The Landlock ABI the kernel offers (`None` when it has none or it was not reached).
    pub landlock_abi: Option<u32>,
    /// The ABI whose rights every ruleset handles.
    pub landlock_abi_pinned: u32,
    /// Per namespace (user, pid, net, ipc, uts, mnt): separate from the host's.
    pub namespaces: std::collections::BTreeMap<String, bool>,
    /// A TCP connect from inside to a loopback listener outside failed, and none arrived.
    pub network_blocked: Option<bool>,
    pub bwrap: Option<PathBuf>,
    pub bwrap_version: Option<String>,
    /// Who a confined command is on the host.
    pub identity: Option<Identity>,
    /// The seccomp filter every confined command runs under.
    pub seccomp: Option<FilterInfo>,
    /// The default limits of a confined command.
    pub limits: Option<Limits>,
    /// Which bounds hold for a confined command, over what, and which this probe saw.
    pub bounds: Vec<link_report::probe::Bound>,
    /// Each check: name → `ok` or what was seen instead.
    pub checks: std::collections::BTreeMap<String, String>,
    /// For `unavailable`: what the machine lacks, typed (`doctor` names its fix).
    pub cause: Option<Cause>,
}

/// The seccomp filter, as a report names it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FilterInfo {
    pub name: String,
    pub sha256: String,
    pub programs: usize,
    pub instructions: usize,
}

/// Calls the filter must refuse, with the errno it answers, then the twins it must allow.
const SYSCALLS: &[(&str, &str)] = &[
    ("unshare_user", "EPERM"),
    ("unshare_mount", "EPERM"),
    ("keyctl", "EPERM"),
    ("io_uring_setup", "EPERM"),
    ("bpf", "EPERM"),
    ("clone3", "ENOSYS"),
    ("socket_netlink", "EAFNOSUPPORT"),
    ("socket_packet", "EAFNOSUPPORT"),
    ("getpid", "ok"),
    ("socket_unix", "ok"),
    ("socket_inet", "ok"),
    // The x32 ABI would reach the kernel past the filter's rules: the filter kills a process
    // that uses it. (Under the sandbox plugin, its own filter kills it too: the CLI's probe is
    // the one that proves the commands' filter does.)
    #[cfg(target_arch = "x86_64")]
    ("x32_getpid", "SIGSYS"),
];

impl ProbeReport {
    fn new() -> Self {
        ProbeReport {
            status: ProbeStatus::Enforced,
            reason: None,
            landlock_abi: None,
            landlock_abi_pinned: crate::rules::PINNED_ABI_NUMBER,
            namespaces: Default::default(),
            network_blocked: None,
            bwrap: None,
            bwrap_version: None,
            identity: None,
            seccomp: None,
            limits: None,
            bounds: Vec::new(),
            checks: Default::default(),
            cause: None,
        }
    }
    /// The answer of a probe that panicked: `broken`, with where and why, so whoever reads
    /// the answer (the host's start, the kit, `doctor`) names the fault, not a backtrace note.
    pub fn panicked(info: &std::panic::PanicHookInfo<'_>) -> Self {
        ProbeReport::new().fail(ProbeStatus::Broken, format!("the probe panicked: {info}"))
    }

    fn fail(mut self, status: ProbeStatus, reason: impl Into<String>) -> Self {
        self.status = status;
        self.reason = Some(reason.into());
        self
    }

    /// `unavailable` for `cause`, or `broken` when no cause is known: only a machine's
    /// missing capability is unavailable.
    fn lacking(self, cause: Option<Cause>, reason: impl Into<String>) -> Self {
        let status = match cause {
            Some(_) => ProbeStatus::Unavailable,
            None => ProbeStatus::Broken,
        };
        ProbeReport {
            cause,
            ..self.fail(status, reason)
        }
    }
}

/// Runs [`probe_blocking`] on tokio's blocking pool.
pub async fn probe(program: &Path) -> ProbeReport {
    let program = program.to_path_buf();
    tokio::task::spawn_blocking(move || probe_blocking(&program))
        .await
        .unwrap_or_else(|e| ProbeReport::new().fail(ProbeStatus::Broken, e.to_string()))
}

/// Runs the probe with `program` (the path of the `link-plugin-sandbox` binary, which runs the
/// inside checks). Every process
/// it starts is waited for; the namespace's init is reaped here when the calling process is a
/// child subreaper ([`link_os::reaper::become_subreaper`]), as the binary's `probe` command is.
pub fn probe_blocking(program: &Path) -> ProbeReport {
    let report = ProbeReport::new();
    let report = match landlock_in_child() {
        Ok(abi) => ProbeReport {
            landlock_abi: Some(abi),
            ..report
        },
        Err((cause, reason)) => return report.lacking(cause, reason),
    };
    let Ok(bwrap) = which::which("bwrap") else {
        return report.lacking(
            Some(Cause::NoBubblewrap),
            "bubblewrap (`bwrap`) is not on PATH: install it (Debian/Ubuntu: apt-get install \
             bubblewrap); confined runs never fall back to running unconfined",
        );
    };
    let report = ProbeReport {
        bwrap_version: bwrap_version(&bwrap),
        bwrap: Some(bwrap.clone()),
        ..report
    };
    let filter = crate::seccomp::filter();
    let identity = match Identity::for_slot(0) {
        Ok(i) => i,
        Err(e) => return report.fail(ProbeStatus::Broken, e),
    };
    let report = ProbeReport {
        identity: Some(identity),
        seccomp: Some(FilterInfo {
            name: crate::seccomp::NAME.into(),
            sha256: filter.sha256.clone(),
            programs: 1,
            instructions: filter.instructions,
        }),
        limits: Some(Limits::DEFAULT),
        ..report
    };
    let dir = match ProbeDir::create() {
        Ok(d) => d,
        Err(e) => {
            return report.fail(
                ProbeStatus::Broken,
                format!("cannot create the probe workspace: {e}"),
            )
        }
    };
    let mut report = production_run(report, &bwrap, program, &dir);
    report.bounds = Limits::DEFAULT.bounds(
        |check| report.checks.get(check).is_some_and(|seen| seen == "ok"),
        crate::cgroup::support().map(drop),
    );
    report
}

/// Step 1: the helper applies the inside ruleset in a child, outside any namespace.
fn landlock_in_child() -> Result<u32, (Option<Cause>, String)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| (None, format!("pipe: {e}")))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&w);
    let image =
        crate::helper::image().map_err(|e| (None, format!("the helper's memory file: {e}")))?;
    // The kernel opens the program before it closes the close-on-exec descriptors.
    let helper = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&image));
    let mut cmd = std::process::Command::new(&helper);
    cmd.args(["--status-fd", &fd.to_string()])
        .args(["--", "/bin/true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let parent = rustix::process::getpid();
    // SAFETY: fcntl on one descriptor we own, and prctl/getppid: async-signal-safe calls.
    unsafe {
        cmd.pre_exec(move || {
            link_os::reaper::die_with_parent(parent)?;
            link_os::reaper::inherit(fd)
        })
    };
    let cannot_run = |e: std::io::Error| (None, format!("cannot run the helper ({helper}): {e}"));
    let mut child = cmd.spawn().map_err(cannot_run)?;
    drop(w);
    match link_os::process::wait_or_kill(&mut child, STEP_TIMEOUT) {
        Ok(Some(_)) => {}
        Ok(None) => return Err((None, "the Landlock check hung".into())),
        Err(e) => return Err(cannot_run(e)),
    }
    let text = {
        use std::io::Read;
        let mut s = String::new();
        let _ = std::fs::File::from(r).read_to_string(&mut s);
        s
    };
    match Status::parse(&text) {
        (Some(abi), _) => Ok(abi),
        (None, Some(Status::Refused(reason))) => Err((Some(Cause::NoLandlock), reason)),
        _ => Err((
            None,
            format!("the Landlock helper reported nothing (`{}`)", text.trim()),
        )),
    }
}

fn bwrap_version(bwrap: &Path) -> Option<String> {
    use std::os::unix::process::CommandExt;
    let parent = rustix::process::getpid();
    let mut cmd = std::process::Command::new(bwrap);
    cmd.arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    // SAFETY: prctl and getppid are async-signal-safe.
    unsafe { cmd.pre_exec(move || link_os::reaper::die_with_parent(parent)) };
    let mut child = cmd.spawn().ok()?;
    // One short line: it fits the pipe, so bwrap never blocks writing it.
    link_os::process::wait_or_kill(&mut child, STEP_TIMEOUT).ok()??;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut out).ok()?;
    // A bwrap that prints no version (a wrapper, a stand-in) has none, not an empty one.
    let version = out.trim().trim_start_matches("bubblewrap ").to_owned();
    (!version.is_empty()).then_some(version)
}

/// The probe's own scratch directory, removed on drop. It holds an `flock` on the directory
/// for its life, by which a sweep tells it is in use: not by its pid, which another pid
/// namespace sharing the temporary directory would read as another process, or none.
struct ProbeDir {
    root: PathBuf,
    name: String,
    _lock: std::os::fd::OwnedFd,
}

impl ProbeDir {
    fn create() -> std::io::Result<ProbeDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("{PROBE_DIR_PREFIX}{}-{nanos}", std::process::id());
        let tmp = std::env::temp_dir();
        sweep_probe_dirs(&tmp);
        // Made and locked under a name no sweep reads, then renamed: a sweep never sees it
        // unlocked.
        let making = tmp.join(format!(".{name}"));
        std::fs::create_dir_all(making.join("workspace"))?;
        let lock = locked(&making)?.ok_or_else(|| std::io::Error::other("lock held"))?;
        let root = tmp.join(&name);
        std::fs::rename(&making, &root)?;
        Ok(ProbeDir {
            root,
            name,
            _lock: lock,
        })
    }
    fn workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }
}

/// `dir` opened (not followed) and locked exclusively, or `None` when another holds it.
fn locked(dir: &Path) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty())?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

const PROBE_DIR_PREFIX: &str = "lnk-probe-";

/// `sweep_probe_dirs` in this process's temporary directory, the one its probes use: for a
/// host that has just ended the probe it started (a stop while the probe ran).
pub fn sweep_dead_probe_dirs() {
    sweep_probe_dirs(&std::env::temp_dir());
}

/// Ends what probes that are gone left: a probe killed mid-step (kill -9 of the host takes it
/// down at once, a host stopping mid-probe kills it) cannot remove its scratch directory, and
/// its bwrap may outlive it ([`crate::leftovers`]). A directory whose lock is held is a live
/// probe's, whatever pid namespace it runs in; a link is not followed.
fn sweep_probe_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(PROBE_DIR_PREFIX));
        if !ours || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // Held while it is swept, so no probe can take it meanwhile.
        if let Ok(Some(_held)) = locked(&entry.path()) {
            crate::leftovers::kill_bwraps_of(&entry.path());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for ProbeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Step 3: the production arguments on a real command, and its effects on the host.
fn production_run(
    mut report: ProbeReport,
    bwrap: &Path,
    program: &Path,
    dir: &ProbeDir,
) -> ProbeReport {
    let listener = match std::net::TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => return report.fail(ProbeStatus::Broken, format!("loopback listener: {e}")),
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let inside = Path::new(crate::policy::PROBE_PROGRAM);
    let spec = Spec {
        bwrap: bwrap.to_path_buf(),
        owner: dir.root.clone(),
        policy: Policy {
            probe_program: Some(program.to_path_buf()),
            ..Policy::new(
                dir.workspace(),
                None,
                report.identity.expect("set before the run"),
            )
        },
        argv: vec![
            inside.into(),
            "probe-inside".into(),
            "--port".into(),
            port.to_string().into(),
            "--name".into(),
            dir.name.clone().into(),
        ],
        env: Policy::env(|_| None, &[]).unwrap_or_default(),
        timeout: STEP_TIMEOUT,
        output: Output::Capture { cap: 64 * 1024 },
        cgroup: None,
    };
    let outcome = match crate::run::run_blocking(&spec) {
        Ok(o) => o,
        Err(RunError::Bwrap { stderr, code }) => {
            let (cause, reason) = diagnose_bwrap(&stderr, code);
            return report.lacking(cause, reason);
        }
        Err(RunError::Landlock(reason)) => return report.lacking(Some(Cause::NoLandlock), reason),
        Err(RunError::UserNamespace { error, .. }) if error.machine_cannot() => {
            return report.lacking(error.cause(), error.to_string())
        }
        Err(e) => return report.fail(ProbeStatus::Broken, e.to_string()),
    };
    let inside: serde_json::Value = match serde_json::from_slice(&outcome.stdout) {
        Ok(v) if outcome.exit_code == Some(0) => v,
        _ => {
            return report.fail(
                ProbeStatus::Broken,
                format!(
                    "the probe command failed (exit {:?}, signal {:?}): {}",
                    outcome.exit_code,
                    outcome.signal,
                    String::from_utf8_lossy(&outcome.stderr).trim()
                ),
            )
        }
    };
    let outside_etc = Path::new("/etc").join(&dir.name);
    let connection_arrived = listener.set_nonblocking(true).is_ok() && listener.accept().is_ok();
    let host_ns = inside::namespace_ids();
    for ns in NAMESPACES {
        let separate = inside["namespaces"][ns] != host_ns[ns] && inside["namespaces"][ns] != "";
        report.namespaces.insert((*ns).into(), separate);
        check(
            &mut report,
            &format!("namespace_{ns}"),
            separate,
            "shared with the host",
        );
    }
    let ws_written = std::fs::read(dir.workspace().join(&dir.name)).is_ok_and(|b| b == b"probe");
    check_value(
        &mut report,
        "workspace_write",
        &inside["workspace_write"],
        &["ok"],
    );
    check(
        &mut report,
        "workspace_write_on_host",
        ws_written,
        "the inside write is not on the host",
    );
    check_value(
        &mut report,
        "outside_write",
        &inside["etc_write"],
        &["EROFS", "EACCES"],
    );
    check(
        &mut report,
        "outside_write_on_host",
        !outside_etc.exists(),
        "a file appeared in /etc on the host",
    );
    check_value(
        &mut report,
        "landlock_dev_write",
        &inside["dev_write"],
        &["EACCES"],
    );
    let tcp_failed = inside["tcp_connect"] != "ok";
    report.network_blocked = Some(tcp_failed && !connection_arrived);
    check(
        &mut report,
        "tcp_loopback_blocked",
        tcp_failed && !connection_arrived,
        &format!("connect gave {}", inside["tcp_connect"]),
    );
    if tcp_failed && !connection_arrived {
        let seen = format!("ok ({})", inside["tcp_connect"].as_str().unwrap_or("?"));
        report.checks.insert("tcp_loopback_blocked".into(), seen);
    }
    for (key, want) in [
        ("CapEff", "0"),
        ("CapPrm", "0"),
        ("CapBnd", "0"),
        ("CapInh", "0"),
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
    ] {
        let got = inside["status"][key].as_str().unwrap_or("?");
        let ok = got.trim_start_matches('0') == want.trim_start_matches('0');
        check(&mut report, key, ok, &format!("{key} is {got}"));
    }
    check_inside(&mut report, &inside, program, dir);
    if let Some(abi) = outcome.landlock_abi {
        report.landlock_abi = Some(abi);
    }
    let failed: Vec<String> = report
        .checks
        .iter()
        .filter(|(_, v)| !v.starts_with("ok"))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    if !failed.is_empty() {
        let reason = format!("confinement checks failed: {}", failed.join("; "));
        return report.fail(ProbeStatus::Broken, reason);
    }
    report
}

/// The filter, the identity, the limits and what the namespace's init shows, from inside.
fn check_inside(
    report: &mut ProbeReport,
    inside: &serde_json::Value,
    program: &Path,
    dir: &ProbeDir,
) {
    let filters: usize = inside["status"]["Seccomp_filters"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let programs = report.seccomp.as_ref().map_or(0, |f| f.programs);
    check(
        report,
        "seccomp_filters",
        filters >= programs,
        &format!("{filters} filters loaded, want {programs}"),
    );
    for (call, want) in SYSCALLS {
        check_value(
            report,
            &format!("syscall_{call}"),
            &inside["syscalls"][call],
            &[want],
        );
    }
    let identity = report.identity.expect("set before the run");
    let uid = inside["identity"]["uid"].as_u64();
    check(
        report,
        "identity_uid",
        uid == Some(identity.uid().into()) && uid != Some(0),
        &format!("uid inside is {uid:?}, want {}", identity.describe()),
    );
    if let Identity::Dedicated { .. } = identity {
        let groups = inside["identity"]["groups"].as_u64();
        check(
            report,
            "identity_groups",
            groups == Some(0),
            &format!("{groups:?} supplementary groups"),
        );
    }
    let l = Limits::DEFAULT;
    for (key, want) in [
        ("processes", l.processes),
        ("memory_bytes", l.memory_bytes),
        ("cpu_seconds", l.cpu_seconds),
        ("file_size_bytes", l.file_size_bytes),
    ] {
        let got = inside["limits"][key].as_u64();
        check(
            report,
            &format!("limit_{key}"),
            got == Some(want),
            &format!("{got:?}, want {want}"),
        );
    }
    let cmdline = inside["init_cmdline"].as_str().unwrap_or("");
    let leaks = [program.to_string_lossy(), dir.root.to_string_lossy()]
        .into_iter()
        .filter(|p| cmdline.contains(p.as_ref()))
        .collect::<Vec<_>>();
    check(
        report,
        "init_cmdline_hides_host_paths",
        leaks.is_empty() && !cmdline.is_empty(),
        &format!("/proc/1/cmdline is {cmdline:?}"),
    );
}

fn check(report: &mut ProbeReport, name: &str, ok: bool, otherwise: &str) {
    let value = if ok {
        "ok".into()
    } else {
        otherwise.to_owned()
    };
    report.checks.insert(name.into(), value);
}

fn check_value(report: &mut ProbeReport, name: &str, got: &serde_json::Value, want: &[&str]) {
    let s = got.as_str().unwrap_or("?");
    let value = if want.contains(&s) {
        format!("ok ({s})")
    } else {
        format!("got {s}, want {}", want.join(" or "))
    };
    report.checks.insert(name.into(), value);
}

/// Names the known causes of a bwrap failure with their fix: a cause the machine lacks, or
/// none (`broken`) with what bwrap said.
pub fn diagnose_bwrap(stderr: &str, code: Option<i32>) -> (Option<Cause>, String) {
    let msg = stderr.trim();
    let known = if msg.contains("setting up uid map: Permission denied") {
        Some((
            Cause::UserNamespacesAppArmor,
            "user namespaces are blocked by AppArmor (`setting up uid map: Permission denied`): \
             allow them with `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` or an \
             AppArmor profile granting `userns` to bwrap",
        ))
    } else if msg.contains("new namespace") {
        Some((
            Cause::UserNamespacesBlocked,
            "user namespaces cannot be created (a container's seccomp profile, or \
             user.max_user_namespaces=0): run the container with a seccomp profile that allows \
             clone/unshare of user namespaces (e.g. docker --security-opt seccomp=unconfined) \
             or raise user.max_user_namespaces",
        ))
    } else if msg.contains("Can't mount proc") {
        Some((
            Cause::ProcNotMountable,
            "/proc is not mountable in this container (masked /proc paths): run it with \
             --security-opt systempaths=unconfined, or on a host without masked /proc",
        ))
    } else {
        None
    };
    match known {
        Some((cause, why)) => (Some(cause), format!("{why}; bwrap said: {msg}")),
        None => (None, crate::run::bwrap_failed(code, msg)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reader of the probe (the kit, the xtask) reads its JSON as
    /// `link_report::probe::SandboxProbe`: whatever this report writes, they read the same
    /// verdict, reason and figures.
    #[test]
    fn every_reader_reads_the_report_the_probe_writes() {
        use link_report::probe::{SandboxProbe, SandboxStatus};
        for (status, want) in [
            (ProbeStatus::Enforced, SandboxStatus::Enforced),
            (ProbeStatus::Unavailable, SandboxStatus::Unavailable),
            (ProbeStatus::Broken, SandboxStatus::Broken),
        ] {
            let mut report = ProbeReport::new().fail(status, "bwrap: no user namespaces");
            report.landlock_abi = Some(7);
            report.bwrap_version = Some("0.11.0".into());
            report.bounds = Limits::DEFAULT.bounds(|_| true, Ok(()));
            let json = serde_json::to_string(&report).unwrap();
            let read = SandboxProbe::parse(&json).expect("a reader reads the probe's JSON");
            assert_eq!(
                read,
                SandboxProbe {
                    status: want,
                    reason: report.reason.clone(),
                    landlock_abi: Some(7),
                    landlock_abi_pinned: Some(crate::rules::PINNED_ABI_NUMBER),
                    bwrap_version: Some("0.11.0".into()),
                    cause: None,
                    bounds: report.bounds.clone(),
                }
            );
            assert_eq!(status.as_str(), serde_json::to_value(want).unwrap());
        }
    }

    /// A probe directory nobody holds is swept, with the sandbox left under it; one whose
    /// lock is held is kept with its sandbox, whatever pid its name gives (a dead one here,
    /// as a probe in another pid namespace would seem), and so is a link named like one.
    #[test]
    fn the_scratch_dirs_of_dead_probes_are_swept_and_only_those() {
        let tmp = std::env::temp_dir().join(format!("lnk-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let dead_dir = tmp.join(format!("{PROBE_DIR_PREFIX}{dead}-1"));
        let live_dir = tmp.join(format!("{PROBE_DIR_PREFIX}{dead}-3"));
        let other = tmp.join("lnk-probe-notapid-1");
        let target = tmp.join("kept");
        for d in [&dead_dir, &live_dir, &other, &target] {
            std::fs::create_dir_all(d.join("workspace")).unwrap();
        }
        let held = locked(&live_dir).unwrap().expect("not yet held");
        assert!(
            locked(&live_dir).unwrap().is_none(),
            "a second lock is refused"
        );
        // A link named like a dead probe's directory is not followed.
        let link = tmp.join(format!("{PROBE_DIR_PREFIX}{dead}-2"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // The sandbox a dead probe left (a stand-in named bwrap, under its directory's tag),
        // and a live probe's.
        let sandbox_of =
            |dir: &Path| crate::leftovers::tests::fake_bwrap(&tmp, crate::leftovers::tag(dir));
        let mut left = sandbox_of(&dead_dir);
        let mut running = sandbox_of(&live_dir);
        std::thread::sleep(std::time::Duration::from_millis(50));
        sweep_probe_dirs(&tmp);
        assert!(!dead_dir.exists(), "a dead probe's directory is swept");
        assert!(!other.exists(), "a probe directory nobody holds is swept");
        let status = left.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "a dead probe's sandbox is killed"
        );
        assert!(
            running.try_wait().unwrap().is_none(),
            "a live probe's sandbox was killed"
        );
        running.kill().unwrap();
        running.wait().unwrap();
        for kept in [&live_dir, &target.join("workspace")] {
            assert!(kept.exists(), "{} is kept", kept.display());
        }
        assert!(link.symlink_metadata().is_ok());
        drop(held);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn known_bwrap_failures_are_named_with_their_fix() {
        let cases = [
            (
                "bwrap: setting up uid map: Permission denied",
                Cause::UserNamespacesAppArmor,
                "AppArmor",
            ),
            (
                "bwrap: No permissions to creating new namespace, likely because the kernel \
                 does not allow non-privileged user namespaces.",
                Cause::UserNamespacesBlocked,
                "seccomp",
            ),
            (
                "bwrap: Creating new namespace failed: Operation not permitted",
                Cause::UserNamespacesBlocked,
                "seccomp",
            ),
            (
                "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
                Cause::ProcNotMountable,
                "/proc",
            ),
        ];
        for (stderr, want, fix) in cases {
            let (cause, reason) = diagnose_bwrap(stderr, Some(1));
            assert_eq!(cause, Some(want), "{stderr}");
            assert!(reason.contains(fix), "{reason}");
            let report = ProbeReport::new().lacking(cause, reason);
            assert_eq!(report.status, ProbeStatus::Unavailable);
            let read =
                link_report::probe::SandboxProbe::parse(&serde_json::to_string(&report).unwrap())
                    .unwrap();
            assert_eq!(read.cause, Some(want), "the readers read the cause");
        }
        let (cause, reason) = diagnose_bwrap("bwrap: something new", Some(1));
        assert_eq!(cause, None);
        assert_eq!(
            reason,
            "bubblewrap failed (exit status 1): bwrap: something new"
        );
        let (_, killed) = diagnose_bwrap("", None);
        assert_eq!(killed, "bubblewrap failed (ended by a signal): ");
        assert_eq!(
            ProbeReport::new().lacking(cause, reason).status,
            ProbeStatus::Broken
        );
    }
}
