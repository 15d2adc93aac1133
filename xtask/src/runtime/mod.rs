//! `cargo xtask runtime`: N interleaved Mini and full Link runs on the locked release programs
//! (Mini, Link, Mini, Link, ...; every run's report kept under `target/runtime-runs/`), an
//! optional separate strace pass, and the comparison under `target/`.
//!
//! One file each: `mod.rs` the invocation (its lock, the checks before anything runs, the
//! order of the runs, cycles and benchmark, the outputs written); `checks.rs` what it checks
//! before it measures (and that the reports name the programs it hashed); `files.rs` the names
//! of what it writes; `runner.rs` driving the standalone runner; `summary.rs` the exit status and the
//! printed table. The source's name is [`crate::source`]'s, the exit statuses
//! [`crate::exit`]'s.

use crate::baseline;
use crate::bench_sandbox::{self, BenchStatus};
use crate::compare::{self, Comparison, Inputs, Loaded, Noise, TimedRun};
use crate::doctor::{self, Probe};
use crate::outputs::{self, Workspace};
use crate::{ci, source, state, svg, system};
use anyhow::{anyhow, bail, Context, Result};
use link_report::probe::{SandboxProbe, SandboxStatus};
use link_report::{Mode, Profile, Report, Status};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod checks;
mod files;
mod runner;
mod summary;

pub use checks::require_outputs;
use checks::{different_programs, require_against, stale_outputs, strace};
pub use files::{comparison_files, files, run_file};
use runner::{print_checks, remove_stale, timed_run, traced_run};
use summary::print_summary;
pub use summary::{summarize, Summary};

/// Full scenario runs per side unless `--runs` says otherwise: the spec's reports and every
/// check; the figures come from the paired timing cycles ([`crate::cycles`]).
pub const DEFAULT_RUNS: u32 = 1;
/// ROUNDS per run unless `--rounds` says otherwise: enough warm turns for a distribution.
pub const DEFAULT_ROUNDS: u32 = 20;

/// What `runtime` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub build: bool,
    /// Install the missing system packages first ([`system::install_missing`]).
    pub install: bool,
    pub mode: Mode,
    pub rounds: Option<u32>,
    /// Timed runs per side (interleaved).
    pub runs: u32,
    pub trace: bool,
    pub allow_skip: bool,
    /// Measure programs older than their sources (others are editing the tree); the
    /// comparison says so in its caveats. Missing programs are still refused.
    pub allow_stale: bool,
    pub baseline: Option<PathBuf>,
    pub max_regression: f64,
    /// `--junit FILE`: JUnit XML, a testsuite per side, a testcase per check.
    pub junit: Option<PathBuf>,
    /// `--bench-sandbox`: after the runs, the sandbox benchmark, recorded in the comparison.
    pub bench_sandbox: bool,
    /// `--budget SECS`: how long the paired timing cycles may run.
    pub budget: Duration,
    /// `--precision PCT`: the cycles stop once every figure is within about ±PCT%.
    pub precision_pct: f64,
    /// `--against DIR`: other programs, compared with target/release cycle by cycle.
    pub against: Option<PathBuf>,
}

/// Confined mode where the sandbox probe says confinement is unavailable: said once, with the
/// probe's reason, before any run (or after the first run that skipped for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unconfinable {
    pub reason: String,
}

impl std::fmt::Display for Unconfinable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "confinement is unavailable on this machine: {}; nothing was measured (no timed \
             runs, no trace pass). `cargo xtask doctor` says what to install or change; \
             `--mode diagnostic` measures unconfined, explicitly",
            self.reason
        )
    }
}

impl std::error::Error for Unconfinable {}

/// A confined run that skipped while the runner's own sandbox probe (kept in the report's
/// `platform.sandbox`) found confinement unavailable; the probe's reason, as it gave it.
fn unconfinable_skip(mode: Mode, report: &Report) -> Option<Unconfinable> {
    let probe = SandboxProbe::read(&report.platform.sandbox)?;
    let skipped = mode == Mode::Confined && report.outcome.status == Status::Skipped;
    (skipped && probe.status == SandboxStatus::Unavailable).then(|| Unconfinable {
        reason: probe
            .reason
            .unwrap_or_else(|| "the sandbox probe gave no reason".into()),
    })
}

