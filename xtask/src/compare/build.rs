//! The comparison from the runs: each side's median run, per-phase rows and statistics, exec
//! counts from the traced runs, caveats and warnings.

use super::runs::work_ns;
use super::{
    status_word, Comparison, ExecRow, ExitOverhead, Loaded, PhaseRow, PhaseSample, PhaseStats,
    RunRecord, Side, StartupCpuSide, StartupCpuStats, TimedRun, TracedSide, SCHEMA_VERSION,
    WIDE_INTERVAL,
};
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
}

/// Builds the comparison.
pub fn build(input: &Inputs<'_>) -> Comparison {
    let mut mini = side(input.mini, input.mini_traced);
    let mut link = side(input.link, input.link_traced);
    for s in [&mut mini, &mut link] {
        worst_outcome(s, input.runs);
    }
    let phases = phase_rows(&input.mini.report.phases, &input.link.report.phases);
    let execs = exec_rows(input.mini_traced, input.link_traced);
    let caveats = caveats(input, &mini, &link);
    let runs: Vec<RunRecord> = input.runs.iter().map(run_record).collect();
    let stats = phase_stats(&runs);
    let warnings = warnings(&runs, &stats, input.runs_requested);
    let host_exit = [Profile::Mini, Profile::Link]
        .map(|p| exit_overhead(&runs, p))
        .to_vec();
    let startup_cpu = startup_cpu(&runs, input.mini.report.platform.cpus);
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
        method: stats::METHOD.into(),
        warnings,
        host_exit,
        sandbox_bench: None,
        startup_cpu,
    }
}

/// A side is as good as its worst run: one failed run of five fails the side.
fn worst_outcome(side: &mut Side, runs: &[TimedRun]) {
    let rank = |s: Status| match s {
        Status::Passed => 0,
        Status::Skipped => 1,
        Status::Failed => 2,
    };
    let worst = runs
        .iter()
        .filter(|r| r.loaded.report.profile == side.profile)
        .max_by_key(|r| {
            (
                rank(r.loaded.report.outcome.status),
                std::cmp::Reverse(r.index),
            )
        });
    if let Some(w) = worst.filter(|w| rank(w.loaded.report.outcome.status) > rank(side.outcome)) {
        side.outcome = w.loaded.report.outcome.status;
        side.reason = Some(format!(
            "run {}: {}",
            w.index,
            w.loaded
                .report
                .outcome
                .reason
                .as_deref()
                .unwrap_or("no reason given")
        ));
    }
}

fn run_record(r: &TimedRun) -> RunRecord {
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
            })
            .collect(),
        startup_cpu: rep.startup_cpu,
    }
}

/// Phase names in run order over every run of both sides.
fn phase_names(runs: &[RunRecord]) -> Vec<String> {
    let mut order: Vec<Key> = Vec::new();
    for r in runs {
        let mut keys: Vec<Key> = Vec::new();
        for p in &r.phases {
            let k = (p.name.clone(), 0);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        order = merge_order(&order, &keys);
    }
    order.into_iter().map(|(n, _)| n).collect()
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

fn phase_stats(runs: &[RunRecord]) -> Vec<PhaseStats> {
    phase_names(runs)
        .into_iter()
        .map(|name| {
            let seed = stats::seed(&name);
            let (m, l) = (
                groups(runs, Profile::Mini, &name),
                groups(runs, Profile::Link, &name),
            );
            let absent = |p: Profile, g: &[Vec<f64>]| -> Option<String> {
                if !g.is_empty() {
                    return None;
                }
                let side: Vec<&RunRecord> = runs.iter().filter(|r| r.profile == p).collect();
                if side.is_empty() {
                    return Some("no run".into());
                }
                match side.iter().find(|r| r.outcome == Status::Passed) {
                    Some(_) => Some("no such phase".into()),
                    None => Some(format!(
                        "{}: {}",
                        side[0].outcome,
                        side[0].reason.as_deref().unwrap_or("no reason given")
                    )),
                }
            };
            let known = name.parse::<PhaseName>().ok();
            PhaseStats {
                fixed_wait: known.is_some_and(|p| p.fixed_wait()),
                within: known.and_then(|p| p.within()).map(|p| p.as_str().into()),
                mini: stats::spread(&m, seed),
                mini_absent: absent(Profile::Mini, &m),
                link: stats::spread(&l, seed ^ 1),
                link_absent: absent(Profile::Link, &l),
                ratio: stats::ratio(&m, &l, seed),
                name,
            }
        })
        .collect()
}

/// Noisy runs and vague phases, each saying what to do.
fn warnings(runs: &[RunRecord], stats: &[PhaseStats], requested: u32) -> Vec<String> {
    let mut out = Vec::new();
    for r in runs {
        if let Some(why) = r.noise.complaint() {
            out.push(format!(
                "the machine was busy before {} run {}: {why}; close other work and run again",
                r.profile, r.index
            ));
        }
    }
    let more = (requested.max(1) * 2).max(5);
    for s in stats.iter().filter(|s| !s.fixed_wait) {
        if let Some(r) = s.ratio.filter(|r| r.width_factor() > WIDE_INTERVAL) {
            out.push(format!(
                "phase {}: the Link/Mini interval {} is wide (upper/lower {:.2} > {WIDE_INTERVAL}); \
                 close other work or raise --runs (e.g. --runs {more})",
                s.name,
                r.ratio_text(),
                r.width_factor()
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
            }
        }),
    }
}

type Key = (String, u32);

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

pub(super) fn merge_order(first: &[Key], second: &[Key]) -> Vec<Key> {
    let mut out: Vec<Key> = Vec::new();
    for k in first {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    for (i, k) in second.iter().enumerate() {
        if out.contains(k) {
            continue;
        }
        let at = match i
            .checked_sub(1)
            .and_then(|p| out.iter().position(|o| *o == second[p]))
        {
            Some(prev) => prev + 1,
            None if i == 0 => 0,
            None => out.len(),
        };
        out.insert(at, k.clone());
    }
    out
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
