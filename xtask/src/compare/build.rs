//! The comparison from the runs: each side's median run, per-phase rows and statistics, exec
//! counts from the traced runs, caveats and warnings.

use super::order::{merge_order, phase_names, Key};
use super::pairs::{self, Clock};
use super::runs::work_ns;
use super::{
    status_word, AbRow, Build, Comparison, ExecRow, ExitOverhead, Loaded, PhaseRow, PhaseSample,
    PhaseStats, RunRecord, Sampling, Side, StartupCpuSide, StartupCpuStats, TimedRun, TracedSide,
    SCHEMA_VERSION, WIDE_INTERVAL,
};
use crate::paired::{self, Kind};
use crate::stats;
use link_report::{Mode, Phase, PhaseName, Profile, StartupCpu, Status, TracePhase};

/// Each side's representative timed report, every timed run, and, when a trace pass ran, the
/// traced ones.
pub struct Inputs<'a> {
    pub mode: Mode,
    pub mini: &'a Loaded,
    pub link: &'a Loaded,
    pub runs: &'a [TimedRun],
    pub runs_requested: u32,
    pub rounds: u32,
    pub mini_traced: Option<&'a Loaded>,
    pub link_traced: Option<&'a Loaded>,
    /// The paired timing cycles, in the order they ran.
    pub cycles: &'a [TimedRun],
    /// How the cycles were sampled and why they stopped.
    pub sampling: Sampling,
    /// `--against DIR`: the other programs, and the margin its gate uses.
    pub against: Option<(String, f64)>,
}

/// Builds the comparison.
pub fn build(input: &Inputs<'_>) -> Comparison {
    let mut mini = side(input.mini, input.mini_traced);
    let mut link = side(input.link, input.link_traced);
    for s in [&mut mini, &mut link] {
        worst_outcome(s, input.runs.iter().chain(input.cycles));
        if !input.runs.is_empty() || !input.cycles.is_empty() {
            s.checks_not_passed =
                checks_not_passed(s.profile, input.runs.iter().chain(input.cycles));
        }
    }
    let phases = phase_rows(&input.mini.report.phases, &input.link.report.phases);
    let execs = exec_rows(input.mini_traced, input.link_traced);
    let caveats = caveats(input, &mini, &link);
    let runs: Vec<RunRecord> = input.runs.iter().map(run_record).collect();
    let cycles: Vec<RunRecord> = input.cycles.iter().map(run_record).collect();
    let failed = |s: &Side| (s.outcome != Status::Passed).then(|| side_absent(s));
    // The figures come from the measured programs' cycles (with `--against`, not the others').
    let measured: Vec<RunRecord> = cycles
        .iter()
        .filter(|r| r.cycle.is_some_and(|c| c.build == Build::New))
        .cloned()
        .collect();
    let stats = phase_stats(&measured, failed(&mini), failed(&link));
    let mut warnings = warnings(&runs, &cycles, &stats);
    if let Some(why) = input.sampling.short_of_target() {
        warnings.push(why);
    }
    let host_exit = [Profile::Mini, Profile::Link]
        .map(|p| exit_overhead(&measured, p))
        .to_vec();
    let both_passed = failed(&mini).is_none() && failed(&link).is_none();
    let mut startup_cpu = startup_cpu(&measured, input.mini.report.platform.cpus);
    if let Some(cpu) = startup_cpu.as_mut().filter(|_| !both_passed) {
        cpu.ratio = None;
    }
    let shared_total = both_passed
        .then(|| paired::ratio(&pairs::shared_total(&cycles, Build::New)))
        .flatten();
    let ab = input
        .against
        .as_ref()
        .filter(|_| both_passed)
        .map(|(dir, margin)| ab(&cycles, dir, *margin));
    Comparison {
        schema_version: SCHEMA_VERSION,
        mode: input.mode,
        mini,
        link,
        phases,
        execs,
        caveats,
        runs_requested: input.runs_requested,
        rounds: input.rounds,
        runs,
        stats,
        method: paired::METHOD.into(),
        warnings,
        host_exit,
        machine: None,
        source_checked: None,
        sandbox_bench: None,
        startup_cpu,
        pairs: pairs::pair_count(&cycles, Build::New) as u32,
        sampling: Some(input.sampling.clone()),
        shared_total,
        ab,
        cycles,
    }
}

