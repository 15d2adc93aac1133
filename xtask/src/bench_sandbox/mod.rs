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

//!
//! One file each: `mod.rs` the command (its checks, the rounds, the result written);
//! `schedule.rs` the turns and the order of the rounds; `host.rs` the benchmark's own runtime
//! and its scratch directories; `report.rs` the result, its figures and how it is shown, a leaf
//! the comparison reads.

mod host;
pub mod report;
mod schedule;

use host::{sweep, Runtime, Scratch, AGENT, STATE_PREFIX, WORKSPACE_PREFIX};
use report::{figures, render, Commands, METHOD, SCHEMA_VERSION};
pub use report::{BenchStatus, SandboxBench, FILE};
use schedule::{schedule, Samples, Step, Turn};

use crate::noise::{Noise, WIDE_INTERVAL};
use crate::outputs::{self, Workspace};
use crate::{doctor, exit, source, state, system};
use anyhow::{anyhow, bail, Context, Result};
use link_protocol::layout::StateLayout;
// The floor's argv, owned with the load benchmark's samples.
use link_protocol::routes::programs::HOST;
use link_report::load::BARE_BWRAP;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Rounds of `bare_bwrap` and `cli_exec` unless `--rounds` says otherwise.
pub const DEFAULT_ROUNDS: u32 = 100;
/// Rounds with the turns (run, tool, plain) unless `--turn-rounds` says otherwise.
pub const DEFAULT_TURN_ROUNDS: u32 = 40;
/// Rounds run first and discarded (each with the turns): caches, the model connection, the
/// harness's first load of the conversation.
pub const WARMUP_ROUNDS: u32 = 5;

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
    let source = source::source(&ws.root)?;
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
        BenchStatus::Measured => exit::PASSED,
        BenchStatus::Skipped => exit::UNCONFINABLE,
        BenchStatus::Failed => exit::FAILED,
    })
}

/// For `cargo xtask runtime --bench-sandbox`, whose checks have run already: never an error,
/// a failure is recorded as [`BenchStatus::Failed`] with its reason. The caller [`write`](fn@write)s it
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
    let builds = [outputs::build_commands().swap_remove(0)];
    outputs::ready(ws, allow_stale, &outputs::program_outputs(), &builds)
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
pub(crate) fn no_bwrap() -> Option<String> {
    which::which("bwrap").is_err().then(|| {
        format!(
            "bwrap is not on PATH, so there is no bare bwrap run to compare with ({})",
            system::install_hint(&[system::BUBBLEWRAP])
        )
    })
}

/// Why this machine cannot run the benchmark, if it cannot: bwrap missing from PATH, or the
/// sandbox probe finding confinement unavailable. A broken probe is an error.
pub(crate) fn unavailable(ws: &Workspace) -> Result<Option<String>> {
    if let Some(reason) = no_bwrap() {
        return Ok(Some(reason));
    }
    match doctor::probe_sandbox(ws) {
        doctor::Probe::Enforced(_) => Ok(None),
        doctor::Probe::Unavailable(reason, _) => Ok(Some(format!(
            "confinement unavailable: {reason} (`cargo xtask doctor` says what to install or \
             change)"
        ))),
        doctor::Probe::Broken(reason)
        | doctor::Probe::Unexpected(reason)
        | doctor::Probe::NotBuilt(reason)
        | doctor::Probe::NotRun(reason) => bail!(
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use report::Program;

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
}
