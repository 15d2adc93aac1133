//! Capability probes, by kernel operations only (never `which`).
//!
//! - The **sandbox probe** runs the built `link-plugin-sandbox probe`, which exercises the
//!   production bubblewrap arguments and Landlock; exit 0 enforced, 2 unavailable, 1 broken.
//! - The **native probe** checks what the runner itself needs: `PR_SET_CHILD_SUBREAPER` set
//!   and read back with the getter, `pidfd_open` on a real child (signalled and polled through
//!   the pidfd), and `/proc` sampling of this process.
//!
//! A missing capability makes a case skipped with the reason; `LNK_REQUIRE_SANDBOX=1` and
//! `LNK_REQUIRE_NATIVE=1` make it a failure. There is no unconfined fallback.

use crate::reaper;
use link_report::probe::{SandboxProbe, SandboxStatus};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

pub const ENV_REQUIRE_SANDBOX: &str = "LNK_REQUIRE_SANDBOX";
pub const ENV_REQUIRE_NATIVE: &str = "LNK_REQUIRE_NATIVE";
/// Set to `1`, a runtime test that cannot start the runtime fails instead of skipping.
pub const ENV_REQUIRE_RUNTIME: &str = "LNK_REQUIRE_RUNTIME";

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeStatus {
    /// Every operation worked.
    Available,
    /// The kernel or environment lacks the capability (a reason to skip).
    Unavailable,
    /// The probe itself misbehaved (always a failure).
    Broken,
}

/// One probe's verdict, its reason and the evidence as JSON.
#[derive(Debug, Clone)]
pub struct Capability {
    pub name: &'static str,
    pub status: ProbeStatus,
    pub reason: Option<String>,
    pub evidence: Value,
}

impl Capability {
    pub fn available(&self) -> bool {
        self.status == ProbeStatus::Available
    }
}

