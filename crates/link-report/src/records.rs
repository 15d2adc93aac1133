//! The runtime report (`runtime-*.json`) and the monitor's samples.

use crate::{Mode, Profile};
use serde::{Deserialize, Serialize};

/// Bumped whenever a field is added, changes meaning or disappears; `schemas/run-report.schema.json`
/// is this version's, generated from these types (`cargo xtask schemas`).
/// 2: `trace.outside_phases_execs`, `trace.total_execs`; every field since 1 without a bump
/// (`phases[].cpu_ns`, `startup_cpu`, ...) is in the published schema.
pub const SCHEMA_VERSION: u32 = 2;

/// One run of one profile.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Report {
    pub schema_version: u32,
    /// `git rev-parse HEAD` of the programs, as the caller passed it.
    pub source: String,
    pub profile: Profile,
    pub mode: Mode,
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
    /// The CPU time start-up took, counted when the ready line came; absent: not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_cpu: Option<StartupCpu>,
}

/// The CPU time (user and system, every thread) the host and every process it started and
/// still ran had used when its ready line came: start-up's work, whatever its parallelism. On
/// `cpus` CPUs start-up cannot take less than `cpu_ns / cpus`. Not in it: a process (or a
/// thread) that had already exited, and the sandbox probe full Link starts right after
/// `ready` behind a kept answer, with what that probe runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StartupCpu {
    pub cpu_ns: u64,
    /// The processes counted: the host and its live descendants.
    pub processes: u32,
}

/// A program the run used, as found on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Artifact {
    pub name: String,
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The machine and what it could do.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Configuration {
    pub profile: Profile,
    pub mode: Mode,
    pub rounds: u32,
    pub monitor_interval_ms: u64,
    pub traced: bool,
    /// Variables the children received that shape the run (`LNK_KEYCHAIN`, ...).
    pub child_env: Vec<(String, String)>,
}

/// The directories involved.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Roots {
    pub programs: String,
    pub state: String,
    pub output: String,
}

/// One timed phase; epoch bounds let a trace be matched to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Phase {
    pub name: String,
    pub round: u32,
    pub start_unix_ns: u128,
    pub end_unix_ns: u128,
    pub duration_ns: u128,
    /// CPU time the runtime's processes (every thread of the host and its live descendants,
    /// but the sandbox probe) used from the phase's start to its end; absent where it cannot
    /// be read at both ends (start-up before the host, a stop whose processes are gone).
    /// Processes that started and ended within the phase are not in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
}

/// A process the runtime started, identified beyond its pid.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SampleRound {
    pub index: u64,
    pub unix_ns: u128,
    pub processes: Vec<ProcessSample>,
}

/// One process in one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatusPoint {
    pub index: u32,
    pub start_unix_ns: u128,
    pub duration_ns: u128,
    pub http_status: u16,
}

vocabulary! {
    /// The verdict of a check ([`Check::outcome`]) and of the whole run ([`Outcome::status`]).
    #[derive(Default)]
    pub enum Status ("status") {
        Passed = "passed",
        #[default]
        Failed = "failed",
        Skipped = "skipped",
    }
}

/// The verdict of one check: the same words as a run's [`Status`].
pub type CheckOutcome = Status;

vocabulary! {
    /// Every check a report carries; [`CheckName::ALL`] is their order in a report (DESIGN §7).
    pub enum CheckName ("check") {
        Startup = "startup",
        ColdTurn = "cold_turn",
        WarmTurn = "warm_turn",
        AgentFilesIsolated = "agent_files_isolated",
        UnauthenticatedRefused = "unauthenticated_refused",
        ConversationWriteRefused = "conversation_write_refused",
        RunToolConfined = "run_tool_confined",
        FileToolConfined = "file_tool_confined",
        SchedulerFired = "scheduler_fired",
        IdleSamplesCompleted = "idle_samples_completed",
        StatusSeries = "status_series",
        ProcessesStopped = "processes_stopped",
        NoOrphans = "no_orphans",
    }
}

vocabulary! {
    /// Every timed phase a report can carry, in run order ([`Phase::name`] is one of these
    /// words; a reader keeps a name it does not know as plain text).
    pub enum PhaseName ("phase") {
        Startup = "startup",
        ColdTurn = "cold_turn",
        WarmTurn = "warm_turn",
        SecondAgent = "second_agent",
        /// Requests without a valid token, one round per request: the same on both sides.
        Refusals = "refusals",
        /// Confined full Link: a turn whose file-tool write of the conversation log is
        /// refused as protected (a whole tool turn; Mini has no tools).
        RefusedWrite = "refused_write",
        ProtectedTools = "protected_tools",
        ToolsRefused = "tools_refused",
        Scheduler = "scheduler",
        /// A fixed wait while the monitor samples, not work.
        Idle = "idle",
        StatusSeries = "status_series",
        /// `link down` until the host and every plugin are gone and the host is collected.
        Shutdown = "shutdown",
        /// `link down` until the host process itself exited: the host's own exit time, the
        /// floor `shutdown` is measured against. It lies within `shutdown`.
        HostExit = "host_exit",
    }
}

