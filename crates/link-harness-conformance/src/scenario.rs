//! One runtime run, end to end: probe capabilities → hash programs → start the profile →
//! phases → stop → verify that no process remains → report.
//!
//! [`run_scenario`] is the core shared by the `runtime` example and the spec's `runtime::`
//! tests. It always returns a [`Report`]: a run that fails keeps everything measured up to the
//! failing check, still stops the runtime, removes its state root and (when asked) writes its
//! JSON. A SIGINT/SIGTERM caught by [`crate::interrupt`] fails the current phase and takes the
//! same path.

use crate::client::{host_call, Connection, ToolCall, TurnReply};
use crate::fixture::{FixtureError, StateRoot};
use crate::probe::{self, Verdict};
use crate::programs::{self, ProgramsError};
use crate::reaper::{self, Owned};
use crate::{interrupt, CHECKS};
use link_plugin_measure::sample::unix_ns;
use link_plugin_measure::{
    Check, CheckOutcome, Configuration, Coverage, MonitorStatus, Outcome, Phase, Platform,
    ProcessIdentity, Report, Roots, SampleRound, Status, StatusPoint, SCHEMA_VERSION,
};
use link_protocol::layout::StateLayout;
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Display;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The monitor interval the idle phase asks for.
pub const MONITOR_INTERVAL_SECS: u64 = 1;
/// Completed monitor samples the idle phase waits for.
pub const IDLE_SAMPLES: u64 = 3;

/// How to run one scenario.
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    /// Where the built programs are (`target/release`).
    pub programs: PathBuf,
    pub profile: Profile,
    pub mode: Mode,
    /// The commit the programs were built from, as given.
    pub source: String,
    /// How many timed warm turns.
    pub rounds: u32,
    /// The run is under strace: timeouts are stretched, and the report says so.
    pub traced: bool,
    /// Where to write the JSON report, if anywhere.
    pub output: Option<PathBuf>,
    /// Full Link: run the two agents' turns at the same time and check each keeps its
    /// files through the run tool too.
    pub concurrent_agents: bool,
    /// Requests in the isolated status series.
    pub status_points: u32,
}

impl ScenarioConfig {
    pub fn new(programs: impl Into<PathBuf>, profile: Profile, mode: Mode, source: &str) -> Self {
        ScenarioConfig {
            programs: programs.into(),
            profile,
            mode,
            source: source.to_owned(),
            rounds: 3,
            traced: false,
            output: None,
            concurrent_agents: false,
            status_points: 10,
        }
    }

    /// `[mini]`, `[link diagnostic]`: the prefix of progress lines.
    pub fn label(&self) -> String {
        match self.mode {
            Mode::Confined => self.profile.as_str().to_owned(),
            Mode::Diagnostic => format!("{} diagnostic", self.profile.as_str()),
        }
    }
}

/// Input that cannot start a run; each names the problem and the fix.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{0}")]
    Programs(#[from] ProgramsError),
    #[error("{0}")]
    Fixture(#[from] FixtureError),
    #[error("cannot write the report to {path}: {problem}; choose a writable file path")]
    Output { path: PathBuf, problem: String },
    #[error("SOURCE is empty: pass the commit the programs were built from, e.g. \"$(git rev-parse HEAD)\"")]
    Source,
    #[error("ROUNDS must be at least 1")]
    Rounds,
}

/// Checks everything a run needs before anything is started or created.
pub fn preflight(config: &ScenarioConfig) -> Result<Vec<PathBuf>, InputError> {
    if config.source.trim().is_empty() {
        return Err(InputError::Source);
    }
    if config.rounds == 0 {
        return Err(InputError::Rounds);
    }
    let dir = std::path::absolute(&config.programs).unwrap_or_else(|_| config.programs.clone());
    let found = programs::find(&dir, config.profile)?;
    if let Some(out) = &config.output {
        check_output(out)?;
    }
    crate::fixture::plan()?;
    Ok(found)
}

/// Proves the report path can be written, leaving nothing behind.
pub fn check_output(path: &Path) -> Result<(), InputError> {
    let fail = |problem: String| InputError::Output {
        path: path.to_path_buf(),
        problem,
    };
    if path.is_dir() {
        return Err(fail("it is a directory".into()));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(fail(format!(
            "directory {} does not exist (create it first)",
            parent.display()
        )));
    }
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| fail(e.to_string()))?;
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| fail(e.to_string()))?;
    std::fs::remove_file(path).map_err(|e| fail(e.to_string()))
}

/// Scenarios of one process run one at a time: the no-orphan check looks at every
/// descendant of this process.
static RUN_LOCK: Mutex<()> = Mutex::new(());

/// Runs one scenario and returns its report (also written to `config.output` if set).
pub fn run_scenario(config: &ScenarioConfig) -> Report {
    let _one_at_a_time = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut run = Run::new(config);
    run.execute();
    let report = run.finish();
    if let Some(out) = &config.output {
        match write_report(out, &report) {
            Ok(()) => eprintln!("[{}] report written to {}", config.label(), out.display()),
            Err(e) => eprintln!(
                "[{}] error: cannot write the report to {}: {e}",
                config.label(),
                out.display()
            ),
        }
    }
    report
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Startup,
    ColdTurn,
    WarmTurns,
    SecondAgent,
    Refusals,
    ProtectedTools,
    Scheduler,
    Idle,
    StatusSeries,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Startup => "startup",
            Step::ColdTurn => "cold_turn",
            Step::WarmTurns => "warm_turn",
            Step::SecondAgent => "second_agent",
            Step::Refusals => "refusals",
            Step::ProtectedTools => "protected_tools",
            Step::Scheduler => "scheduler",
            Step::Idle => "idle",
            Step::StatusSeries => "status_series",
        }
    }

    /// The check a failure of this phase is reported under.
    fn check(self) -> &'static str {
        match self {
            Step::Startup => "startup",
            Step::ColdTurn => "cold_turn",
            Step::WarmTurns => "warm_turn",
            Step::SecondAgent => "agent_files_isolated",
            Step::Refusals => "unauthenticated_refused",
            Step::ProtectedTools => "run_tool_confined",
            Step::Scheduler => "scheduler_fired",
            Step::Idle => "idle_samples_completed",
            Step::StatusSeries => "status_series",
        }
    }
}

struct Timer {
    start_ns: u128,
    at: Instant,
}

impl Timer {
    fn start() -> Timer {
        Timer {
            start_ns: unix_ns(),
            at: Instant::now(),
        }
    }
}

/// The running host: `link up`, its stdout lines and its stderr file.
struct Host {
    process: Owned,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: PathBuf,
}

