//! The Mini ↔ full Link comparison: built from N interleaved runs of each side (and the traced
//! twins), written as `runtime-comparison.json` and `.md`. Per phase: each side's median,
//! spread and sample count, and the Link/Mini ratio with a 95% bootstrap interval
//! ([`crate::stats`]); the machine's load around every run, and warnings when it was noisy.

use crate::stats::{self, Interval, Spread};
use anyhow::{bail, Context, Result};
use link_report::{Mode, Phase, Profile, Report, Status, TracePhase};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Bumped whenever a field of the comparison changes meaning or disappears.
/// 2: `runs`, `stats`, `method`, `warnings`; `mini`/`link` are each side's median run.
pub const SCHEMA_VERSION: u32 = 2;

/// The phase that is a fixed wait, not work: kept apart and out of totals.
pub const FIXED_WAIT: &str = "idle";

/// A ratio interval wider than this (upper / lower) is called out.
pub const WIDE_INTERVAL: f64 = 1.5;
/// A one-minute load average above this many per CPU is called out.
pub const HIGH_LOAD_PER_CPU: f64 = 1.0;
/// A `/proc/pressure/cpu` `some avg10` above this (percent) is called out.
pub const HIGH_CPU_PRESSURE: f64 = 10.0;

/// One comparison of a Mini run and a full Link run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: u32,
    /// `confined` or `diagnostic`, as requested.
    pub mode: Mode,
    pub mini: Side,
    pub link: Side,
    /// One row per (phase, round) of either side, in run order.
    pub phases: Vec<PhaseRow>,
    /// Per-phase counts from the traced runs; empty when no trace pass ran.
    pub execs: Vec<ExecRow>,
    /// What these numbers are not evidence of, and anything that weakens them.
    pub caveats: Vec<String>,
    /// How many timed runs per side were asked for, and ROUNDS per run.
    #[serde(default)]
    pub runs_requested: u32,
    #[serde(default)]
    pub rounds: u32,
    /// Every timed run, in the order it ran (Mini, Link, Mini, Link, ...).
    #[serde(default)]
    pub runs: Vec<RunRecord>,
    /// Per phase, over every passed run of each side.
    #[serde(default)]
    pub stats: Vec<PhaseStats>,
    /// How `stats` was computed.
    #[serde(default)]
    pub method: String,
    /// Noise and vague figures, each naming what to do.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// The machine's load just before a run (`None`: the kernel does not say).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    pub cpus: usize,
    pub load1: Option<f64>,
    pub load5: Option<f64>,
    pub load15: Option<f64>,
    /// `/proc/pressure/cpu` `some avg10`, percent.
    pub cpu_pressure_some_avg10: Option<f64>,
}

impl Noise {
    /// Reads `/proc/loadavg` and `/proc/pressure/cpu`.
    pub fn sample() -> Noise {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let (load1, load5, load15) = read("/proc/loadavg")
            .map(|t| parse_loadavg(&t))
            .unwrap_or_default();
        Noise {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load1,
            load5,
            load15,
            cpu_pressure_some_avg10: read("/proc/pressure/cpu").and_then(|t| parse_pressure(&t)),
        }
    }

    /// Why this run's machine was busy, if it was.
    pub fn complaint(&self) -> Option<String> {
        let mut why = Vec::new();
        if let Some(l) = self
            .load1
            .filter(|l| *l > HIGH_LOAD_PER_CPU * self.cpus.max(1) as f64)
        {
            why.push(format!("load average {l:.2} on {} CPUs", self.cpus));
        }
        if let Some(p) = self
            .cpu_pressure_some_avg10
            .filter(|p| *p > HIGH_CPU_PRESSURE)
        {
            why.push(format!("CPU pressure some avg10 {p:.1}%"));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }
}

fn parse_loadavg(text: &str) -> (Option<f64>, Option<f64>, Option<f64>) {
    let mut f = text.split_whitespace().map(|w| w.parse::<f64>().ok());
    (f.next().flatten(), f.next().flatten(), f.next().flatten())
}

fn parse_pressure(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("avg10="))
        .and_then(|v| v.parse().ok())
}

