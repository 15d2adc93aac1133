//! `cargo xtask bench-sandbox`: what confinement costs per command, against a bare bubblewrap
//! run, on the locked release programs.
//!
//! Interleaved rounds, each in a rotating order, of
//! - `bare_bwrap`: `bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all --die-with-parent
//!   /bin/true`, the floor;
//! - `cli_exec`: `link-plugin-sandbox exec --workspace WS -- /bin/true`;
//! - the plugin path: on a full Link runtime started confined, a warm turn `run: true`, a warm
//!   tool turn `list` (the file tool, which starts no sandbox) and a plain warm turn `hello`,
//!   all through `link turn`, so the client's own cost cancels in their per-round differences:
//!   `plugin_path` (run turn − plain turn, issue 14's measure) and `confined_run` (run turn −
//!   tool turn: what the confined command adds to a tool step, the model's second step and the
//!   tool result's durable append taken out).
//!
//! Each variant's median with its 95% interval and the ratios to `bare_bwrap` come from
//! [`crate::stats`]; the result is `target/bench-sandbox.json` (and, with `cargo xtask runtime
//! --bench-sandbox`, the comparison's `sandbox_bench`). No figure is a gate: the goals of
//! issue 14 (each ratio ≤ 1.3×) are said met or not met only when the interval allows it.

use crate::compare::{Noise, WIDE_INTERVAL};
use crate::outputs::{self, Problem, Workspace};
use crate::stats::{self, Interval, Spread};
use crate::{doctor, runtime, state, system};
use anyhow::{anyhow, bail, Context, Result};
use link_protocol::layout::StateLayout;
use link_protocol::routes::programs::HOST;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Rounds of `bare_bwrap` and `cli_exec` unless `--rounds` says otherwise.
pub const DEFAULT_ROUNDS: u32 = 100;
/// Rounds with the turns (run, tool, plain) unless `--turn-rounds` says otherwise.
pub const DEFAULT_TURN_ROUNDS: u32 = 40;
/// Rounds run first and discarded (each with the turns): caches, the model connection, the
/// harness's first load of the conversation.
pub const WARMUP_ROUNDS: u32 = 5;
/// Issue 14's goal for every ratio.
pub const GOAL: f64 = 1.3;
/// Bumped whenever a field of `bench-sandbox.json` changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;
/// The file the benchmark writes under the target directory.
pub const FILE: &str = "bench-sandbox.json";

/// The agent the turns go to.
const AGENT: &str = "bench";

/// The three turns the benchmark times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// `run: true`: one confined command through the run tool and the sandbox plugin.
    Run,
    /// `list`: one call of the file tool, which starts no sandbox: a tool step's own cost.
    Tool,
    /// `hello`: no tool call.
    Plain,
}

impl Turn {
    /// What the turn asks the local model.
    pub fn message(self) -> &'static str {
        match self {
            Turn::Run => "run: true",
            Turn::Tool => "list",
            Turn::Plain => "hello",
        }
    }

    /// The one tool the reply must have called, if any.
    fn tool(self) -> Option<&'static str> {
        match self {
            Turn::Run => Some("run"),
            Turn::Tool => Some("file"),
            Turn::Plain => None,
        }
    }
}

/// The fixture-dir children of one benchmark: `bs<pid>` the state root, `bw<pid>` the
/// `exec` workspace.
const STATE_PREFIX: &str = "bs";
const WORKSPACE_PREFIX: &str = "bw";
/// How long `link up` may take to print its ready line, and the host to exit after `down`.
const READY_WITHIN: Duration = Duration::from_secs(60);
const EXIT_WITHIN: Duration = Duration::from_secs(30);

pub const METHOD: &str = "each round runs bare_bwrap and cli_exec once, and in evenly spaced \
    rounds also the run, tool and plain turns, in an order changing from round to round; the \
    first 5 rounds are warm-up and discarded; a sample is the wall time from spawn to exit of \
    the command; plugin_path is, per turn round, the run turn's time minus the plain turn's \
    time of the same round, and confined_run the run turn's minus the tool turn's (all through \
    `link turn`, so the client's start cancels); each \
    variant's median has a 95% percentile bootstrap interval and each ratio of medians a 95% \
    percentile bootstrap interval resampling numerator and denominator independently (4000 \
    resamples, crate::stats, seeded from the name with splitmix64); a goal is met when the \
    whole interval is at or below it, not met when wholly above, otherwise undecided";

/// What `bench-sandbox` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub rounds: u32,
    pub turn_rounds: u32,
    /// Measure programs older than their sources (said in the result's warnings).
    pub allow_stale: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            rounds: DEFAULT_ROUNDS,
            turn_rounds: DEFAULT_TURN_ROUNDS,
            allow_stale: false,
        }
    }
}

/// Whether the benchmark measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BenchStatus {
    Measured,
    /// Nothing was measured: bwrap is missing or confinement is unavailable (`reason`).
    Skipped,
    /// Started but could not finish (`reason`); only inside `cargo xtask runtime`, which
    /// records the failure instead of losing the comparison.
    Failed,
}

/// A goal against an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// The whole interval is at or below the goal.
    Met,
    /// The whole interval is above it.
    NotMet,
    /// The interval straddles it.
    Undecided,
}

impl Goal {
    pub fn of(interval: &Interval, max: f64) -> Goal {
        if interval.high <= max {
            Goal::Met
        } else if interval.low > max {
            Goal::NotMet
        } else {
            Goal::Undecided
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Goal::Met => "met",
            Goal::NotMet => "not met",
            Goal::Undecided => "undecided",
        }
    }
}

/// The commands each variant runs, as a person would type them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Commands {
    pub bare_bwrap: String,
    pub cli_exec: String,
    pub run_turn: String,
    pub plain_turn: String,
    /// Absent from a file written before the tool turn was measured.
    #[serde(default)]
    pub tool_turn: Option<String>,
}