struct Run<'a> {
    config: &'a ScenarioConfig,
    /// The programs directory as an absolute path (children run inside the state root).
    programs: PathBuf,
    label: String,
    report: Report,
    checks: BTreeMap<&'static str, Check>,
    root: Option<StateRoot>,
    host: Option<Host>,
    conn: Option<Connection>,
    agents: Vec<String>,
    /// Pid → role, from `host.status`.
    roles: HashMap<i32, String>,
    /// (pid, start time) → index into `report.processes`.
    seen: HashMap<(i32, u64), usize>,
    first_failure: Option<String>,
    reaped_before: usize,
    scale: u32,
}

impl<'a> Run<'a> {
    fn new(config: &'a ScenarioConfig) -> Run<'a> {
        let report = Report {
            schema_version: SCHEMA_VERSION,
            source: config.source.clone(),
            profile: config.profile.as_str().into(),
            mode: config.mode.as_str().into(),
            platform: platform(),
            configuration: Configuration {
                profile: config.profile.as_str().into(),
                mode: config.mode.as_str().into(),
                rounds: config.rounds,
                monitor_interval_ms: MONITOR_INTERVAL_SECS * 1000,
                traced: config.traced,
                child_env: Vec::new(),
            },
            roots: Roots {
                programs: absolute(&config.programs),
                state: String::new(),
                output: config.output.as_deref().map(absolute).unwrap_or_default(),
            },
            ..Report::default()
        };
        Run {
            config,
            programs: std::path::absolute(&config.programs)
                .unwrap_or_else(|_| config.programs.clone()),
            label: config.label(),
            report,
            checks: BTreeMap::new(),
            root: None,
            host: None,
            conn: None,
            agents: Vec::new(),
            roles: HashMap::new(),
            seen: HashMap::new(),
            first_failure: None,
            reaped_before: reaper::global().reaped().len(),
            scale: if config.traced { 4 } else { 1 },
        }
    }

    fn diagnostic(&self) -> bool {
        self.config.mode == Mode::Diagnostic
    }

    fn say(&self, msg: impl Display) {
        eprintln!("[{}] {msg}", self.label);
    }

    fn decorate(&self, detail: impl Into<String>) -> String {
        let detail = detail.into();
        if self.diagnostic() {
            format!("diagnostic (not confined qualification): {detail}")
        } else {
            detail
        }
    }

    fn pass(&mut self, name: &'static str, detail: impl Into<String>) {
        let detail = self.decorate(detail);
        self.say(format!("check {name} passed: {detail}"));
        self.checks.insert(name, Check::passed(name, detail));
    }

    fn fail(&mut self, name: &'static str, detail: impl Into<String>) {
        let detail = self.decorate(detail);
        self.say(format!("check {name} FAILED: {detail}"));
        if self.first_failure.is_none() {
            self.first_failure = Some(format!("{name}: {detail}"));
        }
        self.checks.insert(name, Check::failed(name, detail));
    }

    fn skip(&mut self, name: &'static str, detail: impl Into<String>) {
        let detail = self.decorate(detail);
        self.checks.insert(name, Check::skipped(name, detail));
    }

    /// Records a check from a result: `Ok(detail)` passes, `Err(detail)` fails.
    fn judge(&mut self, name: &'static str, result: Result<String, String>) -> Result<(), String> {
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

    fn end_phase(&mut self, name: &str, round: u32, t: Timer) -> Duration {
        let took = t.at.elapsed();
        self.report.phases.push(Phase {
            name: name.into(),
            round,
            start_unix_ns: t.start_ns,
            end_unix_ns: t.start_ns + took.as_nanos(),
            duration_ns: took.as_nanos(),
        });
        let rounds = if round > 0 {
            format!(" {round}/{}", self.config.rounds)
        } else {
            String::new()
        };
        self.say(format!("phase {name}{rounds} ... {}", ms(took)));
        self.observe(name);
        took
    }

    /// Records every live descendant as a process identity seen in `phase`.
    fn observe(&mut self, phase: &str) {
        let host_pid = self.host.as_ref().map(|h| h.process.pid());
        for p in reaper::snapshot() {
            let key = (p.pid, p.start_time_ticks);
            let idx = match self.seen.get(&key) {
                Some(&i) => i,
                None => {
                    let role = self.role_of(&p, host_pid);
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

    fn role_of(&self, p: &reaper::ProcInfo, host_pid: Option<i32>) -> String {
        if Some(p.pid) == host_pid {
            return "host".into();
        }
        if let Some(role) = self.roles.get(&p.pid) {
            return role.clone();
        }
        let base = Path::new(&p.exe)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if routes::PLUGINS.contains(&base.as_str()) {
            return base;
        }
        if base == programs::HOST {
            return "cli".into();
        }
        format!("helper ({})", p.comm)
    }

    /// Runs a future with a timeout (stretched when traced), giving up on interrupt.
    async fn guarded<T, E: Display>(
        &self,
        what: &str,
        secs: u64,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        let limit = Duration::from_secs(secs * self.scale as u64);
        tokio::select! {
            r = tokio::time::timeout(limit, fut) => match r {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(format!("{what}: {e}")),
                Err(_) => Err(format!("{what}: no answer within {}", ms(limit))),
            },
            sig = interrupt::wait() => Err(format!("{what}: interrupted by {}", interrupt::name(sig))),
        }
    }

    fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("connection after startup")
    }

    fn layout(&self) -> StateLayout {
        self.root.as_ref().expect("state root").layout().clone()
    }

    async fn turn(&self, agent: &str, message: &str) -> Result<TurnReply, String> {
        self.guarded(
            &format!("turn `{message}`"),
            120,
            self.conn().turn(agent, message),
        )
        .await
    }

    // ---- the run ----

    fn execute(&mut self) {
        if let Some(sig) = interrupt::interrupted() {
            self.fail(
                "startup",
                format!("interrupted by {} before the run", interrupt::name(sig)),
            );
            return;
        }
        let found = match preflight(self.config) {
            Ok(found) => found,
            Err(e) => {
                self.fail("startup", e.to_string());
                return;
            }
        };
        let root = match StateRoot::create() {
            Ok(root) => root,
            Err(e) => {
                self.fail("startup", e.to_string());
                return;
            }
        };
        self.report.roots.state = root.path().display().to_string();
        self.report.configuration.child_env = root.isolated_env();
        self.say(format!("state root {}", root.path().display()));
        self.root = Some(root);
        if !self.probe() {
            return;
        }
        self.hash(&found);
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                self.fail("startup", format!("cannot start the async runtime: {e}"));
                return;
            }
        };
        rt.block_on(self.phases());
        if self.host.is_some() {
            rt.block_on(self.shutdown());
        } else {
            self.skip("processes_stopped", "the runtime never started");
        }
        self.verify_no_orphans();
    }

    fn probe(&mut self) -> bool {
        let native = probe::native_probe();
        let root = self.root.as_ref().expect("root");
        let sandbox = probe::sandbox_probe(&self.programs, |cmd| root.isolate(cmd));
        self.report.platform.native = native.evidence.clone();
        self.report.platform.sandbox = sandbox.evidence.clone();
        self.say(format!(
            "capabilities: sandbox {:?}, native {:?}",
            sandbox.status, native.status
        ));
        match probe::judge(self.config.mode == Mode::Confined, &sandbox, &native) {
            Verdict::Run => true,
            Verdict::Skip(reason) => {
                self.say(format!("SKIPPED: {reason}"));
                for name in CHECKS {
                    self.skip(name, format!("skipped: {reason}"));
                }
                self.report.outcome = Outcome {
                    status: Status::Skipped,
                    reason: Some(reason),
                };
                false
            }
            Verdict::Fail(reason) => {
                self.fail("startup", reason);
                false
            }
        }
    }

    fn hash(&mut self, found: &[PathBuf]) {
        let at = Instant::now();
        for path in found {
            if interrupt::interrupted().is_some() {
                break;
            }
            match programs::artifact(path) {
                Ok(a) => self.report.artifacts.push(a),
                Err(e) => self.say(format!("warning: cannot hash {}: {e}", path.display())),
            }
        }
        let bytes: u64 = self.report.artifacts.iter().map(|a| a.bytes).sum();
        self.say(format!(
            "hashed {} programs ({:.1} MB) in {}",
            self.report.artifacts.len(),
            bytes as f64 / 1e6,
            ms(at.elapsed())
        ));
    }

    fn plan(&mut self) -> Vec<Step> {
        let mut steps = vec![
            Step::Startup,
            Step::ColdTurn,
            Step::WarmTurns,
            Step::SecondAgent,
            Step::Refusals,
        ];
        match (self.config.profile, self.config.mode) {
            (Profile::Mini, _) => {
                let why = "Mini has no router and no tools";
                self.skip(
                    "conversation_write_refused",
                    format!("{why}: no file tool to refuse it"),
                );
                self.skip("run_tool_confined", format!("{why}: no run tool"));
                self.skip("file_tool_confined", format!("{why}: no file tool"));
                self.skip("scheduler_fired", "Mini has no scheduler");
            }
            (Profile::Link, Mode::Confined) => {
                steps.push(Step::ProtectedTools);
                self.skip(
                    "scheduler_fired",
                    "confined runs exercise the protected run and file tools; the scheduler \
                     is exercised by diagnostic runs",
                );
            }
            (Profile::Link, Mode::Diagnostic) => {
                steps.push(Step::Scheduler);
                let why = "diagnostic mode disables the protected run and file tools";
                self.skip("run_tool_confined", why);
                self.skip("file_tool_confined", why);
                self.skip(
                    "conversation_write_refused",
                    format!("{why}, so a refused write would prove nothing"),
                );
            }
        }
        steps.extend([Step::Idle, Step::StatusSeries]);
        steps
    }

    async fn phases(&mut self) {
        for step in self.plan() {
            let result = match step {
                _ if interrupt::interrupted().is_some() => Err(format!(
                    "interrupted by {} before this phase",
                    interrupt::name(interrupt::interrupted().unwrap_or(0))
                )),
                Step::Startup => self.startup().await,
                Step::ColdTurn => self.cold_turn().await,
                Step::WarmTurns => self.warm_turns().await,
                Step::SecondAgent => self.second_agent().await,
                Step::Refusals => self.refusals().await,
                Step::ProtectedTools => self.protected_tools().await,
                Step::Scheduler => self.scheduler().await,
                Step::Idle => self.idle().await,
                Step::StatusSeries => self.status_series().await,
            };
            if let Err(e) = result {
                if !self.checks.contains_key(step.check()) {
                    self.fail(step.check(), e.clone());
                }
                if self.first_failure.is_none() {
                    self.first_failure = Some(format!("{}: {e}", step.name()));
                }
                self.say(format!(
                    "phase {} failed; stopping the runtime",
                    step.name()
                ));
                return;
            }
        }
    }

    fn cli(&self, args: &[&str]) -> Command {
        let root = self.root.as_ref().expect("root");
        let mut cmd = Command::new(self.programs.join(programs::HOST));
        cmd.args(args);
        root.isolate(&mut cmd);
        cmd
    }

    fn state_arg(&self) -> String {
        self.root
            .as_ref()
            .expect("root")
            .path()
            .display()
            .to_string()
    }

    /// `link token create`: before start-up, so start-up timing does not include it.
    fn create_token(&self) -> Result<String, String> {
        let state = self.state_arg();
        let mut cmd = self.cli(&["token", "create", "--state", &state]);
        let out = reaper::global()
            .output(&mut cmd, Duration::from_secs(60))
            .map_err(|e| format!("link token create: {e}"))?;
        let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || token.is_empty() {
            return Err(format!(
                "link token create failed ({}): {}",
                out.status,
                one_line(&String::from_utf8_lossy(&out.stderr))
            ));
        }
        Ok(token)
    }

    fn spawn_host(&mut self) -> Result<(), String> {
        use std::os::unix::process::CommandExt;
        let state = self.state_arg();
        let programs = self.programs.display().to_string();
        let interval = MONITOR_INTERVAL_SECS.to_string();
        let mut cmd = self.cli(&[
            "up",
            "--profile",
            self.config.profile.as_str(),
            "--state",
            &state,
            "--mode",
            self.config.mode.as_str(),
            "--programs",
            &programs,
            "--monitor-interval",
            &interval,
        ]);
        let stderr = self
            .root
            .as_ref()
            .expect("root")
            .home()
            .join("link-up.stderr");
        let file = std::fs::File::create(&stderr)
            .map_err(|e| format!("cannot create {}: {e}", stderr.display()))?;
        // Its own process group: a terminal's Ctrl-C reaches the runner, which stops it in order.
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file)
            .process_group(0);
        let mut process = reaper::global()
            .spawn(&mut cmd)
            .map_err(|e| format!("cannot start link up: {e}"))?;
        let stdout = process.child.stdout.take().expect("piped stdout");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        self.host = Some(Host {
            process,
            lines,
            stderr,
        });
        Ok(())
    }

    /// Waits for `ready <socket>` on the host's stdout, or its early exit.
    async fn wait_ready(&mut self) -> Result<PathBuf, String> {
        let limit = Duration::from_secs(180 * self.scale as u64);
        let deadline = Instant::now() + limit;
        let mut open = true;
        loop {
            if let Some(sig) = interrupt::interrupted() {
                return Err(format!(
                    "interrupted by {} during start-up",
                    interrupt::name(sig)
                ));
            }
            let host = self.host.as_mut().expect("host");
            if let Some(status) = host.process.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("link up exited before it was ready ({status})"));
            }
            if Instant::now() >= deadline {
                return Err(format!("link up was not ready within {}", ms(limit)));
            }
            if !open {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            tokio::select! {
                line = host.lines.recv() => match line {
                    Some(line) => {
                        if let Some(socket) = line.trim().strip_prefix("ready ") {
                            return Ok(PathBuf::from(socket.trim()));
                        }
                    }
                    None => open = false,
                },
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    /// The tail of the host's stderr and of every plugin log: what a failed start-up needs.
    fn log_tail(&self) -> String {
        let mut parts = Vec::new();
        if let Some(host) = &self.host {
            if let Some(t) = tail(&host.stderr, 8) {
                parts.push(format!("link up stderr: {t}"));
            }
        }
        if let Some(root) = &self.root {
            if let Ok(entries) = std::fs::read_dir(root.layout().log_dir()) {
                let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
                files.sort();
                for f in files {
                    if let Some(t) = tail(&f, 3) {
                        let name = f
                            .file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .into_owned();
                        parts.push(format!("{name}: {t}"));
                    }
                }
            }
        }
        if parts.is_empty() {
            "no logs were written".into()
        } else {
            parts.join(" | ")
        }
    }

    async fn startup(&mut self) -> Result<(), String> {
        let token = self.create_token()?;
        let t = Timer::start();
        self.spawn_host()?;
        let ready = self.wait_ready().await;
        let took = self.end_phase("startup", 0, t);
        let socket = ready.map_err(|e| format!("{e}; {}", self.log_tail()))?;
        self.conn = Some(Connection::new(&socket, token));
        let layout = self.layout();
        let status = self
            .guarded("host.status", 30, host_call(&layout, routes::HOST_STATUS))
            .await?;
        let result = self.judge_startup(&status, &socket, took);
        self.observe("startup");
        self.judge("startup", result)
    }

    fn judge_startup(
        &mut self,
        status: &Value,
        socket: &Path,
        took: Duration,
    ) -> Result<String, String> {
        let expected = self.config.profile.plugins();
        let plugins = status["plugins"].as_array().cloned().unwrap_or_default();
        let mut ready = Vec::new();
        for p in &plugins {
            let name = p["name"].as_str().unwrap_or_default().to_owned();
            if let Some(pid) = p["pid"].as_i64() {
                self.roles.insert(pid as i32, name.clone());
            }
            if p["state"] == "ready" {
                ready.push(name);
            }
        }
        if let Some(pid) = status["pid"].as_i64() {
            self.roles.insert(pid as i32, "host".into());
        }
        let missing: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|n| !ready.iter().any(|r| r == n))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "link up printed ready but these plugins are not ready: {}; host.status: {status}",
                missing.join(", ")
            ));
        }
        if status["mode"] != self.config.mode.as_str()
            || status["profile"] != self.config.profile.as_str()
        {
            return Err(format!(
                "host.status reports another profile or mode: {status}"
            ));
        }
        if !socket.exists() {
            return Err(format!("ready socket {} does not exist", socket.display()));
        }
        Ok(format!(
            "ready in {} with {} plugins ({}), connection {}",
            ms(took),
            ready.len(),
            ready.join(", "),
            socket.display()
        ))
    }