/// One timed run as it is compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub profile: Profile,
    /// 1-based, per side.
    pub index: u32,
    pub report: String,
    pub report_sha256: String,
    pub outcome: Status,
    pub reason: Option<String>,
    pub noise: Noise,
    /// Every phase round's duration.
    pub phases: Vec<PhaseSample>,
}

/// One phase round of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseSample {
    pub name: String,
    pub round: u32,
    pub duration_ns: u128,
}

/// One phase over all runs: each side's figures and the ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseStats {
    pub name: String,
    /// A fixed wait (idle): shown apart, never in totals.
    pub fixed_wait: bool,
    pub mini: Option<Spread>,
    /// Why Mini has no figure (`skipped: ...`, `no such phase`).
    pub mini_absent: Option<String>,
    pub link: Option<Spread>,
    pub link_absent: Option<String>,
    /// Link/Mini ratio of medians with its 95% bootstrap interval.
    pub ratio: Option<Interval>,
}

/// A timed run as read from disk, with the load just before it.
#[derive(Debug, Clone)]
pub struct TimedRun {
    pub index: u32,
    pub loaded: Loaded,
    pub noise: Noise,
}

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

/// Total phase time without the fixed wait.
fn work_ns(phases: &[Phase]) -> u128 {
    phases
        .iter()
        .filter(|p| p.name != FIXED_WAIT)
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

/// What one side's report says, reduced to what is compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub profile: Profile,
    pub mode: Mode,
    pub source: String,
    /// The report file and its sha256, so the numbers can be traced back.
    pub report: String,
    pub report_sha256: String,
    pub outcome: Status,
    pub reason: Option<String>,
    /// Checks that did not pass, as `name: outcome`.
    pub checks_not_passed: Vec<String>,
    /// Processes the runtime started (identities in the report).
    pub processes: u64,
    /// The most processes seen in one monitor pass.
    pub peak_sampled_processes: u64,
    /// The largest total RSS of one monitor pass; `None` without samples.
    pub peak_rss_bytes: Option<u64>,
    pub artifacts: u64,
    pub artifact_bytes: u64,
    /// Sum of the phases' durations.
    pub total_phase_ns: u128,
    /// Sum of the phases' durations without the fixed idle wait.
    #[serde(default)]
    pub work_phase_ns: u128,
    /// The timeline, for the picture.
    pub phases: Vec<Phase>,
    /// The traced run behind `execs`, when one ran.
    pub traced: Option<TracedSide>,
}

/// The separate strace run of one side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedSide {
    pub report: String,
    pub outcome: Status,
    pub available: bool,
    pub reason: Option<String>,
}

/// One phase on both sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRow {
    pub name: String,
    pub round: u32,
    pub mini_ns: Option<u128>,
    pub link_ns: Option<u128>,
    /// Link / Mini; `None` when either is missing or Mini took no measurable time.
    pub ratio: Option<f64>,
}

/// One phase's trace counts on both sides (`None`: the side has no such phase or no trace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRow {
    pub name: String,
    pub round: u32,
    pub mini: Option<TracePhase>,
    pub link: Option<TracePhase>,
}

/// A report as read from disk.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub path: String,
    pub sha256: String,
    pub report: Report,
}