impl PhaseName {
    /// A wait of fixed length, shown apart and never in a work total.
    pub fn fixed_wait(self) -> bool {
        self == PhaseName::Idle
    }

    /// Work only full Link does (its tools, its scheduler): timed, judged against a
    /// baseline, never divided by a Mini figure. Every other phase does the same requests on
    /// both sides, so its Link/Mini ratio compares like with like.
    pub fn link_only(self) -> bool {
        matches!(
            self,
            PhaseName::RefusedWrite
                | PhaseName::ProtectedTools
                | PhaseName::ToolsRefused
                | PhaseName::Scheduler
        )
    }

    /// The phase whose time this one is part of; such a phase is never in a total.
    pub fn within(self) -> Option<PhaseName> {
        (self == PhaseName::HostExit).then_some(PhaseName::Shutdown)
    }

    /// Whether a phase named `name` counts in a run's total time (every phase not within
    /// another; names this vocabulary does not know count).
    pub fn in_total(name: &str) -> bool {
        name.parse::<PhaseName>()
            .map_or(true, |p| p.within().is_none())
    }

    /// Whether a phase named `name` counts as work: in the total and not a fixed wait.
    pub fn is_work(name: &str) -> bool {
        name.parse::<PhaseName>()
            .map_or(true, |p| p.within().is_none() && !p.fixed_wait())
    }
}

/// A named check with what was observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Check {
    pub name: CheckName,
    pub outcome: Status,
    pub detail: String,
}

/// The verdict and, unless passed, why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Outcome {
    pub status: Status,
    pub reason: Option<String>,
}

/// What the run exercised and what it is explicitly not evidence of.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Coverage {
    pub exercised: Vec<String>,
    pub not_evidence_of: Vec<String>,
}

/// Counts from an strace of the run, per phase; `available: false` never means zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceSection {
    pub available: bool,
    pub reason: Option<String>,
    pub phases: Vec<TracePhase>,
    /// Execs within no phase's bounds: before start-up, between phases (full Link's sandbox
    /// probe right after `ready`), after shutdown. With the phases that count toward the total
    /// ([`crate::PhaseName::in_total`]) they make `total_execs`. `None` in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_phases_execs: Option<u64>,
    /// Every successful exec of the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_execs: Option<u64>,
}

/// Exec activity inside one phase's epoch bounds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MonitorStatus {
    pub interval_ms: u64,
    pub completed_samples: u64,
    pub stopped: bool,
}

impl Check {
    pub fn new(name: CheckName, outcome: Status, detail: impl Into<String>) -> Check {
        Check {
            name,
            outcome,
            detail: detail.into(),
        }
    }
    pub fn passed(name: CheckName, detail: impl Into<String>) -> Check {
        Check::new(name, Status::Passed, detail)
    }
    pub fn failed(name: CheckName, detail: impl Into<String>) -> Check {
        Check::new(name, Status::Failed, detail)
    }
    pub fn skipped(name: CheckName, detail: impl Into<String>) -> Check {
        Check::new(name, Status::Skipped, detail)
    }
}

impl Report {
    /// An empty report of one run: everything but what ran, and how, left to fill in.
    pub fn new(profile: Profile, mode: Mode) -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            source: String::new(),
            profile,
            mode,
            artifacts: Vec::new(),
            platform: Platform::default(),
            configuration: Configuration::new(profile, mode),
            roots: Roots::default(),
            phases: Vec::new(),
            processes: Vec::new(),
            samples: Vec::new(),
            status_series: Vec::new(),
            checks: Vec::new(),
            outcome: Outcome::default(),
            coverage: Coverage::default(),
            trace: None,
            startup_cpu: None,
        }
    }
}

impl Configuration {
    /// Nothing asked for yet: no rounds, no monitor interval, untraced, no child variables.
    pub fn new(profile: Profile, mode: Mode) -> Configuration {
        Configuration {
            profile,
            mode,
            rounds: 0,
            monitor_interval_ms: 0,
            traced: false,
            child_env: Vec::new(),
        }
    }
}
