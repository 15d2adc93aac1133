//! The one place the scenario writes its records: checks (pass, fail, skip), phases with their
//! timings, the processes seen in each phase, and at the end the outcome and coverage of the
//! [`Report`]; also the report's JSON file.

use super::judge;
use super::plan::Step;
use super::scope::Scope;
use super::text::ms;
use super::{ScenarioConfig, MONITOR_INTERVAL_SECS};
use crate::fixture::StateRoot;
use crate::{programs, reaper};
use link_os::sample::unix_ns;
use link_protocol::plugin::{Mode, Profile};
use link_report::{
    Artifact, Check, CheckName, Coverage, Phase, PhaseName, Platform, ProcessIdentity, Report,
    SampleRound, Status, StatusPoint,
};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::path::Path;
use std::time::{Duration, Instant};

/// When a phase started, by the wall clock (for the report) and monotonically (its duration).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timer {
    start_ns: u128,
    at: Instant,
    /// The phase's CPU time is read at its end, against [`Recorder::timer`]'s snapshot.
    cpu: bool,
}

impl Timer {
    /// A phase timer without CPU time: before the host runs, or when its processes will be
    /// gone at the phase's end.
    pub(super) fn start() -> Timer {
        Timer {
            start_ns: unix_ns(),
            at: Instant::now(),
            cpu: false,
        }
    }
}

/// The report of one run while it is being written.
pub(super) struct Recorder<'a> {
    config: &'a ScenarioConfig,
    /// The run's turn and which processes are its own.
    scope: &'a Scope,
    label: String,
    report: Report,
    checks: BTreeMap<CheckName, Check>,
    /// Pid → role, from `host.status`.
    roles: HashMap<i32, String>,
    /// (pid, start time) → index into `report.processes`.
    seen: HashMap<(i32, u64), usize>,
    host_pid: Option<i32>,
    first_failure: Option<String>,
    /// CPU time per runtime process when the last [`Recorder::timer`] started.
    cpu_start: Vec<(i32, u64)>,
    /// The runtime's processes at the last [`Recorder::observe`]: the host first, the sandbox
    /// probe left out.
    runtime: Vec<i32>,
}