/// `failed: <reason>` / `skipped: <reason>` for a side that did not pass.
fn side_absent(s: &Side) -> String {
    format!(
        "{}: {}",
        status_word(s.outcome),
        s.reason.as_deref().unwrap_or("no reason given")
    )
}

/// `--against`: each side's new/old per phase, paired by unit, and the gate on it.
fn ab(cycles: &[RunRecord], against: &str, margin: f64) -> super::Ab {
    let mut rows: Vec<AbRow> = Vec::new();
    for name in phase_names(cycles) {
        if name.parse::<PhaseName>().is_ok_and(|p| p.fixed_wait()) {
            continue;
        }
        for profile in Profile::ALL {
            if let Some(m) = paired::ratio(&pairs::new_over_old(cycles, profile, &name)) {
                rows.push(AbRow {
                    phase: name.clone(),
                    profile,
                    new_over_old: m,
                    kind: Kind::Unmeasured,
                });
            }
        }
    }
    let tests = rows
        .iter()
        .filter(|r| r.new_over_old.p_above.is_some())
        .count();
    for r in &mut rows {
        let m = r.new_over_old;
        r.kind = match (m.p_above, m.p_below) {
            (Some(up), Some(down)) => paired::judge(m.estimate, up, down, tests, margin),
            _ => Kind::Unmeasured,
        };
    }
    super::Ab {
        against: against.into(),
        max_regression: margin,
        tests: tests as u32,
        rows,
    }
}

/// Every check of side `p` that did not pass in some run or cycle: `name: outcome (where it
/// first did, and in how many more)`, failures first.
fn checks_not_passed<'a>(p: Profile, runs: impl Iterator<Item = &'a TimedRun>) -> Vec<String> {
    let mut seen: Vec<(Status, String, String, usize)> = Vec::new();
    for r in runs.filter(|r| r.loaded.report.profile == p) {
        let which = label(r);
        for c in r
            .loaded
            .report
            .checks
            .iter()
            .filter(|c| c.outcome != Status::Passed)
        {
            let name = c.name.as_str().to_string();
            match seen
                .iter_mut()
                .find(|(o, n, _, _)| *o == c.outcome && *n == name)
            {
                Some(entry) => entry.3 += 1,
                None => seen.push((c.outcome, name, which.clone(), 0)),
            }
        }
    }
    seen.sort_by_key(|(o, ..)| *o != Status::Failed);
    seen.into_iter()
        .map(|(o, name, first, more)| match more {
            0 => format!("{name}: {o} ({first})"),
            n => format!("{name}: {o} ({first} and {n} more)"),
        })
        .collect()
}

/// `run N` for a scenario run, `new cycle N` / `old cycle N` for a timing cycle.
fn label(r: &TimedRun) -> String {
    match r.cycle {
        Some(c) => format!("{} cycle {}", c.build.as_str(), c.pair),
        None => format!("run {}", r.index),
    }
}

/// A side is as good as its worst run or cycle: one failed run of five fails the side.
fn worst_outcome<'a>(side: &mut Side, runs: impl Iterator<Item = &'a TimedRun>) {
    let rank = |s: Status| match s {
        Status::Passed => 0,
        Status::Skipped => 1,
        Status::Failed => 2,
    };
    // The first of the worst, in the order they ran (a cycle's pair counts after every run).
    let worst = runs
        .filter(|r| r.loaded.report.profile == side.profile)
        .enumerate()
        .max_by_key(|(at, r)| (rank(r.loaded.report.outcome.status), std::cmp::Reverse(*at)))
        .map(|(_, r)| r);
    if let Some(w) = worst.filter(|w| rank(w.loaded.report.outcome.status) > rank(side.outcome)) {
        side.outcome = w.loaded.report.outcome.status;
        side.reason = Some(format!(
            "{}: {}",
            label(w),
            w.loaded
                .report
                .outcome
                .reason
                .as_deref()
                .unwrap_or("no reason given")
        ));
    }
}