/// One variant's figures (nanoseconds) and its samples in the order they ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Variant {
    #[serde(flatten)]
    pub spread: Spread,
    pub samples_ns: Vec<f64>,
}

/// Every variant; `plugin_path` is `run_turn − plain_turn` and `confined_run` is
/// `run_turn − tool_turn`, per turn round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Variants {
    pub bare_bwrap: Variant,
    pub cli_exec: Variant,
    pub plugin_path: Variant,
    pub run_turn: Variant,
    pub plain_turn: Variant,
    /// Both absent from a file written before the tool turn was measured: not zero.
    #[serde(default)]
    pub confined_run: Option<Variant>,
    #[serde(default)]
    pub tool_turn: Option<Variant>,
}

/// `numerator / denominator`, a ratio of medians with its interval, against the goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ratio {
    pub name: String,
    pub numerator: String,
    pub denominator: String,
    pub ratio: Interval,
    pub goal_max: f64,
    pub goal: Goal,
}

pub use crate::outputs::Program;

/// `target/bench-sandbox.json`, and the comparison's `sandbox_bench`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxBench {
    pub schema_version: u32,
    pub status: BenchStatus,
    /// Why nothing (or not everything) was measured; `None` when measured.
    pub reason: Option<String>,
    pub source: String,
    /// Timed rounds of bare_bwrap and cli_exec, of them with a turn pair, and warm-up rounds.
    pub rounds: u32,
    pub turn_rounds: u32,
    pub warmup_rounds: u32,
    pub commands: Commands,
    pub programs: Vec<Program>,
    pub noise_before: Option<Noise>,
    pub noise_after: Option<Noise>,
    /// `None` unless measured: never zeros.
    pub variants: Option<Variants>,
    /// `cli_exec/bare_bwrap` and `plugin_path/bare_bwrap`; empty unless measured.
    pub ratios: Vec<Ratio>,
    pub method: String,
    pub warnings: Vec<String>,
    /// Wall time of the whole benchmark, start-up and shutdown included.
    pub elapsed_s: f64,
}

/// `cargo xtask bench-sandbox`: runs, prints the table, writes the JSON (removing an earlier
/// one first). Exit 0 measured, 3 skipped (nothing measured, the JSON says why); errors are
/// exit 1 and leave no JSON.
pub fn main(ws: &Workspace, opts: &Options) -> Result<u8> {
    let fixture = state::from_env()?;
    // A result left from an earlier run must never pass for this one's, whatever happens next.
    let old = ws.target.join(FILE);
    match std::fs::remove_file(&old) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("cannot remove the old {}", old.display()))
        }
        _ => {}
    }
    let source = runtime::source(&ws.root)?;
    // Without bwrap nothing here can run, built programs or not: say so before checking them.
    let bench = match no_bwrap() {
        Some(reason) => skipped(opts, &source, &commands(ws, &fixture), reason),
        None => {
            let stale = programs_ready(ws, opts.allow_stale)?;
            let mut bench = run(ws, opts, &fixture, &source)?;
            bench.warnings.splice(0..0, stale_warning(&stale));
            bench
        }
    };
    let path = write(ws, &bench)?;
    link_protocol::out!("{}", render(&bench));
    link_protocol::errln!("xtask: wrote {}", ws.show(&path).display());
    Ok(match bench.status {
        BenchStatus::Measured => 0,
        BenchStatus::Skipped => runtime::EXIT_UNCONFINABLE,
        BenchStatus::Failed => runtime::EXIT_FAILED,
    })
}

/// For `cargo xtask runtime --bench-sandbox`, whose checks have run already: never an error,
/// a failure is recorded as [`BenchStatus::Failed`] with its reason. The caller [`write`]s it
/// once it has checked the programs are the runs' own.
pub fn within_runtime(ws: &Workspace, fixture: &Path, source: &str) -> SandboxBench {
    let opts = Options::default();
    let bench = run(ws, &opts, fixture, source).unwrap_or_else(|e| SandboxBench {
        status: BenchStatus::Failed,
        reason: Some(format!("{e:#}").replace('\n', " ")),
        ..empty(&opts, source, &commands(ws, fixture))
    });
    link_protocol::err!("\n{}", render(&bench));
    bench
}

/// The programs the benchmark needs (every program of the first build command; the runner
/// example is not needed): missing ones refuse with the build command; stale ones refuse
/// unless `allow_stale`, which returns them.
fn programs_ready(ws: &Workspace, allow_stale: bool) -> Result<Vec<String>> {
    let runner = ws.release().join(outputs::RUNNER);
    let problems: Vec<Problem> = outputs::verify(&ws.release(), &ws.root)?
        .into_iter()
        .filter(|p| p.output() != runner)
        .collect();
    let refused = problems.iter().any(|p| !p.measurable());
    if problems.is_empty() || (allow_stale && !refused) {
        for p in &problems {
            link_protocol::errln!("xtask: --allow-stale: measuring anyway: {p}");
        }
        return Ok(problems.iter().map(|p| p.to_string()).collect());
    }
    link_protocol::errln!("xtask: the release programs are not ready:");
    for p in &problems {
        link_protocol::errln!("  {p}");
    }
    let build = &outputs::build_commands()[0];
    link_protocol::errln!(
        "build them (from {}) with:\n  {}",
        ws.root.display(),
        outputs::command_text(build)
    );
    if !refused {
        link_protocol::errln!("or pass --allow-stale to measure them as built");
    }
    bail!(
        "{} release program(s) missing or stale; build them with the command above",
        problems.len()
    )
}

fn stale_warning(stale: &[String]) -> Option<String> {
    (!stale.is_empty()).then(|| outputs::allow_stale_caveat(stale.len()))
}

