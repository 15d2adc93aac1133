//! `cargo xtask doctor`: what this machine can do for the runtime comparison, and what to fix.

use crate::outputs::{self, Workspace};
use crate::state;
use crate::system::{self, Package};
use link_report::probe::{Cause, SandboxProbe};
use std::process::Command;

/// One finding: fine, or a problem with what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub what: String,
    pub ok: bool,
    pub detail: String,
    pub fixes: Vec<String>,
}

impl Finding {
    fn ok(what: &str, detail: impl Into<String>) -> Finding {
        Finding {
            what: what.into(),
            ok: true,
            detail: detail.into(),
            fixes: vec![],
        }
    }
    fn fix(what: &str, detail: impl Into<String>, fixes: Vec<String>) -> Finding {
        Finding {
            what: what.into(),
            ok: false,
            detail: detail.into(),
            fixes,
        }
    }
}

/// Runs every check, prints them, and says whether all are fine.
pub fn run(ws: &Workspace) -> bool {
    let findings = vec![
        programs(ws),
        sandbox_probe(ws),
        installed(system::BUBBLEWRAP),
        installed(system::LIBSECCOMP),
        strace(),
        state_dir(),
    ];
    link_protocol::out!("{}", render(&findings));
    findings.iter().all(|f| f.ok)
}

pub fn render(findings: &[Finding]) -> String {
    let mut out = String::from("doctor\n");
    for f in findings {
        let mark = if f.ok { "ok " } else { "FIX" };
        out.push_str(&format!("  {mark}  {}: {}\n", f.what, f.detail));
        for fix in &f.fixes {
            out.push_str(&format!("         -> {fix}\n"));
        }
    }
    out
}

fn programs(ws: &Workspace) -> Finding {
    match outputs::verify(&ws.release(), &ws.root) {
        Ok(p) if p.is_empty() => Finding::ok(
            "release programs",
            format!(
                "all {} built and current",
                outputs::expected_outputs().len()
            ),
        ),
        Ok(p) => Finding::fix(
            "release programs",
            brief(&p),
            vec!["cargo xtask build".into()],
        ),
        Err(e) => Finding::fix("release programs", format!("{e:#}"), vec![]),
    }
}

/// `missing: a, b; older than their sources: c` with bare program names.
fn brief(problems: &[outputs::Problem]) -> String {
    let name = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let (mut missing, mut stale, mut test) = (Vec::new(), Vec::new(), Vec::new());
    for p in problems {
        match p {
            outputs::Problem::Missing { output } => missing.push(name(output)),
            outputs::Problem::Stale { output, .. } => stale.push(name(output)),
            outputs::Problem::TestHooks { output } => test.push(name(output)),
        }
    }
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing: {}", missing.join(", ")));
    }
    if !stale.is_empty() {
        parts.push(format!("older than their sources: {}", stale.join(", ")));
    }
    if !test.is_empty() {
        parts.push(format!("built with test hooks: {}", test.join(", ")));
    }
    parts.join("; ")
}

/// What `link-plugin-sandbox probe` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Exit 0, with the probe's fields.
    Enforced(String),
    /// Exit 2, with the probe's reason and its typed cause (`None` from a probe that gave
    /// none: then no fix is guessed from its sentence).
    Unavailable(String, Option<Cause>),
    /// Exit 1, with the probe's reason.
    Broken(String),
    /// An exit status the probe never gives (or a signal): the probe itself misbehaved.
    Unexpected(String),
    /// `link-plugin-sandbox` is not built.
    NotBuilt(String),
    /// The program cannot be started.
    NotRun(String),
}