pub fn run_record(r: &TimedRun) -> RunRecord {
    let rep = &r.loaded.report;
    RunRecord {
        profile: rep.profile,
        index: r.index,
        report: r.loaded.path.clone(),
        report_sha256: r.loaded.sha256.clone(),
        outcome: rep.outcome.status,
        reason: rep.outcome.reason.clone(),
        noise: r.noise.clone(),
        phases: rep
            .phases
            .iter()
            .map(|p| PhaseSample {
                name: p.name.clone(),
                round: p.round,
                duration_ns: p.duration_ns,
                cpu_ns: p.cpu_ns,
            })
            .collect(),
        startup_cpu: rep.startup_cpu,
        cycle: r.cycle,
    }
}

/// Side `p`'s passed runs.
fn passed(runs: &[RunRecord], p: Profile) -> impl Iterator<Item = &RunRecord> {
    runs.iter()
        .filter(move |r| r.profile == p && r.outcome == Status::Passed)
}

/// One group per passed run of side `p`: the durations of its rounds of phase `name`.
fn groups(runs: &[RunRecord], p: Profile, name: &str) -> Vec<Vec<f64>> {
    passed(runs, p)
        .map(|r| {
            r.phases
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.duration_ns as f64)
                .collect::<Vec<f64>>()
        })
        .filter(|g| !g.is_empty())
        .collect()
}

/// Side `p`'s shutdown over its host's own exit time: the median of its passed runs' own
/// ratios (each run's two phases are one measurement, so they are paired).
fn exit_overhead(runs: &[RunRecord], p: Profile) -> ExitOverhead {
    let (shutdown, exit) = (PhaseName::Shutdown.as_str(), PhaseName::HostExit.as_str());
    let pairs: Vec<(f64, f64)> = passed(runs, p)
        .filter_map(|r| Some((duration(r, shutdown)?, duration(r, exit)?)))
        .filter(|(_, part)| *part > 0.0)
        .collect();
    let over: Vec<f64> = pairs.iter().map(|(whole, part)| whole - part).collect();
    let ratio = stats::paired_ratio(&pairs, stats::seed(exit));
    let absent = ratio.is_none().then(|| {
        if passed(runs, p).next().is_none() {
            "no passed run".to_string()
        } else {
            format!(
                "no {exit} phase (link down did not stop the host alone, no pidfd, or a \
                 runner older than the phase)"
            )
        }
    });
    ExitOverhead {
        profile: p,
        runs: pairs.len() as u32,
        median_over_ns: (!over.is_empty()).then(|| stats::median(&over).round()),
        ratio,
        absent,
    }
}

/// The first round of phase `name` in run `r`, in ns.
fn duration(r: &RunRecord, name: &str) -> Option<f64> {
    r.phases
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.duration_ns as f64)
}

/// Each side's start-up CPU time over its passed runs that measured it, and Link/Mini.
fn startup_cpu(runs: &[RunRecord], cpus: usize) -> Option<StartupCpuStats> {
    let measured = |p: Profile| -> Vec<(&RunRecord, StartupCpu)> {
        passed(runs, p)
            .filter_map(|r| Some((r, r.startup_cpu?)))
            .collect()
    };
    let (mini, link) = (measured(Profile::Mini), measured(Profile::Link));
    if mini.is_empty() && link.is_empty() {
        return None;
    }
    // One group (of one figure) per run, as the phases' bootstrap takes them.
    let groups = |m: &[(&RunRecord, StartupCpu)]| -> Vec<Vec<f64>> {
        m.iter().map(|(_, c)| vec![c.cpu_ns as f64]).collect()
    };
    let startup = PhaseName::Startup.as_str();
    let side = |p: Profile, m: &[(&RunRecord, StartupCpu)]| {
        let cpu: Vec<f64> = m.iter().map(|(_, c)| c.cpu_ns as f64).collect();
        let counts: Vec<f64> = m.iter().map(|(_, c)| c.processes as f64).collect();
        let median_ns = (!cpu.is_empty()).then(|| stats::median(&cpu));
        let floor = |cpu_ns: f64| (cpus > 0).then(|| cpu_ns / cpus as f64);
        // Each run's start-up against that run's own floor: one measurement, so paired.
        let pairs: Vec<(f64, f64)> = m
            .iter()
            .filter_map(|(r, c)| Some((duration(r, startup)?, floor(c.cpu_ns as f64)?)))
            .collect();
        StartupCpuSide {
            profile: p,
            runs: m.len() as u32,
            median_ns,
            processes: (!counts.is_empty()).then(|| stats::median(&counts).round() as u32),
            floor_ns: median_ns.and_then(floor),
            over_floor: stats::paired_ratio(&pairs, stats::seed("startup_over_floor")),
        }
    };
    Some(StartupCpuStats {
        cpus,
        sides: vec![side(Profile::Mini, &mini), side(Profile::Link, &link)],
        ratio: stats::ratio(&groups(&mini), &groups(&link), stats::seed("startup_cpu")),
    })
}