/// The JSON, pretty, under the target directory.
pub fn write(ws: &Workspace, bench: &SandboxBench) -> Result<PathBuf> {
    let path = ws.target.join(FILE);
    std::fs::create_dir_all(&ws.target)
        .with_context(|| format!("cannot create {}", ws.target.display()))?;
    let text = serde_json::to_string_pretty(bench)? + "\n";
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The fixture children of this process.
fn dirs(fixture: &Path) -> (PathBuf, PathBuf) {
    let pid = std::process::id();
    (
        fixture.join(format!("{STATE_PREFIX}{pid}")),
        fixture.join(format!("{WORKSPACE_PREFIX}{pid}")),
    )
}

fn commands(ws: &Workspace, fixture: &Path) -> Commands {
    let (root, workspace) = dirs(fixture);
    let release = ws.show(&ws.release());
    let link = release.join(HOST);
    let turn = |m: &str| {
        format!(
            "{} turn --state {} --token T {AGENT} '{m}'",
            link.display(),
            root.display()
        )
    };
    Commands {
        bare_bwrap: format!("bwrap {}", BARE_BWRAP.join(" ")),
        cli_exec: format!(
            "{} exec --workspace {} -- /bin/true",
            release.join("link-plugin-sandbox").display(),
            workspace.display()
        ),
        run_turn: turn(Turn::Run.message()),
        plain_turn: turn(Turn::Plain.message()),
        tool_turn: Some(turn(Turn::Tool.message())),
    }
}

const BARE_BWRAP: [&str; 10] = [
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--unshare-all",
    "--die-with-parent",
    "/bin/true",
];

/// A result with nothing measured.
fn empty(opts: &Options, source: &str, commands: &Commands) -> SandboxBench {
    SandboxBench {
        schema_version: SCHEMA_VERSION,
        status: BenchStatus::Skipped,
        reason: None,
        source: source.into(),
        rounds: opts.rounds,
        turn_rounds: opts.turn_rounds.min(opts.rounds),
        warmup_rounds: WARMUP_ROUNDS,
        commands: commands.clone(),
        programs: Vec::new(),
        noise_before: None,
        noise_after: None,
        variants: None,
        ratios: Vec::new(),
        method: METHOD.into(),
        warnings: Vec::new(),
        elapsed_s: 0.0,
    }
}

/// A result that says why nothing was measured.
fn skipped(opts: &Options, source: &str, commands: &Commands, reason: String) -> SandboxBench {
    link_protocol::errln!("xtask: bench-sandbox: SKIPPED, nothing measured: {reason}");
    SandboxBench {
        reason: Some(reason),
        ..empty(opts, source, commands)
    }
}

/// Why there is no bare bwrap run to compare with, if there is none.
fn no_bwrap() -> Option<String> {
    which::which("bwrap").is_err().then(|| {
        format!(
            "bwrap is not on PATH, so there is no bare bwrap run to compare with ({})",
            system::install_hint(&[system::BUBBLEWRAP])
        )
    })
}

/// Why this machine cannot run the benchmark, if it cannot: bwrap missing from PATH, or the
/// sandbox probe finding confinement unavailable. A broken probe is an error.
fn unavailable(ws: &Workspace) -> Result<Option<String>> {
    if let Some(reason) = no_bwrap() {
        return Ok(Some(reason));
    }
    match doctor::probe_sandbox(ws) {
        doctor::Probe::Enforced(_) => Ok(None),
        doctor::Probe::Unavailable(reason) => Ok(Some(format!(
            "confinement unavailable: {reason} (`cargo xtask doctor` says what to install or \
             change)"
        ))),
        doctor::Probe::Broken(reason) | doctor::Probe::NotRun(reason) => bail!(
            "the sandbox probe is broken: {reason}; nothing was measured (`cargo xtask doctor` \
             says more)"
        ),
    }
}

/// The benchmark itself; a skip is a result, not an error.
fn run(ws: &Workspace, opts: &Options, fixture: &Path, source: &str) -> Result<SandboxBench> {
    let started = Instant::now();
    let commands = commands(ws, fixture);
    if let Some(reason) = unavailable(ws)? {
        return Ok(skipped(opts, source, &commands, reason));
    }
    let mut bench = empty(opts, source, &commands);
    sweep(ws, fixture);
    bench.programs = outputs::hash_programs(&ws.release())?;
    let (root, workspace) = dirs(fixture);
    StateLayout::new(&root)
        .check()
        .map_err(|e| anyhow!("the benchmark's state root cannot be used: {e}"))?;
    let noise_before = Noise::sample();
    let samples = {
        let _workspace = Scratch::create(&workspace)?;
        let mut rt = Runtime::start(ws, &root)?;
        let samples = measure(ws, opts, &workspace, &mut rt)?;
        rt.stop()?;
        samples
    };
    let noise_after = Noise::sample();
    bench.warnings = warnings(&[&noise_before, &noise_after]);
    bench.noise_before = Some(noise_before);
    bench.noise_after = Some(noise_after);
    let (variants, ratios) = figures(&samples)?;
    for r in &ratios {
        if r.ratio.width_factor() > WIDE_INTERVAL {
            bench.warnings.push(format!(
                "{} has a wide interval ({}): raise --rounds/--turn-rounds or close other work",
                r.name,
                r.ratio.ratio_text()
            ));
        }
    }
    bench.status = BenchStatus::Measured;
    bench.variants = Some(variants);
    bench.ratios = ratios;
    bench.elapsed_s = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    Ok(bench)
}

fn warnings(noise: &[&Noise]) -> Vec<String> {
    noise
        .iter()
        .zip(["before", "after"])
        .filter_map(|(n, when)| {
            n.complaint().map(|why| {
                format!("the machine was busy {when} the benchmark ({why}): close other work")
            })
        })
        .collect()
}

/// The raw samples, nanoseconds, in the order they ran.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Samples {
    pub bare_bwrap: Vec<f64>,
    pub cli_exec: Vec<f64>,
    pub run_turn: Vec<f64>,
    pub tool_turn: Vec<f64>,
    pub plain_turn: Vec<f64>,
}

