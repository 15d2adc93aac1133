//! Driving the standalone runner (`link-harness-conformance`'s `runtime` example): one timed
//! run, one traced run and its `runtime report`, each a child whose progress is relayed.

use super::files::files;
use super::Options;
use crate::ci;
use crate::compare::{self, Loaded, TimedRun};
use crate::outputs::Workspace;
use anyhow::{bail, Context, Result};
use link_report::{CheckName, Mode, Profile, Status};
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
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
        // 4: the counts are unavailable, which the report says and the verdict reads from it.
        if !matches!(report.code(), Some(0 | 4)) {
            bail!("`{shown}` could not add the trace to the report ({report})");
        }
    }
    Ok(read_side(&f.traced, profile, opts.mode, source, status))
}

pub(super) fn runner_shell(ws: &Workspace, state: &Path) -> Result<Shell> {
    let sh = Shell::new()?;
    sh.change_dir(&ws.root);
    sh.set_var("LNK_TEST_STATE_DIR", state);
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
/// and says, now and then, that it is still going.
///
/// The runner's stderr passes through a filter that drops its per-run check list (`[mini]
/// startup  Passed`): each side's checks are printed once, over all runs ([`print_checks`]).
pub(super) fn run_with_progress(
    step: &str,
    shown: &str,
    mut command: Command,
) -> Result<ExitStatus> {
    link_protocol::errln!("xtask: {step}: $ {shown}");
    let start = Instant::now();
    let mut child = command
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start `{shown}`"))?;
    let relay = child.stderr.take().map(|stderr| {
        std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(stderr);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                if !is_check_line(text) {
                    link_protocol::errln!("{text}");
                }
                line.clear();
            }
        })
    });
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
    // A process the child left behind may hold its stderr open: wait a little, then go on.
    if let Some(relay) = relay {
        let until = Instant::now() + Duration::from_secs(5);
        while !relay.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        if relay.is_finished() {
            let _ = relay.join();
        }
    }
    link_protocol::errln!(
        "xtask: {step}: finished in {:.1} s ({status})",
        start.elapsed().as_secs_f64()
    );
    Ok(status)
}

/// `[mini] startup                     Passed` (or `[link diagnostic] ...`): one line of the
/// runner's check list, which it prints after every run.
pub(super) fn is_check_line(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('[') else {
        return false;
    };
    let Some((label, rest)) = rest.split_once("] ") else {
        return false;
    };
    let side = label.strip_suffix(" diagnostic").unwrap_or(label);
    let words: Vec<&str> = rest.split_whitespace().collect();
    side.parse::<Profile>().is_ok()
        && matches!(words[..], [name, "Passed" | "Failed" | "Skipped"] if name.parse::<CheckName>().is_ok())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_runners_check_lines_are_dropped() {
        assert!(is_check_line("[mini] startup                     Passed"));
        assert!(is_check_line("[link diagnostic] no_orphans       Failed"));
        assert!(is_check_line("[link] run_tool_confined           Skipped"));
        assert!(!is_check_line("[link] SKIPPED — NOT a pass: no bwrap"));
        assert!(!is_check_line("[mini] startup 120 ms"));
        assert!(!is_check_line(
            "[mini] capabilities: sandbox Available, native Available"
        ));
        assert!(!is_check_line("[other] startup Passed"));
        assert!(!is_check_line(
            "xtask: [run 1/5, 1/2] mini confined: $ runner"
        ));
    }
}