impl<'a> Recorder<'a> {
    pub(super) fn new(config: &'a ScenarioConfig, scope: &'a Scope) -> Recorder<'a> {
        let mut report = Report::new(config.profile, config.mode);
        report.source = config.source.clone();
        report.platform = platform();
        report.configuration.rounds = config.rounds;
        report.configuration.monitor_interval_ms = MONITOR_INTERVAL_SECS * 1000;
        report.configuration.traced = config.traced;
        report.roots.programs = absolute(&config.programs);
        report.roots.output = config.output.as_deref().map(absolute).unwrap_or_default();
        Recorder {
            config,
            scope,
            label: config.label(),
            report,
            checks: BTreeMap::new(),
            roles: HashMap::new(),
            seen: HashMap::new(),
            host_pid: None,
            first_failure: None,
            cpu_start: Vec::new(),
            runtime: Vec::new(),
        }
    }

    fn diagnostic(&self) -> bool {
        self.config.mode == Mode::Diagnostic
    }

    /// A progress line: `[label] msg`.
    pub(super) fn say(&self, msg: impl Display) {
        link_protocol::errln!("[{}] {msg}", self.label);
    }

    fn decorate(&self, detail: impl Into<String>) -> String {
        let detail = detail.into();
        if self.diagnostic() {
            format!("diagnostic (not confined qualification): {detail}")
        } else {
            detail
        }
    }

    pub(super) fn pass(&mut self, name: CheckName, detail: impl Into<String>) {
        let detail = self.decorate(detail);
        self.say(format!("check {name} passed: {detail}"));
        self.checks.insert(name, Check::passed(name, detail));
    }

    pub(super) fn fail(&mut self, name: CheckName, detail: impl Into<String>) {
        let detail = self.decorate(detail);
        self.say(format!("check {name} FAILED: {detail}"));
        if self.first_failure.is_none() {
            self.first_failure = Some(format!("{name}: {detail}"));
        }
        self.checks.insert(name, Check::failed(name, detail));
    }

    pub(super) fn skip(&mut self, name: CheckName, detail: impl Into<String>) {
        let detail = self.decorate(detail);
        self.checks.insert(name, Check::skipped(name, detail));
    }

    /// Records a check from a result: `Ok(detail)` passes, `Err(detail)` fails.
    pub(super) fn judge(
        &mut self,
        name: CheckName,
        result: Result<String, String>,
    ) -> Result<(), String> {
        match result {
            Ok(detail) => {
                self.pass(name, detail);
                Ok(())
            }
            Err(detail) => {
                self.fail(name, detail.clone());
                Err(detail)
            }
        }
    }

    /// A phase failed with `e`: its check fails unless already decided, and the run stops.
    pub(super) fn phase_failed(&mut self, step: Step, e: String) {
        if !self.checks.contains_key(&step.check()) {
            self.fail(step.check(), e.clone());
        }
        if self.first_failure.is_none() {
            self.first_failure = Some(format!("{}: {e}", step.name()));
        }
        self.say(format!(
            "phase {} failed; stopping the runtime",
            step.name()
        ));
    }

    /// An event before the first failure that explains it: it leads the run's reason.
    pub(super) fn first_cause(&mut self, cause: String) {
        self.say(format!("first cause: {cause}"));
        self.first_failure = Some(match self.first_failure.take() {
            Some(then) => format!("{cause}; then {then}"),
            None => cause,
        });
    }

    /// The probe said the run cannot happen here: every check skipped, the run skipped.
    pub(super) fn skip_run(&mut self, reason: String) {
        self.say(format!("SKIPPED: {reason}"));
        for name in CheckName::ALL {
            self.skip(name, format!("skipped: {reason}"));
        }
        self.report.outcome = link_report::Outcome {
            status: Status::Skipped,
            reason: Some(reason),
        };
    }

    /// A phase timer that also measures the runtime's CPU time: every thread of the host and
    /// its live descendants but the sandbox probe, as the last [`Recorder::observe`] found
    /// them ([`super::cpu::runtime_processes`]), read before the clock starts and after it
    /// stops, so reading costs the phase nothing.
    pub(super) fn timer(&mut self) -> Timer {
        self.cpu_start = super::cpu::cpu_of(&self.runtime);
        Timer {
            cpu: !self.cpu_start.is_empty(),
            ..Timer::start()
        }
    }

    /// The CPU time the processes of the last [`Recorder::timer`] used since; one that ended
    /// meanwhile counts for nothing it did after the start (its time went with it).
    fn cpu_since_timer(&self) -> u64 {
        use link_os::sample::cpu_run_ns;
        self.cpu_start
            .iter()
            .map(|&(pid, before)| cpu_run_ns(pid).map_or(0, |now| now.saturating_sub(before)))
            .sum()
    }

    /// Records a phase that ran from `t` until now, and the processes alive at its end.
    pub(super) fn end_phase(&mut self, name: PhaseName, round: u32, t: Timer) -> Duration {
        self.end_phase_at(name, round, t, Instant::now())
    }

    /// [`end_phase`](Self::end_phase) for a phase that ended at `end`.
    pub(super) fn end_phase_at(
        &mut self,
        name: PhaseName,
        round: u32,
        t: Timer,
        end: Instant,
    ) -> Duration {
        let took = self.phase_until(name, round, t, end);
        if t.cpu {
            let cpu = self.cpu_since_timer();
            if let Some(p) = self.report.phases.last_mut() {
                p.cpu_ns = Some(cpu);
            }
        }
        let rounds = match (name, round) {
            (_, 0) => String::new(),
            (PhaseName::WarmTurn, _) => format!(" {round}/{}", self.config.rounds),
            _ => format!(" {round}"),
        };
        self.say(format!("phase {name}{rounds} ... {}", ms(took)));
        self.observe(name);
        took
    }

    /// Records a phase that ran from `t` until `end`, without observing processes (for a
    /// phase that ended before the runner could look, such as [`PhaseName::HostExit`]).
    pub(super) fn phase_until(
        &mut self,
        name: PhaseName,
        round: u32,
        t: Timer,
        end: Instant,
    ) -> Duration {
        let took = end.saturating_duration_since(t.at);
        self.report.phases.push(Phase {
            name: name.as_str().into(),
            round,
            start_unix_ns: t.start_ns,
            end_unix_ns: t.start_ns + took.as_nanos(),
            duration_ns: took.as_nanos(),
            cpu_ns: None,
        });
        took
    }

    pub(super) fn state_root(&mut self, root: &StateRoot) {
        self.report.roots.state = root.path().display().to_string();
        self.report.configuration.child_env = root.isolated_env();
        self.say(format!("state root {}", root.path().display()));
    }

    pub(super) fn probes(&mut self, sandbox: Value, native: Value) {
        self.report.platform.sandbox = sandbox;
        self.report.platform.native = native;
    }

    /// How the host knew confinement holds (`link status`'s `sandbox.probe`: `ran`, or
    /// `cached` with the probe running behind it), beside this runner's own probe.
    pub(super) fn host_probe(&mut self, how: &Value) {
        if let Some(sandbox) = self.report.platform.sandbox.as_object_mut() {
            sandbox.insert("host_probe".into(), how.clone());
        }
    }

    pub(super) fn artifact(&mut self, a: Artifact) {
        self.report.artifacts.push(a);
    }

    pub(super) fn artifacts(&self) -> &[Artifact] {
        &self.report.artifacts
    }

    pub(super) fn samples(&mut self, rounds: Vec<SampleRound>) {
        self.report.samples = rounds;
    }

    pub(super) fn status_series(&mut self, points: Vec<StatusPoint>) {
        self.report.status_series = points;
    }

    pub(super) fn processes(&self) -> &[ProcessIdentity] {
        &self.report.processes
    }

    /// Start-up's CPU time, also the `startup` phase's (nothing ran before it).
    pub(super) fn startup_cpu(&mut self, cpu: Option<link_report::StartupCpu>) {
        self.report.startup_cpu = cpu;
        let startup = PhaseName::Startup.as_str();
        if let Some(p) = self.report.phases.iter_mut().find(|p| p.name == startup) {
            p.cpu_ns = cpu.map(|c| c.cpu_ns);
        }
    }

    /// The host's pid, so the processes seen from now on name it `host`.
    pub(super) fn host_started(&mut self, pid: i32) {
        self.host_pid = Some(pid);
    }

    /// Roles by pid (from `host.status`) for the processes seen from now on.
    pub(super) fn roles(&mut self, roles: Vec<(i32, String)>) {
        self.roles.extend(roles);
    }

    pub(super) fn scope(&self) -> &'a Scope {
        self.scope
    }

    /// Records every live descendant the run started as a process identity seen in `phase`.
    pub(super) fn observe(&mut self, phase: PhaseName) {
        let phase = phase.as_str();
        let snapshot = self.scope.snapshot();
        if let Some(host) = self.host_pid {
            self.runtime = super::cpu::runtime_processes(&snapshot, host);
        }
        for p in snapshot {
            let key = (p.pid, p.start_time_ticks);
            let idx = match self.seen.get(&key) {
                Some(&i) => i,
                None => {
                    let role = self.role_of(&p);
                    self.report.processes.push(ProcessIdentity {
                        pid: p.pid,
                        ppid: p.ppid,
                        role,
                        exe: p.exe.clone(),
                        argv: p.argv.clone(),
                        start_time_ticks: p.start_time_ticks,
                        phases_seen: Vec::new(),
                    });
                    self.seen.insert(key, self.report.processes.len() - 1);
                    self.report.processes.len() - 1
                }
            };
            let ident = &mut self.report.processes[idx];
            if ident.role.starts_with("helper") {
                if let Some(role) = self.roles.get(&p.pid) {
                    ident.role = role.clone();
                }
            }
            if !ident.phases_seen.iter().any(|s| s == phase) {
                ident.phases_seen.push(phase.to_owned());
            }
        }
    }

    fn role_of(&self, p: &reaper::ProcInfo) -> String {
        if Some(p.pid) == self.host_pid {
            return "host".into();
        }
        if let Some(role) = self.roles.get(&p.pid) {
            return role.clone();
        }
        // A plugin is non-dumpable, so its `exe` is unreadable but to root: then its argv[0].
        let exe = match p.exe.as_str() {
            "" => p.argv.first().map_or("", String::as_str),
            exe => exe,
        };
        let base = Path::new(exe)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if link_protocol::manifest::find(&base).is_some() {
            return base;
        }
        if base == programs::HOST {
            return "cli".into();
        }
        format!("helper ({})", p.comm)
    }

    /// Every check not decided is skipped as not reached; the outcome, coverage and summary.
    pub(super) fn finish(mut self) -> Report {
        let skipped_run = self.report.outcome.status == Status::Skipped;
        let unreached = match &self.first_failure {
            Some(f) => format!("not reached: {f}"),
            None => "not reached".into(),
        };
        let not_reached: Vec<CheckName> = CheckName::ALL
            .into_iter()
            .filter(|n| !self.checks.contains_key(n))
            .collect();
        for &name in &not_reached {
            self.skip(name, unreached.clone());
        }
        self.report.checks = CheckName::ALL
            .iter()
            .filter_map(|n| self.checks.get(n).cloned())
            .collect();
        if !skipped_run {
            self.report.outcome = judge::outcome(
                &self.report.checks,
                &not_reached,
                self.first_failure.as_deref(),
                self.diagnostic(),
            );
        }
        self.report.coverage = self.coverage(skipped_run);
        self.summary();
        self.report
    }

    fn coverage(&self, skipped_run: bool) -> Coverage {
        let mut exercised = Vec::new();
        if !skipped_run {
            let mut phases: Vec<&str> = Vec::new();
            for p in &self.report.phases {
                if !phases.contains(&p.name.as_str()) {
                    phases.push(p.name.as_str());
                }
            }
            for phase in phases {
                exercised.push(self.decorate(describe_phase(phase, self.config)));
            }
            for c in &self.report.checks {
                if c.outcome == Status::Passed {
                    exercised.push(self.decorate(format!("check {} passed", c.name)));
                }
            }
        }
        let not_evidence_of = not_evidence_of(self.config.profile, self.diagnostic(), skipped_run);
        Coverage {
            exercised,
            not_evidence_of,
        }
    }

    fn summary(&self) {
        let status = match self.report.outcome.status {
            Status::Passed => "PASSED",
            Status::Failed => "FAILED",
            Status::Skipped => "SKIPPED",
        };
        let reason = self.report.outcome.reason.as_deref().unwrap_or("");
        self.say(format!("outcome {status} {reason}"));
    }
}