/// Per phase, from the cycles of the measured programs (`new`): each side's description, and
/// where both sides passed, the paired figures. A side that failed or skipped has no figure and
/// no ratio: `failed`/`skipped` name why.
fn phase_stats(
    new: &[RunRecord],
    mini_failed: Option<String>,
    link_failed: Option<String>,
) -> Vec<PhaseStats> {
    let both = mini_failed.is_none() && link_failed.is_none();
    phase_names(new)
        .into_iter()
        .map(|name| {
            let seed = stats::seed(&name);
            let known = name.parse::<PhaseName>().ok();
            let link_only = known.is_some_and(|p| p.link_only());
            let side = |p: Profile, failed: &Option<String>| {
                let g = groups(new, p, &name);
                let absent = match failed {
                    Some(why) => Some(why.clone()),
                    None if g.is_empty() && link_only && p == Profile::Mini => {
                        Some("Link-only work".into())
                    }
                    None if g.is_empty() => Some("no such phase".into()),
                    None => None,
                };
                let spread = failed
                    .is_none()
                    .then(|| stats::spread(&g, seed ^ p as u64))
                    .flatten();
                let time = failed
                    .is_none()
                    .then(|| paired::ratio(&pairs::side_logs(new, Build::New, p, &name)))
                    .flatten();
                let cpu = failed
                    .is_none()
                    .then(|| cpu_median(new, p, &name))
                    .flatten();
                (spread, absent, time, cpu)
            };
            let (mini, mini_absent, mini_time, mini_cpu_ns) = side(Profile::Mini, &mini_failed);
            let (link, link_absent, link_time, link_cpu_ns) = side(Profile::Link, &link_failed);
            let logs = if both && !link_only {
                pairs::link_over_mini(new, Build::New, &name, Clock::Wall)
            } else {
                Vec::new()
            };
            let only = pairs::logs(&logs);
            let paired_ratio = paired::ratio(&only);
            let cpu_logs = if both && !link_only {
                pairs::logs(&pairs::link_over_mini(new, Build::New, &name, Clock::Cpu))
            } else {
                Vec::new()
            };
            PhaseStats {
                fixed_wait: known.is_some_and(|p| p.fixed_wait()),
                within: known.and_then(|p| p.within()).map(|p| p.as_str().into()),
                link_only,
                ratio: paired_ratio.and_then(|r| r.interval()),
                paired: paired_ratio,
                cpu_ratio: paired::ratio(&cpu_logs),
                position_effect: pairs::position_effect(&logs),
                outlying_pairs: paired::outliers(&only)
                    .into_iter()
                    .map(|i| logs[i].pair)
                    .collect(),
                mini,
                mini_absent,
                mini_time,
                mini_cpu_ns,
                link,
                link_absent,
                link_time,
                link_cpu_ns,
                name,
            }
        })
        .collect()
}

