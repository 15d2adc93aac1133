//! `cargo xtask runtime`: N interleaved Mini and full Link runs on the locked release programs
//! (Mini, Link, Mini, Link, ...; every run's report kept under `target/runtime-runs/`), an
//! optional separate strace pass, and the comparison under `target/`.

use crate::baseline::{self, Verdict};
use crate::bench_sandbox::{self, BenchStatus};
use crate::compare::{self, status_word, Comparison, Inputs, Loaded, Noise, TimedRun};
use crate::doctor::{self, Probe};
use crate::outputs::{self, Workspace};
use crate::{ci, state, svg, system};
use anyhow::{anyhow, bail, Context, Result};
use link_report::{CheckName, Mode, Profile, Report, Status};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use xshell::{cmd, Shell};

/// Full scenario runs per side unless `--runs` says otherwise: the spec's reports and every
/// check; the figures come from the paired timing cycles ([`crate::cycles`]).
pub const DEFAULT_RUNS: u32 = 1;
/// ROUNDS per run unless `--rounds` says otherwise: enough warm turns for a distribution.
pub const DEFAULT_ROUNDS: u32 = 20;

/// How often a long run reports that it is still going.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// Diagnostic outputs carry `-diagnostic` so they never overwrite confined ones.
fn tag(mode: Mode) -> &'static str {
    match mode {
        Mode::Confined => "",
        Mode::Diagnostic => "-diagnostic",
    }
}

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

/// Exit status: both sides passed, and no significant regression against `--baseline`.
pub const EXIT_PASSED: u8 = 0;
/// Exit status: a side failed, the trace pass was unusable, a phase regressed significantly,
/// or nothing could be compared (an error).
pub const EXIT_FAILED: u8 = 1;
/// Exit status: a side was skipped (0 with `--allow-skip`).
pub const EXIT_SKIPPED: u8 = 2;
/// Exit status: confined mode, and the sandbox probe says confinement is unavailable here;
/// nothing was measured (`--allow-skip` does not change it).
pub const EXIT_UNCONFINABLE: u8 = 3;

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

/// A skip whose reason is the runner's own sandbox probe finding confinement unavailable.
fn unconfinable_skip(mode: Mode, report: &Report) -> Option<Unconfinable> {
    let reason = report.outcome.reason.as_deref()?;
    let rest = reason.strip_prefix("confinement unavailable")?;
    (mode == Mode::Confined && report.outcome.status == Status::Skipped).then(|| Unconfinable {
        reason: rest.trim_start_matches([':', ' ']).to_string(),
    })
}

/// The files one profile's runs write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    pub report: PathBuf,
    pub traced: PathBuf,
    pub trace: PathBuf,
}

pub fn files(target: &Path, profile: Profile, mode: Mode) -> Files {
    let stem = format!("runtime-{profile}{}", tag(mode));
    Files {
        report: target.join(format!("{stem}.json")),
        traced: target.join(format!("{stem}-traced.json")),
        trace: target.join(format!("{stem}.trace")),
    }
}

/// Run `index` (1-based) of one side: `target/runtime-runs[-diagnostic]/{mini,link}-{index}.json`.
pub fn run_file(target: &Path, profile: Profile, mode: Mode, index: u32) -> PathBuf {
    target
        .join(format!("runtime-runs{}", tag(mode)))
        .join(format!("{profile}-{index}.json"))
}

/// `runtime-comparison[-diagnostic].{json,md,svg}`.
pub fn comparison_files(target: &Path, mode: Mode) -> [PathBuf; 3] {
    let stem = format!("runtime-comparison{}", tag(mode));
    ["json", "md", "svg"].map(|ext| target.join(format!("{stem}.{ext}")))
}

/// The result of a whole `runtime` invocation.
#[derive(Debug)]
pub struct Summary {
    pub comparison: Comparison,
    pub verdict: Option<Verdict>,
    /// Reasons the run is not a success (failed sides, unusable traces, regressions).
    pub failures: Vec<String>,
    /// Skipped sides, with their reasons.
    pub skips: Vec<String>,
    /// Problems of the trace pass alone (also in `failures`), for the qualify checklist.
    pub trace_problems: Vec<String>,
    pub written: Vec<PathBuf>,
}