/// Runs everything and writes the comparison; errors only when nothing can be compared.
///
/// One invocation at a time per target directory ([`lock`]). Before anything runs, the outputs
/// an earlier invocation left are removed, so none can pass for this one's; when this one
/// measures nothing (an error, confinement unavailable) it still writes every output, each
/// saying `failed: <reason>` or `skipped: <reason>`.
pub fn run(ws: &Workspace, opts: &Options) -> Result<Summary> {
    let _lock = lock(ws)?;
    // Read first: it may be the very file this run replaces (target/runtime-comparison.json).
    let earlier = opts.baseline.as_deref().map(baseline::load);
    remove_outputs(ws, opts)?;
    let result = earlier
        .transpose()
        .and_then(|earlier| measure(ws, opts, earlier));
    if let Err(e) = &result {
        let (status, reason) = match e.downcast_ref::<Unconfinable>() {
            Some(u) => (
                Status::Skipped,
                format!("confinement unavailable: {}", u.reason),
            ),
            None => (Status::Failed, format!("{e:#}").replace('\n', " ")),
        };
        if let Err(w) = write_nothing_measured(ws, opts, status, &reason) {
            link_protocol::errln!("xtask: cannot write the outputs that say so: {w:#}");
        }
    }
    result
}

/// Holds `target/runtime.lock` for the invocation: two comparisons in one target directory
/// would overwrite each other's files. The second is refused, naming the first's pid.
fn lock(ws: &Workspace) -> Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    std::fs::create_dir_all(&ws.target)
        .with_context(|| format!("cannot create {}", ws.target.display()))?;
    let path = ws.target.join("runtime.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        bail!(
            "another `cargo xtask runtime` (pid {}) is running on {}; wait for it to finish (or \
             stop it) and run again",
            holder.trim(),
            ws.show(&ws.target).display()
        );
    }
    file.set_len(0)?;
    file.rewind()?;
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

/// Every output of an earlier invocation in this mode: the comparison, the spec's single-run
/// reports, the traced reports and traces, `--junit`'s file.
fn remove_outputs(ws: &Workspace, opts: &Options) -> Result<()> {
    let mut old: Vec<PathBuf> = comparison_files(&ws.target, opts.mode).into();
    for p in Profile::ALL {
        let f = files(&ws.target, p, opts.mode);
        old.extend([f.report, f.traced, f.trace]);
    }
    old.extend(opts.junit.iter().cloned());
    old.iter().try_for_each(|p| remove_stale(p))
}

/// The outputs of an invocation that measured nothing: both sides `status` with `reason`, no
/// figure, no ratio.
fn write_nothing_measured(
    ws: &Workspace,
    opts: &Options,
    status: Status,
    reason: &str,
) -> Result<()> {
    let stand_in = |p: Profile| {
        let mut l = Loaded::failed(
            p,
            opts.mode,
            "(not measured)",
            Path::new("(none)"),
            String::new(),
        );
        l.report.outcome = link_report::Outcome {
            status,
            reason: Some(reason.to_string()),
        };
        l
    };
    let (mini, link) = (stand_in(Profile::Mini), stand_in(Profile::Link));
    let c = compare::build(&Inputs {
        mode: opts.mode,
        mini: &mini,
        link: &link,
        runs: &[],
        runs_requested: opts.runs,
        rounds: opts.rounds.unwrap_or(DEFAULT_ROUNDS),
        mini_traced: None,
        link_traced: None,
        cycles: &[],
        sampling: no_cycles(opts),
        against: None,
    });
    write_comparison(ws, opts.mode, &c)?;
    if let Some(path) = &opts.junit {
        ci::write_junit(path, &c, &[])?;
    }
    if let Some(path) = ci::step_summary_file(std::env::var_os(ci::STEP_SUMMARY)) {
        ci::append_step_summary(&path, &compare::markdown(&c))?;
    }
    let [json, ..] = comparison_files(&ws.target, opts.mode);
    link_protocol::errln!(
        "xtask: nothing was measured; {} and its Markdown and SVG (and the JUnit and step \
         summary, where asked for) say {status}: {reason}",
        ws.show(&json).display()
    );
    Ok(())
}

