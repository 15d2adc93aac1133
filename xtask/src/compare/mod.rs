//! The Mini ↔ full Link comparison: built from N interleaved runs of each side (and the traced
//! twins), written as `runtime-comparison.json` and `.md`. Per phase: each side's median,
//! spread and sample count, and the Link/Mini ratio with a 95% bootstrap interval
//! ([`crate::stats`]); the machine's load around every run ([`crate::noise`]), and warnings
//! when it was noisy.
//!
//! Modules: [`runs`] (checking the runs share
//! their programs, choosing each side's median run), [`build`](mod@build) (the comparison from the
//! runs) and [`markdown`](mod@markdown) (the page).

mod build;
mod markdown;
mod order;
pub mod pairs;
mod runs;
#[cfg(test)]
pub(crate) mod tests;

pub use crate::noise::{CpuTicks, Noise, WIDE_INTERVAL};
pub use build::{build, run_record, Inputs};
pub use markdown::{cell, markdown, ms, stats_markdown, status_word};
pub use runs::{representative, same_programs};

use crate::stats::{Interval, Spread};
use anyhow::{Context, Result};
use link_report::{Mode, Phase, Profile, Report, Status, TracePhase};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Bumped whenever a field of the comparison changes meaning or disappears.
/// 2: `runs`, `stats`, `method`, `warnings`; `mini`/`link` are each side's median run.
/// 3: `stats` come from the paired timing `cycles` (kept raw, for a later baseline), not from
/// the scenario `runs`; `stats[].ratio` is the paired figure; `pairs`, `sampling`,
/// `shared_total`, `ab`.
/// 4: `machine`, `source_checked`, `mini.traced`/`link.traced` gain `outside_phases_execs` and
/// `total_execs`; the published schema is `schemas/runtime-comparison.schema.json`.
pub const SCHEMA_VERSION: u32 = 4;
/// The oldest comparison a `--baseline` may be: 3 keeps the raw cycles a baseline needs.
pub const MIN_BASELINE_SCHEMA: u32 = 3;

/// One comparison of a Mini run and a full Link run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Per side, the shutdown phase against the host's own exit time.
    #[serde(default)]
    pub host_exit: Vec<ExitOverhead>,
    /// The machine it ran on (`cargo xtask fleet` compares machines by it); `None` in older
    /// comparisons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<link_report::machine::Machine>,
    /// How the sides' `source` was checked against the checkout; `None`: it was not (the
    /// runner records what it is given, and `--allow-stale` lets other programs through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_checked: Option<String>,
    /// `cargo xtask runtime --bench-sandbox`: the sandbox benchmark, as in
    /// `bench-sandbox.json`; absent without the flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_bench: Option<crate::bench_sandbox::report::SandboxBench>,
    /// Start-up's CPU time on each side; absent when no passed run measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_cpu: Option<StartupCpuStats>,
    /// Pairs of the measured programs in which both cycles passed.
    #[serde(default)]
    pub pairs: u32,
    /// How the cycles were sampled and why they stopped.
    #[serde(default)]
    pub sampling: Option<Sampling>,
    /// Link/Mini of the shared work phases summed per cycle: the headline, without the work
    /// only full Link does.
    #[serde(default)]
    pub shared_total: Option<crate::paired::LogMean>,
    /// `--against DIR`: each side's new/old per phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ab: Option<Ab>,
    /// Every timing cycle, raw (each phase round's wall and CPU time): what `stats` come
    /// from, and what a later `--baseline` tests against.
    #[serde(default)]
    pub cycles: Vec<RunRecord>,
}

/// How many cycles ran and why they stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Sampling {
    /// The precision asked for: every figure's interval within about ±this percent.
    pub precision_pct: f64,
    pub budget_s: f64,
    pub elapsed_s: f64,
    pub min_pairs: u32,
    /// Figures that did not reach the precision, with the width they reached.
    pub not_reached: Vec<String>,
}

