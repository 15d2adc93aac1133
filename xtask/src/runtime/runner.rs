//! Driving the standalone runner (`link-harness-conformance`'s `runtime` example): one timed
//! run, one traced run and its `runtime report`, each a child whose progress is relayed. What
//! a run found is read from the report it wrote, never from its stderr.

use super::files::files;
use super::Options;
use crate::ci;
use crate::compare::{self, Loaded, TimedRun};
use crate::outputs::Workspace;
use anyhow::{bail, Context, Result};
use link_report::{runner, Mode, Profile, Status};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};
use xshell::{cmd, Shell};

/// How often a long run reports that it is still going.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// One timed run: `runtime PROGRAMS OUTPUT.json PROFILE MODE SOURCE ROUNDS`.
#[allow(clippy::too_many_arguments)]
pub(super) fn timed_run(
    ws: &Workspace,
    opts: &Options,
    rounds: u32,
    profile: Profile,
    source: &str,
    state: &Path,
    out: &Path,
    step: &str,
) -> Result<Loaded> {
    remove_stale(out)?;
    let sh = runner_shell(ws, state)?;
    let (runner, programs, output) = (ws.show(&ws.runner()), ws.show(&ws.release()), ws.show(out));
    let (side, mode) = (profile.as_str(), opts.mode.as_str());
    let rounds = rounds.to_string();
    let c = cmd!(
        sh,
        "{runner} {programs} {output} {side} {mode} {source} {rounds}"
    );
    let status = run_with_progress(step, &c.to_string(), Command::from(c))?;
    Ok(read_side(out, profile, opts.mode, source, status))
}

/// The strace pass of one profile, then `runtime report` on it.
pub(super) fn traced_run(
    ws: &Workspace,
    opts: &Options,
    profile: Profile,
    source: &str,
    state: &Path,
    strace: &Path,
    step: &str,
) -> Result<Loaded> {
    let f = files(&ws.target, profile, opts.mode);
    remove_stale(&f.traced)?;
    remove_stale(&f.trace)?;
    let sh = runner_shell(ws, state)?;
    let (runner, programs) = (ws.show(&ws.runner()), ws.show(&ws.release()));
    let (traced, trace) = (ws.show(&f.traced), ws.show(&f.trace));
    let (side, mode) = (profile.as_str(), opts.mode.as_str());
    let c = cmd!(
        sh,
        "{strace} -f -ttt -e trace=process -o {trace} {runner} {programs} {traced} {side} {mode} {source} 1 traced"
    );
    let status = run_with_progress(step, &c.to_string(), Command::from(c))?;
    if f.traced.exists() {
        let c = cmd!(sh, "{runner} report {traced} {trace}");
        let (label, shown) = (format!("{step} report"), c.to_string());
        let report = run_with_progress(&label, &shown, Command::from(c))?;
        // Unavailable counts are in the report, which says so and why; the verdict reads it.
        let counted = [runner::PASSED, runner::TRACE_UNAVAILABLE].map(i32::from);
        if !report.code().is_some_and(|c| counted.contains(&c)) {
            bail!("`{shown}` could not add the trace to the report ({report})");
        }
    }
    Ok(read_side(&f.traced, profile, opts.mode, source, status))
}

pub(super) fn runner_shell(ws: &Workspace, state: &Path) -> Result<Shell> {
    let sh = Shell::new()?;
    sh.change_dir(&ws.root);
    sh.set_var("LNK_TEST_STATE_DIR", state);
    sh.set_var(runner::ENV_NO_CHECK_LIST, "1");
    Ok(sh)
}

/// A report left from an earlier run must never pass for this one's.
pub(super) fn remove_stale(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove the old {}", path.display())),
    }
}

/// Runs a child with inherited output (the runner's phase lines go straight to the terminal)
/// and says, now and then, that it is still going. The runner leaves its per-run check list
/// off ([`runner::ENV_NO_CHECK_LIST`], set by [`runner_shell`]): each side's checks are printed
/// once, over all runs, from the reports ([`print_checks`]).
pub(super) fn run_with_progress(
    step: &str,
    shown: &str,
    mut command: Command,
) -> Result<ExitStatus> {
    link_protocol::errln!("xtask: {step}: $ {shown}");
    let start = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start `{shown}`"))?;
    let mut next = PROGRESS_EVERY;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() >= next {
            link_protocol::errln!("xtask: {step}: still running ({} s)", next.as_secs());
            next += PROGRESS_EVERY;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    link_protocol::errln!(
        "xtask: {step}: finished in {:.1} s ({status})",
        start.elapsed().as_secs_f64()
    );
    Ok(status)
}

/// One side's checks over all its timed runs, printed once.
pub(super) fn print_checks(profile: Profile, timed: &[TimedRun]) {
    let runs: Vec<&TimedRun> = timed
        .iter()
        .filter(|t| t.loaded.report.profile == profile)
        .collect();
    let cases = ci::check_cases(&runs);
    if cases.is_empty() {
        return;
    }
    let mut out = format!("xtask: {profile} checks over {} run(s):\n", runs.len());
    for c in &cases {
        let word = match c.status {
            Status::Passed => "passed".to_string(),
            Status::Skipped => "SKIPPED".to_string(),
            Status::Failed => "FAILED".to_string(),
        };
        let why = if c.message.is_empty() {
            String::new()
        } else {
            format!(" — {}", c.message)
        };
        out.push_str(&format!("  {:<27} {word}{why}\n", c.name));
    }
    link_protocol::err!("{out}");
}

/// The report a run wrote; without one, a failed stand-in that says why.
pub(super) fn read_side(
    path: &Path,
    profile: Profile,
    mode: Mode,
    source: &str,
    status: ExitStatus,
) -> Loaded {
    compare::load(path).unwrap_or_else(|e| {
        Loaded::failed(profile, mode, source, path, format!("{e:#} ({status})"))
    })
}