/// One command of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Bare,
    Exec,
    Turn(Turn),
}

/// Every order of the three turns: each turn precedes each other one in half of them.
const TURN_ORDERS: [[Turn; 3]; 6] = {
    use Turn::*;
    [
        [Run, Tool, Plain],
        [Plain, Run, Tool],
        [Tool, Plain, Run],
        [Run, Plain, Tool],
        [Tool, Run, Plain],
        [Plain, Tool, Run],
    ]
};

/// The steps of timed round `index` (0-based; warm-up rounds are `None`, all with turns):
/// `turn_rounds` of the `rounds` rounds, evenly spaced, carry the three turns. Bare bwrap and
/// the CLI exec take turns at running first; in a turn round the turns come in each of their
/// six orders in turn, with bwrap runs before the first turn and between the first and second,
/// so over every twelve turn rounds each turn precedes each other one equally often.
pub fn schedule(index: Option<u32>, rounds: u32, turn_rounds: u32, turn_index: u32) -> Vec<Step> {
    let turns = match index {
        None => true,
        Some(i) => {
            let (i, n, t) = (
                u64::from(i),
                u64::from(rounds.max(1)),
                u64::from(turn_rounds),
            );
            (i + 1) * t / n > i * t / n
        }
    };
    let k = if turns {
        turn_index
    } else {
        index.unwrap_or(0)
    } as usize;
    let (first, second) = if k.is_multiple_of(2) {
        (Step::Bare, Step::Exec)
    } else {
        (Step::Exec, Step::Bare)
    };
    if !turns {
        return vec![first, second];
    }
    let [a, b, c] = TURN_ORDERS[(k / 2) % TURN_ORDERS.len()].map(Step::Turn);
    vec![first, a, second, b, c]
}

fn measure(ws: &Workspace, opts: &Options, workspace: &Path, rt: &mut Runtime) -> Result<Samples> {
    let token = rt.token()?;
    rt.create_agent(&token)?;
    let sandbox = ws.release().join("link-plugin-sandbox");
    let bare = || {
        let mut c = Command::new("bwrap");
        c.args(BARE_BWRAP);
        c
    };
    let exec = || {
        let mut c = Command::new(&sandbox);
        c.arg("exec")
            .arg("--workspace")
            .arg(workspace)
            .args(["--", "/bin/true"]);
        c
    };
    let turn_rounds = opts.turn_rounds.min(opts.rounds);
    let total = WARMUP_ROUNDS + opts.rounds;
    link_protocol::errln!(
        "xtask: bench-sandbox: {WARMUP_ROUNDS} warm-up rounds, then {} rounds ({turn_rounds} \
         with a turn pair), interleaved",
        opts.rounds
    );
    let mut s = Samples::default();
    let mut turn_index = 0u32;
    let mut next_report = Instant::now() + Duration::from_secs(10);
    for r in 0..total {
        let timed = r.checked_sub(WARMUP_ROUNDS);
        let steps = schedule(timed, opts.rounds, turn_rounds, turn_index);
        if steps.contains(&Step::Turn(Turn::Run)) {
            turn_index += 1;
        }
        for step in steps {
            let (ns, into) = match step {
                Step::Bare => (timed_ok("bare bwrap", bare())?, &mut s.bare_bwrap),
                Step::Exec => (
                    timed_ok("link-plugin-sandbox exec", exec())?,
                    &mut s.cli_exec,
                ),
                Step::Turn(turn) => (
                    rt.timed_turn(&token, turn)?,
                    match turn {
                        Turn::Run => &mut s.run_turn,
                        Turn::Tool => &mut s.tool_turn,
                        Turn::Plain => &mut s.plain_turn,
                    },
                ),
            };
            if timed.is_some() {
                into.push(ns);
            }
        }
        if Instant::now() >= next_report {
            link_protocol::errln!("xtask: bench-sandbox: round {}/{total}", r + 1);
            next_report += Duration::from_secs(10);
        }
    }
    Ok(s)
}

/// Spawn to exit of `command` (stdin and stdout null, stderr kept for the error), in
/// nanoseconds, and its output; an error when it could not start.
fn timed(what: &str, mut command: Command) -> Result<(f64, Output)> {
    command.stdin(Stdio::null());
    let start = Instant::now();
    let out = command
        .output()
        .with_context(|| format!("cannot start {what}"))?;
    Ok((start.elapsed().as_nanos() as f64, out))
}

