//! Checks over the timed runs: the same programs everywhere, and each side's median run.

use super::{Loaded, TimedRun};
use anyhow::{bail, Result};
use link_report::{Phase, PhaseName, Profile, Status};

/// Refuses reports that did not run the same programs: every artifact name must have one
/// sha256 across all of them.
pub fn same_programs<'a>(reports: impl IntoIterator<Item = &'a Loaded>) -> Result<()> {
    let mut seen: Vec<(&str, &str, &str)> = Vec::new();
    for l in reports {
        for a in &l.report.artifacts {
            match seen.iter().find(|(n, _, _)| *n == a.name) {
                Some((_, sha, first)) if *sha != a.sha256 => bail!(
                    "program `{}` differs between runs: {first} has sha256 {sha}, {} has {}; the programs changed during the comparison, so nothing is \
                     compared (rebuild and run again)",
                    a.name,
                    l.path,
                    a.sha256
                ),
                Some(_) => {}
                None => seen.push((&a.name, &a.sha256, &l.path)),
            }
        }
    }
    Ok(())
}

/// Total phase time without the fixed wait (and without phases within others).
pub(super) fn work_ns(phases: &[Phase]) -> u128 {
    phases
        .iter()
        .filter(|p| PhaseName::is_work(&p.name))
        .map(|p| p.duration_ns)
        .sum()
}

/// The run whose phase time without idle is the median of the side's passed runs (the
/// earlier of the two middle ones); without a passed run, the first run.
pub fn representative(runs: &[TimedRun], profile: Profile) -> Option<&TimedRun> {
    let side: Vec<&TimedRun> = runs
        .iter()
        .filter(|r| r.loaded.report.profile == profile)
        .collect();
    let mut passed: Vec<&TimedRun> = side
        .iter()
        .copied()
        .filter(|r| r.loaded.report.outcome.status == Status::Passed)
        .collect();
    if passed.is_empty() {
        return side.first().copied();
    }
    passed.sort_by_key(|r| (work_ns(&r.loaded.report.phases), r.index));
    Some(passed[(passed.len() - 1) / 2])
}
