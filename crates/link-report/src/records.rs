//! The runtime report (`runtime-*.json`) and the monitor's samples.

use serde::{Deserialize, Serialize};

/// Bumped whenever a field changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// One run of one profile.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    /// `git rev-parse HEAD` of the programs, as the caller passed it.
    pub source: String,
    pub profile: String,
    pub mode: String,
    pub artifacts: Vec<Artifact>,
    pub platform: Platform,
    pub configuration: Configuration,
    pub roots: Roots,
    pub phases: Vec<Phase>,
    pub processes: Vec<ProcessIdentity>,
    pub samples: Vec<SampleRound>,
    pub status_series: Vec<StatusPoint>,
    pub checks: Vec<Check>,
    pub outcome: Outcome,
    pub coverage: Coverage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceSection>,
}

/// A program the run used, as found on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub name: String,
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The machine and what it could do.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Platform {
    pub os: String,
    pub arch: String,
    pub kernel: String,
    pub cpus: usize,
    /// The sandbox probe's JSON, verbatim (status, landlock ABI, bwrap version, reason).
    pub sandbox: serde_json::Value,
    /// The native probe: subreaper, pidfd, `/proc` sampling.
    pub native: serde_json::Value,
}

/// How the run was asked to go.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Configuration {
    pub profile: String,
    pub mode: String,
    pub rounds: u32,
    pub monitor_interval_ms: u64,
    pub traced: bool,
    /// Variables the children received that shape the run (`LNK_KEYCHAIN`, ...).
    pub child_env: Vec<(String, String)>,
}

/// The directories involved.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Roots {
    pub programs: String,
    pub state: String,
    pub output: String,
}

/// One timed phase; epoch bounds let a trace be matched to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    pub name: String,
    pub round: u32,
    pub start_unix_ns: u128,
    pub end_unix_ns: u128,
    pub duration_ns: u128,
}

/// A process the runtime started, identified beyond its pid.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: i32,
    pub ppid: i32,
    pub role: String,
    pub exe: String,
    pub argv: Vec<String>,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time_ticks: u64,
    pub phases_seen: Vec<String>,
}

/// One pass of the monitor over the runtime's processes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleRound {
    pub index: u64,
    pub unix_ns: u128,
    pub processes: Vec<ProcessSample>,
}

/// One process in one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub pid: i32,
    pub ppid: i32,
    pub name: String,
    pub rss_bytes: u64,
    pub cpu_ns: u64,
    pub state: String,
}

impl SampleRound {
    /// Total resident memory of this pass.
    pub fn rss_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.rss_bytes).sum()
    }
}

/// One `GET /v1/status` of the isolated status series.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusPoint {
    pub index: u32,
    pub start_unix_ns: u128,
    pub duration_ns: u128,
    pub http_status: u16,
}

/// Whether one check held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    Passed,
    #[default]
    Failed,
    Skipped,
}

/// A named check with what was observed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub outcome: CheckOutcome,
    pub detail: String,
}

/// The verdict of the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Passed,
    #[default]
    Failed,
    Skipped,
}

/// The verdict and, unless passed, why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    pub reason: Option<String>,
}

/// What the run exercised and what it is explicitly not evidence of.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    pub exercised: Vec<String>,
    pub not_evidence_of: Vec<String>,
}

/// Counts from an strace of the run, per phase; `available: false` never means zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceSection {
    pub available: bool,
    pub reason: Option<String>,
    pub phases: Vec<TracePhase>,
}

/// Exec activity inside one phase's epoch bounds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracePhase {
    pub name: String,
    pub round: u32,
    /// Successful `execve`/`execveat` completions.
    pub execs: u64,
    /// Distinct pids that completed an exec.
    pub executing_pids: u64,
    /// Processes alive at the phase's end.
    pub resident_processes: u64,
}

/// What the monitor plugin reports about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonitorStatus {
    pub interval_ms: u64,
    pub completed_samples: u64,
    pub stopped: bool,
}

impl Check {
    pub fn passed(name: &str, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            outcome: CheckOutcome::Passed,
            detail: detail.into(),
        }
    }
    pub fn failed(name: &str, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            outcome: CheckOutcome::Failed,
            detail: detail.into(),
        }
    }
    pub fn skipped(name: &str, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            outcome: CheckOutcome::Skipped,
            detail: detail.into(),
        }
    }
}