impl Sampling {
    /// A warning when the budget ran out before every figure was precise enough.
    pub fn short_of_target(&self) -> Option<String> {
        (!self.not_reached.is_empty()).then(|| {
            format!(
                "the time budget ({:.0} s) ran out before every figure reached ±{}%: {}; raise \
                 --budget or close other work",
                self.budget_s,
                self.precision_pct,
                self.not_reached.join(", ")
            )
        })
    }
}

/// `--against DIR`: the measured programs (new) over the other ones (old), per side and phase,
/// from units of four cycles (each build on each side) run back to back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ab {
    pub against: String,
    pub max_regression: f64,
    /// Figures judged: the Bonferroni correction divides 5% by this.
    pub tests: u32,
    pub rows: Vec<AbRow>,
}

impl Ab {
    pub fn regressions(&self) -> impl Iterator<Item = &AbRow> {
        self.rows
            .iter()
            .filter(|r| r.kind == crate::paired::Kind::Regressed)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AbRow {
    pub phase: String,
    pub profile: Profile,
    pub new_over_old: crate::paired::LogMean,
    pub kind: crate::paired::Kind,
}

impl AbRow {
    /// `startup link: new/old 1.31× [1.24–1.38], p 2e-9 (paired t, 1 of 24 tests)`.
    pub fn describe(&self, tests: u32) -> String {
        let p = self.new_over_old.p_above.unwrap_or(f64::NAN);
        format!(
            "{} {}: new/old {}, one-sided p {p:.2e} (paired t on logs; Bonferroni over {tests} \
             figures)",
            self.phase,
            self.profile,
            self.new_over_old.text()
        )
    }
}

/// Start-up's CPU time (`Report::startup_cpu`) over each side's passed runs, and the floor it
/// puts under start-up on this machine's CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StartupCpuStats {
    pub cpus: usize,
    pub sides: Vec<StartupCpuSide>,
    /// Link/Mini, the ratio of medians with its 95% bootstrap interval over runs.
    pub ratio: Option<Interval>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StartupCpuSide {
    pub profile: Profile,
    /// Passed runs that measured it.
    pub runs: u32,
    pub median_ns: Option<f64>,
    /// The processes counted, median over those runs.
    pub processes: Option<u32>,
    /// `median_ns / cpus`: no start-up of this side can be shorter on this machine.
    pub floor_ns: Option<f64>,
    /// The `startup` phase over the run's own floor, median of the runs' own ratios with its
    /// 95% interval: how far start-up is from using every CPU all the time.
    #[serde(default)]
    pub over_floor: Option<Interval>,
}

/// One timed run as it is compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_cpu: Option<link_report::StartupCpu>,
    /// Set for a timing cycle: its pair, its place in the pair and which programs it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<CycleInfo>,
}

/// Which programs a cycle ran: the ones measured (`new`, `target/release`) or, with
/// `--against DIR`, the ones they are compared with (`old`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Build {
    New,
    Old,
}

impl Build {
    pub fn as_str(self) -> &'static str {
        match self {
            Build::New => "new",
            Build::Old => "old",
        }
    }
}

/// Where a timing cycle sits among the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CycleInfo {
    /// 1-based: the pair (with `--against`, the unit of four) it belongs to.
    pub pair: u32,
    /// 1-based place in its pair: who ran first is recorded, so its effect can be measured.
    pub position: u32,
    pub build: Build,
}

/// One phase round of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseSample {
    pub name: String,
    pub round: u32,
    pub duration_ns: u128,
    /// The runtime's CPU time in the round, where the runner could read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
}