/// Runs `PROGRAMS/link-plugin-sandbox probe` with the given environment applied by `isolate`.
pub fn sandbox_probe(programs: &Path, isolate: impl FnOnce(&mut Command)) -> Capability {
    let program = programs.join("link-plugin-sandbox");
    let mut cmd = Command::new(&program);
    cmd.arg("probe");
    isolate(&mut cmd);
    let out = match reaper::global().output(&mut cmd, Duration::from_secs(120)) {
        Ok(out) => out,
        Err(e) => {
            return sandbox_result(
                ProbeStatus::Broken,
                format!("cannot run {} probe: {e}", program.display()),
                Value::Null,
            )
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    let said = SandboxProbe::read(&report)
        .and_then(|p| p.reason)
        .or_else(|| last_line(&stderr));
    match out.status.code() {
        Some(0) => Capability {
            name: "sandbox",
            status: ProbeStatus::Available,
            reason: None,
            evidence: report,
        },
        Some(2) => {
            let said = said.unwrap_or_else(|| "the sandbox probe gave no reason".into());
            // Without the probe's own JSON, the report keeps one of the same shape, so its
            // readers ([`SandboxProbe`]) find the verdict and the probe's reason as it gave it.
            let report = if report.is_null() {
                json!({"status": SandboxStatus::Unavailable, "reason": said})
            } else {
                report
            };
            sandbox_result(
                ProbeStatus::Unavailable,
                format!("confinement unavailable: {said}"),
                report,
            )
        }
        other => sandbox_result(
            ProbeStatus::Broken,
            format!(
                "the sandbox probe is broken ({}): {}",
                other.map_or("killed by a signal".into(), |c| format!("exit status {c}")),
                said.unwrap_or_else(|| "no output".into())
            ),
            report,
        ),
    }
}

fn sandbox_result(status: ProbeStatus, reason: String, report: Value) -> Capability {
    let evidence = if report.is_null() {
        json!({"status": SandboxStatus::Broken, "reason": reason})
    } else {
        report
    };
    Capability {
        name: "sandbox",
        status,
        reason: Some(reason),
        evidence,
    }
}

/// What a program said last on stderr; for a panic, where and what it was (the lines after
/// it are only the backtrace's).
fn last_line(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    if let Some(at) = lines.iter().position(|l| l.contains(" panicked at ")) {
        let message = lines.get(at + 1).copied().unwrap_or_default();
        return Some(format!("{} {message}", lines[at]).trim().to_owned());
    }
    lines
        .iter()
        .rev()
        .find(|l| !l.is_empty())
        .map(|l| (*l).to_owned())
}

/// The program the pidfd probe starts and kills (any long sleeper would do).
const PROBE_CHILD: &str = "sleep";

/// Why one part of the native probe failed: the kernel lacks a primitive, or the probe itself
/// could not run (its helper program is missing), which is never a missing primitive.
enum PartError {
    Unavailable(String),
    Broken(String),
}

impl From<String> for PartError {
    fn from(e: String) -> PartError {
        PartError::Unavailable(e)
    }
}

impl From<&str> for PartError {
    fn from(e: &str) -> PartError {
        PartError::Unavailable(e.to_owned())
    }
}

/// Checks the runner's native process primitives; leaves this process a child subreaper.
pub fn native_probe() -> Capability {
    native_from([
        (
            "child subreaper",
            probe_subreaper().map_err(PartError::from),
        ),
        ("pidfd", probe_pidfd(Path::new(PROBE_CHILD))),
        ("/proc sampling", probe_proc().map_err(PartError::from)),
    ])
}

fn native_from(parts: [(&str, Result<Value, PartError>); 3]) -> Capability {
    let (mut missing, mut broken) = (Vec::new(), Vec::new());
    for (name, r) in &parts {
        match r {
            Err(PartError::Unavailable(e)) => missing.push(format!("{name}: {e}")),
            Err(PartError::Broken(e)) => broken.push(format!("{name}: {e}")),
            Ok(_) => {}
        }
    }
    let (status, reason) = if !broken.is_empty() {
        let why = format!("the native probe is broken: {}", broken.join("; "));
        (ProbeStatus::Broken, Some(why))
    } else if !missing.is_empty() {
        let why = format!(
            "native process primitives unavailable: {}; the runner needs them to adopt, \
             track and reap the runtime's processes",
            missing.join("; ")
        );
        (ProbeStatus::Unavailable, Some(why))
    } else {
        (ProbeStatus::Available, None)
    };
    let show = |r: &Result<Value, PartError>| match r {
        Ok(v) => json!({"ok": true, "detail": v}),
        Err(PartError::Unavailable(e) | PartError::Broken(e)) => json!({"ok": false, "error": e}),
    };
    let [subreaper, pidfd, proc_sampling] = &parts;
    Capability {
        name: "native",
        status,
        evidence: json!({
            "status": match status {
                ProbeStatus::Available => "available",
                ProbeStatus::Unavailable => "unavailable",
                ProbeStatus::Broken => "broken",
            },
            "subreaper": show(&subreaper.1),
            "pidfd": show(&pidfd.1),
            "proc": show(&proc_sampling.1),
            "reason": reason,
        }),
        reason,
    }
}

fn probe_subreaper() -> Result<Value, String> {
    reaper::global()
        .become_subreaper()
        .map_err(|e| format!("PR_SET_CHILD_SUBREAPER failed: {e}"))?;
    let got = rustix::process::child_subreaper()
        .map_err(|e| format!("PR_GET_CHILD_SUBREAPER failed: {e}"))?;
    Ok(json!({"get_child_subreaper": got.map(|p| p.as_raw_nonzero().get())}))
}

/// Starts `child` (a sleeper) and kills it through a pidfd.
fn probe_pidfd(child: &Path) -> Result<Value, PartError> {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::process::{pidfd_open, pidfd_send_signal, PidfdFlags, Signal};
    let mut child = reaper::global()
        .spawn(Command::new(child).arg("60"))
        .map_err(|e| {
            PartError::Broken(format!(
                "cannot start its helper `{}` ({e}); it is part of coreutils: install it, or \
                 put it on PATH",
                child.display()
            ))
        })?;
    let pid = rustix::process::Pid::from_raw(child.pid()).ok_or("child has no pid")?;
    let fd = pidfd_open(pid, PidfdFlags::empty())
        .map_err(|e| format!("pidfd_open on a child failed: {e} (needs Linux 5.3 or later)"))?;
    pidfd_send_signal(&fd, Signal::KILL).map_err(|e| format!("pidfd_send_signal failed: {e}"))?;
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let timeout = rustix::event::Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    let ready = poll(&mut fds, Some(&timeout)).map_err(|e| format!("poll on a pidfd: {e}"))?;
    if ready != 1 {
        return Err("the pidfd did not become readable after the child was killed".into());
    }
    let status = child
        .wait_timeout(Duration::from_secs(10))
        .map_err(|e| format!("waiting for the child: {e}"))?
        .ok_or("the killed child never exited")?;
    Ok(json!({"child": pid.as_raw_nonzero().get(), "status": status.to_string()}))
}

fn probe_proc() -> Result<Value, String> {
    let me = procfs::process::Process::myself()
        .map_err(|e| format!("/proc/self is not readable: {e}; mount /proc"))?;
    let stat = me
        .stat()
        .map_err(|e| format!("/proc/self/stat is not readable: {e}"))?;
    if stat.starttime == 0 && stat.pid != 1 {
        return Err("/proc/self/stat has no start time".into());
    }
    let rss = stat.rss * procfs::page_size();
    if rss == 0 {
        return Err("/proc/self/stat reports no resident memory".into());
    }
    let exe = me
        .exe()
        .map_err(|e| format!("/proc/self/exe is not readable: {e}"))?;
    Ok(json!({
        "pid": stat.pid,
        "start_time_ticks": stat.starttime,
        "rss_bytes": rss,
        "exe": exe.display().to_string(),
        "ticks_per_second": procfs::ticks_per_second(),
    }))
}

/// What to do about the probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Run,
    Skip(String),
    Fail(String),
}

fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// Decides from the probes: confined runs need the sandbox, every run needs the native
/// primitives. Missing → skip, unless the matching `LNK_REQUIRE_*` is set.
pub fn judge(confined: bool, sandbox: &Capability, native: &Capability) -> Verdict {
    judge_with(
        confined,
        sandbox,
        native,
        required(ENV_REQUIRE_SANDBOX),
        required(ENV_REQUIRE_NATIVE),
    )
}

/// [`judge`] with the requirements passed in.
pub fn judge_with(
    confined: bool,
    sandbox: &Capability,
    native: &Capability,
    require_sandbox: bool,
    require_native: bool,
) -> Verdict {
    let mut skips = Vec::new();
    for (cap, needed, require, var) in [
        (native, true, require_native, ENV_REQUIRE_NATIVE),
        (sandbox, confined, require_sandbox, ENV_REQUIRE_SANDBOX),
    ] {
        let reason = cap.reason.clone().unwrap_or_default();
        match cap.status {
            ProbeStatus::Available => {}
            ProbeStatus::Broken if needed || require => return Verdict::Fail(reason),
            ProbeStatus::Unavailable if require => {
                return Verdict::Fail(format!("{reason} ({var}=1 requires it)"))
            }
            ProbeStatus::Unavailable if needed => skips.push(reason),
            _ => {}
        }
    }
    if skips.is_empty() {
        Verdict::Run
    } else {
        Verdict::Skip(skips.join("; "))
    }
}

/// What one test does about one capability: run when it is available; fail when the probe is
/// broken (never a skip), or when it is unavailable but `require_var=1`; skip otherwise.
pub fn decide(status: ProbeStatus, reason: &str, require_var: &str, required: bool) -> Verdict {
    match status {
        ProbeStatus::Available => Verdict::Run,
        ProbeStatus::Broken => Verdict::Fail(format!("the probe is broken: {reason}")),
        ProbeStatus::Unavailable if required => {
            Verdict::Fail(format!("{require_var}=1 but it is unavailable: {reason}"))
        }
        ProbeStatus::Unavailable => Verdict::Skip(reason.to_owned()),
    }
}

/// Every skip goes through [`link_report::skip`]: re-exported so tests of the kit keep one
/// import.
pub use link_report::skip::{skipped, ENV_SKIP_LOG};

/// The one place a test decides ([`decide`], with `require_var` read from the environment):
/// true to run, false after printing `SKIPPED (what): reason`; panics on a failure.
pub fn require_or_skip(what: &str, status: ProbeStatus, reason: &str, require_var: &str) -> bool {
    match decide(status, reason, require_var, required(require_var)) {
        Verdict::Run => true,
        Verdict::Skip(why) => {
            skipped(&format!("SKIPPED ({what} not available): {why}"));
            false
        }
        Verdict::Fail(why) => panic!("{what}: {why}"),
    }
}

/// For a test that needs confinement: runs `PROGRAMS/link-plugin-sandbox probe`; true when it
/// is enforced (exit 0), a skip when unavailable (exit 2) or not built, a failure when the
/// probe is broken (exit 1, a signal, unreadable) or `LNK_REQUIRE_SANDBOX=1`.
pub fn sandbox_or_skip(programs: &Path) -> bool {
    let program = programs.join("link-plugin-sandbox");
    if !program.is_file() {
        return require_or_skip(
            "sandbox",
            ProbeStatus::Unavailable,
            &format!(
                "{} is not built (cargo build -p link-plugin-sandbox)",
                program.display()
            ),
            ENV_REQUIRE_SANDBOX,
        );
    }
    let cap = sandbox_probe(programs, |_| {});
    require_or_skip(
        "sandbox",
        cap.status,
        cap.reason.as_deref().unwrap_or(""),
        ENV_REQUIRE_SANDBOX,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_program_is_named_by_its_panic_not_the_backtrace_note() {
        let stderr = "\nthread 'main' (7) panicked at src/x.rs:1:2:\nthe message\nstack backtrace:\n   0: f\nnote: Some details are omitted\n";
        assert_eq!(
            last_line(stderr).unwrap(),
            "thread 'main' (7) panicked at src/x.rs:1:2: the message"
        );
        assert_eq!(last_line("one\ntwo\n\n").unwrap(), "two");
        assert_eq!(last_line(" \n"), None);
    }

    #[test]
    fn native_probe_uses_the_kernel_and_leaves_a_subreaper() {
        let cap = native_probe();
        assert!(cap.available(), "{:?}", cap);
        assert!(reaper::Reaper::is_subreaper());
        assert_eq!(cap.evidence["subreaper"]["ok"], true);
        assert_eq!(cap.evidence["pidfd"]["ok"], true);
        assert!(cap.evidence["pidfd"]["detail"]["status"]
            .as_str()
            .unwrap()
            .contains("signal: 9"));
        assert!(
            cap.evidence["proc"]["detail"]["rss_bytes"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert_eq!(
            cap.evidence["proc"]["detail"]["pid"].as_i64().unwrap(),
            std::process::id() as i64
        );
    }

    #[test]
    fn a_missing_helper_is_a_broken_probe_not_missing_primitives() {
        let helper = Path::new("/nonexistent/sleep");
        let cap = native_from([
            ("child subreaper", Ok(Value::Null)),
            ("pidfd", probe_pidfd(helper)),
            ("/proc sampling", Ok(Value::Null)),
        ]);
        assert_eq!(cap.status, ProbeStatus::Broken, "{cap:?}");
        let reason = cap.reason.unwrap();
        assert!(
            reason.starts_with("the native probe is broken: pidfd: "),
            "{reason}"
        );
        assert!(reason.contains("`/nonexistent/sleep`") && reason.contains("coreutils"));
        assert!(!reason.contains("primitives unavailable"), "{reason}");
        assert_eq!(cap.evidence["status"], "broken");
        // The twin: a primitive the kernel lacks is unavailable, and says so.
        let cap = native_from([
            ("child subreaper", Ok(Value::Null)),
            (
                "pidfd",
                Err(PartError::Unavailable("pidfd_open failed".into())),
            ),
            ("/proc sampling", Ok(Value::Null)),
        ]);
        assert_eq!(cap.status, ProbeStatus::Unavailable);
        assert!(cap
            .reason
            .unwrap()
            .contains("primitives unavailable: pidfd: pidfd_open"));
    }

    #[test]
    fn missing_sandbox_program_is_broken_not_available() {
        let dir = std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/lnk-t");
        let cap = sandbox_probe(&dir.join("no-programs-here"), |_| {});
        assert_eq!(cap.status, ProbeStatus::Broken);
        assert!(cap.reason.unwrap().contains("link-plugin-sandbox"));
    }

    fn cap(status: ProbeStatus) -> Capability {
        Capability {
            name: "x",
            status,
            reason: Some(format!("{status:?}")),
            evidence: Value::Null,
        }
    }

    #[test]
    fn judging_skips_missing_capability_unless_required() {
        use ProbeStatus::*;
        let (ok, missing, broken) = (cap(Available), cap(Unavailable), cap(Broken));
        assert_eq!(judge_with(true, &ok, &ok, false, false), Verdict::Run);
        assert!(matches!(
            judge_with(true, &missing, &ok, false, false),
            Verdict::Skip(_)
        ));
        assert!(matches!(
            judge_with(true, &missing, &ok, true, false),
            Verdict::Fail(r) if r.contains("LNK_REQUIRE_SANDBOX=1")
        ));
        // Diagnostic runs do not need the sandbox, unless it is required anyway.
        assert_eq!(judge_with(false, &missing, &ok, false, false), Verdict::Run);
        assert!(matches!(
            judge_with(false, &ok, &missing, false, false),
            Verdict::Skip(_)
        ));
        assert!(matches!(
            judge_with(false, &ok, &missing, false, true),
            Verdict::Fail(r) if r.contains("LNK_REQUIRE_NATIVE=1")
        ));
        assert!(matches!(
            judge_with(true, &broken, &ok, false, false),
            Verdict::Fail(_)
        ));
    }

    #[test]
    fn a_broken_probe_fails_a_test_never_skips_it() {
        let var = ENV_REQUIRE_SANDBOX;
        for required in [false, true] {
            assert_eq!(
                decide(ProbeStatus::Broken, "exit status 1", var, required),
                Verdict::Fail("the probe is broken: exit status 1".into())
            );
            assert_eq!(
                decide(ProbeStatus::Available, "", var, required),
                Verdict::Run
            );
        }
        assert_eq!(
            decide(ProbeStatus::Unavailable, "no userns", var, false),
            Verdict::Skip("no userns".into())
        );
        assert!(matches!(
            decide(ProbeStatus::Unavailable, "no userns", var, true),
            Verdict::Fail(w) if w.contains("LNK_REQUIRE_SANDBOX=1")
        ));
    }

    #[test]
    #[should_panic(expected = "the probe is broken")]
    fn require_or_skip_panics_on_a_broken_probe() {
        require_or_skip(
            "sandbox",
            ProbeStatus::Broken,
            "exit status 1",
            ENV_REQUIRE_SANDBOX,
        );
    }

    #[test]
    fn a_sandbox_probe_exiting_1_fails_the_test() {
        let dir = std::env::temp_dir().join(format!("lnk-probe-broken-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("link-plugin-sandbox");
        std::fs::write(&fake, "#!/bin/sh\necho 'probe crashed' >&2\nexit 1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let result = std::panic::catch_unwind(|| sandbox_or_skip(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        let err = result.expect_err("a broken probe must fail, not skip");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("broken") && msg.contains("exit status 1"),
            "{msg}"
        );
    }
}
