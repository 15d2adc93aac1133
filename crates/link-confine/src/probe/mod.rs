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
use scratch::ProbeDir;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

mod diagnose;
pub mod inside;
mod report;
mod scratch;

pub use diagnose::diagnose_bwrap;
pub use report::{FilterInfo, ProbeReport, ProbeStatus};
pub use scratch::sweep_dead_probe_dirs;

/// The namespaces the sandbox must not share with the host.
pub use inside::NAMESPACES;

const STEP_TIMEOUT: Duration = Duration::from_secs(20);

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
        crate::cgroup::held_or_support(),
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