/// The median over cycles of one side's CPU time in a phase.
fn cpu_median(cycles: &[RunRecord], p: Profile, name: &str) -> Option<f64> {
    let v: Vec<f64> = passed(cycles, p)
        .filter_map(|r| pairs::cycle_value(r, name, Clock::Cpu))
        .collect();
    (!v.is_empty()).then(|| stats::median(&v).round())
}

/// Noisy runs and cycles, vague figures and outlying pairs, each saying what to do.
fn warnings(runs: &[RunRecord], cycles: &[RunRecord], stats: &[PhaseStats]) -> Vec<String> {
    let mut out = Vec::new();
    for r in runs {
        if let Some(why) = r.noise.complaint() {
            out.push(format!(
                "the machine was busy before {} run {}: {why}; close other work and run again",
                r.profile, r.index
            ));
        }
    }
    let busy: Vec<String> = cycles
        .iter()
        .filter_map(|r| Some((r, r.noise.cycle_complaint()?)))
        .map(|(r, why)| format!("{} cycle {} ({why})", r.profile, r.index))
        .collect();
    if let Some(first) = busy.first() {
        out.push(format!(
            "other work disturbed {} of {} cycles, first {first}; close other work and run \
             again",
            busy.len(),
            cycles.len()
        ));
    }
    for s in stats.iter().filter(|s| !s.fixed_wait) {
        if let Some(w) = s
            .paired
            .and_then(|r| r.width_factor())
            .filter(|w| *w > WIDE_INTERVAL)
        {
            out.push(format!(
                "phase {}: the Link/Mini interval {} is wide (upper/lower {w:.2} > \
                 {WIDE_INTERVAL}); close other work or raise --budget",
                s.name,
                s.paired.map(|r| r.text()).unwrap_or_default(),
            ));
        }
        if let Some(r) = s.paired.filter(|r| r.low.is_none()) {
            out.push(format!(
                "phase {}: {} pairs give no interval (at least {} needed); raise --budget",
                s.name,
                r.pairs,
                paired::MIN_PAIRS
            ));
        }
        if !s.outlying_pairs.is_empty() {
            let list: Vec<String> = s.outlying_pairs.iter().map(u32::to_string).collect();
            out.push(format!(
                "phase {}: pair(s) {} lie far from the others (modified z-score over {}); \
                 they are in the figure, which they widen: look for what disturbed them",
                s.name,
                list.join(", "),
                paired::OUTLIER_Z
            ));
        }
    }
    out
}

fn side(loaded: &Loaded, traced: Option<&Loaded>) -> Side {
    let r = &loaded.report;
    Side {
        profile: r.profile,
        mode: r.mode,
        source: r.source.clone(),
        report: loaded.path.clone(),
        report_sha256: loaded.sha256.clone(),
        outcome: r.outcome.status,
        reason: r.outcome.reason.clone(),
        checks_not_passed: r
            .checks
            .iter()
            .filter(|c| c.outcome != Status::Passed)
            .map(|c| format!("{}: {}", c.name, c.outcome))
            .collect(),
        processes: r.processes.len() as u64,
        peak_sampled_processes: r
            .samples
            .iter()
            .map(|s| s.processes.len() as u64)
            .max()
            .unwrap_or(0),
        peak_rss_bytes: r.samples.iter().map(|s| s.rss_bytes()).max(),
        artifacts: r.artifacts.len() as u64,
        artifact_bytes: r.artifacts.iter().map(|a| a.bytes).sum(),
        total_phase_ns: r
            .phases
            .iter()
            .filter(|p| PhaseName::in_total(&p.name))
            .map(|p| p.duration_ns)
            .sum(),
        work_phase_ns: work_ns(&r.phases),
        phases: r.phases.clone(),
        traced: traced.map(|t| {
            let section = t.report.trace.as_ref();
            TracedSide {
                report: t.path.clone(),
                outcome: t.report.outcome.status,
                available: section.is_some_and(|s| s.available),
                reason: match section {
                    Some(s) => s.reason.clone(),
                    None => Some("the traced report has no trace section".into()),
                },
                outside_phases_execs: section.and_then(|s| s.outside_phases_execs),
                total_execs: section.and_then(|s| s.total_execs),
            }
        }),
    }
}