impl Summary {
    /// 0 when both sides passed; 2 when the only problem is a skip; 1 otherwise.
    pub fn exit_code(&self, allow_skip: bool) -> u8 {
        if !self.failures.is_empty() {
            EXIT_FAILED
        } else if !self.skips.is_empty() && !allow_skip {
            EXIT_SKIPPED
        } else {
            EXIT_PASSED
        }
    }
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
    let source = source(&ws.root)?;
    let mode = opts.mode;
    // Where confined mode cannot run, every run would skip: say so once and stop.
    if mode == Mode::Confined {
        match doctor::probe_sandbox(ws) {
            Probe::Enforced(_) => {}
            Probe::Unavailable(reason) => return Err(Unconfinable { reason }.into()),
            Probe::Broken(reason) | Probe::NotRun(reason) => bail!(
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

/// Why `programs` (hashed by the xtask for the sandbox benchmark or the timing cycles) are not
/// the ones the reports name, if they are not: a program with another sha256.
fn different_programs(
    programs: &[outputs::Program],
    reports: &[Loaded],
    what: &str,
) -> Option<String> {
    programs.iter().find_map(|p| {
        let other = reports
            .iter()
            .flat_map(|l| &l.report.artifacts)
            .find(|a| a.name == p.name && a.sha256 != p.sha256)?;
        Some(format!(
            "program `{}` changed between the runs and {what} (sha256 {} in the reports, {} in \
             {what})",
            p.name, other.sha256, p.sha256
        ))
    })
}

/// Fails with every missing or stale output listed and the exact build commands.
pub fn require_outputs(ws: &Workspace) -> Result<()> {
    let problems = outputs::verify(&ws.release(), &ws.root)?;
    if problems.is_empty() {
        return Ok(());
    }
    link_protocol::errln!("xtask: the locked release outputs are not ready:");
    for p in &problems {
        link_protocol::errln!("  {p}");
    }
    link_protocol::errln!("build them (from {}) with:", ws.root.display());
    for c in outputs::build_commands() {
        link_protocol::errln!("  {}", outputs::command_text(&c));
    }
    link_protocol::errln!("or run `cargo xtask runtime --build`");
    bail!(
        "{} of {} release outputs missing, stale or a test build; build them with the commands above",
        problems.len(),
        outputs::expected_outputs().len()
    )
}

/// With `--allow-stale`: missing outputs still refuse; stale ones and a test build are
/// listed and returned.
fn stale_outputs(ws: &Workspace) -> Result<Vec<String>> {
    let problems = outputs::verify(&ws.release(), &ws.root)?;
    if problems.iter().any(|p| !p.measurable()) {
        return require_outputs(ws).map(|()| Vec::new());
    }
    for p in &problems {
        link_protocol::errln!("xtask: --allow-stale: measuring anyway: {p}");
    }
    Ok(problems.iter().map(|p| p.to_string()).collect())
}

fn strace() -> Result<PathBuf> {
    which::which("strace").map_err(|_| {
        anyhow!(
            "--trace needs strace, which is not on PATH: {} (or pass --install, or drop --trace)",
            system::install_hint(&[system::STRACE])
        )
    })
}

/// `git rev-parse HEAD`, with `-dirty` when the work tree has changes.
pub fn source(root: &Path) -> Result<String> {
    let sh = Shell::new()?;
    sh.change_dir(root);
    let head = cmd!(sh, "git rev-parse HEAD")
        .quiet()
        .read()
        .context("cannot name the source: `git rev-parse HEAD` failed (run from a git checkout)")?;
    let status = cmd!(sh, "git status --porcelain")
        .quiet()
        .read()
        .context("`git status --porcelain` failed")?;
    Ok(with_dirty(head.trim(), &status))
}

fn with_dirty(head: &str, porcelain: &str) -> String {
    if porcelain.trim().is_empty() {
        head.to_string()
    } else {
        format!("{head}-dirty")
    }
}

/// One timed run: `runtime PROGRAMS OUTPUT.json PROFILE MODE SOURCE ROUNDS`.
#[allow(clippy::too_many_arguments)]
fn timed_run(
    ws: &Workspace,
    opts: &Options,
    rounds: u32,
    profile: Profile,
    source: &str,
    state: &Path,
    out: &Path,
    step: &str,
) -> Result<Loaded> {
    remove_stale(out)?;
    let sh = runner_shell(ws, state)?;
    let (runner, programs, output) = (ws.show(&ws.runner()), ws.show(&ws.release()), ws.show(out));
    let (side, mode) = (profile.as_str(), opts.mode.as_str());
    let rounds = rounds.to_string();
    let c = cmd!(
        sh,
        "{runner} {programs} {output} {side} {mode} {source} {rounds}"
    );
    let status = run_with_progress(step, &c.to_string(), Command::from(c))?;
    Ok(read_side(out, profile, opts.mode, source, status))
}

/// The strace pass of one profile, then `runtime report` on it.
fn traced_run(
    ws: &Workspace,
    opts: &Options,
    profile: Profile,
    source: &str,
    state: &Path,
    strace: &Path,
    step: &str,
) -> Result<Loaded> {
    let f = files(&ws.target, profile, opts.mode);
    remove_stale(&f.traced)?;
    remove_stale(&f.trace)?;
    let sh = runner_shell(ws, state)?;
    let (runner, programs) = (ws.show(&ws.runner()), ws.show(&ws.release()));
    let (traced, trace) = (ws.show(&f.traced), ws.show(&f.trace));
    let (side, mode) = (profile.as_str(), opts.mode.as_str());
    let c = cmd!(
        sh,
        "{strace} -f -ttt -e trace=process -o {trace} {runner} {programs} {traced} {side} {mode} {source} 1 traced"
    );
    let status = run_with_progress(step, &c.to_string(), Command::from(c))?;
    if f.traced.exists() {
        let c = cmd!(sh, "{runner} report {traced} {trace}");
        let (label, shown) = (format!("{step} report"), c.to_string());
        let report = run_with_progress(&label, &shown, Command::from(c))?;
        // 4: the counts are unavailable, which the report says and the verdict reads from it.
        if !matches!(report.code(), Some(0 | 4)) {
            bail!("`{shown}` could not add the trace to the report ({report})");
        }
    }
    Ok(read_side(&f.traced, profile, opts.mode, source, status))
}

fn runner_shell(ws: &Workspace, state: &Path) -> Result<Shell> {
    let sh = Shell::new()?;
    sh.change_dir(&ws.root);
    sh.set_var("LNK_TEST_STATE_DIR", state);
    Ok(sh)
}

/// A report left from an earlier run must never pass for this one's.
fn remove_stale(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove the old {}", path.display())),
    }
}

/// Runs a child with inherited output (the runner's phase lines go straight to the terminal)
/// and says, now and then, that it is still going.
///
/// The runner's stderr passes through a filter that drops its per-run check list (`[mini]
/// startup  Passed`): each side's checks are printed once, over all runs ([`print_checks`]).
fn run_with_progress(step: &str, shown: &str, mut command: Command) -> Result<ExitStatus> {
    link_protocol::errln!("xtask: {step}: $ {shown}");
    let start = Instant::now();
    let mut child = command
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start `{shown}`"))?;
    let relay = child.stderr.take().map(|stderr| {
        std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(stderr);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                if !is_check_line(text) {
                    link_protocol::errln!("{text}");
                }
                line.clear();
            }
        })
    });
    let mut next = PROGRESS_EVERY;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() >= next {
            link_protocol::errln!("xtask: {step}: still running ({} s)", next.as_secs());
            next += PROGRESS_EVERY;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // A process the child left behind may hold its stderr open: wait a little, then go on.
    if let Some(relay) = relay {
        let until = Instant::now() + Duration::from_secs(5);
        while !relay.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        if relay.is_finished() {
            let _ = relay.join();
        }
    }
    link_protocol::errln!(
        "xtask: {step}: finished in {:.1} s ({status})",
        start.elapsed().as_secs_f64()
    );
    Ok(status)
}

/// `[mini] startup                     Passed` (or `[link diagnostic] ...`): one line of the
/// runner's check list, which it prints after every run.
fn is_check_line(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('[') else {
        return false;
    };
    let Some((label, rest)) = rest.split_once("] ") else {
        return false;
    };
    let side = label.strip_suffix(" diagnostic").unwrap_or(label);
    let words: Vec<&str> = rest.split_whitespace().collect();
    side.parse::<Profile>().is_ok()
        && matches!(words[..], [name, "Passed" | "Failed" | "Skipped"] if name.parse::<CheckName>().is_ok())
}

/// One side's checks over all its timed runs, printed once.
fn print_checks(profile: Profile, timed: &[TimedRun]) {
    let runs: Vec<&TimedRun> = timed
        .iter()
        .filter(|t| t.loaded.report.profile == profile)
        .collect();
    let cases = ci::check_cases(&runs);
    if cases.is_empty() {
        return;
    }
    let mut out = format!("xtask: {profile} checks over {} run(s):\n", runs.len());
    for c in &cases {
        let word = match c.status {
            Status::Passed => "passed".to_string(),
            Status::Skipped => "SKIPPED".to_string(),
            Status::Failed => "FAILED".to_string(),
        };
        let why = if c.message.is_empty() {
            String::new()
        } else {
            format!(" — {}", c.message)
        };
        out.push_str(&format!("  {:<27} {word}{why}\n", c.name));
    }
    link_protocol::err!("{out}");
}

/// The report a run wrote; without one, a failed stand-in that says why.
fn read_side(
    path: &Path,
    profile: Profile,
    mode: Mode,
    source: &str,
    status: ExitStatus,
) -> Loaded {
    compare::load(path).unwrap_or_else(|e| {
        Loaded::failed(profile, mode, source, path, format!("{e:#} ({status})"))
    })
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

/// `--against DIR` must hold every release output, none a test build; older than the sources
/// it may be (it is the other build).
fn require_against(ws: &Workspace, dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        bail!(
            "--against {}: no such directory; build the programs to compare with into it \
             (README: `cargo xtask runtime --against`)",
            dir.display()
        );
    }
    if std::fs::canonicalize(dir)? == std::fs::canonicalize(ws.release()).unwrap_or_default() {
        link_protocol::errln!(
            "xtask: --against {} is target/release itself: an A/A comparison (every change \
             found is noise)",
            dir.display()
        );
    }
    let problems: Vec<_> = outputs::verify(dir, &ws.root)?
        .into_iter()
        .filter(|p| !matches!(p, outputs::Problem::Stale { .. }))
        .collect();
    if let Some(p) = problems.first() {
        bail!(
            "--against {}: {p} ({} problem(s)); it must hold every release output of `cargo xtask build`, none built with test hooks",
            dir.display(),
            problems.len()
        );
    }
    Ok(())
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

/// Decides what counts against the exit status.
pub fn summarize(
    comparison: Comparison,
    verdict: Option<Verdict>,
    traced: bool,
    written: Vec<PathBuf>,
) -> Summary {
    let mut failures = Vec::new();
    let mut skips = Vec::new();
    let mut trace_problems = Vec::new();
    for s in [&comparison.mini, &comparison.link] {
        let why = s.reason.as_deref().unwrap_or("no reason given");
        match s.outcome {
            Status::Passed => {}
            Status::Skipped => skips.push(format!("{} skipped: {why}", s.profile)),
            Status::Failed => failures.push(format!("{} failed: {why}", s.profile)),
        }
        if !traced {
            continue;
        }
        match &s.traced {
            None => trace_problems.push(format!("{}: no traced run", s.profile)),
            Some(t) if t.outcome != Status::Passed => trace_problems.push(format!(
                "{} traced run {}",
                s.profile,
                status_word(t.outcome)
            )),
            Some(t) if !t.available => trace_problems.push(format!(
                "{} trace unavailable: {}",
                s.profile,
                t.reason.as_deref().unwrap_or("no reason given")
            )),
            Some(_) => {}
        }
    }
    // A traced side that merely skipped like its timed twin is already counted as a skip.
    let skipped_sides = [&comparison.mini, &comparison.link]
        .iter()
        .filter(|s| s.outcome == Status::Skipped)
        .count();
    if skipped_sides == 0 {
        failures.extend(trace_problems.iter().cloned());
    }
    if let Some(ab) = &comparison.ab {
        let worse: Vec<String> = ab.regressions().map(|r| r.describe(ab.tests)).collect();
        if !worse.is_empty() {
            failures.push(format!(
                "against {}: {} figure(s) significantly slower by more than {:.0}%: {}",
                ab.against,
                worse.len(),
                ab.max_regression,
                worse.join("; ")
            ));
        }
    }
    if let Some(v) = verdict.as_ref().filter(|v| !v.passed()) {
        let worst: Vec<String> = v.regressions().iter().map(|c| c.describe()).collect();
        failures.push(format!(
            "baseline: {} phase(s) significantly worse than the baseline by more than {:.0}%: {}",
            worst.len(),
            v.max_regression,
            worst.join(", ")
        ));
    }
    Summary {
        comparison,
        verdict,
        failures,
        skips,
        trace_problems,
        written,
    }
}

fn print_summary(ws: &Workspace, s: &Summary, opts: &Options) {
    let c = &s.comparison;
    let mut out = format!(
        "\nruntime comparison ({}, {} runs per side, ROUNDS {}; median run per side)\n\
         {:<5} {:<8} {:<11} {:>16} {:>9} {:>10} {:>12} {:>7}\n",
        c.mode,
        c.runs_requested,
        c.rounds,
        "side",
        "outcome",
        "mode",
        "ms without idle",
        "processes",
        "peak RSS",
        "artifacts",
        "execs"
    );
    for side in [&c.mini, &c.link] {
        let execs: Option<u64> = side.traced.as_ref().filter(|t| t.available).map(|_| {
            c.execs
                .iter()
                .filter(|r| link_report::PhaseName::in_total(&r.name))
                .filter_map(|r| {
                    match side.profile {
                        Profile::Mini => &r.mini,
                        Profile::Link => &r.link,
                    }
                    .as_ref()
                })
                .map(|t| t.execs)
                .sum()
        });
        // A side that did not pass has no figures: dashes, never zeros.
        let passed = side.outcome == Status::Passed;
        let fig = |text: String| if passed { text } else { "—".into() };
        out.push_str(&format!(
            "{:<5} {:<8} {:<11} {:>16} {:>9} {:>10} {:>12} {:>7}\n",
            side.profile,
            status_word(side.outcome),
            side.mode,
            fig(compare::ms(side.work_phase_ns)),
            fig(side.processes.to_string()),
            fig(side
                .peak_rss_bytes
                .map(|b| format!("{:.1} MiB", b as f64 / 1048576.0))
                .unwrap_or_else(|| "-".into())),
            if side.artifacts == 0 {
                "—".into()
            } else {
                format!("{:.1} MiB", side.artifact_bytes as f64 / 1048576.0)
            },
            execs.map(|e| e.to_string()).unwrap_or_else(|| "-".into()),
        ));
    }
    out.push('\n');
    out.push_str(&compare::stats_markdown(c));
    for w in &c.warnings {
        out.push_str(&format!("\nWARNING: {w}\n"));
    }
    if let Some(v) = &s.verdict {
        out.push('\n');
        out.push_str(&v.render());
    }
    out.push_str("\nwritten:\n");
    for w in &s.written {
        out.push_str(&format!("  {}\n", ws.show(w).display()));
    }
    for skip in &s.skips {
        let note = if opts.allow_skip {
            " (allowed by --allow-skip)"
        } else {
            ""
        };
        out.push_str(&format!("\n*** SKIPPED: {skip}{note} ***\n"));
    }
    for f in &s.failures {
        out.push_str(&format!("\nFAILED: {f}\n"));
    }
    link_protocol::err!("{out}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::sample;

    #[test]
    fn diagnostic_outputs_never_share_confined_names() {
        let t = Path::new("/w/target");
        let confined = files(t, Profile::Mini, Mode::Confined);
        assert_eq!(confined.report, t.join("runtime-mini.json"));
        assert_eq!(confined.traced, t.join("runtime-mini-traced.json"));
        assert_eq!(confined.trace, t.join("runtime-mini.trace"));
        let diag = files(t, Profile::Mini, Mode::Diagnostic);
        assert_eq!(diag.report, t.join("runtime-mini-diagnostic.json"));
        assert_eq!(diag.traced, t.join("runtime-mini-diagnostic-traced.json"));
        assert_eq!(diag.trace, t.join("runtime-mini-diagnostic.trace"));
        assert_eq!(
            run_file(t, Profile::Link, Mode::Confined, 3),
            t.join("runtime-runs/link-3.json")
        );
        assert_eq!(
            run_file(t, Profile::Mini, Mode::Diagnostic, 1),
            t.join("runtime-runs-diagnostic/mini-1.json")
        );
        let c = comparison_files(t, Mode::Confined);
        let d = comparison_files(t, Mode::Diagnostic);
        assert_eq!(c[0], t.join("runtime-comparison.json"));
        for (c, d) in c.iter().zip(&d) {
            assert_ne!(c, d);
            assert!(d.to_string_lossy().contains("diagnostic"));
        }
    }

    #[test]
    fn only_the_runners_check_lines_are_dropped() {
        assert!(is_check_line("[mini] startup                     Passed"));
        assert!(is_check_line("[link diagnostic] no_orphans       Failed"));
        assert!(is_check_line("[link] run_tool_confined           Skipped"));
        assert!(!is_check_line("[link] SKIPPED — NOT a pass: no bwrap"));
        assert!(!is_check_line("[mini] startup 120 ms"));
        assert!(!is_check_line(
            "[mini] capabilities: sandbox Available, native Available"
        ));
        assert!(!is_check_line("[other] startup Passed"));
        assert!(!is_check_line(
            "xtask: [run 1/5, 1/2] mini confined: $ runner"
        ));
    }

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
        let u = unconfinable_skip(Mode::Confined, &r).unwrap();
        assert_eq!(u.reason, "bwrap: no user namespaces");
        assert!(u.to_string().contains("nothing was measured"), "{u}");
        r.outcome.reason = Some("pidfd_open is not supported".into());
        assert_eq!(unconfinable_skip(Mode::Confined, &r), None);
    }

    #[test]
    fn a_benchmark_of_other_programs_is_not_recorded_as_theirs() {
        let bench = crate::bench_sandbox::tests::measured();
        let report = |sha: &str| Loaded {
            path: "r.json".into(),
            sha256: String::new(),
            report: Report {
                artifacts: vec![link_report::Artifact {
                    name: "link".into(),
                    sha256: sha.into(),
                    ..Default::default()
                }],
                ..Report::new(Profile::Link, Mode::Confined)
            },
        };
        let what = "the sandbox benchmark";
        assert_eq!(
            different_programs(&bench.programs, &[report("aa")], what),
            None
        );
        let why = different_programs(&bench.programs, &[report("bb")], what).unwrap();
        assert!(
            why.contains("program `link` changed between the runs and the sandbox"),
            "{why}"
        );
        // A cycle's report names no program: the xtask's own hashes stand for the cycles.
        let cycles = "the timing cycles";
        assert_eq!(different_programs(&bench.programs, &[], cycles), None);
    }

    #[test]
    fn dirty_sources_are_marked() {
        assert_eq!(with_dirty("abc", ""), "abc");
        assert_eq!(with_dirty("abc", " M x.rs\n"), "abc-dirty");
    }

    #[test]
    fn exit_status_follows_both_sides() {
        let passed = summarize(sample(), None, true, vec![]);
        assert!(passed.failures.is_empty(), "{:?}", passed.failures);
        assert_eq!(passed.exit_code(false), 0);

        let mut c = sample();
        c.link.outcome = Status::Skipped;
        c.link.reason = Some("no user namespaces".into());
        let skipped = summarize(c, None, false, vec![]);
        assert_eq!(skipped.skips, vec!["link skipped: no user namespaces"]);
        assert_eq!(skipped.exit_code(false), 2);
        assert_eq!(skipped.exit_code(true), 0);

        let mut c = sample();
        c.mini.outcome = Status::Failed;
        c.mini.reason = Some("cold_turn timed out".into());
        let failed = summarize(c, None, false, vec![]);
        assert_eq!(failed.exit_code(true), 1);

        let mut c = sample();
        c.link.traced.as_mut().unwrap().available = false;
        c.link.traced.as_mut().unwrap().reason = Some("trace is empty".into());
        let untraced = summarize(c, None, true, vec![]);
        assert_eq!(
            untraced.failures,
            vec!["link trace unavailable: trace is empty"]
        );
        assert_eq!(untraced.exit_code(true), 1);
    }
}
