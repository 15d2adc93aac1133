//! The paired timing cycles of `cargo xtask runtime`: the runner's `cycle` scenario (no fixed
//! idle wait, several cold turns, each refused request a round), Mini and full Link back to
//! back in each pair, in alternating order; with `--against DIR`, units of four (each build on
//! each side, both orders alternating). Pairs continue until every figure is within the
//! precision asked for, or the time budget is spent; never fewer than the minimum.

use crate::compare::{
    self, pairs, Build, CpuTicks, CycleInfo, Loaded, Noise, RunRecord, Sampling, TimedRun,
};
use crate::outputs::{hash_programs, Program, Workspace};
use crate::paired::MIN_PAIRS;
use anyhow::{bail, Context, Result};
use link_report::{Mode, Profile, Status};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The default time budget for the cycles: the whole default command stays under 2 minutes.
pub const DEFAULT_BUDGET_S: u64 = 70;
/// The default precision: every interval within about ±5% (upper/lower ≤ 1.10).
pub const DEFAULT_PRECISION_PCT: f64 = 5.0;
/// Pairs past which the cycles stop whatever the precision.
const MAX_PAIRS: u32 = 1000;

/// What the cycles are asked to do.
pub struct Plan<'a> {
    pub mode: Mode,
    pub rounds: u32,
    pub source: &'a str,
    pub state: &'a Path,
    /// `--against DIR`: the programs to compare with.
    pub against: Option<&'a Path>,
    pub budget: Duration,
    pub precision_pct: f64,
}

/// Where cycle `pair` of `build` and `profile` writes its report.
pub fn cycle_file(target: &Path, mode: Mode, build: Build, profile: Profile, pair: u32) -> PathBuf {
    let tag = match mode {
        Mode::Confined => "",
        Mode::Diagnostic => "-diagnostic",
    };
    target
        .join(format!("runtime-cycles{tag}"))
        .join(format!("{}-{profile}-{pair}.json", build.as_str()))
}

/// The order of unit `pair`: the sides alternate every pair; with `--against` the builds
/// alternate too, every pair, and the sides every second one, so each build and side comes
/// first as often as the other.
pub fn order(pair: u32, against: bool) -> Vec<(Build, Profile)> {
    let sides = |flip: bool| {
        if flip {
            [Profile::Link, Profile::Mini]
        } else {
            [Profile::Mini, Profile::Link]
        }
    };
    if !against {
        return sides(pair.is_multiple_of(2))
            .into_iter()
            .map(|p| (Build::New, p))
            .collect();
    }
    let builds = if pair.is_multiple_of(2) {
        [Build::New, Build::Old]
    } else {
        [Build::Old, Build::New]
    };
    sides((pair - 1) / 2 % 2 == 1)
        .into_iter()
        .flat_map(|p| builds.map(|b| (b, p)))
        .collect()
}

/// Runs pairs until the precision or the budget is reached; stops at the first cycle that did
/// not pass (its side then has no figure). The cycles in the order they ran, how, and the
/// programs they ran: a cycle's report names none (hashing them each time would cost a third
/// of a cycle), so the xtask hashes each programs directory before and after them instead.
pub fn run(ws: &Workspace, plan: &Plan<'_>) -> Result<(Vec<TimedRun>, Sampling, Vec<Program>)> {
    let dir = cycle_file(&ws.target, plan.mode, Build::New, Profile::Mini, 1);
    let dir = dir.parent().expect("a cycle file has a directory");
    // Cycles of an earlier invocation must not pass for this one's.
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dirs: Vec<PathBuf> = std::iter::once(ws.release())
        .chain(plan.against.map(Path::to_path_buf))
        .collect();
    let before: Vec<Vec<Program>> = dirs
        .iter()
        .map(|d| hash_programs(d))
        .collect::<Result<_>>()?;
    let start = Instant::now();
    let mut cycles: Vec<TimedRun> = Vec::new();
    let mut records: Vec<RunRecord> = Vec::new();
    let mut not_reached: Vec<String> = Vec::new();
    let mut last_said = Instant::now();
    link_protocol::errln!(
        "xtask: [cycles] pairs of timing cycles until every figure is within ±{}% (at least {MIN_PAIRS} pairs, at most {} s)",
        plan.precision_pct,
        plan.budget.as_secs()
    );
    'pairs: for pair in 1..=MAX_PAIRS {
        for (position, (build, profile)) in (1..).zip(order(pair, plan.against.is_some())) {
            let info = CycleInfo {
                pair,
                position,
                build,
            };
            let cycle = one(ws, plan, info, profile)?;
            let status = cycle.loaded.report.outcome.status;
            records.push(compare::run_record(&cycle));
            cycles.push(cycle);
            if status != Status::Passed {
                break 'pairs;
            }
        }
        if pair < MIN_PAIRS as u32 {
            continue;
        }
        not_reached = pairs::not_precise(&records, plan.against.is_some(), plan.precision_pct);
        let spent = start.elapsed() >= plan.budget;
        if last_said.elapsed() >= Duration::from_secs(10) || not_reached.is_empty() || spent {
            link_protocol::errln!(
                "xtask: [cycles] {pair} pairs in {:.0} s; {}",
                start.elapsed().as_secs_f64(),
                match not_reached.len() {
                    0 => "every figure within the precision".to_string(),
                    n => format!("{n} figure(s) not yet: {}", not_reached.join(", ")),
                }
            );
            last_said = Instant::now();
        }
        if not_reached.is_empty() || spent {
            break;
        }
    }
    for (dir, then) in dirs.iter().zip(&before) {
        if let Some(why) = changed(then, &hash_programs(dir)?) {
            bail!(
                "{why} in {} during the timing cycles; nothing is compared (rebuild and run \
                 again)",
                ws.show(dir).display()
            );
        }
    }
    let sampling = Sampling {
        precision_pct: plan.precision_pct,
        budget_s: plan.budget.as_secs_f64(),
        elapsed_s: (start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        min_pairs: MIN_PAIRS as u32,
        not_reached,
    };
    let measured = before.into_iter().next().unwrap_or_default();
    Ok((cycles, sampling, measured))
}