/// [`run`] once the lock is held and the old outputs are gone.
fn measure(ws: &Workspace, opts: &Options, earlier: Option<Comparison>) -> Result<Summary> {
    // Cheap refusals first, so nobody waits for a build to learn the fixture dir is unusable.
    let state = state::from_env()?;
    if opts.bench_sandbox && opts.mode != Mode::Confined {
        bail!("--bench-sandbox measures confinement, so it needs --mode confined");
    }
    if opts.install {
        system::install_missing(opts.trace)?;
    }
    let strace = if opts.trace { Some(strace()?) } else { None };
    if let Some(old) = earlier.as_ref().filter(|o| o.mode != opts.mode) {
        bail!(
            "baseline ran in {} mode but this run is {}; compare like with like",
            old.mode,
            opts.mode
        );
    }
    if opts.build {
        outputs::build(ws)?;
    }
    let stale = if opts.allow_stale {
        stale_outputs(ws)?
    } else {
        require_outputs(ws)?;
        Vec::new()
    };
    if let Some(dir) = &opts.against {
        require_against(ws, dir)?;
    }
    let source = source::source(&ws.root)?;
    let mode = opts.mode;
    // Where confined mode cannot run, every run would skip: say so once and stop.
    if mode == Mode::Confined {
        match doctor::probe_sandbox(ws) {
            Probe::Enforced(_) => {}
            Probe::Unavailable(reason, _) => return Err(Unconfinable { reason }.into()),
            Probe::Broken(reason)
            | Probe::Unexpected(reason)
            | Probe::NotBuilt(reason)
            | Probe::NotRun(reason) => bail!(
                "the sandbox probe is broken: {reason}; nothing was measured (`cargo xtask \
                 doctor` says more)"
            ),
        }
    }
    link_protocol::errln!(
        "xtask: runtime comparison, {mode}, source {source}, state under {}",
        state.display()
    );

    let runs = opts.runs.max(1);
    let rounds = opts.rounds.unwrap_or(DEFAULT_ROUNDS);
    let runs_dir = run_file(&ws.target, Profile::Mini, mode, 1);
    let runs_dir = runs_dir.parent().expect("a run file has a directory");
    std::fs::create_dir_all(runs_dir)
        .with_context(|| format!("cannot create {}", runs_dir.display()))?;
    // Reports of an earlier, longer invocation must not pass for this one's runs.
    for entry in std::fs::read_dir(runs_dir)?.flatten() {
        if entry.path().extension().is_some_and(|e| e == "json") {
            remove_stale(&entry.path())?;
        }
    }
    // Interleaved, Mini before Link in each pair, so slow drift hits both sides alike. A side
    // that skipped is not run again: a missing capability does not come back.
    let mut timed: Vec<TimedRun> = Vec::new();
    let mut stopped: Vec<Profile> = Vec::new();
    for index in 1..=runs {
        for (i, profile) in Profile::ALL.into_iter().enumerate() {
            if stopped.contains(&profile) {
                continue;
            }
            let step = format!("[run {index}/{runs}, {}/2] {profile} {mode}", i + 1);
            let noise = Noise::sample();
            let out = run_file(&ws.target, profile, mode, index);
            let loaded = timed_run(ws, opts, rounds, profile, &source, &state, &out, &step)?;
            if let Some(u) = unconfinable_skip(mode, &loaded.report) {
                return Err(u.into());
            }
            if loaded.report.outcome.status == Status::Skipped {
                stopped.push(profile);
            }
            timed.push(TimedRun {
                index,
                loaded,
                noise,
                cycle: None,
            });
        }
    }
    // Each side's checks once, over all its runs (the runner's per-run lists are not shown).
    for profile in Profile::ALL {
        print_checks(profile, &timed);
    }
    // The figures: paired timing cycles, unless a side already did not pass.
    let (cycles, sampling, cycled) = if stopped.is_empty()
        && timed
            .iter()
            .all(|t| t.loaded.report.outcome.status == Status::Passed)
    {
        crate::cycles::run(
            ws,
            &crate::cycles::Plan {
                mode,
                rounds,
                source: &source,
                state: &state,
                against: opts.against.as_deref(),
                budget: opts.budget,
                precision_pct: opts.precision_pct,
            },
        )?
    } else {
        link_protocol::errln!(
            "xtask: [cycles] not run: a side's scenario run did not pass, so it has no figure"
        );
        (Vec::new(), no_cycles(opts), Vec::new())
    };
    let reports: Vec<Loaded> = timed.iter().map(|t| t.loaded.clone()).collect();
    if let Some(why) = different_programs(&cycled, &reports, "the timing cycles") {
        bail!("{why}; nothing is compared (rebuild and run again)");
    }
    // A side that skipped is not traced either: the capability it lacked is still missing.
    let mut traced: Vec<(Profile, Loaded)> = Vec::new();
    if let Some(strace) = &strace {
        for (i, profile) in Profile::ALL.into_iter().enumerate() {
            if stopped.contains(&profile) {
                link_protocol::errln!(
                    "xtask: [trace {}/2] {profile} {mode}: not traced, its timed run skipped",
                    i + 1
                );
                continue;
            }
            let step = format!("[trace {}/2] {profile} {mode}", i + 1);
            let loaded = traced_run(ws, opts, profile, &source, &state, strace, &step)?;
            traced.push((profile, loaded));
        }
    }
    // The sandbox benchmark last, on the same programs (checked below against the reports).
    let bench = opts
        .bench_sandbox
        .then(|| bench_sandbox::within_runtime(ws, &state, &source));
    let traced_of = |p: Profile| traced.iter().find(|(q, _)| *q == p).map(|(_, l)| l);
    // Every report, timed or traced, must name the same programs with the same sha256 (a
    // cycle's names none: `cycles::run` hashed its directories, checked above).
    compare::same_programs(
        timed
            .iter()
            .map(|t| &t.loaded)
            .chain(traced.iter().map(|(_, l)| l)),
    )?;

    // Each side's median run stands for it as the spec's single-run report.
    let mut chosen = Vec::new();
    for profile in Profile::ALL {
        let rep = compare::representative(&timed, profile)
            .ok_or_else(|| anyhow!("no {profile} run to compare"))?;
        let single = files(&ws.target, profile, mode).report;
        remove_stale(&single)?;
        if rep.loaded.path != "(none)" {
            std::fs::copy(&rep.loaded.path, &single).with_context(|| {
                format!("cannot copy {} to {}", rep.loaded.path, single.display())
            })?;
        }
        chosen.push(rep.loaded.clone());
    }

    let comparison = compare::build(&Inputs {
        mode,
        mini: &chosen[0],
        link: &chosen[1],
        runs: &timed,
        runs_requested: runs,
        rounds,
        mini_traced: traced_of(Profile::Mini),
        link_traced: traced_of(Profile::Link),
        cycles: &cycles,
        sampling,
        against: opts
            .against
            .as_ref()
            .map(|d| (ws.show(d).display().to_string(), opts.max_regression)),
    });
    let mut comparison = comparison;
    // Without `--allow-stale`, `require_outputs` refused any program older than a source file
    // of this checkout: the programs are the release build of the commit named.
    comparison.source_checked = stale.is_empty().then(|| {
        "`git rev-parse HEAD` of this checkout, and every measured program is its current \
         release build"
            .to_string()
    });
    if !stale.is_empty() {
        comparison
            .caveats
            .insert(0, outputs::allow_stale_caveat(stale.len()));
    }
    if let Some(mut b) = bench {
        if let Some(why) = different_programs(&b.programs, &chosen, "the sandbox benchmark") {
            b.status = BenchStatus::Failed;
            b.reason = Some(format!("{why}; its figures are not recorded"));
            b.variants = None;
            b.ratios.clear();
        }
        comparison.sandbox_bench = Some(b);
    }
    let mut written = write_comparison(ws, opts.mode, &comparison)?;
    if let Some(b) = &comparison.sandbox_bench {
        written.push(bench_sandbox::write(ws, b)?);
    }
    if let Some(path) = &opts.junit {
        ci::write_junit(path, &comparison, &timed)?;
        written.push(path.clone());
    }
    if let Some(path) = ci::step_summary_file(std::env::var_os(ci::STEP_SUMMARY)) {
        ci::append_step_summary(&path, &compare::markdown(&comparison))?;
        link_protocol::errln!(
            "xtask: appended the comparison to the step summary {} (${})",
            path.display(),
            ci::STEP_SUMMARY
        );
    }
    let verdict = match &earlier {
        Some(old) => Some(baseline::compare(old, &comparison, opts.max_regression)?),
        None => None,
    };
    let mut summary = summarize(comparison, verdict, opts.trace, written);
    if let Some(b) = &summary.comparison.sandbox_bench {
        let why = b.reason.as_deref().unwrap_or("no reason given");
        match b.status {
            BenchStatus::Measured => {}
            BenchStatus::Skipped => summary
                .skips
                .push(format!("sandbox benchmark skipped: {why}")),
            BenchStatus::Failed => summary
                .failures
                .push(format!("sandbox benchmark failed: {why}")),
        }
    }
    print_summary(ws, &summary, opts);
    Ok(summary)
}