/// One phase over all runs: each side's figures and the ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseStats {
    pub name: String,
    /// A fixed wait (idle): shown apart, never in totals.
    pub fixed_wait: bool,
    /// The phase this one is part of (`host_exit` lies within `shutdown`): never in totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    pub mini: Option<Spread>,
    /// Why Mini has no figure (`skipped: ...`, `no such phase`).
    pub mini_absent: Option<String>,
    pub link: Option<Spread>,
    pub link_absent: Option<String>,
    /// The paired Link/Mini figure's interval ([`PhaseStats::paired`]); none for Link-only
    /// work, a side that did not pass, or too few pairs.
    pub ratio: Option<Interval>,
    /// Work only full Link does: no ratio, its own time judged.
    #[serde(default)]
    pub link_only: bool,
    /// Link/Mini from the pairs' log ratios, with what it could detect.
    #[serde(default)]
    pub paired: Option<crate::paired::LogMean>,
    /// The same from the runtime's CPU time.
    #[serde(default)]
    pub cpu_ratio: Option<crate::paired::LogMean>,
    /// Each side's time per cycle: geometric mean with its interval.
    #[serde(default)]
    pub mini_time: Option<crate::paired::LogMean>,
    #[serde(default)]
    pub link_time: Option<crate::paired::LogMean>,
    /// Each side's median CPU time per cycle, ns.
    #[serde(default)]
    pub mini_cpu_ns: Option<f64>,
    #[serde(default)]
    pub link_cpu_ns: Option<f64>,
    /// Link/Mini when Mini ran first over Link/Mini when Link ran first.
    #[serde(default)]
    pub position_effect: Option<Interval>,
    /// Pairs whose log ratio is an outlier (they are in the figure, and named).
    #[serde(default)]
    pub outlying_pairs: Vec<u32>,
}

/// One side's `shutdown` over its `host_exit`: how much longer than the host took to exit
/// the stop took (`link down` seeing the exit and returning, and the runner collecting the
/// host), as a ratio and in nanoseconds; a ratio alone would flatter a side whose host is
/// slower to exit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExitOverhead {
    pub profile: Profile,
    /// Passed runs with both phases.
    pub runs: u32,
    /// The median of the runs' shutdown − host_exit.
    #[serde(default)]
    pub median_over_ns: Option<f64>,
    /// shutdown / host_exit: the median of the runs' own ratios, with its 95% bootstrap
    /// interval over runs ([`crate::stats::paired_ratio`]).
    pub ratio: Option<Interval>,
    /// Why there is no ratio.
    pub absent: Option<String>,
}

/// A timed run as read from disk, with the load just before it.
#[derive(Debug, Clone)]
pub struct TimedRun {
    pub index: u32,
    pub loaded: Loaded,
    pub noise: Noise,
    /// A timing cycle's place; `None` for a full scenario run.
    pub cycle: Option<CycleInfo>,
}

/// What one side's report says, reduced to what is compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TracedSide {
    pub report: String,
    pub outcome: Status,
    pub available: bool,
    pub reason: Option<String>,
    /// Execs within no phase's bounds, and of the whole trace (`None`: unavailable, or an older
    /// report).
    #[serde(default)]
    pub outside_phases_execs: Option<u64>,
    #[serde(default)]
    pub total_execs: Option<u64>,
}

/// One phase on both sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseRow {
    pub name: String,
    pub round: u32,
    pub mini_ns: Option<u128>,
    pub link_ns: Option<u128>,
    /// Link / Mini; `None` when either is missing or Mini took no measurable time.
    pub ratio: Option<f64>,
}

/// One phase's trace counts on both sides (`None`: the side has no such phase or no trace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

impl Loaded {
    /// A failed stand-in for a run that left no readable report at `path`, saying why.
    pub fn failed(profile: Profile, mode: Mode, source: &str, path: &Path, why: String) -> Loaded {
        let reason = if path.exists() {
            why
        } else {
            format!("the runner wrote no report at {}: {why}", path.display())
        };
        Loaded {
            path: "(none)".into(),
            sha256: String::new(),
            report: Report {
                source: source.into(),
                outcome: link_report::Outcome {
                    status: Status::Failed,
                    reason: Some(reason),
                },
                ..Report::new(profile, mode)
            },
        }
    }
}

/// Reads and decodes one report.
pub fn load(path: &Path) -> Result<Loaded> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let report: Report = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a runtime report", path.display()))?;
    Ok(Loaded {
        path: path.display().to_string(),
        sha256: link_protocol::digest::sha256_hex(&bytes),
        report,
    })
}