/// Which program differs between two hashings of one directory, if one does.
fn changed(before: &[Program], after: &[Program]) -> Option<String> {
    before.iter().zip(after).find_map(|(b, a)| {
        (b.sha256 != a.sha256).then(|| {
            format!(
                "program `{}` changed (sha256 {} before, {} after)",
                b.name, b.sha256, a.sha256
            )
        })
    })
}

/// One cycle: `runtime PROGRAMS OUTPUT.json PROFILE MODE SOURCE ROUNDS cycle`, its output kept
/// and shown only when it did not pass.
fn one(ws: &Workspace, plan: &Plan<'_>, info: CycleInfo, profile: Profile) -> Result<TimedRun> {
    let out = cycle_file(&ws.target, plan.mode, info.build, profile, info.pair);
    let programs = match info.build {
        Build::New => ws.release(),
        Build::Old => plan
            .against
            .expect("old cycles only with --against")
            .to_path_buf(),
    };
    let mut noise = Noise::sample();
    let before = CpuTicks::now();
    let output = Command::new(ws.runner())
        .current_dir(&ws.root)
        .env("LNK_TEST_STATE_DIR", plan.state)
        .args([programs.as_os_str(), out.as_os_str()])
        .args([profile.as_str(), plan.mode.as_str(), plan.source])
        .args([plan.rounds.to_string().as_str(), "cycle"])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start the runner {}", ws.runner().display()))?;
    noise.other_cpu_pct = before
        .zip(CpuTicks::now())
        .and_then(|(b, a)| a.other_percent_since(&b, noise.cpus))
        .map(|p| (p * 10.0).round() / 10.0);
    let loaded = match compare::load(&out) {
        Ok(l) => l,
        Err(e) => Loaded::failed(profile, plan.mode, plan.source, &out, format!("{e:#}")),
    };
    if loaded.report.outcome.status != Status::Passed {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        link_protocol::errln!(
            "xtask: [cycles] {} {profile} cycle {} {} ({}); the runner's last lines:",
            info.build.as_str(),
            info.pair,
            loaded.report.outcome.status,
            output.status
        );
        for line in tail.into_iter().rev() {
            link_protocol::errln!("  {line}");
        }
    }
    Ok(TimedRun {
        index: info.pair,
        loaded,
        noise,
        cycle: Some(info),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_alternate_who_runs_first() {
        assert_eq!(
            order(1, false),
            [(Build::New, Profile::Mini), (Build::New, Profile::Link)]
        );
        assert_eq!(
            order(2, false),
            [(Build::New, Profile::Link), (Build::New, Profile::Mini)]
        );
    }

    #[test]
    fn against_units_balance_builds_and_sides_over_four_units() {
        let mut new_first = 0;
        let mut mini_first = 0;
        for unit in 1..=4 {
            let o = order(unit, true);
            assert_eq!(o.len(), 4);
            for b in [Build::New, Build::Old] {
                for p in Profile::ALL {
                    assert_eq!(o.iter().filter(|x| **x == (b, p)).count(), 1, "{o:?}");
                }
            }
            new_first += usize::from(o[0].0 == Build::New);
            mini_first += usize::from(o[0].1 == Profile::Mini);
            // A side's two builds run back to back, so they share the machine's state.
            assert_eq!(o[0].1, o[1].1);
        }
        assert_eq!((new_first, mini_first), (2, 2));
    }

    #[test]
    fn a_program_rebuilt_during_the_cycles_is_named() {
        let p = |sha: &str| Program {
            name: "link".into(),
            sha256: sha.into(),
        };
        assert_eq!(changed(&[p("aa")], &[p("aa")]), None);
        let why = changed(&[p("aa")], &[p("bb")]).unwrap();
        assert_eq!(why, "program `link` changed (sha256 aa before, bb after)");
    }
}
