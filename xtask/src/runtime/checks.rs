//! What `runtime` checks before it measures, and of what it measured: the release outputs
//! built and fresh, `--against`'s programs, strace for `--trace`, and the programs the reports
//! name being the ones the xtask hashed.

use crate::compare::Loaded;
use crate::outputs::{self, Workspace};
use crate::system;
use anyhow::{anyhow, bail, Result};
use std::path::{Path, PathBuf};

/// Why `programs` (hashed by the xtask for the sandbox benchmark or the timing cycles) are not
/// the ones the reports name, if they are not: a program with another sha256.
pub(super) fn different_programs(
    programs: &[outputs::Program],
    reports: &[Loaded],
    what: &str,
) -> Option<String> {
    programs.iter().find_map(|p| {
        let other = reports
            .iter()
            .flat_map(|l| &l.report.artifacts)
            .find(|a| a.name == p.name && a.sha256 != p.sha256)?;
        Some(format!(
            "program `{}` changed between the runs and {what} (sha256 {} in the reports, {} in \
             {what})",
            p.name, other.sha256, p.sha256
        ))
    })
}

/// Fails with every missing or stale output listed and the exact build commands.
pub fn require_outputs(ws: &Workspace) -> Result<()> {
    let problems = outputs::verify(&ws.release(), &ws.root)?;
    if problems.is_empty() {
        return Ok(());
    }
    link_protocol::errln!("xtask: the locked release outputs are not ready:");
    for p in &problems {
        link_protocol::errln!("  {p}");
    }
    link_protocol::errln!("build them (from {}) with:", ws.root.display());
    for c in outputs::build_commands() {
        link_protocol::errln!("  {}", outputs::command_text(&c));
    }
    link_protocol::errln!("or run `cargo xtask runtime --build`");
    bail!(
        "{} of {} release outputs missing, stale or a test build; build them with the commands above",
        outputs_with_problems(&problems),
        outputs::expected_outputs().len()
    )
}

/// How many outputs `problems` name: one can be both stale and a test build.
fn outputs_with_problems(problems: &[outputs::Problem]) -> usize {
    let named: std::collections::BTreeSet<&std::path::Path> =
        problems.iter().map(outputs::Problem::output).collect();
    named.len()
}

/// With `--allow-stale`: missing outputs still refuse; stale ones and a test build are
/// listed and returned.
pub(super) fn stale_outputs(ws: &Workspace) -> Result<Vec<String>> {
    let problems = outputs::verify(&ws.release(), &ws.root)?;
    if problems.iter().any(|p| !p.measurable()) {
        return require_outputs(ws).map(|()| Vec::new());
    }
    for p in &problems {
        link_protocol::errln!("xtask: --allow-stale: measuring anyway: {p}");
    }
    Ok(problems.iter().map(|p| p.to_string()).collect())
}

pub(super) fn strace() -> Result<PathBuf> {
    which::which("strace").map_err(|_| {
        anyhow!(
            "--trace needs strace, which is not on PATH: {} (or pass --install, or drop --trace)",
            system::install_hint(&[system::STRACE])
        )
    })
}

/// `--against DIR` must hold every release output, none a test build; older than the sources
/// it may be (it is the other build).
pub(super) fn require_against(ws: &Workspace, dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        bail!(
            "--against {}: no such directory; build the programs to compare with into it \
             (README: `cargo xtask runtime --against`)",
            dir.display()
        );
    }
    if std::fs::canonicalize(dir)? == std::fs::canonicalize(ws.release()).unwrap_or_default() {
        link_protocol::errln!(
            "xtask: --against {} is target/release itself: an A/A comparison (every change \
             found is noise)",
            dir.display()
        );
    }
    let problems: Vec<_> = outputs::verify(dir, &ws.root)?
        .into_iter()
        .filter(|p| !matches!(p, outputs::Problem::Stale { .. }))
        .collect();
    if let Some(p) = problems.first() {
        bail!(
            "--against {}: {p} ({} problem(s)); it must hold every release output of `cargo xtask build`, none built with test hooks",
            dir.display(),
            problems.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use link_report::{Mode, Profile, Report};

    #[test]
    fn a_benchmark_of_other_programs_is_not_recorded_as_theirs() {
        let bench = crate::bench_sandbox::tests::measured();
        let report = |sha: &str| Loaded {
            path: "r.json".into(),
            sha256: String::new(),
            report: Report {
                artifacts: vec![link_report::Artifact {
                    name: "link".into(),
                    sha256: sha.into(),
                    ..Default::default()
                }],
                ..Report::new(Profile::Link, Mode::Confined)
            },
        };
        let what = "the sandbox benchmark";
        assert_eq!(
            different_programs(&bench.programs, &[report("aa")], what),
            None
        );
        let why = different_programs(&bench.programs, &[report("bb")], what).unwrap();
        assert!(
            why.contains("program `link` changed between the runs and the sandbox"),
            "{why}"
        );
        // A cycle's report names no program: the xtask's own hashes stand for the cycles.
        let cycles = "the timing cycles";
        assert_eq!(different_programs(&bench.programs, &[], cycles), None);
    }
}
