//! xtask: `cargo xtask runtime` and friends — the locked release build, the Mini ↔ full Link
//! runtime comparison with its optional strace pass, qualification and a machine doctor.
//!
//! Modules: [`outputs`] (build commands, missing/stale programs), [`state`] (the fixture
//! directory), [`runtime`] (the runs), [`compare`] (comparison JSON/Markdown), [`svg`] (the
//! per-phase picture), [`stats`] (medians and bootstrap intervals), [`baseline`] (regressions
//! against an earlier comparison), [`ci`] (JUnit XML, the GitHub step summary),
//! [`bench_sandbox`] (what confinement costs per command), [`load`] (throughput under load),
//! [`qualify`] and [`doctor`].

mod baseline;
mod bench_sandbox;
mod ci;
mod compare;
mod cycles;
mod doctor;
mod exit;
mod fleet;
mod load;
mod noise;
mod outputs;
mod paired;
mod qualify;
mod runtime;
mod schemas;
mod source;
mod state;
mod stats;
mod svg;
mod system;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use link_report::Mode;
use std::path::PathBuf;
use std::process::ExitCode;

const COMMANDS: &str = "\
usage: cargo xtask <command> [options]   (cargo xtask <command> --help for its options)

commands:
  runtime   run the spec's scenario for Mini and full Link on the locked release programs,
            then paired timing cycles until every figure is precise enough, and compare them
            with intervals (target/runtime-comparison.{md,json,svg}); --build, --install,
            --trace, --mode diagnostic, --runs N (1), --rounds N (20), --budget SECS (70),
            --precision PCT (5), --against DIR, --baseline FILE, --max-regression PCT (10),
            --allow-skip, --allow-stale, --junit FILE, --bench-sandbox; exit 0 passed,
            1 failed or regressed, 2 skipped, 3 confinement unavailable
  bench-sandbox  time bare bwrap, the CLI `exec` and a confined `run` turn on the plugin
            path, interleaved, with ratios and intervals (target/bench-sandbox.json);
            --rounds N (100), --turn-rounds N (40), --allow-stale; exit 0 measured,
            1 error, 2 usage error, 3 skipped (no bwrap or confinement unavailable)
  load      throughput under load: Mini's plain turn against full Link's plain, `write` and
            `run: true` turns and a bare bwrap per command (the floor), CLIENTS clients,
            interleaved rounds, ratios with intervals and issue 43's goals
            (target/load.{json,md}); --clients N,N (8,32), --rounds N (6), --secs S (3),
            --allow-stale; exit 0 measured, 1 error, 2 usage error, 3 skipped (no bwrap or
            confinement unavailable)
  fleet     one table (target/fleet.{md,json,svg}) of several machines' comparisons, each
            DIR holding one machine's target/runtime-* outputs; --allow-mixed, --out DIR;
            exit 0 none failed, 1 a machine failed, 2 usage error or mixed sources
  build     run the spec's two locked release build commands
  schemas   rewrite schemas/*.schema.json (run report, comparison, sandbox benchmark, load,
            fleet) from the types
  qualify   build, the spec's confined tests, runtime --trace, then a checklist
  doctor    probe confinement and tracing on this machine and say what to install or change
  install   install the missing system packages (bubblewrap, strace, libseccomp-dev),
            saying what it runs
";

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Link's release tasks",
    disable_help_subcommand = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run Mini then full Link on the locked release programs and compare them.
    Runtime(RuntimeArgs),
    /// Time bare bwrap, the CLI `exec` and the plugin path of a confined `run`, interleaved.
    BenchSandbox(BenchArgs),
    /// Throughput under load: Mini against full Link's turns and the bwrap floor, with ratios.
    Load(LoadArgs),
    /// One table of several machines' comparisons (each DIR: one machine's `target/runtime-*`).
    Fleet(FleetArgs),
    /// Run the spec's two locked release build commands.
    Build,
    /// Rewrite the published JSON Schemas (`schemas/`) from the report types.
    Schemas,
    /// Build, run the spec's confined tests and `runtime --trace`, then print a checklist.
    Qualify(BaselineArgs),
    /// Probe confinement and tracing support and say what to install or change.
    Doctor,
    /// Install the missing system packages (bubblewrap, strace, libseccomp's development
    /// package) with the distribution's package manager, through sudo when not root, saying
    /// what it runs.
    Install,
}

#[derive(Args)]
struct RuntimeArgs {
    /// Run the locked release build first.
    #[arg(long)]
    build: bool,
    /// First install the missing system packages (bubblewrap, libseccomp's development
    /// package; strace with --trace) with the distribution's package manager, through sudo
    /// when not root, saying what it runs.
    #[arg(long)]
    install: bool,
    /// `confined` (default) or `diagnostic` (explicitly unconfined; never qualification).
    #[arg(long, default_value_t = Mode::Confined, value_parser = mode_parser())]
    mode: Mode,
    /// ROUNDS for the runner: how often the timed warm turn repeats in each run (default 20).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    rounds: Option<u32>,
    /// Full scenario runs per side (the spec's reports and every check), interleaved; the
    /// figures come from the paired timing cycles that follow.
    #[arg(long, value_name = "N", default_value_t = runtime::DEFAULT_RUNS,
          value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Seconds the paired timing cycles may run at most (at least 10 pairs run whatever it says).
    #[arg(long, value_name = "SECS", default_value_t = cycles::DEFAULT_BUDGET_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    budget: u64,
    /// The cycles stop once every figure's 95% interval is within about ±PCT%
    /// (upper/lower ≤ 1 + 2·PCT/100).
    #[arg(long, value_name = "PCT", default_value_t = cycles::DEFAULT_PRECISION_PCT)]
    precision: f64,
    /// Other programs (e.g. the last release, built into its own directory) to compare with
    /// target/release, cycle by cycle on both sides: new/old per phase, gated by
    /// --max-regression.
    #[arg(long, value_name = "DIR")]
    against: Option<PathBuf>,
    /// After the timed runs, trace a separate run of each side with strace and count execs.
    #[arg(long)]
    trace: bool,
    /// Exit 0 even when a side was skipped (the skip is still printed loudly).
    #[arg(long)]
    allow_skip: bool,
    /// Measure release programs older than their sources or built with test hooks (say so in the comparison's
    /// caveats) instead of refusing; for a tree others are editing. Missing ones still refuse.
    #[arg(long)]
    allow_stale: bool,
    /// Also write JUnit XML here: a testsuite per side, a testcase per check (skipped and
    /// failed checks say why). `$GITHUB_STEP_SUMMARY`, when set, gets the Markdown appended.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// After the runs, also run the sandbox benchmark (`bench-sandbox` with its defaults) and
    /// record it in the comparison (`sandbox_bench`) and in target/bench-sandbox.json.
    #[arg(long)]
    bench_sandbox: bool,
    #[command(flatten)]
    baseline: BaselineArgs,
}

#[derive(Args)]
struct FleetArgs {
    /// One directory per machine, holding its runtime-comparison.json (or under target/).
    #[arg(value_name = "DIR", required = true)]
    dirs: Vec<PathBuf>,
    /// Compare machines that measured different sources (said in the table) instead of
    /// refusing.
    #[arg(long)]
    allow_mixed: bool,
    /// Where to write fleet.{json,md,svg} (default: the target directory).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct BenchArgs {
    /// Timed rounds of bare bwrap and the CLI `exec` (after 5 warm-up rounds).
    #[arg(long, value_name = "N", default_value_t = bench_sandbox::DEFAULT_ROUNDS,
          value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// How many of those rounds, evenly spaced, also time a `run: true` turn and a plain turn
    /// (default 40, or --rounds when fewer); at most --rounds.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    turn_rounds: Option<u32>,
    /// Measure release programs older than their sources or built with test hooks (said in the JSON's warnings)
    /// instead of refusing. Missing ones still refuse.
    #[arg(long)]
    allow_stale: bool,
}

#[derive(Args)]
struct LoadArgs {
    /// Client counts, comma-separated, each measured in its own rounds.
    #[arg(long, value_name = "N,N", value_delimiter = ',',
          default_value = load::DEFAULT_CLIENTS,
          value_parser = clap::value_parser!(u32).range(1..))]
    clients: Vec<u32>,
    /// Rounds per client count (at least 2, for an interval).
    #[arg(long, value_name = "N", default_value_t = load::DEFAULT_ROUNDS,
          value_parser = clap::value_parser!(u32).range(2..))]
    rounds: u32,
    /// Seconds each kind runs in each round.
    #[arg(long, value_name = "S", default_value_t = load::DEFAULT_SECS, value_parser = positive_secs)]
    secs: f64,
    /// Measure release programs older than their sources or built with test hooks (said in
    /// the JSON's warnings) instead of refusing. Missing ones still refuse.
    #[arg(long)]
    allow_stale: bool,
}

/// `--secs`: a positive, finite number of seconds.
fn positive_secs(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

#[derive(Args)]
struct BaselineArgs {
    /// An earlier runtime-comparison.json to compare each phase with.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// With --baseline or --against: a figure regressed when its change is significant
    /// (Bonferroni-corrected) and its estimate exceeds this many percent.
    #[arg(long, value_name = "PCT", default_value_t = 10.0)]
    max_regression: f64,
}

/// `--mode`: one of [`Mode::NAMES`], listed in `--help` and in the refusal of any other word.
fn mode_parser() -> impl TypedValueParser<Value = Mode> {
    PossibleValuesParser::new(Mode::NAMES).map(|word| {
        word.parse::<Mode>()
            .expect("clap admits only the listed modes")
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        link_protocol::out!("{COMMANDS}");
        return ExitCode::SUCCESS;
    };
    match dispatch(command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            link_protocol::errln!("error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn dispatch(command: Cmd) -> anyhow::Result<u8> {
    let ws = outputs::Workspace::locate();
    match command {
        Cmd::Runtime(a) => {
            let opts = runtime::Options {
                build: a.build,
                install: a.install,
                mode: a.mode,
                rounds: a.rounds,
                runs: a.runs,
                trace: a.trace,
                allow_skip: a.allow_skip,
                allow_stale: a.allow_stale,
                baseline: a.baseline.baseline,
                max_regression: a.baseline.max_regression,
                junit: a.junit,
                bench_sandbox: a.bench_sandbox,
                budget: std::time::Duration::from_secs(a.budget),
                precision_pct: a.precision,
                against: a.against,
            };
            match runtime::run(&ws, &opts) {
                Ok(summary) => Ok(summary.exit_code(opts.allow_skip)),
                Err(e) => match e.downcast_ref::<runtime::Unconfinable>() {
                    Some(u) => {
                        link_protocol::errln!("xtask: {u}");
                        Ok(exit::UNCONFINABLE)
                    }
                    None => Err(e),
                },
            }
        }
        Cmd::BenchSandbox(a) => {
            let turn_rounds = match a.turn_rounds {
                Some(t) if t > a.rounds => anyhow::bail!(
                    "--turn-rounds {t} cannot exceed --rounds {}: turn rounds are among the \
                     rounds",
                    a.rounds
                ),
                Some(t) => t,
                None => bench_sandbox::DEFAULT_TURN_ROUNDS.min(a.rounds),
            };
            let opts = bench_sandbox::Options {
                rounds: a.rounds,
                turn_rounds,
                allow_stale: a.allow_stale,
            };
            bench_sandbox::main(&ws, &opts)
        }
        Cmd::Load(a) => load::main(
            &ws,
            &load::Options {
                clients: a.clients,
                rounds: a.rounds,
                secs: a.secs,
                allow_stale: a.allow_stale,
            },
        ),
        Cmd::Fleet(a) => {
            // Bad input (no comparison, mixed sources) is a usage error: 2, nothing written.
            let table = match fleet::load(&a.dirs)
                .and_then(|machines| fleet::build(&machines, a.allow_mixed))
            {
                Ok(t) => t,
                Err(e) => {
                    link_protocol::errln!("error: {e:#}");
                    return Ok(exit::USAGE);
                }
            };
            let out = a.out.unwrap_or_else(|| ws.target.clone());
            for path in fleet::write(&out, &table)? {
                link_protocol::errln!("xtask: wrote {}", path.display());
            }
            link_protocol::out!("{}", fleet::markdown(&table));
            let failed = table
                .machines
                .iter()
                .any(|m| m.outcome == link_report::Status::Failed);
            Ok(exit::from_ok(!failed))
        }
        Cmd::Schemas => {
            for path in schemas::write(&ws.root.join("schemas"))? {
                link_protocol::errln!("xtask: wrote {}", ws.show(&path).display());
            }
            Ok(exit::PASSED)
        }
        Cmd::Build => {
            outputs::build(&ws)?;
            runtime::require_outputs(&ws)?;
            link_protocol::errln!(
                "xtask: all {} release outputs are built",
                outputs::expected_outputs().len()
            );
            Ok(exit::PASSED)
        }
        Cmd::Qualify(b) => Ok(exit::from_ok(qualify::run(
            &ws,
            b.baseline,
            b.max_regression,
        ))),
        Cmd::Doctor => Ok(exit::from_ok(doctor::run(&ws))),
        Cmd::Install => {
            system::install_missing(true)?;
            link_protocol::errln!(
                "xtask: bubblewrap, strace and libseccomp's development package are installed"
            );
            Ok(exit::PASSED)
        }
    }
}