/// What a run's report is not evidence of. Every run is a fixture run started by the runner,
/// not a production deployment, so every report says it is not evidence of production
/// confinement (with the reason that applies); only full Link has a secret plugin.
fn not_evidence_of(profile: Profile, diagnostic: bool, skipped_run: bool) -> Vec<String> {
    let confinement = if diagnostic {
        "production confinement: this diagnostic run was explicitly unconfined"
    } else if skipped_run {
        "production confinement: the run was skipped"
    } else {
        "production confinement: a fixture run on a fresh state root, not a production deployment"
    };
    let mut out = vec![confinement.to_owned()];
    if profile == Profile::Link {
        out.push(
            "root-secret service behaviour: the secret plugin ran with LNK_KEYCHAIN=off (file backend)"
                .to_owned(),
        );
    }
    out.extend(
        [
            "real OS service managers: the runner started the host itself, no systemd or launchd",
            "memory totals: samples cover the runtime's processes at 1 s intervals only",
            "shipped bytes: artifacts are local release builds, not a packaged distribution",
        ]
        .map(String::from),
    );
    out
}

fn describe_phase(phase: &str, config: &ScenarioConfig) -> String {
    let profile = config.profile.as_str();
    let Ok(name) = phase.parse::<PhaseName>() else {
        return phase.into();
    };
    match name {
        PhaseName::Startup => format!("start-up of the {profile} profile until `ready`"),
        PhaseName::ColdTurn if config.cycle => format!(
            "{} fresh agents created, each with its cold first turn, one round each",
            super::COLD_AGENTS
        ),
        PhaseName::ColdTurn => "a first agent created and its cold first turn".into(),
        PhaseName::WarmTurn => format!("{} timed warm turns", config.rounds),
        PhaseName::SecondAgent if config.concurrent_agents => {
            "a second agent, turns of both agents at once".into()
        }
        PhaseName::SecondAgent => "a second agent and its first turn".into(),
        PhaseName::Refusals if config.cycle => {
            "unauthenticated requests refused, one round each, the five sent three times".into()
        }
        PhaseName::Refusals => "unauthenticated requests refused, one round each".into(),
        PhaseName::RefusedWrite => {
            "a turn whose conversation write through the file tool is refused".into()
        }
        PhaseName::ProtectedTools => {
            "the run and file tools through their protected routes, confined".into()
        }
        PhaseName::ToolsRefused => {
            "the disabled run and file tools asked to write, and refused".into()
        }
        PhaseName::Scheduler => "a scheduled turn fired by the scheduler".into(),
        PhaseName::Idle => "idle with the monitor sampling at a 1 s interval".into(),
        PhaseName::StatusSeries => {
            "an isolated series of GET /v1/status after the monitor stopped".into()
        }
        PhaseName::Shutdown => "shutdown through link down, with no process left".into(),
        PhaseName::HostExit => "the host's own exit within shutdown, watched on its pidfd".into(),
    }
}