/// Sampling when no cycle ran.
fn no_cycles(opts: &Options) -> compare::Sampling {
    compare::Sampling {
        precision_pct: opts.precision_pct,
        budget_s: opts.budget.as_secs_f64(),
        elapsed_s: 0.0,
        min_pairs: crate::paired::MIN_PAIRS as u32,
        not_reached: Vec::new(),
    }
}

fn write_comparison(ws: &Workspace, mode: Mode, c: &Comparison) -> Result<Vec<PathBuf>> {
    let c = &Comparison {
        machine: Some(doctor::machine(ws)),
        ..c.clone()
    };
    let [json, md, pic] = comparison_files(&ws.target, mode);
    let text = serde_json::to_string_pretty(c)? + "\n";
    for (path, body) in [
        (&json, text),
        (&md, compare::markdown(c)),
        (&pic, svg::render(c)),
    ] {
        std::fs::write(path, body).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut written: Vec<PathBuf> = c
        .runs
        .iter()
        .filter(|r| r.report != "(none)")
        .map(|r| PathBuf::from(&r.report))
        .collect();
    for s in [&c.mini, &c.link] {
        let single = files(&ws.target, s.profile, mode).report;
        if single.exists() {
            written.push(single);
        }
        if let Some(t) = &s.traced {
            written.push(PathBuf::from(&t.report));
        }
    }
    written.extend([json, md, pic]);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confinement_unavailable_is_recognised_in_a_skip() {
        let mut r = Loaded::failed(
            Profile::Mini,
            Mode::Confined,
            "abc",
            Path::new("/nonexistent"),
            String::new(),
        )
        .report;
        r.outcome = link_report::Outcome {
            status: Status::Skipped,
            reason: Some("confinement unavailable: bwrap: no user namespaces".into()),
        };
        r.platform.sandbox = serde_json::json!({
            "status": "unavailable",
            "reason": "bwrap: no user namespaces",
            "landlock_abi": 6,
        });
        let u = unconfinable_skip(Mode::Confined, &r).unwrap();
        assert_eq!(u.reason, "bwrap: no user namespaces");
        assert!(u.to_string().contains("nothing was measured"), "{u}");
        assert_eq!(unconfinable_skip(Mode::Diagnostic, &r), None);
        // A skip for another reason while the probe found confinement enforced.
        r.outcome.reason = Some("pidfd_open is not supported".into());
        r.platform.sandbox = serde_json::json!({"status": "enforced"});
        assert_eq!(unconfinable_skip(Mode::Confined, &r), None);
        // No probe answer at all (it could not run): not this case either.
        r.platform.sandbox = serde_json::Value::Null;
        assert_eq!(unconfinable_skip(Mode::Confined, &r), None);
    }
}
