//! One runtime run, end to end: probe capabilities → hash programs → start the profile →
//! phases → stop → verify that no process remains → report.
//!
//! [`run_scenario`] is the core shared by the `runtime` example and the spec's `runtime::`
//! tests. It always returns a [`Report`]: a run that fails keeps everything measured up to the
//! failing check, still stops the runtime, removes its state root and (when asked) writes its
//! JSON. A SIGINT/SIGTERM caught by [`crate::interrupt`] fails the current phase and takes the
//! same path.
//!
//! One module per phase, in run order: [`prepare`] (probes, hashes), [`startup`], [`turns`]
//! (cold and warm), [`second_agent`], [`refusals`], [`tools`] (confined full Link) or
//! [`scheduler`] (diagnostic full Link), [`idle`], [`status_series`], [`shutdown`] (with the
//! orphan check). [`scope`] is what a run counts as its own: it holds the process's exclusive
//! turn (see [`crate::runtime_process::exclusive`]) and considers only the processes it
//! started. Each phase hands the next what it needs ([`session::Session`] after start-up,
//! [`turns::Alpha`] after the cold turn). [`plan`] says which phases and skips a run has,
//! [`judge`] decides each check from what a phase observed, [`report`] is the one place
//! records are written, and [`cpu`] finds the runtime's own processes and their CPU time.

mod cpu;
mod idle;
mod judge;
mod plan;
mod prepare;
mod refusals;
mod report;
mod scheduler;
mod scope;
mod second_agent;
mod session;
mod shutdown;
mod startup;
mod status_series;
mod text;
mod tools;
mod turns;

pub use report::{read_report, write_report};
pub use text::ms;