/// Rows in run order: Mini's phases, with Link-only ones placed after their predecessor.
fn phase_rows(mini: &[Phase], link: &[Phase]) -> Vec<PhaseRow> {
    let key = |p: &Phase| (p.name.clone(), p.round);
    let mini_keys: Vec<Key> = mini.iter().map(key).collect();
    let link_keys: Vec<Key> = link.iter().map(key).collect();
    merge_order(&mini_keys, &link_keys)
        .into_iter()
        .map(|(name, round)| {
            let find = |all: &[Phase]| {
                all.iter()
                    .find(|p| p.name == name && p.round == round)
                    .map(|p| p.duration_ns)
            };
            let (mini_ns, link_ns) = (find(mini), find(link));
            PhaseRow {
                ratio: ratio(mini_ns, link_ns),
                name,
                round,
                mini_ns,
                link_ns,
            }
        })
        .collect()
}

pub(super) fn ratio(mini: Option<u128>, link: Option<u128>) -> Option<f64> {
    let (m, l) = (mini?, link?);
    // Four decimals: plenty for a ratio, and stable through a JSON round trip.
    (m > 0)
        .then(|| (l as f64 / m as f64 * 1e4).round() / 1e4)
        .filter(|r| r.is_finite())
}

fn exec_rows(mini: Option<&Loaded>, link: Option<&Loaded>) -> Vec<ExecRow> {
    let phases = |l: Option<&Loaded>| -> Vec<TracePhase> {
        l.and_then(|l| l.report.trace.as_ref())
            .filter(|t| t.available)
            .map(|t| t.phases.clone())
            .unwrap_or_default()
    };
    let (m, l) = (phases(mini), phases(link));
    if m.is_empty() && l.is_empty() {
        return Vec::new();
    }
    let key = |p: &TracePhase| (p.name.clone(), p.round);
    let keys = merge_order(
        &m.iter().map(key).collect::<Vec<_>>(),
        &l.iter().map(key).collect::<Vec<_>>(),
    );
    keys.into_iter()
        .map(|(name, round)| {
            let find = |all: &[TracePhase]| {
                all.iter()
                    .find(|p| p.name == name && p.round == round)
                    .cloned()
            };
            ExecRow {
                mini: find(&m),
                link: find(&l),
                name,
                round,
            }
        })
        .collect()
}

fn caveats(input: &Inputs<'_>, mini: &Side, link: &Side) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for side in [mini, link] {
        if side.outcome != Status::Passed {
            add(format!(
                "{} {}: {}",
                side.profile,
                status_word(side.outcome),
                side.reason.as_deref().unwrap_or("no reason given")
            ));
        }
        if side.mode != input.mode {
            add(format!(
                "{} ran in {} mode, not the requested {}",
                side.profile, side.mode, input.mode
            ));
        }
        if let Some(t) = side.traced.as_ref().filter(|t| !t.available) {
            add(format!(
                "{} exec counts unavailable: {}",
                side.profile,
                t.reason.as_deref().unwrap_or("no reason given")
            ));
        }
    }
    if mini.source != link.source {
        add(format!(
            "the sides ran different sources: mini {} vs link {}",
            mini.source, link.source
        ));
    }
    if [input.mode, mini.mode, link.mode].contains(&Mode::Diagnostic) {
        add(
            "diagnostic mode: protected run and file tools are disabled; this is not confined \
             qualification and its process counts are not a secure deployment's"
                .into(),
        );
    }
    add(
        "peak RSS is the largest total of one monitor pass over the runtime's processes, \
         not a memory total"
            .into(),
    );
    add("artifact bytes are the programs each side used as built here, not shipped bytes".into());
    if input.mini_traced.is_some() || input.link_traced.is_some() {
        add(
            "exec counts come from separate traced runs (ROUNDS 1), never from the timed runs"
                .into(),
        );
    }
    for r in [&input.mini.report, &input.link.report] {
        for n in &r.coverage.not_evidence_of {
            add(format!("not evidence of: {n}"));
        }
    }
    out
}