/// Reads and decodes one report.
pub fn load(path: &Path) -> Result<Loaded> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let report: Report = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a runtime report", path.display()))?;
    Ok(Loaded {
        path: path.display().to_string(),
        sha256: hex(&Sha256::digest(&bytes)),
        report,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

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

fn phase_stats(runs: &[RunRecord]) -> Vec<PhaseStats> {
    phase_names(runs)
        .into_iter()
        .map(|name| {
            let seed = stats::seed(&name);
            let groups = |p: Profile| -> Vec<Vec<f64>> {
                runs.iter()
                    .filter(|r| r.profile == p && r.outcome == Status::Passed)
                    .map(|r| {
                        r.phases
                            .iter()
                            .filter(|s| s.name == name)
                            .map(|s| s.duration_ns as f64)
                            .collect::<Vec<f64>>()
                    })
                    .filter(|g| !g.is_empty())
                    .collect()
            };
            let (m, l) = (groups(Profile::Mini), groups(Profile::Link));
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
            PhaseStats {
                fixed_wait: name == FIXED_WAIT,
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
        total_phase_ns: r.phases.iter().map(|p| p.duration_ns).sum(),
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

fn merge_order(first: &[Key], second: &[Key]) -> Vec<Key> {
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

fn ratio(mini: Option<u128>, link: Option<u128>) -> Option<f64> {
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

pub fn status_word(s: Status) -> &'static str {
    s.as_str()
}

/// Milliseconds with one decimal.
pub fn ms(ns: u128) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The Markdown page.
pub fn markdown(c: &Comparison) -> String {
    let count = |p: Profile| c.runs.iter().filter(|r| r.profile == p).count();
    let mut md = format!(
        "# Runtime comparison: Mini vs full Link ({})\n\n\
         Source: mini `{}`, link `{}`. {} Mini and {} Link timed runs, interleaved \
         (Mini, Link, Mini, ...), ROUNDS {} each.\n\n",
        c.mode,
        c.mini.source,
        c.link.source,
        count(Profile::Mini),
        count(Profile::Link),
        c.rounds
    );
    if !c.warnings.is_empty() {
        md.push_str("## Warnings\n\n");
        for w in &c.warnings {
            md.push_str(&format!("- **warning**: {w}\n"));
        }
        md.push('\n');
    }
    md.push_str(&stats_markdown(c));
    md.push_str(&format!(
        "\n## Each side's median run\n\n\
         The run whose phase time without idle is the median of its side's passed runs \
         (mini run {}, link run {}; copied to `runtime-mini.json` / `runtime-link.json`).\n\n",
        run_index(c, &c.mini),
        run_index(c, &c.link)
    ));
    md.push_str("| | Mini | Link | Link/Mini |\n|---|---|---|---|\n");
    let row = |md: &mut String, what: &str, m: String, l: String, r: Option<f64>| {
        let r = r.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "—".into());
        md.push_str(&format!("| {what} | {m} | {l} | {r} |\n"));
    };
    row(
        &mut md,
        "outcome",
        side_outcome(&c.mini),
        side_outcome(&c.link),
        None,
    );
    row(
        &mut md,
        "mode",
        c.mini.mode.to_string(),
        c.link.mode.to_string(),
        None,
    );
    // A side that did not pass has no figures: a dash, never a zero, and no ratio.
    let both = c.mini.outcome == Status::Passed && c.link.outcome == Status::Passed;
    let fig = |s: &Side, text: String| {
        if s.outcome == Status::Passed {
            text
        } else {
            "—".into()
        }
    };
    let n = |m: u64, l: u64| (both && m > 0).then(|| l as f64 / m as f64);
    row(
        &mut md,
        "processes started",
        fig(&c.mini, c.mini.processes.to_string()),
        fig(&c.link, c.link.processes.to_string()),
        n(c.mini.processes, c.link.processes),
    );
    row(
        &mut md,
        "peak processes sampled",
        fig(&c.mini, c.mini.peak_sampled_processes.to_string()),
        fig(&c.link, c.link.peak_sampled_processes.to_string()),
        n(c.mini.peak_sampled_processes, c.link.peak_sampled_processes),
    );
    let rss = |s: &Side| {
        fig(
            s,
            s.peak_rss_bytes
                .map(mib)
                .unwrap_or_else(|| "no samples".into()),
        )
    };
    row(
        &mut md,
        "peak RSS (one monitor pass)",
        rss(&c.mini),
        rss(&c.link),
        c.mini
            .peak_rss_bytes
            .zip(c.link.peak_rss_bytes)
            .and_then(|(m, l)| n(m, l)),
    );
    let art = |s: &Side| {
        if s.artifacts == 0 {
            "—".into()
        } else {
            format!("{} ({} programs)", mib(s.artifact_bytes), s.artifacts)
        }
    };
    row(
        &mut md,
        "artifact bytes",
        art(&c.mini),
        art(&c.link),
        (c.mini.artifacts > 0 && c.link.artifacts > 0)
            .then(|| c.link.artifact_bytes as f64 / c.mini.artifact_bytes.max(1) as f64),
    );
    row(
        &mut md,
        "all phases except the fixed idle wait (ms)",
        fig(&c.mini, ms(c.mini.work_phase_ns)),
        fig(&c.link, ms(c.link.work_phase_ns)),
        if both {
            ratio(Some(c.mini.work_phase_ns), Some(c.link.work_phase_ns))
        } else {
            None
        },
    );
    md.push_str(&noise_markdown(c));
    md.push_str(&execs_markdown(c));
    for s in [&c.mini, &c.link] {
        if !s.checks_not_passed.is_empty() {
            md.push_str(&format!(
                "\n{} checks not passed: {}\n",
                s.profile,
                s.checks_not_passed.join(", ")
            ));
        }
    }
    md.push_str("\n## Caveats\n\n");
    for cv in &c.caveats {
        md.push_str(&format!("- {cv}\n"));
    }
    md.push_str("\n## Reports\n\n");
    for r in &c.runs {
        md.push_str(&format!(
            "- {} run {}: `{}` (sha256 {}), {}\n",
            r.profile,
            r.index,
            r.report,
            r.report_sha256,
            status_word(r.outcome)
        ));
    }
    if c.runs.is_empty() {
        md.push_str(&format!(
            "- `{}` (sha256 {}), `{}` (sha256 {})\n",
            c.mini.report, c.mini.report_sha256, c.link.report, c.link.report_sha256
        ));
    }
    md
}

fn run_index(c: &Comparison, s: &Side) -> String {
    c.runs
        .iter()
        .find(|r| r.profile == s.profile && r.report == s.report)
        .map(|r| r.index.to_string())
        .unwrap_or_else(|| "—".into())
}

/// `median (IQR q1–q3)` in ms, or why there is no figure.
fn spread_cell(s: Option<&Spread>, absent: Option<&str>) -> String {
    match s {
        Some(s) => format!(
            "{} (IQR {}–{})",
            fms(s.median_ns),
            fms(s.q1_ns),
            fms(s.q3_ns)
        ),
        None => match absent {
            Some("no such phase") | None => "—".into(),
            Some(why) => why.replace('|', "/"),
        },
    }
}

fn fms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

fn samples(s: Option<&Spread>) -> String {
    s.map(|s| format!("{} ({} runs)", s.samples, s.runs))
        .unwrap_or_else(|| "—".into())
}

/// The per-phase table: medians, spreads, sample counts and ratios with intervals.
pub fn stats_markdown(c: &Comparison) -> String {
    let mut md = String::from(
        "## Phases (ms): median (IQR), samples, Link/Mini ratio of medians [95% interval]\n\n\
         | phase | Mini median (IQR) | Mini samples | Link median (IQR) | Link samples | Link/Mini [95% CI] |\n\
         |---|---|---|---|---|---|\n",
    );
    let line = |s: &PhaseStats, label: &str| {
        format!(
            "| {label} | {} | {} | {} | {} | {} |\n",
            spread_cell(s.mini.as_ref(), s.mini_absent.as_deref()),
            samples(s.mini.as_ref()),
            spread_cell(s.link.as_ref(), s.link_absent.as_deref()),
            samples(s.link.as_ref()),
            s.ratio
                .map(|r| r.ratio_text())
                .unwrap_or_else(|| "—".into())
        )
    };
    for s in c.stats.iter().filter(|s| !s.fixed_wait) {
        md.push_str(&line(s, &s.name));
    }
    for s in c.stats.iter().filter(|s| s.fixed_wait) {
        md.push_str(&line(s, &format!("{} (fixed wait)", s.name)));
    }
    md.push_str(&format!(
        "\nMethod: {}. A side that did not pass has no figure (`skipped: …`/`failed: …`, or \
         `—` where the phase does not exist); idle is a fixed wait, shown apart.\n",
        c.method
    ));
    md
}

fn noise_markdown(c: &Comparison) -> String {
    if c.runs.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\n## Machine load before each run\n\n\
         | run | load 1/5/15 min | CPUs | CPU pressure some avg10 |\n|---|---|---|---|\n",
    );
    let f = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "—".into());
    for r in &c.runs {
        md.push_str(&format!(
            "| {} {} | {}/{}/{} | {} | {} |\n",
            r.profile,
            r.index,
            f(r.noise.load1),
            f(r.noise.load5),
            f(r.noise.load15),
            r.noise.cpus,
            r.noise
                .cpu_pressure_some_avg10
                .map(|p| format!("{p:.1}%"))
                .unwrap_or_else(|| "not available".into())
        ));
    }
    md
}

fn side_outcome(s: &Side) -> String {
    match &s.reason {
        Some(r) if s.outcome != Status::Passed => format!("**{}**: {r}", status_word(s.outcome)),
        _ => status_word(s.outcome).to_string(),
    }
}

fn execs_markdown(c: &Comparison) -> String {
    let traced = [&c.mini, &c.link].iter().any(|s| s.traced.is_some());
    if !traced {
        return "\nExec counts: no trace pass ran (use `cargo xtask runtime --trace`).\n".into();
    }
    let mut md = String::from(
        "\n## Exec counts (separate traced runs)\n\n\
         execs = successful execve/execveat; pids = distinct executing pids; \
         resident = processes alive at the phase's end.\n\n\
         | phase | round | Mini execs | Mini pids | Mini resident | Link execs | Link pids | Link resident |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let cells = |t: &Option<TracePhase>| match t {
        Some(t) => format!(
            "{} | {} | {}",
            t.execs, t.executing_pids, t.resident_processes
        ),
        None => "— | — | —".into(),
    };
    for r in &c.execs {
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.name,
            r.round,
            cells(&r.mini),
            cells(&r.link)
        ));
    }
    for s in [&c.mini, &c.link] {
        if let Some(t) = s.traced.as_ref().filter(|t| !t.available) {
            md.push_str(&format!(
                "\n{} trace **unavailable**: {}\n",
                s.profile,
                t.reason.as_deref().unwrap_or("no reason given")
            ));
        }
    }
    md
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    pub(crate) fn fixture(name: &str) -> Loaded {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name);
        load(&path).unwrap()
    }

    pub(crate) fn timed(index: u32, loaded: &Loaded) -> TimedRun {
        TimedRun {
            index,
            loaded: loaded.clone(),
            noise: Noise {
                cpus: 2,
                load1: Some(0.5),
                load5: Some(0.4),
                load15: Some(0.3),
                cpu_pressure_some_avg10: Some(1.0),
            },
        }
    }

    /// `runs` interleaved runs per side, phase durations scaled by `scale(profile, run)`.
    pub(crate) fn runs_of(runs: u32, scale: impl Fn(Profile, u32) -> f64) -> Vec<TimedRun> {
        let (mini, link) = (fixture("runtime-mini.json"), fixture("runtime-link.json"));
        let mut out = Vec::new();
        for i in 1..=runs {
            for base in [&mini, &link] {
                let mut t = timed(i, base);
                let f = scale(base.report.profile, i);
                for p in &mut t.loaded.report.phases {
                    p.duration_ns = (p.duration_ns as f64 * f) as u128;
                }
                t.loaded.path = format!("target/runtime-runs/{}-{i}.json", base.report.profile);
                // The fixtures' made-up digests differ between sides; real runs share programs.
                for a in &mut t.loaded.report.artifacts {
                    a.sha256 = format!("{:064x}", stats::seed(&a.name));
                }
                out.push(t);
            }
        }
        out
    }

    pub(crate) fn from_runs(runs: &[TimedRun]) -> Comparison {
        let (mt, lt) = (
            fixture("runtime-mini-traced.json"),
            fixture("runtime-link-traced.json"),
        );
        let mini = &representative(runs, Profile::Mini).unwrap().loaded;
        let link = &representative(runs, Profile::Link).unwrap().loaded;
        build(&Inputs {
            mode: Mode::Confined,
            mini,
            link,
            runs,
            runs_requested: (runs.len() / 2) as u32,
            rounds: 1,
            mini_traced: Some(&mt),
            link_traced: Some(&lt),
        })
    }

    pub(crate) fn sample() -> Comparison {
        // Five runs each, ±4% apart, so every phase has a small, real spread.
        from_runs(&runs_of(5, |_, i| 0.88 + 0.04 * i as f64))
    }

    #[test]
    fn comparison_from_two_recorded_reports() {
        let c = sample();
        assert_eq!(c.mini.outcome, Status::Passed);
        assert_eq!(c.link.outcome, Status::Passed);
        assert_eq!((c.mini.mode, c.link.mode), (Mode::Confined, Mode::Confined));
        assert_eq!((c.mini.processes, c.link.processes), (5, 13));
        // Host 8 + model 8 + connection 4 + harness 8 + measure 4 MiB, plus the host's 512 KiB.
        assert_eq!(c.mini.peak_rss_bytes, Some(32 * 1_048_576 + 524_288));
        assert_eq!(c.mini.artifacts, 5);

        let names: Vec<&str> = c.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "startup",
                "cold_turn",
                "warm_turn",
                "second_agent",
                "refusals",
                "protected_tools",
                "idle",
                "status_series",
                "shutdown"
            ]
        );
        let tools = c
            .phases
            .iter()
            .find(|p| p.name == "protected_tools")
            .unwrap();
        assert_eq!((tools.mini_ns, tools.ratio), (None, None));
        let startup = &c.phases[0];
        assert_eq!(startup.mini_ns, Some(120_000_000));
        assert_eq!(startup.link_ns, Some(480_000_000));
        assert_eq!(startup.ratio, Some(4.0));

        assert_eq!(c.execs.len(), 9);
        let tools = c
            .execs
            .iter()
            .find(|r| r.name == "protected_tools")
            .unwrap();
        assert!(tools.mini.is_none());
        assert_eq!(tools.link.as_ref().unwrap().execs, 6);
        assert!(c
            .caveats
            .iter()
            .any(|cv| cv.contains("separate traced runs")));
        assert!(c
            .caveats
            .iter()
            .any(|cv| cv.contains("not evidence of: memory totals")));
        assert!(!c.caveats.iter().any(|cv| cv.starts_with("diagnostic")));

        // The vocabulary is written as the same words as before it was typed.
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["mode"], "confined");
        assert_eq!(
            (&v["mini"]["profile"], &v["link"]["profile"]),
            (&"mini".into(), &"link".into())
        );
        assert_eq!(
            (&v["mini"]["mode"], &v["mini"]["outcome"]),
            (&"confined".into(), &"passed".into())
        );
        assert_eq!(v["link"]["traced"]["outcome"], "passed");

        // The JSON round-trips.
        let json = serde_json::to_string_pretty(&c).unwrap();
        let back: Comparison = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn markdown_names_both_sides_and_every_phase() {
        let c = sample();
        let md = markdown(&c);
        for p in &c.phases {
            assert!(
                md.contains(&format!("| {} | {} |", p.name, p.round)),
                "{}",
                p.name
            );
        }
        assert!(
            md.contains("| startup | 120.0 (IQR 115.2–124.8) | 5 (5 runs) | 480.0 (IQR 460.8–499.2) | 5 (5 runs) | 4.00× ["),
            "{md}"
        );
        assert!(md.contains("| idle (fixed wait) |"), "{md}");
        assert!(md.contains("Method: median of all samples"), "{md}");
        assert!(md.contains("all phases except the fixed idle wait"), "{md}");
        assert!(md.contains("| outcome | passed | passed |"), "{md}");
        assert!(md.contains("## Exec counts"));
        assert!(md.contains("## Caveats"));
    }

    #[test]
    fn skipped_side_and_missing_trace_are_caveats() {
        let mini = fixture("runtime-mini.json");
        let mut link = fixture("runtime-link.json");
        link.report.outcome = link_report::Outcome {
            status: Status::Skipped,
            reason: Some("bubblewrap cannot create a user namespace".into()),
        };
        let mut lt = fixture("runtime-link-traced.json");
        lt.report.trace = Some(link_report::TraceSection {
            available: false,
            reason: Some("trace is empty".into()),
            phases: vec![],
        });
        let runs = vec![timed(1, &mini), timed(1, &link)];
        let c = build(&Inputs {
            mode: Mode::Confined,
            mini: &mini,
            link: &link,
            runs: &runs,
            runs_requested: 1,
            rounds: 1,
            mini_traced: None,
            link_traced: Some(&lt),
        });
        assert!(c
            .caveats
            .iter()
            .any(|cv| cv == "link skipped: bubblewrap cannot create a user namespace"));
        assert!(c
            .caveats
            .iter()
            .any(|cv| cv == "link exec counts unavailable: trace is empty"));
        assert!(c.execs.is_empty(), "no available trace on either side");
        let md = markdown(&c);
        assert!(md.contains("**skipped**: bubblewrap"), "{md}");
        // A skipped side has no figures: no zero, no ratio.
        assert!(
            md.contains("| startup | 120.0 (IQR 120.0–120.0) | 1 (1 runs) | skipped: bubblewrap cannot create a user namespace | — | — |"),
            "{md}"
        );
        assert!(md.contains("| processes started | 5 | — | — |"), "{md}");
        assert!(!md.contains("| 0.0 |") && !md.contains("| 0 |"), "{md}");
        let startup = c.stats.iter().find(|s| s.name == "startup").unwrap();
        assert!(startup.link.is_none() && startup.ratio.is_none());
        assert!(md.contains("trace **unavailable**: trace is empty"), "{md}");
    }

    #[test]
    fn intervals_contain_the_medians_and_runs_are_kept() {
        let c = sample();
        assert_eq!(c.schema_version, 2);
        assert_eq!(c.runs.len(), 10);
        let order: Vec<(Profile, u32)> = c.runs.iter().map(|r| (r.profile, r.index)).collect();
        assert_eq!(
            order[..4],
            [
                (Profile::Mini, 1),
                (Profile::Link, 1),
                (Profile::Mini, 2),
                (Profile::Link, 2)
            ]
        );
        // The median run (scale 1.0 is run 3) stands for each side.
        assert!(c.mini.report.ends_with("mini-3.json"), "{}", c.mini.report);
        assert_eq!(c.mini.phases[0].duration_ns, 120_000_000);
        for s in &c.stats {
            if let Some(r) = s.ratio {
                assert!(
                    r.low <= r.estimate && r.estimate <= r.high,
                    "{}: {r:?}",
                    s.name
                );
            }
            for sp in [&s.mini, &s.link].into_iter().flatten() {
                assert!(sp.median_low_ns <= sp.median_ns && sp.median_ns <= sp.median_high_ns);
                assert_eq!(sp.run_medians_ns.len(), 5);
            }
        }
        let tools = c
            .stats
            .iter()
            .find(|s| s.name == "protected_tools")
            .unwrap();
        assert_eq!(tools.mini_absent.as_deref(), Some("no such phase"));
        assert!(tools.ratio.is_none());
        let idle = c.stats.iter().find(|s| s.name == "idle").unwrap();
        assert!(idle.fixed_wait);
        // Same scale on both sides: each ratio is the fixture's, exactly.
        let startup = c.stats.iter().find(|s| s.name == "startup").unwrap();
        assert_eq!(startup.ratio.unwrap().estimate, 4.0);
        // A deterministic figure: building again gives the same intervals.
        assert_eq!(sample().stats, c.stats);
    }

    #[test]
    fn mismatched_programs_are_refused_by_name() {
        let runs = runs_of(2, |_, _| 1.0);
        same_programs(runs.iter().map(|r| &r.loaded)).unwrap();
        let mut runs = runs;
        runs[3].loaded.report.artifacts[0].sha256 = "ff".repeat(32);
        let name = runs[3].loaded.report.artifacts[0].name.clone();
        let err = same_programs(runs.iter().map(|r| &r.loaded))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("program `{name}` differs")), "{err}");
        assert!(err.contains("link-2.json"), "{err}");
    }

    #[test]
    fn noise_is_parsed_and_called_out() {
        assert_eq!(
            parse_loadavg("0.52 1.10 2.00 1/234 5678\n"),
            (Some(0.52), Some(1.10), Some(2.0))
        );
        let psi = "some avg10=12.50 avg60=3.00 avg300=1.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure(psi), Some(12.5));
        let busy = Noise {
            cpus: 2,
            load1: Some(3.5),
            cpu_pressure_some_avg10: Some(12.5),
            ..Noise::default()
        };
        let why = busy.complaint().unwrap();
        assert!(
            why.contains("load average 3.50 on 2 CPUs") && why.contains("12.5%"),
            "{why}"
        );
        assert!(Noise {
            cpus: 2,
            load1: Some(0.3),
            ..Noise::default()
        }
        .complaint()
        .is_none());

        let mut runs = runs_of(3, |p, i| {
            if p == Profile::Link && i == 2 {
                3.0
            } else {
                1.0
            }
        });
        runs[0].noise = busy;
        let c = from_runs(&runs);
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("busy before mini run 1")),
            "{:?}",
            c.warnings
        );
        assert!(
            c.warnings
                .iter()
                .any(|w| w.starts_with("phase startup:") && w.contains("raise --runs")),
            "{:?}",
            c.warnings
        );
        assert!(markdown(&c).contains("**warning**: phase startup"));
    }

    #[test]
    fn one_failed_run_fails_its_side_and_leaves_the_figures() {
        let mut runs = runs_of(3, |_, _| 1.0);
        runs[3].loaded.report.outcome = link_report::Outcome {
            status: Status::Failed,
            reason: Some("cold_turn timed out".into()),
        };
        let c = from_runs(&runs);
        assert_eq!(c.link.outcome, Status::Failed);
        assert_eq!(c.link.reason.as_deref(), Some("run 2: cold_turn timed out"));
        let startup = c.stats.iter().find(|s| s.name == "startup").unwrap();
        assert_eq!(startup.link.as_ref().unwrap().samples, 2);
        assert_eq!(startup.mini.as_ref().unwrap().samples, 3);
    }

    #[test]
    fn merge_keeps_run_order() {
        let k = |s: &str| (s.to_string(), 0u32);
        let merged = merge_order(
            &[k("a"), k("b"), k("d")],
            &[k("a"), k("b"), k("c"), k("d"), k("e")],
        );
        assert_eq!(merged, vec![k("a"), k("b"), k("c"), k("d"), k("e")]);
        let merged = merge_order(&[k("b")], &[k("a"), k("b")]);
        assert_eq!(merged, vec![k("a"), k("b")]);
    }
}