/// `link-plugin-sandbox probe`: exit 0 enforced, 2 unavailable, 1 broken; JSON on stdout.
pub fn probe_sandbox(ws: &Workspace) -> Probe {
    let bin = ws.release().join("link-plugin-sandbox");
    if !bin.exists() {
        return Probe::NotBuilt(format!("{} is not built", ws.show(&bin).display()));
    }
    let out = match Command::new(&bin).arg("probe").output() {
        Ok(o) => o,
        Err(e) => return Probe::NotRun(format!("cannot run {}: {e}", bin.display())),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let probe = SandboxProbe::parse(&stdout);
    let status = probe.as_ref().map(|p| p.status);
    let reason = probe
        .as_ref()
        .and_then(|p| p.reason.clone())
        .unwrap_or_else(|| first_line(&stderr));
    match out.status.code() {
        Some(0) => Probe::Enforced(probe.map_or_else(|| first_line(&stdout), |p| summary(&p))),
        Some(2) => Probe::Unavailable(reason, probe.and_then(|p| p.cause)),
        Some(1) => Probe::Broken(reason),
        other => Probe::Unexpected(format!(
            "the probe ended unexpectedly ({}), status {status:?}: {reason}",
            other.map_or("killed".into(), |c| format!("exit {c}"))
        )),
    }
}

/// This machine, with the sandbox probe's bubblewrap version and Landlock ABI where the probe
/// can run (its JSON carries them whether or not confinement is available).
pub fn machine(ws: &Workspace) -> link_report::machine::Machine {
    let mut m = link_report::machine::Machine::detect();
    let bin = ws.release().join("link-plugin-sandbox");
    if let Ok(out) = Command::new(&bin).arg("probe").output() {
        if let Some(f) = SandboxProbe::parse(&String::from_utf8_lossy(&out.stdout)) {
            m.bwrap_version = f.bwrap_version;
            m.landlock_abi = f.landlock_abi;
        }
    }
    m
}

fn sandbox_probe(ws: &Workspace) -> Finding {
    let what = "confinement (sandbox probe)";
    match probe_sandbox(ws) {
        Probe::Enforced(fields) => Finding::ok(what, format!("enforced ({fields})")),
        Probe::Unavailable(reason, cause) => {
            Finding::fix(what, format!("unavailable: {reason}"), hints(cause))
        }
        Probe::Unexpected(reason) => Finding::fix(what, reason, vec![]),
        Probe::Broken(reason) => Finding::fix(
            what,
            format!("the probe is broken: {reason}"),
            vec![
                "rebuild with `cargo xtask build`; if it persists, report the probe output".into(),
            ],
        ),
        Probe::NotBuilt(why) => Finding::fix(what, why, vec!["cargo xtask build".into()]),
        Probe::NotRun(why) => Finding::fix(what, why, vec![]),
    }
}

/// The enforced probe's figures, for the doctor's line.
fn summary(p: &SandboxProbe) -> String {
    let mut parts = vec!["status=enforced".to_string()];
    if let Some(abi) = p.landlock_abi {
        parts.push(format!("landlock_abi={abi}"));
    }
    if let Some(pinned) = p.landlock_abi_pinned {
        parts.push(format!("landlock_abi_pinned={pinned}"));
    }
    if let Some(v) = &p.bwrap_version {
        parts.push(format!("bwrap_version={v}"));
    }
    parts.join(", ")
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_string()
}

/// What to install or change for what the probe found missing (its reason names its own fix
/// too), then the explicit unconfined way.
pub fn hints(cause: Option<Cause>) -> Vec<String> {
    let fix = cause.map(|c| match c {
        Cause::NoBubblewrap => system::install_hint(&[system::BUBBLEWRAP]),
        Cause::UserNamespacesAppArmor => "allow unprivileged user namespaces: sysctl -w \
             kernel.apparmor_restrict_unprivileged_userns=0 (or install an AppArmor profile for \
             bwrap)"
            .into(),
        Cause::UserNamespacesBlocked => "run the container with a seccomp profile that allows \
             user namespaces (e.g. docker --security-opt seccomp=unconfined), or sysctl -w \
             user.max_user_namespaces=15000"
            .into(),
        Cause::UserNamespacesUnmapped => "Link runs in a user namespace that does not map root \
             and the sandbox's identities: set LNK_SANDBOX_UID_BASE to a range it maps"
            .into(),
        Cause::NoLandlock => "boot a kernel with Landlock enabled (CONFIG_SECURITY_LANDLOCK=y \
             and landlock in the lsm= boot list; see /sys/kernel/security/lsm)"
            .into(),
        Cause::ProcNotMountable => "let the sandbox mount /proc (e.g. docker --security-opt \
             systempaths=unconfined)"
            .into(),
    });
    fix.into_iter()
        .chain([
            "or run the comparison explicitly unconfined: cargo xtask runtime --mode diagnostic \
             (never qualification)"
                .to_string(),
        ])
        .collect()
}

/// Where the package's program (or header) is, or the command that installs it here (for each
/// known distribution when this one is not).
fn installed(package: Package) -> Finding {
    let what = system::Manager::here().map_or(package.name, |m| package.name_for(m));
    match package.found() {
        Some(p) => Finding::ok(what, format!("{}", p.display())),
        None => Finding::fix(
            what,
            package.absence(),
            vec![system::install_hint(&[package])],
        ),
    }
}

/// strace on PATH is not enough: it must be allowed to trace (ptrace) here.
fn strace() -> Finding {
    let found = installed(system::STRACE);
    if !found.ok {
        return found;
    }
    let out = Command::new("strace")
        .args(["-f", "-e", "trace=process", "-o", "/dev/null", "true"])
        .output();
    match out {
        Ok(o) if o.status.success() => Finding::ok("strace", format!("{} (traces)", found.detail)),
        Ok(o) => Finding::fix(
            "strace",
            format!(
                "installed but cannot trace: {}",
                first_line(&String::from_utf8_lossy(&o.stderr))
            ),
            vec![
                "allow ptrace: run the container with --cap-add SYS_PTRACE, or \
                 sysctl -w kernel.yama.ptrace_scope=0"
                    .into(),
            ],
        ),
        Err(e) => Finding::fix("strace", format!("cannot run strace: {e}"), vec![]),
    }
}

fn state_dir() -> Finding {
    let what = "fixture directory (LNK_TEST_STATE_DIR)";
    let dir = match state::choose(
        std::env::var_os("LNK_TEST_STATE_DIR"),
        std::env::var_os("HOME"),
    ) {
        Ok(d) => d,
        Err(e) => return Finding::fix(what, format!("{e:#}"), vec![]),
    };
    let check = link_protocol::layout::StateLayout::new(dir.join("r0000")).check();
    match check {
        Ok(()) => Finding::ok(what, format!("{} is usable", dir.display())),
        Err(e) => Finding::fix(
            what,
            e.to_string(),
            vec!["export LNK_TEST_STATE_DIR=\"$HOME/lnk-tests\"".into()],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enforced_probe_is_summed_up_by_its_figures() {
        let p = SandboxProbe::parse(
            r#"{"status":"enforced","reason":null,"landlock_abi":7,"landlock_abi_pinned":7,"bwrap_version":"0.11.0"}"#,
        )
        .unwrap();
        assert_eq!(
            summary(&p),
            "status=enforced, landlock_abi=7, landlock_abi_pinned=7, bwrap_version=0.11.0"
        );
    }

    #[test]
    fn hints_name_what_to_change() {
        for (cause, fix) in [
            (
                Cause::UserNamespacesAppArmor,
                "apparmor_restrict_unprivileged_userns=0",
            ),
            (Cause::NoBubblewrap, "bubblewrap"),
            (Cause::NoLandlock, "CONFIG_SECURITY_LANDLOCK"),
            (Cause::UserNamespacesBlocked, "seccomp"),
            (Cause::UserNamespacesUnmapped, "LNK_SANDBOX_UID_BASE"),
            (Cause::ProcNotMountable, "systempaths=unconfined"),
        ] {
            let h = hints(Some(cause));
            assert_eq!(h.len(), 2, "{h:?}");
            assert!(h[0].contains(fix), "{cause}: {h:?}");
            assert!(h[1].contains("--mode diagnostic"));
        }
        // No cause, no guess: only the explicit unconfined way.
        assert_eq!(hints(None).len(), 1);
    }

    #[test]
    fn rendering_marks_problems_with_fixes() {
        let text = render(&[
            Finding::ok("strace", "/usr/bin/strace"),
            Finding::fix(
                "bubblewrap",
                "`bwrap` is not on PATH",
                vec!["apt-get install -y bubblewrap".into()],
            ),
        ]);
        assert!(text.contains("  ok   strace: /usr/bin/strace"), "{text}");
        assert!(text.contains("  FIX  bubblewrap"), "{text}");
        assert!(text.contains("-> apt-get install -y bubblewrap"), "{text}");
    }
}