/// [`timed`], with stdout discarded and a non-zero exit an error.
fn timed_ok(what: &str, mut command: Command) -> Result<f64> {
    command.stdout(Stdio::null());
    let (ns, out) = timed(what, command)?;
    if !out.status.success() {
        bail!(
            "{what} of /bin/true failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(ns)
}

/// The variants and ratios from the samples.
pub fn figures(s: &Samples) -> Result<(Variants, Vec<Ratio>)> {
    let less = |of: &[f64], base: &[f64]| -> Vec<f64> {
        of.iter().zip(base).map(|(of, base)| of - base).collect()
    };
    let plugin = less(&s.run_turn, &s.plain_turn);
    let confined = less(&s.run_turn, &s.tool_turn);
    let variant = |name: &str, samples: &[f64]| -> Result<Variant> {
        let spread = stats::spread(&[samples.to_vec()], stats::seed(name))
            .ok_or_else(|| anyhow!("no {name} sample"))?;
        Ok(Variant {
            spread,
            samples_ns: samples.to_vec(),
        })
    };
    let variants = Variants {
        bare_bwrap: variant("bare_bwrap", &s.bare_bwrap)?,
        cli_exec: variant("cli_exec", &s.cli_exec)?,
        plugin_path: variant("plugin_path", &plugin)?,
        run_turn: variant("run_turn", &s.run_turn)?,
        plain_turn: variant("plain_turn", &s.plain_turn)?,
        confined_run: Some(variant("confined_run", &confined)?),
        tool_turn: Some(variant("tool_turn", &s.tool_turn)?),
    };
    let ratio = |num: &str, samples: &Vec<f64>| -> Result<Ratio> {
        let name = format!("{num}/bare_bwrap");
        let (bare, num_samples) = (
            std::slice::from_ref(&s.bare_bwrap),
            std::slice::from_ref(samples),
        );
        let r = stats::ratio(bare, num_samples, stats::seed(&name))
            .ok_or_else(|| anyhow!("no ratio {name}: bare bwrap took no measurable time"))?;
        Ok(Ratio {
            goal: Goal::of(&r, GOAL),
            name,
            numerator: num.into(),
            denominator: "bare_bwrap".into(),
            ratio: r,
            goal_max: GOAL,
        })
    };
    let ratios = vec![
        ratio("cli_exec", &s.cli_exec)?,
        ratio("plugin_path", &plugin)?,
        ratio("confined_run", &confined)?,
    ];
    Ok((variants, ratios))
}

/// The short table.
pub fn render(b: &SandboxBench) -> String {
    let mut out = format!(
        "sandbox benchmark: {} rounds of bare bwrap and CLI exec, {} of them with the turns, \
         {} warm-up rounds discarded\n",
        b.rounds, b.turn_rounds, b.warmup_rounds
    );
    let (Some(v), BenchStatus::Measured) = (&b.variants, b.status) else {
        let word = match b.status {
            BenchStatus::Failed => "FAILED",
            _ => "SKIPPED",
        };
        out.push_str(&format!(
            "*** {word}, nothing measured: {} ***\n",
            b.reason.as_deref().unwrap_or("no reason given")
        ));
        return out;
    };
    out.push_str(&format!(
        "{:<14} {:>10} {:>19} {:>8}\n",
        "variant", "median ms", "95% interval", "samples"
    ));
    let ms = |ns: f64| format!("{:.2}", ns / 1e6);
    for (name, var, note) in [
        ("bare_bwrap", Some(&v.bare_bwrap), ""),
        ("cli_exec", Some(&v.cli_exec), ""),
        (
            "plugin_path",
            Some(&v.plugin_path),
            "  (run turn − plain turn)",
        ),
        (
            "confined_run",
            v.confined_run.as_ref(),
            "  (run turn − tool turn)",
        ),
        ("  run_turn", Some(&v.run_turn), ""),
        ("  tool_turn", v.tool_turn.as_ref(), ""),
        ("  plain_turn", Some(&v.plain_turn), ""),
    ] {
        let Some(var) = var else {
            out.push_str(&format!("{name:<14} {:>10}\n", "not measured"));
            continue;
        };
        let s = &var.spread;
        out.push_str(&format!(
            "{name:<14} {:>10} {:>19} {:>8}{note}\n",
            ms(s.median_ns),
            format!("[{}–{}]", ms(s.median_low_ns), ms(s.median_high_ns)),
            s.samples
        ));
    }
    out.push_str(&format!(
        "\n{:<26} {:<24} {:<8} {}\n",
        "ratio", "estimate [95% interval]", "goal", "verdict"
    ));
    for r in &b.ratios {
        out.push_str(&format!(
            "{:<26} {:<24} {:<8} {}\n",
            r.name.replace('/', " / "),
            r.ratio.ratio_text(),
            format!("≤ {:.2}×", r.goal_max),
            r.goal.word()
        ));
    }
    for w in &b.warnings {
        out.push_str(&format!("WARNING: {w}\n"));
    }
    out.push_str(&format!("({:.1} s)\n", b.elapsed_s));
    out
}

/// The Markdown section of the runtime comparison.
pub fn markdown(b: &SandboxBench) -> String {
    format!(
        "\n## Sandbox benchmark\n\nConfined `run` on the plugin path and CLI `exec` against \
         one bare bwrap run (`bench-sandbox.json`; method: {}).\n\n```\n{}```\n",
        b.method,
        render(b)
    )
}

/// A directory of the benchmark's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn create(dir: &Path) -> Result<Scratch> {
        private_dir(dir)?;
        Ok(Scratch(dir.to_path_buf()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_dir(&self.0);
    }
}

fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => link_protocol::errln!("xtask: cannot remove {}: {e}", dir.display()),
    }
}

/// Leftovers of an earlier benchmark that was killed (Ctrl-C, SIGKILL): a `bs<pid>` or
/// `bw<pid>` whose process is gone. A runtime still up on such a state root is stopped with
/// `link down` first.
fn sweep(ws: &Workspace, fixture: &Path) {
    let Ok(entries) = std::fs::read_dir(fixture) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = leftover_pid(&name.to_string_lossy()) else {
            continue;
        };
        if pid == std::process::id() || alive(pid) {
            continue;
        }
        let dir = entry.path();
        if StateLayout::new(&dir).host_socket().exists() {
            let _ = link_command(ws, &dir, &["down"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        link_protocol::errln!(
            "xtask: bench-sandbox: removing {}, left by an earlier benchmark (pid {pid})",
            dir.display()
        );
        remove_dir(&dir);
    }
}

/// A process `pid` exists and is not a zombie waiting to be reaped.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)`, comm may hold anything.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X")),
        Err(_) => false,
    }
}