/// Writes a report as pretty JSON (through a sibling file, so a reader never sees half).
pub fn write_report(path: &Path, report: &Report) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let bytes = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Reads a report back.
pub fn read_report(path: &Path) -> Result<Report, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not a runtime report: {e}", path.display()))
}

fn absolute(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

fn platform() -> Platform {
    Platform {
        os: std::env::consts::OS.into(),
        arch: std::env::consts::ARCH.into(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        sandbox: Value::Null,
        native: Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::not_evidence_of;
    use link_protocol::plugin::Profile;

    #[test]
    fn every_report_is_not_evidence_of_production_confinement() {
        for profile in [Profile::Mini, Profile::Link] {
            for (diagnostic, skipped) in
                [(false, false), (true, false), (false, true), (true, true)]
            {
                let list = not_evidence_of(profile, diagnostic, skipped);
                assert!(
                    list.iter()
                        .any(|s| s.starts_with("production confinement:")),
                    "{profile:?} diagnostic={diagnostic} skipped={skipped}: {list:?}"
                );
            }
        }
        let confined = not_evidence_of(Profile::Link, false, false);
        assert!(
            confined[0].contains("not a production deployment"),
            "{confined:?}"
        );
    }

    #[test]
    fn only_full_link_mentions_the_secret_plugin() {
        for (diagnostic, skipped) in [(false, false), (true, false), (false, true)] {
            let mini = not_evidence_of(Profile::Mini, diagnostic, skipped);
            assert!(!mini.iter().any(|s| s.contains("secret")), "{mini:?}");
            let link = not_evidence_of(Profile::Link, diagnostic, skipped);
            assert!(link.iter().any(|s| s.contains("secret plugin")), "{link:?}");
        }
    }
}