use crate::fixture::{FixtureError, StateRoot};
use crate::interrupt;
use crate::programs::{self, ProgramsError};
use crate::runtime_process::RuntimeProcess;
use link_protocol::plugin::{Mode, Profile};
use link_report::{CheckName, Report};
use plan::Step;
use report::Recorder;
use scope::Scope;
use session::Session;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The monitor interval the idle phase asks for.
pub const MONITOR_INTERVAL_SECS: u64 = 1;
/// Completed monitor samples the idle phase waits for.
pub const IDLE_SAMPLES: u64 = 3;
/// Fresh agents a timing cycle gives a cold first turn (`cold_turn` rounds 0 to this − 1).
pub const COLD_AGENTS: u32 = 4;

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
    /// A timing cycle: the scenario without its fixed idle wait and the status series after
    /// it, with [`COLD_AGENTS`] cold turns; for `cargo xtask runtime`'s paired cycles.
    pub cycle: bool,
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
            cycle: false,
        }
    }

    /// Timeouts are multiplied by this: 4 when traced, else 1.
    pub(crate) fn scale(&self) -> u32 {
        if self.traced {
            4
        } else {
            1
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

/// Runs one scenario and returns its report (also written to `config.output` if set).
///
/// It waits for the process's exclusive turn: scenarios of one process run one at a time, and
/// never while a [`RuntimeProcess`] of it is up.
pub fn run_scenario(config: &ScenarioConfig) -> Report {
    let scope = Scope::begin();
    let mut rec = Recorder::new(config, &scope);
    if let Some(root) = execute(&mut rec, config) {
        let path = root.path().to_path_buf();
        if let Err(e) = root.remove() {
            rec.fail(
                CheckName::NoOrphans,
                format!("cannot remove state root {}: {e}", path.display()),
            );
        }
    }
    let report = rec.finish();
    if let Some(out) = &config.output {
        match write_report(out, &report) {
            Ok(()) => {
                link_protocol::errln!("[{}] report written to {}", config.label(), out.display())
            }
            Err(e) => link_protocol::errln!(
                "[{}] error: cannot write the report to {}: {e}",
                config.label(),
                out.display()
            ),
        }
    }
    report
}

/// The whole run up to its report: preflight, state root, probes, hashes, phases, shutdown
/// and the orphan check. The state root it made, for the caller to remove.
fn execute(rec: &mut Recorder<'_>, config: &ScenarioConfig) -> Option<StateRoot> {
    if let Some(sig) = interrupt::interrupted() {
        rec.fail(
            CheckName::Startup,
            format!("interrupted by {} before the run", interrupt::name(sig)),
        );
        return None;
    }
    let found = match preflight(config) {
        Ok(found) => found,
        Err(e) => {
            rec.fail(CheckName::Startup, e.to_string());
            return None;
        }
    };
    let root = match StateRoot::create() {
        Ok(root) => root,
        Err(e) => {
            rec.fail(CheckName::Startup, e.to_string());
            return None;
        }
    };
    rec.state_root(&root);
    // Children run inside the state root: the programs directory as an absolute path.
    let programs =
        std::path::absolute(&config.programs).unwrap_or_else(|_| config.programs.clone());
    if !prepare::probe(rec, config.mode, &programs, &root) {
        return Some(root);
    }
    // A timing cycle leaves hashing to its caller, which does it once for all its cycles.
    if !config.cycle {
        prepare::hash(rec, &found);
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            rec.fail(
                CheckName::Startup,
                format!("cannot start the async runtime: {e}"),
            );
            return Some(root);
        }
    };
    let host = rt.block_on(drive(rec, config, &root, &programs));
    match host {
        Some(mut host) => {
            shutdown::run(rec, &mut host, config.scale());
            shutdown::verify_no_orphans(rec, config.scale());
        }
        None => {
            rec.skip(CheckName::ProcessesStopped, "the runtime never started");
            shutdown::verify_no_orphans(rec, config.scale());
        }
    }
    Some(root)
}

/// The phases in order, each handing the next what it needs; the first failure stops them.
/// The host, if one was started, for the shutdown.
async fn drive(
    rec: &mut Recorder<'_>,
    config: &ScenarioConfig,
    root: &StateRoot,
    programs: &Path,
) -> Option<RuntimeProcess> {
    let plan = plan::plan(config.profile, config.mode, config.cycle);
    for (name, why) in plan.skipped {
        rec.skip(name, why);
    }
    let launched = not_interrupted(Step::Startup).and_then(|()| {
        startup::launch(rec, config, root, programs).map_err(|e| (Step::Startup, e))
    });
    let mut launched = match launched {
        Ok(launched) => launched,
        Err((step, e)) => {
            rec.phase_failed(step, e);
            return None;
        }
    };
    let host = &mut launched.host;
    let token = std::mem::take(&mut launched.token);
    let result = match startup::ready(rec, config, host, token, launched.timer).await {
        Ok(session) => phases(rec, &session, &plan.steps).await,
        Err(e) => Err((Step::Startup, e)),
    };
    if let Err((step, e)) = result {
        rec.phase_failed(step, e);
        if let Some(cause) = stopped_on_its_own(host, config.scale()) {
            rec.first_cause(cause);
        }
    }
    Some(launched.host)
}

/// A host that stops by itself (a plugin died, its sandbox probe failed) does so before any
/// check it makes fail, so its exit and last words are the run's first cause; `None` when it
/// is still running a moment after the failure.
fn stopped_on_its_own(host: &mut RuntimeProcess, scale: u32) -> Option<String> {
    let status = host.wait_timeout(Duration::from_secs(3 * scale as u64))?;
    let said = text::tail(&host.stderr(), 2).unwrap_or_else(|| "it printed nothing".into());
    Some(format!("link up stopped on its own ({status}): {said}"))
}

/// Every phase after start-up, in the plan's order.
async fn phases(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    steps: &[Step],
) -> Result<(), (Step, String)> {
    let alpha = phase(Step::ColdTurn, turns::cold(rec, s)).await?;
    for &step in steps.iter().skip_while(|&&st| st != Step::ColdTurn).skip(1) {
        match step {
            Step::WarmTurns => phase(step, turns::warm(rec, s, &alpha)).await?,
            Step::SecondAgent => phase(step, second_agent::run(rec, s, &alpha)).await?,
            Step::Refusals => phase(step, refusals::run(rec, s, &alpha)).await?,
            Step::RefusedWrite => phase(step, refusals::write(rec, s, &alpha)).await?,
            Step::ProtectedTools => phase(step, tools::run(rec, s, &alpha)).await?,
            Step::ToolsRefused => phase(step, tools::refused(rec, s, &alpha)).await?,
            Step::Scheduler => phase(step, scheduler::run(rec, s, &alpha)).await?,
            Step::Idle => phase(step, idle::run(rec, s)).await?,
            Step::StatusSeries => phase(step, status_series::run(rec, s)).await?,
            Step::Startup | Step::ColdTurn => unreachable!("{} comes first", step.name()),
        }
    }
    Ok(())
}

/// Runs one phase unless the run was interrupted before it; its error names the phase.
async fn phase<T>(
    step: Step,
    fut: impl Future<Output = Result<T, String>>,
) -> Result<T, (Step, String)> {
    not_interrupted(step)?;
    fut.await.map_err(|e| (step, e))
}

fn not_interrupted(step: Step) -> Result<(), (Step, String)> {
    match interrupt::interrupted() {
        Some(sig) => Err((
            step,
            format!("interrupted by {} before this phase", interrupt::name(sig)),
        )),
        None => Ok(()),
    }
}