/// The pid in `bs<pid>` / `bw<pid>`.
pub fn leftover_pid(name: &str) -> Option<u32> {
    let digits = name
        .strip_prefix(STATE_PREFIX)
        .or_else(|| name.strip_prefix(WORKSPACE_PREFIX))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `link ARGS --state ROOT` with HOME and XDG_* inside the state root and the file keychain,
/// as the testing kit runs it.
fn link_command(ws: &Workspace, root: &Path, args: &[&str]) -> Command {
    let home = StateLayout::new(root).home(HOST);
    let mut c = Command::new(ws.release().join(HOST));
    c.args(args)
        .arg("--state")
        .arg(root)
        .env("LNK_KEYCHAIN", "off")
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("HOME", home);
    c
}

/// A confined full Link runtime of the benchmark's own. Dropping it stops it (`link down`,
/// then SIGTERM, then SIGKILL) and removes its state root, on every path out of the
/// benchmark; on Ctrl-C the host gets the terminal's SIGINT itself and stops, and the next
/// benchmark removes the state root ([`sweep`]).
struct Runtime {
    ws: Workspace,
    root: PathBuf,
    child: Option<Child>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

/// Lines of the host's stderr kept for an error message.
const STDERR_TAIL: usize = 20;

impl Runtime {
    fn start(ws: &Workspace, root: &Path) -> Result<Runtime> {
        private_dir(root)?;
        let mut rt = Runtime {
            ws: ws.clone(),
            root: root.to_path_buf(),
            child: None,
            stderr: Arc::default(),
        };
        for dir in ["", ".config", ".cache", ".local/share", ".local/state"] {
            private_dir(&StateLayout::new(root).home(HOST).join(dir))?;
        }
        let mut up = link_command(ws, root, &["up", "--profile", "link", "--mode", "confined"]);
        let shown = format!("link up --profile link --state {}", root.display());
        link_protocol::errln!("xtask: bench-sandbox: $ {shown}");
        let mut child = up
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start `{shown}`"))?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        rt.child = Some(child);
        let (ready_tx, ready_rx) = mpsc::channel();
        if let Some(stdout) = stdout {
            // Sends the ready line, then drains stdout so the host never blocks on it.
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.starts_with("ready ") {
                        let _ = ready_tx.send(line);
                    }
                }
            });
        }
        if let Some(stderr) = stderr {
            let tail = Arc::clone(&rt.stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                    if t.len() == STDERR_TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            });
        }
        match ready_rx.recv_timeout(READY_WITHIN) {
            Ok(_) => Ok(rt),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(anyhow!(
                "`{shown}` printed no ready line within {} s{}",
                READY_WITHIN.as_secs(),
                rt.tail()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Stdout closed: the host is exiting; its last words are on stderr.
                let status = rt.child.as_mut().and_then(|c| wait_until(c, EXIT_WITHIN));
                std::thread::sleep(Duration::from_millis(50));
                Err(anyhow!(
                    "`{shown}` exited before it was ready ({}){}",
                    status.map_or("still running".into(), |s| s.to_string()),
                    rt.tail()
                ))
            }
        }
    }

    fn tail(&self) -> String {
        let t = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends: {}", Vec::from(t.clone()).join(" | "))
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        link_command(&self.ws, &self.root, args)
    }

    /// `link token create`: the bearer token, printed on stdout.
    fn token(&self) -> Result<String> {
        let out = self
            .command(&["token", "create"])
            .stdin(Stdio::null())
            .output()
            .context("cannot run `link token create`")?;
        let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || token.is_empty() {
            bail!(
                "`link token create` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(token)
    }

    fn create_agent(&self, token: &str) -> Result<()> {
        let out = self
            .command(&["agent", "create", "--token", token, AGENT])
            .stdin(Stdio::null())
            .output()
            .context("cannot run `link agent create`")?;
        if !out.status.success() {
            bail!(
                "`link agent create {AGENT}` failed ({}): {} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// One `link turn`, timed; its reply must be what the turn asked for ([`check_reply`]),
    /// or it is an error.
    fn timed_turn(&self, token: &str, turn: Turn) -> Result<f64> {
        let message = turn.message();
        let command = self.command(&["turn", "--token", token, AGENT, message]);
        let (ns, out) = timed("link turn", command)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let refused = |why: &str| {
            anyhow!(
                "the turn `{message}` {why} ({}): {} {}",
                out.status,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        };
        if !out.status.success() {
            return Err(refused("was refused"));
        }
        let reply: serde_json::Value =
            serde_json::from_str(&stdout).map_err(|_| refused("answered no JSON"))?;
        check_reply(&reply, turn).map_err(|why| refused(&why))?;
        Ok(ns)
    }

    /// `link down`, the host's exit (SIGTERM, then SIGKILL past [`EXIT_WITHIN`]), the state
    /// root removed. An error when the host did not stop cleanly.
    fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let down = self
            .command(&["down"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output();
        let down_ok = down.as_ref().is_ok_and(|o| o.status.success());
        if !down_ok {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&child),
                rustix::process::Signal::TERM,
            );
        }
        let status = match wait_until(&mut child, EXIT_WITHIN) {
            Some(s) => Some(s),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        };
        remove_dir(&self.root);
        match (down, status) {
            (Ok(d), Some(s)) if d.status.success() && s.success() => Ok(()),
            (down, status) => Err(anyhow!(
                "the benchmark's runtime did not stop cleanly: `link down` {}, the host {}{}",
                match down {
                    Ok(d) if d.status.success() => "succeeded".to_string(),
                    Ok(d) => format!(
                        "failed ({}): {}",
                        d.status,
                        String::from_utf8_lossy(&d.stderr).trim()
                    ),
                    Err(e) => format!("could not run: {e}"),
                },
                status.map_or(
                    format!("was killed after {} s", EXIT_WITHIN.as_secs()),
                    |s| format!("exited {s}")
                ),
                self.tail()
            )),
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            link_protocol::errln!("xtask: bench-sandbox: {e:#}");
        }
    }
}

/// The child's exit status once it exits, or `None` past `within`.
fn wait_until(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + within;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// A turn's reply is what it asked for: `run: true` made exactly one `run` call, which
/// succeeded with exit code 0; `list` exactly one `file` call, which succeeded; `hello` none.
pub fn check_reply(reply: &serde_json::Value, turn: Turn) -> Result<(), String> {
    if !reply.get("reply").is_some_and(|r| r.is_string()) {
        return Err("answered without a reply".into());
    }
    let calls = reply
        .get("tool_calls")
        .and_then(|c| c.as_array())
        .ok_or("answered without tool_calls")?;
    let Some(tool) = turn.tool() else {
        return match calls.len() {
            0 => Ok(()),
            n => Err(format!("made {n} tool call(s), expected none")),
        };
    };
    let [call] = &calls[..] else {
        return Err(format!("made {} tool calls, expected one", calls.len()));
    };
    if call.get("tool").and_then(|t| t.as_str()) != Some(tool) {
        return Err(format!("made a call that is not `{tool}`"));
    }
    if call.get("ok").and_then(|o| o.as_bool()) != Some(true) {
        return Err(format!("had its `{tool}` call refused"));
    }
    if turn != Turn::Run {
        return Ok(());
    }
    let code = call.pointer("/output/exit_code").and_then(|c| c.as_i64());
    if code != Some(0) {
        return Err(format!("ran `true` with exit code {code:?}, expected 0"));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn goals_are_decided_only_by_the_whole_interval() {
        let i = |low, high| Interval {
            estimate: (low + high) / 2.0,
            low,
            high,
        };
        assert_eq!(Goal::of(&i(1.1, 1.3), 1.3), Goal::Met);
        assert_eq!(Goal::of(&i(1.31, 1.5), 1.3), Goal::NotMet);
        assert_eq!(Goal::of(&i(1.2, 1.4), 1.3), Goal::Undecided);
        assert_eq!(Goal::NotMet.word(), "not met");
    }

    #[test]
    fn turn_rounds_are_spread_evenly_and_orders_balance() {
        use Turn::*;
        let (rounds, turns) = (120, 48);
        let mut with_turns = Vec::new();
        let mut turn_index = 0;
        let mut bare_first = 0;
        // How often the first of each pair of turns ran before the second.
        let pairs = [(Run, Plain), (Run, Tool), (Tool, Plain)];
        let mut before = [0; 3];
        for i in 0..rounds {
            let steps = schedule(Some(i), rounds, turns, turn_index);
            let at = |s| steps.iter().position(|x| *x == s).unwrap();
            if steps.contains(&Step::Turn(Run)) {
                assert_eq!(steps.len(), 5, "{steps:?}");
                turn_index += 1;
                with_turns.push(i);
                for (n, (a, b)) in pairs.iter().enumerate() {
                    before[n] += usize::from(at(Step::Turn(*a)) < at(Step::Turn(*b)));
                }
                if at(Step::Bare) < at(Step::Exec) {
                    bare_first += 1;
                }
            } else {
                let pair = if i.is_multiple_of(2) {
                    [Step::Bare, Step::Exec]
                } else {
                    [Step::Exec, Step::Bare]
                };
                assert_eq!(steps, pair);
            }
        }
        assert_eq!(with_turns.len(), 48);
        // Evenly spaced: no gap between turn rounds above ceil(120/48).
        assert!(
            with_turns.windows(2).all(|w| w[1] - w[0] <= 3),
            "{with_turns:?}"
        );
        assert_eq!(
            before,
            [24, 24, 24],
            "each turn before each other one in half the rounds"
        );
        assert_eq!(bare_first, 24);
        // Every round has turns when there are as many turn rounds as rounds; warm-up too.
        assert!((0..10).all(|i| schedule(Some(i), 10, 10, i).len() == 5));
        assert_eq!(schedule(None, 10, 0, 0).len(), 5);
        assert!((0..10).all(|i| schedule(Some(i), 10, 0, 0).len() == 2));
    }

    #[test]
    fn figures_give_every_variant_and_every_ratio() {
        let s = Samples {
            bare_bwrap: vec![4e6, 4.2e6, 3.9e6, 4.1e6, 4.0e6],
            cli_exec: vec![6e6, 6.2e6, 5.9e6, 6.1e6, 6.0e6],
            run_turn: vec![30e6, 31e6, 29e6],
            tool_turn: vec![26e6, 26e6, 25e6],
            plain_turn: vec![24e6, 25e6, 23e6],
        };
        let (v, r) = figures(&s).unwrap();
        assert_eq!(v.plugin_path.samples_ns, vec![6e6, 6e6, 6e6]);
        assert_eq!(v.plugin_path.spread.median_ns, 6e6);
        let confined = v.confined_run.as_ref().unwrap();
        assert_eq!(confined.samples_ns, vec![4e6, 5e6, 4e6]);
        assert_eq!(confined.spread.median_ns, 4e6);
        assert_eq!(v.bare_bwrap.spread.samples, 5);
        let names: Vec<&str> = r.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cli_exec/bare_bwrap",
                "plugin_path/bare_bwrap",
                "confined_run/bare_bwrap"
            ]
        );
        assert_eq!(r[2].ratio.estimate, 1.0);
        assert_eq!(r[0].ratio.estimate, 1.5);
        assert!(r[0].ratio.low <= 1.5 && 1.5 <= r[0].ratio.high);
        assert_eq!(r[0].goal, Goal::NotMet);
        let empty = Samples::default();
        assert!(figures(&empty).is_err(), "no samples, no figures");
    }

    #[test]
    fn a_skip_says_why_and_has_no_figures() {
        let c = Commands {
            bare_bwrap: "bwrap ...".into(),
            cli_exec: "exec".into(),
            run_turn: "run".into(),
            plain_turn: "plain".into(),
            tool_turn: Some("tool".into()),
        };
        let mut b = empty(&Options::default(), "abc", &c);
        b.reason = Some("confinement unavailable: no user namespaces".into());
        let text = render(&b);
        assert!(text.contains("SKIPPED, nothing measured: confinement unavailable"));
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(json["status"], "skipped");
        assert!(json["variants"].is_null());
        assert_eq!(json["ratios"], serde_json::json!([]));
    }

    #[test]
    fn replies_are_checked_before_a_turn_counts() {
        let ok_run = serde_json::json!({"reply": "run: ok", "tool_calls": [
            {"tool": "run", "ok": true, "output": {"exit_code": 0}}]});
        assert_eq!(check_reply(&ok_run, Turn::Run), Ok(()));
        assert!(check_reply(&ok_run, Turn::Plain).is_err());
        assert!(check_reply(&ok_run, Turn::Tool)
            .unwrap_err()
            .contains("not `file`"));
        let refused = serde_json::json!({"reply": "no", "tool_calls": [
            {"tool": "run", "ok": false, "output": {"error": "unavailable"}}]});
        assert!(check_reply(&refused, Turn::Run)
            .unwrap_err()
            .contains("refused"));
        let failed = serde_json::json!({"reply": "x", "tool_calls": [
            {"tool": "run", "ok": true, "output": {"exit_code": 1}}]});
        assert!(check_reply(&failed, Turn::Run).is_err());
        let listed = serde_json::json!({"reply": "file: ok", "tool_calls": [
            {"tool": "file", "ok": true, "output": {"entries": []}}]});
        assert_eq!(check_reply(&listed, Turn::Tool), Ok(()));
        assert!(check_reply(&listed, Turn::Run).is_err());
        let unlisted = serde_json::json!({"reply": "no", "tool_calls": [
            {"tool": "file", "ok": false, "output": {"error": "denied"}}]});
        assert!(check_reply(&unlisted, Turn::Tool)
            .unwrap_err()
            .contains("refused"));
        let plain = serde_json::json!({"reply": "hi", "tool_calls": []});
        assert_eq!(check_reply(&plain, Turn::Plain), Ok(()));
        assert!(check_reply(&plain, Turn::Run).is_err());
        assert!(check_reply(&plain, Turn::Tool).is_err());
        assert!(check_reply(&serde_json::json!({}), Turn::Plain).is_err());
    }

    /// A measured result from synthetic samples, as the comparison records it.
    pub(crate) fn measured() -> SandboxBench {
        let s = Samples {
            bare_bwrap: vec![4e6, 4.2e6, 3.9e6, 4.1e6],
            cli_exec: vec![5e6, 5.2e6, 4.9e6, 5.1e6],
            run_turn: vec![30e6, 31e6],
            tool_turn: vec![26e6, 26.5e6],
            plain_turn: vec![25e6, 25.5e6],
        };
        let (variants, ratios) = figures(&s).unwrap();
        let c = Commands {
            bare_bwrap: "bwrap".into(),
            cli_exec: "exec".into(),
            run_turn: "run".into(),
            plain_turn: "plain".into(),
            tool_turn: Some("tool".into()),
        };
        SandboxBench {
            status: BenchStatus::Measured,
            variants: Some(variants),
            ratios,
            programs: vec![Program {
                name: "link".into(),
                sha256: "aa".into(),
            }],
            ..empty(&Options::default(), "abc", &c)
        }
    }

    #[test]
    fn the_comparison_records_the_benchmark_and_shows_it() {
        let mut c = crate::compare::tests::sample();
        let plain = serde_json::to_value(&c).unwrap();
        assert!(
            plain.get("sandbox_bench").is_none(),
            "absent without the flag"
        );
        c.sandbox_bench = Some(measured());
        let text = serde_json::to_string(&c).unwrap();
        let back: crate::compare::Comparison = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
        let md = crate::compare::markdown(&c);
        assert!(md.contains("## Sandbox benchmark"), "{md}");
        assert!(md.contains("cli_exec / bare_bwrap      1.25×"), "{md}");
        // An earlier comparison, without the field, still reads.
        let old: crate::compare::Comparison = serde_json::from_value(plain).unwrap();
        assert_eq!(old.sandbox_bench, None);
        // So does a benchmark from before the tool turn: its figures are not measured, not 0.
        let mut before = serde_json::to_value(measured()).unwrap();
        for gone in ["confined_run", "tool_turn"] {
            before["variants"].as_object_mut().unwrap().remove(gone);
        }
        before["commands"]
            .as_object_mut()
            .unwrap()
            .remove("tool_turn");
        let before: SandboxBench = serde_json::from_value(before).unwrap();
        let v = before.variants.as_ref().unwrap();
        assert_eq!((&v.confined_run, &v.tool_turn), (&None, &None));
        assert_eq!(before.commands.tool_turn, None);
        let text = render(&before);
        assert!(text.contains("confined_run   not measured"), "{text}");
    }

    #[test]
    fn this_process_is_alive_and_a_free_pid_is_not() {
        assert!(alive(std::process::id()));
        // Above the kernel's largest pid_max (2^22).
        assert!(!alive(4_194_305));
    }

    #[test]
    fn only_this_benchmarks_leftover_names_are_swept() {
        assert_eq!(leftover_pid("bs1234"), Some(1234));
        assert_eq!(leftover_pid("bw7"), Some(7));
        for other in ["bs", "bsx1", "r0000", "bs12a", "b1234", "bench"] {
            assert_eq!(leftover_pid(other), None, "{other}");
        }
    }
}
