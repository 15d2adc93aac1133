//! The Mini ↔ full Link comparison: built from N interleaved runs of each side (and the traced
//! twins), written as `runtime-comparison.json` and `.md`. Per phase: each side's median,
//! spread and sample count, and the Link/Mini ratio with a 95% bootstrap interval
//! ([`crate::stats`]); the machine's load around every run, and warnings when it was noisy.
//!
//! Modules: [`noise`] (the machine's load before a run), [`runs`] (checking the runs share
//! their programs, choosing each side's median run), [`build`] (the comparison from the
//! runs) and [`markdown`] (the page).

mod build;
mod markdown;
mod noise;
mod runs;
#[cfg(test)]
pub(crate) mod tests;

pub use build::{build, Inputs};
pub use markdown::{markdown, ms, stats_markdown, status_word};
pub use noise::Noise;
pub use runs::{representative, same_programs};

use crate::stats::{Interval, Spread};
use anyhow::{Context, Result};
use link_report::{Mode, Phase, Profile, Report, Status, TracePhase};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Bumped whenever a field of the comparison changes meaning or disappears.
/// 2: `runs`, `stats`, `method`, `warnings`; `mini`/`link` are each side's median run.
/// (Added since, without a bump: `stats[].within`, `host_exit`.)
pub const SCHEMA_VERSION: u32 = 2;

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
    /// Per side, the shutdown phase against the host's own exit time.
    #[serde(default)]
    pub host_exit: Vec<ExitOverhead>,
    /// `cargo xtask runtime --bench-sandbox`: the sandbox benchmark, as in
    /// `bench-sandbox.json`; absent without the flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_bench: Option<crate::bench_sandbox::SandboxBench>,
    /// Start-up's CPU time on each side; absent when no passed run measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_cpu: Option<StartupCpuStats>,
}

/// Start-up's CPU time (`Report::startup_cpu`) over each side's passed runs, and the floor it
/// puts under start-up on this machine's CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartupCpuStats {
    pub cpus: usize,
    pub sides: Vec<StartupCpuSide>,
    /// Link/Mini, the ratio of medians with its 95% bootstrap interval over runs.
    pub ratio: Option<Interval>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_cpu: Option<link_report::StartupCpu>,
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
    /// The phase this one is part of (`host_exit` lies within `shutdown`): never in totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    pub mini: Option<Spread>,
    /// Why Mini has no figure (`skipped: ...`, `no such phase`).
    pub mini_absent: Option<String>,
    pub link: Option<Spread>,
    pub link_absent: Option<String>,
    /// Link/Mini ratio of medians with its 95% bootstrap interval.
    pub ratio: Option<Interval>,
}

/// One side's `shutdown` over its `host_exit`: how much longer than the host took to exit
/// the stop took (`link down` seeing the exit and returning, and the runner collecting the
/// host), as a ratio and in nanoseconds; a ratio alone would flatter a side whose host is
/// slower to exit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