    async fn cold_turn(&mut self) -> Result<(), String> {
        let t = Timer::start();
        let created = self
            .guarded("create agent alpha", 60, self.conn().create_agent("alpha"))
            .await;
        let id = match created {
            Ok(id) => id,
            Err(e) => {
                self.end_phase("cold_turn", 0, t);
                return Err(e);
            }
        };
        let reply = self.turn(&id, "hello from the runtime runner").await;
        let took = self.end_phase("cold_turn", 0, t);
        self.agents.push(id.clone());
        let reply = reply?;
        let result = if reply.reply.trim().is_empty() {
            Err(format!(
                "agent {id}'s first turn came back with an empty reply"
            ))
        } else {
            Ok(format!(
                "agent {id} created and answered its first turn in {}: {:?}",
                ms(took),
                short(&reply.reply)
            ))
        };
        self.judge("cold_turn", result)
    }

    async fn warm_turns(&mut self) -> Result<(), String> {
        let id = self.agents[0].clone();
        let mut times = Vec::new();
        for round in 1..=self.config.rounds {
            let t = Timer::start();
            let reply = self.turn(&id, &format!("warm turn {round}")).await;
            times.push(self.end_phase("warm_turn", round, t));
            let reply = reply?;
            if reply.reply.trim().is_empty() {
                return Err(format!("warm turn {round} came back with an empty reply"));
            }
        }
        times.sort();
        let detail = format!(
            "{} warm turns: min {}, median {}, max {}",
            times.len(),
            ms(times[0]),
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1])
        );
        self.judge("warm_turn", Ok(detail))
    }

    async fn second_agent(&mut self) -> Result<(), String> {
        let a = self.agents[0].clone();
        let t = Timer::start();
        let created = self
            .guarded("create agent beta", 60, self.conn().create_agent("beta"))
            .await;
        let b = match created {
            Ok(b) => b,
            Err(e) => {
                self.end_phase("second_agent", 0, t);
                return Err(e);
            }
        };
        let turns = if self.config.concurrent_agents {
            let (rb, ra) = tokio::join!(
                self.turn(&b, "hello from beta"),
                self.turn(&a, "alpha meanwhile")
            );
            rb.and(ra)
        } else {
            self.turn(&b, "hello from beta").await
        };
        self.end_phase("second_agent", 0, t);
        self.agents.push(b.clone());
        turns?;
        let result = self.isolation(&a, &b).await;
        self.judge("agent_files_isolated", result)
    }

    /// Each agent keeps its conversation and (full Link) its files.
    async fn isolation(&self, a: &str, b: &str) -> Result<String, String> {
        let mut evidence = Vec::new();
        let view_a = self
            .guarded("GET agent alpha", 30, self.conn().agent(a))
            .await?;
        let view_b = self
            .guarded("GET agent beta", 30, self.conn().agent(b))
            .await?;
        let texts = |v: &crate::client::AgentView| -> Vec<String> {
            v.conversation.iter().map(|e| e.text()).collect()
        };
        let (ta, tb) = (texts(&view_a), texts(&view_b));
        if ta.iter().any(|t| t.contains("hello from beta")) {
            return Err(format!("agent {a}'s conversation holds beta's message"));
        }
        if tb
            .iter()
            .any(|t| t.contains("hello from the runtime runner") || t.contains("warm turn"))
        {
            return Err(format!("agent {b}'s conversation holds alpha's messages"));
        }
        if !tb.iter().any(|t| t.contains("hello from beta")) {
            return Err(format!(
                "agent {b}'s conversation lacks its own message: {tb:?}"
            ));
        }
        evidence.push(format!(
            "conversations separate ({} and {} entries)",
            ta.len(),
            tb.len()
        ));
        if self.config.profile == Profile::Link {
            evidence.push(self.isolation_on_disk(a, b)?);
            if self.config.mode == Mode::Confined {
                evidence.push(self.isolation_through_tools(a, b).await?);
            }
        }
        Ok(evidence.join("; "))
    }

    fn isolation_on_disk(&self, a: &str, b: &str) -> Result<String, String> {
        let layout = self.layout();
        let (ca, cb) = (layout.agent_conversation(a), layout.agent_conversation(b));
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        let (la, lb) = (read(&ca)?, read(&cb)?);
        if la.contains("hello from beta") || lb.contains("hello from the runtime runner") {
            return Err("a conversation log on disk holds the other agent's messages".into());
        }
        for ws in [layout.agent_workspace(a), layout.agent_workspace(b)] {
            if !ws.is_dir() {
                return Err(format!("workspace {} does not exist", ws.display()));
            }
        }
        Ok("separate workspaces and conversation logs on disk".into())
    }

    async fn isolation_through_tools(&self, a: &str, b: &str) -> Result<String, String> {
        let layout = self.layout();
        let (wa, wb) = (layout.agent_workspace(a), layout.agent_workspace(b));
        let (ra, rb) = if self.config.concurrent_agents {
            tokio::join!(
                self.turn(a, "write alpha-only.txt: alpha-secret"),
                self.turn(b, "write beta-only.txt: beta-secret")
            )
        } else {
            (
                self.turn(a, "write alpha-only.txt: alpha-secret").await,
                self.turn(b, "write beta-only.txt: beta-secret").await,
            )
        };
        tool_ok(&ra?, "file")?;
        tool_ok(&rb?, "file")?;
        let cross = self.turn(b, "read alpha-only.txt").await?;
        let call = tool_call(&cross, "file")?;
        if call.ok || call.output_text().contains("alpha-secret") {
            return Err(format!(
                "agent {b} read agent {a}'s file: {}",
                call.output_text()
            ));
        }
        let file = |dir: &Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
        if file(&wa, "alpha-only.txt").as_deref() != Some("alpha-secret")
            || file(&wb, "beta-only.txt").as_deref() != Some("beta-secret")
        {
            return Err(
                "a file written through the file tool is not in its agent's workspace".into(),
            );
        }
        if file(&wb, "alpha-only.txt").is_some() || file(&wa, "beta-only.txt").is_some() {
            return Err("a file written by one agent appeared in the other's workspace".into());
        }
        let mut detail =
            "each agent's file tool writes only its own workspace; beta cannot read alpha's file"
                .to_owned();
        if self.config.concurrent_agents {
            let run = self.turn(b, "run: cat alpha-only.txt").await?;
            let call = tool_call(&run, "run")?;
            if call.output_text().contains("alpha-secret") {
                return Err(format!("agent {b}'s run tool read agent {a}'s file"));
            }
            let ls = self.turn(a, "run: ls").await?;
            let listing = tool_call(&ls, "run")?.output_text();
            if !listing.contains("alpha-only.txt") || listing.contains("beta-only.txt") {
                return Err(format!(
                    "agent {a}'s run tool sees the wrong workspace: {listing}"
                ));
            }
            detail.push_str(
                "; concurrent turns kept apart, and the run tool sees only its own workspace",
            );
        }
        Ok(detail)
    }

    async fn refusals(&mut self) -> Result<(), String> {
        let a = self.agents[0].clone();
        let layout = self.layout();
        let conversation = layout.agent_conversation(&a);
        let confined_link =
            self.config.profile == Profile::Link && self.config.mode == Mode::Confined;
        let before = std::fs::read(&conversation).unwrap_or_default();
        let t = Timer::start();
        let unauth = self.unauthenticated(&a).await;
        let write = if confined_link {
            Some(self.turn(&a, "write ../conversation.jsonl: x").await)
        } else {
            None
        };
        self.end_phase("refusals", 0, t);
        let unauth = match unauth {
            Ok(statuses) => self.judge_unauthenticated(&a, statuses).await,
            Err(e) => Err(e),
        };
        let first = self.judge("unauthenticated_refused", unauth);
        if let Some(write) = write {
            let result =
                write.and_then(|reply| judge_conversation_write(&reply, &conversation, &before));
            self.judge("conversation_write_refused", result)?;
        }
        first
    }

    async fn unauthenticated(&self, a: &str) -> Result<Vec<(String, u16, String)>, String> {
        let conn = self.conn();
        let turn_path = format!("/v1/agents/{a}/turns");
        let agent_path = format!("/v1/agents/{a}");
        let name = serde_json::json!({"name": "intruder"});
        let message = serde_json::json!({"message": "unauthenticated turn"});
        let requests: [(&str, &str, Option<&str>, Option<&Value>); 5] = [
            ("POST", "/v1/agents", None, Some(&name)),
            ("POST", "/v1/agents", Some("not-a-valid-token"), Some(&name)),
            ("GET", &agent_path, None, None),
            ("POST", &turn_path, None, Some(&message)),
            ("GET", "/v1/status", None, None),
        ];
        let mut out = Vec::new();
        for (method, path, token, body) in requests {
            let what = format!("{method} {path} without a valid token");
            let resp = self
                .guarded(&what, 30, conn.raw(method, path, token, body))
                .await?;
            out.push((
                what,
                resp.status,
                String::from_utf8_lossy(&resp.body).into_owned(),
            ));
        }
        Ok(out)
    }

    async fn judge_unauthenticated(
        &self,
        a: &str,
        statuses: Vec<(String, u16, String)>,
    ) -> Result<String, String> {
        for (what, status, body) in &statuses {
            if *status != 401 {
                return Err(format!(
                    "{what} answered {status}, not 401: {}",
                    short(body)
                ));
            }
            if body.contains("hello from") {
                return Err(format!(
                    "{what} leaked conversation content: {}",
                    short(body)
                ));
            }
        }
        let view = self
            .guarded("GET agent alpha", 30, self.conn().agent(a))
            .await?;
        if view
            .conversation
            .iter()
            .any(|e| e.text().contains("unauthenticated turn"))
        {
            return Err("the unauthenticated turn reached the conversation".into());
        }
        Ok(format!(
            "{} requests without a valid token answered 401; the refused turn left no trace",
            statuses.len()
        ))
    }

    async fn protected_tools(&mut self) -> Result<(), String> {
        let a = self.agents[0].clone();
        let layout = self.layout();
        let root = layout.root().to_path_buf();
        let tokens = layout.tokens_file();
        let t = Timer::start();
        let mut replies = Vec::new();
        let messages = [
            "run: echo hi > ran.txt; cat ran.txt".to_owned(),
            format!("run: cat {}", tokens.display()),
            format!(
                "run: echo escaped > {}",
                root.join("escape-run.txt").display()
            ),
            "write tool-file.txt: hello-file".to_owned(),
            "read tool-file.txt".to_owned(),
            "read ../../../../../auth/tokens".to_owned(),
            format!("write {}: x", root.join("escape-file.txt").display()),
        ];
        let mut error = None;
        for m in &messages {
            match self.turn(&a, m).await {
                Ok(r) => replies.push(r),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        self.end_phase("protected_tools", 0, t);
        if let Some(e) = error {
            return Err(e);
        }
        let secret = token_hash(&tokens);
        let ws = layout.agent_workspace(&a);
        let run = judge_run_tool(&replies[0..3], &ws, &root, &secret);
        let run = self.judge("run_tool_confined", run);
        let file = judge_file_tool(&replies[3..7], &ws, &root, &secret);
        let file = self.judge("file_tool_confined", file);
        run.and(file)
    }

    async fn scheduler(&mut self) -> Result<(), String> {
        let a = self.agents[0].clone();
        let t = Timer::start();
        let result = self.schedule_and_wait(&a).await;
        let took = self.end_phase("scheduler", 0, t);
        let result = result.map(|d| {
            format!(
                "{d}; fired and appeared in the conversation after {}",
                ms(took)
            )
        });
        self.judge("scheduler_fired", result)
    }

    async fn schedule_and_wait(&self, a: &str) -> Result<String, String> {
        let reply = self.turn(a, "schedule 1s: ping").await?;
        let call = tool_call(&reply, "schedule")?;
        if !call.ok {
            return Err(format!("the schedule tool refused: {}", call.output_text()));
        }
        let limit = Duration::from_secs(30 * self.scale as u64);
        let deadline = Instant::now() + limit;
        loop {
            let view = self
                .guarded("GET agent alpha", 30, self.conn().agent(a))
                .await?;
            let fired = view.conversation.iter().any(|e| {
                let text = e.text();
                e.role == "user" && text.trim_end().ends_with("ping") && !text.contains("schedule")
            });
            if fired {
                return Ok(format!(
                    "`schedule 1s: ping` accepted ({})",
                    short(&call.output_text())
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the scheduled turn did not appear within {}",
                    ms(limit)
                ));
            }
            self.guarded("waiting for the scheduled turn", 5, async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<(), String>(())
            })
            .await?;
        }
    }

    async fn monitor(&self, route: &str) -> Result<MonitorStatus, String> {
        let layout = self.layout();
        let v = self.guarded(route, 30, host_call(&layout, route)).await?;
        serde_json::from_value(v.clone()).map_err(|e| format!("{route} answered {v}: {e}"))
    }

    async fn idle(&mut self) -> Result<(), String> {
        let t = Timer::start();
        let waited = self.wait_samples().await;
        let took = self.end_phase("idle", 0, t);
        let (first, last) = waited?;
        let layout = self.layout();
        let samples = self
            .guarded(
                routes::MONITOR_SAMPLES,
                30,
                host_call(&layout, routes::MONITOR_SAMPLES),
            )
            .await?;
        let rounds: Vec<SampleRound> = serde_json::from_value(samples["rounds"].clone())
            .map_err(|e| format!("monitor.samples answered an unexpected shape: {e}"))?;
        let count = rounds.len();
        self.report.samples = rounds;
        let result = if count == 0 {
            Err("monitor.samples returned no rounds".into())
        } else {
            Ok(format!(
                "{} samples completed at a {} ms interval during {} (from {} to {}); {count} rounds kept",
                last.completed_samples - first.completed_samples,
                last.interval_ms,
                ms(took),
                first.completed_samples,
                last.completed_samples
            ))
        };
        self.judge("idle_samples_completed", result)
    }

    /// Polls `monitor.status` until [`IDLE_SAMPLES`] more samples completed: never a blind sleep.
    async fn wait_samples(&self) -> Result<(MonitorStatus, MonitorStatus), String> {
        let first = self.monitor(routes::MONITOR_STATUS).await?;
        if first.stopped {
            return Err("the monitor is already stopped".into());
        }
        let limit = Duration::from_millis(first.interval_ms * (IDLE_SAMPLES + 2))
            + Duration::from_secs(30 * self.scale as u64);
        let deadline = Instant::now() + limit;
        loop {
            self.guarded("idle", 5, async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<(), String>(())
            })
            .await?;
            let now = self.monitor(routes::MONITOR_STATUS).await?;
            if now.completed_samples >= first.completed_samples + IDLE_SAMPLES {
                return Ok((first, now));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "only {} of {IDLE_SAMPLES} samples completed within {}",
                    now.completed_samples - first.completed_samples,
                    ms(limit)
                ));
            }
        }
    }

    async fn status_series(&mut self) -> Result<(), String> {
        let stopped = self.monitor(routes::MONITOR_STOP).await?;
        let t = Timer::start();
        let mut points = Vec::new();
        let mut error = None;
        for index in 0..self.config.status_points {
            let start = unix_ns();
            let at = Instant::now();
            match self
                .guarded("GET /v1/status", 30, self.conn().status())
                .await
            {
                Ok(resp) => points.push(StatusPoint {
                    index,
                    start_unix_ns: start,
                    duration_ns: at.elapsed().as_nanos(),
                    http_status: resp.status,
                }),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        self.end_phase("status_series", 0, t);
        self.report.status_series = points.clone();
        if let Some(e) = error {
            return Err(e);
        }
        let after = self.monitor(routes::MONITOR_STATUS).await?;
        let result = judge_status_series(&points, &stopped, &after);
        self.judge("status_series", result)
    }

    // ---- stopping and verifying ----

    async fn shutdown(&mut self) {
        let t = Timer::start();
        let state = self.state_arg();
        let mut cmd = self.cli(&["down", "--state", &state]);
        let down = reaper::global().output(&mut cmd, Duration::from_secs(120 * self.scale as u64));
        let mut problems = Vec::new();
        match &down {
            Ok(out) if out.status.success() => {}
            Ok(out) => problems.push(format!(
                "link down failed ({}): {}",
                out.status,
                one_line(&String::from_utf8_lossy(&out.stderr))
            )),
            Err(e) => problems.push(format!("link down: {e}")),
        }
        let limit = Duration::from_secs(60 * self.scale as u64);
        let host = self.host.as_mut().expect("host");
        let mut status = host.process.wait_timeout(limit).ok().flatten();
        if status.is_none() {
            problems.push(format!(
                "link up still running {} after link down; sent SIGTERM",
                ms(limit)
            ));
            let _ = host.process.signal(rustix::process::Signal::TERM);
            status = host.process.wait_timeout(limit).ok().flatten();
        }
        if status.is_none() {
            problems.push("link up ignored SIGTERM; killed its process group".into());
            let pgid = host.process.pid();
            if let Some(pg) = rustix::process::Pid::from_raw(pgid) {
                let _ = rustix::process::kill_process_group(pg, rustix::process::Signal::KILL);
            }
            host.process.kill_and_wait();
            status = host.process.try_wait().ok().flatten();
        }
        let took = self.end_phase("shutdown", 0, t);
        match status {
            Some(s) if s.success() => {}
            Some(s) => problems.push(format!("link up exited with {s}")),
            None => problems.push("link up could not be collected".into()),
        }
        let runtime: Vec<(i32, u64, String)> = self
            .report
            .processes
            .iter()
            .filter(|p| !p.role.starts_with("helper") && p.role != "cli")
            .map(|p| {
                (
                    p.pid,
                    p.start_time_ticks,
                    format!("{} (pid {})", p.role, p.pid),
                )
            })
            .collect();
        reaper::wait_until(Duration::from_secs(10), || {
            runtime
                .iter()
                .all(|(pid, start, _)| !reaper::is_alive(*pid, *start))
        });
        let alive: Vec<&str> = runtime
            .iter()
            .filter(|(pid, start, _)| reaper::is_alive(*pid, *start))
            .map(|(_, _, name)| name.as_str())
            .collect();
        if !alive.is_empty() {
            problems.push(format!("still running: {}", alive.join(", ")));
        }
        if problems.is_empty() {
            self.pass(
                "processes_stopped",
                format!(
                    "link down stopped the runtime in {}; link up exited 0; all {} recorded host and plugin processes are gone",
                    ms(took),
                    runtime.len()
                ),
            );
        } else {
            let detail = format!("{}; {}", problems.join("; "), self.log_tail());
            self.fail("processes_stopped", detail);
        }
    }

    fn verify_no_orphans(&mut self) {
        let recorded: Vec<(i32, u64)> = self
            .report
            .processes
            .iter()
            .map(|p| (p.pid, p.start_time_ticks))
            .collect();
        let none = HashSet::new();
        reaper::wait_until(Duration::from_secs(10 * self.scale as u64), || {
            reaper::global().reap_orphans();
            reaper::leftovers(&recorded, &none).is_empty()
        });
        let left = reaper::leftovers(&recorded, &none);
        let reaped: Vec<String> = reaper::global()
            .reaped()
            .into_iter()
            .skip(self.reaped_before)
            .map(|r| format!("{} ({}, {})", r.pid, r.comm, r.status))
            .collect();
        let adopted = if reaped.is_empty() {
            "no adopted orphan needed reaping".to_owned()
        } else {
            format!(
                "adopted and reaped {} orphans: {}",
                reaped.len(),
                reaped.join(", ")
            )
        };
        if left.is_empty() {
            self.pass(
                "no_orphans",
                format!(
                    "no descendant of the runner and none of the {} recorded processes (by pid and start time) remain; {adopted}",
                    recorded.len()
                ),
            );
            return;
        }
        let names: Vec<String> = left.iter().map(|p| p.describe()).collect();
        for p in &left {
            reaper::kill_exact(p.pid, p.start_time_ticks);
        }
        reaper::wait_until(Duration::from_secs(10), || {
            reaper::global().reap_orphans();
            left.iter()
                .all(|p| !reaper::is_alive(p.pid, p.start_time_ticks))
        });
        self.fail(
            "no_orphans",
            format!(
                "still running after shutdown (now killed): {}; {adopted}",
                names.join("; ")
            ),
        );
    }

    fn finish(mut self) -> Report {
        self.host = None;
        if let Some(root) = self.root.take() {
            let path = root.path().to_path_buf();
            if let Err(e) = root.remove() {
                self.fail(
                    "no_orphans",
                    format!("cannot remove state root {}: {e}", path.display()),
                );
            }
        }
        let skipped_run = self.report.outcome.status == Status::Skipped;
        let unreached = match &self.first_failure {
            Some(f) => format!("not reached: {f}"),
            None => "not reached".into(),
        };
        for name in CHECKS {
            if !self.checks.contains_key(name) {
                self.skip(name, unreached.clone());
            }
        }
        self.report.checks = CHECKS.iter().map(|n| self.checks[n].clone()).collect();
        if !skipped_run {
            self.report.outcome = self.outcome();
        }
        self.report.coverage = self.coverage(skipped_run);
        self.summary();
        self.report
    }

    fn outcome(&self) -> Outcome {
        if let Some(c) = self
            .report
            .checks
            .iter()
            .find(|c| c.outcome == CheckOutcome::Failed)
        {
            let reason = self
                .first_failure
                .clone()
                .unwrap_or_else(|| format!("{}: {}", c.name, c.detail));
            return Outcome {
                status: Status::Failed,
                reason: Some(reason),
            };
        }
        Outcome {
            status: Status::Passed,
            reason: self.diagnostic().then(|| {
                "diagnostic run: explicitly unconfined, protected run and file tools disabled; \
                 not evidence of confined qualification"
                    .to_owned()
            }),
        }
    }

    fn coverage(&self, skipped_run: bool) -> Coverage {
        let mut exercised = Vec::new();
        if !skipped_run {
            let phases: Vec<&str> = {
                let mut seen = Vec::new();
                for p in &self.report.phases {
                    if !seen.contains(&p.name.as_str()) {
                        seen.push(p.name.as_str());
                    }
                }
                seen
            };
            for phase in phases {
                exercised.push(self.decorate(describe_phase(phase, self.config)));
            }
            for c in &self.report.checks {
                if c.outcome == CheckOutcome::Passed {
                    exercised.push(self.decorate(format!("check {} passed", c.name)));
                }
            }
        }
        let mut not_evidence_of = Vec::new();
        if self.diagnostic() || skipped_run {
            not_evidence_of.push(if self.diagnostic() {
                "production confinement: this diagnostic run was explicitly unconfined".to_owned()
            } else {
                "production confinement: the run was skipped".to_owned()
            });
        }
        not_evidence_of.extend(
            [
                "root-secret service behaviour: the secret plugin ran with LNK_KEYCHAIN=off (file backend)",
                "real OS service managers: the runner started the host itself, no systemd or launchd",
                "memory totals: samples cover the runtime's processes at 1 s intervals only",
                "shipped bytes: artifacts are local release builds, not a packaged distribution",
            ]
            .map(String::from),
        );
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

fn describe_phase(phase: &str, config: &ScenarioConfig) -> String {
    let profile = config.profile.as_str();
    match phase {
        "startup" => format!("start-up of the {profile} profile until `ready`"),
        "cold_turn" => "a first agent created and its cold first turn".into(),
        "warm_turn" => format!("{} timed warm turns", config.rounds),
        "second_agent" if config.concurrent_agents => {
            "a second agent, turns of both agents at once".into()
        }
        "second_agent" => "a second agent and its first turn".into(),
        "refusals" if config.profile == Profile::Link && config.mode == Mode::Confined => {
            "unauthenticated requests refused; a conversation write through the file tool refused"
                .into()
        }
        "refusals" => "unauthenticated requests refused".into(),
        "protected_tools" => {
            "the run and file tools through their protected routes, confined".into()
        }
        "scheduler" => "a scheduled turn fired by the scheduler".into(),
        "idle" => "idle with the monitor sampling at a 1 s interval".into(),
        "status_series" => "an isolated series of GET /v1/status after the monitor stopped".into(),
        "shutdown" => "shutdown through link down, with no process left".into(),
        other => other.into(),
    }
}

fn tool_call<'r>(reply: &'r TurnReply, tool: &str) -> Result<&'r ToolCall, String> {
    reply
        .tool_calls
        .iter()
        .find(|c| c.tool == tool)
        .ok_or_else(|| {
            format!(
                "the turn made no {tool} tool call (reply {:?}, calls {:?})",
                short(&reply.reply),
                reply
                    .tool_calls
                    .iter()
                    .map(|c| c.tool.as_str())
                    .collect::<Vec<_>>()
            )
        })
}

fn tool_ok(reply: &TurnReply, tool: &str) -> Result<(), String> {
    let call = tool_call(reply, tool)?;
    if call.ok {
        Ok(())
    } else {
        Err(format!(
            "the {tool} tool failed: {}",
            short(&call.output_text())
        ))
    }
}

fn judge_conversation_write(
    reply: &TurnReply,
    log: &Path,
    before: &[u8],
) -> Result<String, String> {
    let call = tool_call(reply, "file")?;
    let output = call.output_text();
    if call.ok {
        return Err(format!(
            "the file tool accepted a write to the conversation: {}",
            short(&output)
        ));
    }
    if !output.to_lowercase().contains("protected") {
        return Err(format!(
            "the write was refused, but not as protected: {}",
            short(&output)
        ));
    }
    let after = std::fs::read(log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
    if !after.starts_with(before) {
        return Err("the conversation log was rewritten: its earlier entries changed".into());
    }
    let text = String::from_utf8_lossy(&after);
    for (i, line) in text.lines().enumerate() {
        if line.trim() == "x" || serde_json::from_str::<Value>(line).is_err() {
            return Err(format!(
                "conversation log line {} is not a logged entry: {line:?}",
                i + 1
            ));
        }
    }
    Ok(format!(
        "`write ../conversation.jsonl: x` refused as protected ({}); the log kept its {} earlier bytes and only gained the turn's own entries",
        short(&output),
        before.len()
    ))
}

/// The first sha256-looking word of the tokens file: what must never leak into a tool.
fn token_hash(tokens: &Path) -> String {
    let text = std::fs::read_to_string(tokens).unwrap_or_default();
    text.split(|c: char| !c.is_ascii_hexdigit())
        .find(|w| w.len() == 64)
        .map(str::to_owned)
        .unwrap_or_else(|| text.lines().next().unwrap_or("").trim().to_owned())
}

fn judge_run_tool(
    replies: &[TurnReply],
    ws: &Path,
    root: &Path,
    secret: &str,
) -> Result<String, String> {
    let echo = tool_call(&replies[0], "run")?;
    let failed = |c: &ToolCall| !c.ok || c.exit_code().is_some_and(|x| x != 0);
    if failed(echo) || !echo.output_text().contains("hi") {
        return Err(format!(
            "`run: echo hi > ran.txt; cat ran.txt` failed: {}",
            short(&echo.summary())
        ));
    }
    let on_disk = std::fs::read_to_string(ws.join("ran.txt")).unwrap_or_default();
    if on_disk.trim() != "hi" {
        return Err(format!(
            "ran.txt in the workspace holds {on_disk:?}, not \"hi\""
        ));
    }
    let tokens = tool_call(&replies[1], "run")?;
    if !secret.is_empty() && tokens.output_text().contains(secret) {
        return Err("the run tool read the state root's token hashes".into());
    }
    if !failed(tokens) {
        return Err(format!(
            "the run tool could read the state root's tokens file: {}",
            short(&tokens.summary())
        ));
    }
    let escape = root.join("escape-run.txt");
    if escape.exists() {
        let _ = std::fs::remove_file(&escape);
        return Err(format!(
            "the run tool wrote {} outside its workspace",
            escape.display()
        ));
    }
    Ok(format!(
        "`run: echo hi > ran.txt; cat ran.txt` answered {:?} and ran.txt is in the workspace; the state root is hidden (reading the tokens file failed: {}) and a write outside the workspace did not land",
        short(&echo.summary()),
        short(&tokens.summary())
    ))
}

fn judge_file_tool(
    replies: &[TurnReply],
    ws: &Path,
    root: &Path,
    secret: &str,
) -> Result<String, String> {
    let write = tool_call(&replies[0], "file")?;
    if !write.ok {
        return Err(format!(
            "`write tool-file.txt` failed: {}",
            short(&write.output_text())
        ));
    }
    let on_disk = std::fs::read_to_string(ws.join("tool-file.txt")).unwrap_or_default();
    if on_disk != "hello-file" {
        return Err(format!(
            "tool-file.txt in the workspace holds {on_disk:?}, not \"hello-file\""
        ));
    }
    let read = tool_call(&replies[1], "file")?;
    if !read.ok || !read.output_text().contains("hello-file") {
        return Err(format!(
            "`read tool-file.txt` failed: {}",
            short(&read.output_text())
        ));
    }
    let traverse = tool_call(&replies[2], "file")?;
    if traverse.ok || (!secret.is_empty() && traverse.output_text().contains(secret)) {
        return Err(format!(
            "the file tool read outside the workspace: {}",
            short(&traverse.output_text())
        ));
    }
    let outside = tool_call(&replies[3], "file")?;
    let escape = root.join("escape-file.txt");
    if outside.ok || escape.exists() {
        let _ = std::fs::remove_file(&escape);
        return Err(format!(
            "the file tool wrote {} outside the workspace",
            escape.display()
        ));
    }
    Ok(format!(
        "write and read inside the workspace worked (tool-file.txt on disk); `../` traversal refused ({}); an absolute path outside refused ({})",
        short(&traverse.output_text()),
        short(&outside.output_text())
    ))
}

fn judge_status_series(
    points: &[StatusPoint],
    stopped: &MonitorStatus,
    after: &MonitorStatus,
) -> Result<String, String> {
    if points.is_empty() {
        return Err("no status requests were made".into());
    }
    if let Some(p) = points.iter().find(|p| p.http_status != 200) {
        return Err(format!(
            "GET /v1/status #{} answered {}",
            p.index, p.http_status
        ));
    }
    if !stopped.stopped || !after.stopped {
        return Err("the monitor did not report itself stopped before the series".into());
    }
    if after.completed_samples != stopped.completed_samples {
        return Err(format!(
            "the monitor kept sampling during the series ({} → {} samples)",
            stopped.completed_samples, after.completed_samples
        ));
    }
    let mut times: Vec<u128> = points.iter().map(|p| p.duration_ns).collect();
    times.sort_unstable();
    Ok(format!(
        "{} requests answered 200 (median {}, max {}) with the monitor stopped at {} samples",
        points.len(),
        ms(Duration::from_nanos(times[times.len() / 2] as u64)),
        ms(Duration::from_nanos(times[times.len() - 1] as u64)),
        after.completed_samples
    ))
}

fn tail(path: &Path, lines: usize) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if all.is_empty() {
        return None;
    }
    Some(all[all.len().saturating_sub(lines)..].join(" / "))
}

/// Lines joined with " / ", so a check detail stays on one line.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ")
}

fn short(s: &str) -> String {
    let s = one_line(s);
    let s = s.as_str();
    if s.chars().count() <= 160 {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(160).collect::<String>())
    }
}

/// "12.3 ms".
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
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
