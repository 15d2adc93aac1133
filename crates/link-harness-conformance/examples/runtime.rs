//! `runtime`: the standalone runtime runner.
//!
//! ```text
//! runtime PROGRAMS OUTPUT.json mini|link confined|diagnostic SOURCE [ROUNDS] [traced|cycle]
//! runtime report REPORT.json TRACE
//! ```
//!
//! The first form runs one scenario on the built programs in PROGRAMS (it never builds or
//! downloads them) and writes the JSON report (`cycle`: a timing cycle, without the fixed idle
//! wait and the status series, with several cold turns); the second adds a `trace` section from an
//! `strace -f -ttt -e trace=process` file and prints a table. Exit status of a run: 0 passed,
//! 1 failed, 2 bad input (nothing started, nothing left behind), 3 skipped (a capability is
//! missing), 130/143 interrupted. SOURCE is recorded as given: `cargo xtask runtime` is what
//! checks it against the checkout (its comparison says `checked` or `unverified`). Of `report`: 0 counts available, 2 bad input (the report is
//! left as it was), 4 trace counts unavailable (the report says so, and why).

use link_harness_conformance::{
    interrupt, preflight, read_report, run_scenario, trace, write_report, ScenarioConfig,
};
use link_report::{runner, Status};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: runtime PROGRAMS OUTPUT.json mini|link confined|diagnostic SOURCE [ROUNDS] [traced|cycle] | runtime report REPORT.json TRACE";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("report") => report(&args[1..]),
        Some("-h" | "--help") => {
            link_protocol::outln!("{}", USAGE.replace(" | ", "\n       "));
            Ok(ExitCode::SUCCESS)
        }
        _ => run(&args),
    };
    result.unwrap_or_else(|message| {
        link_protocol::errln!("runtime: {message}");
        ExitCode::from(runner::BAD_INPUT)
    })
}

/// Parses the run arguments; every error names the problem and the fix.
fn parse(args: &[String]) -> Result<ScenarioConfig, String> {
    let need = |i: usize, what: &str| {
        args.get(i)
            .cloned()
            .ok_or_else(|| format!("missing {what}; {USAGE}"))
    };
    let programs = PathBuf::from(need(
        0,
        "PROGRAMS (the directory of the built programs, e.g. target/release)",
    )?);
    let output = PathBuf::from(need(1, "OUTPUT.json (where to write the report)")?);
    let profile = need(2, "the profile (mini or link)")?.parse()?;
    let mode = need(3, "the mode (confined or diagnostic)")?.parse()?;
    let source = need(
        4,
        "SOURCE (the commit the programs were built from, e.g. \"$(git rev-parse HEAD)\")",
    )?;
    let mut config = ScenarioConfig::new(programs, profile, mode, &source);
    config.output = Some(output);
    let mut rest = args[5..].iter().peekable();
    if let Some(next) = rest.next_if(|a| !is_kind(a)) {
        config.rounds = next.parse().ok().filter(|r| *r >= 1).ok_or_else(|| {
            format!(
                "ROUNDS `{next}` is not a positive whole number: pass e.g. 3, `traced` or `cycle`"
            )
        })?;
    }
    match rest.next().map(String::as_str) {
        None => {}
        Some("traced") => config.traced = true,
        Some("cycle") => config.cycle = true,
        Some(other) => {
            return Err(format!(
                "unexpected argument `{other}`: the last argument may only be `traced` or `cycle`; {USAGE}"
            ))
        }
    }
    if let Some(extra) = rest.next() {
        return Err(format!("unexpected argument `{extra}`; {USAGE}"));
    }
    Ok(config)
}

/// The last argument's words: a traced run or a timing cycle.
fn is_kind(arg: &str) -> bool {
    matches!(arg, "traced" | "cycle")
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let config = parse(args)?;
    preflight(&config).map_err(|e| e.to_string())?;
    interrupt::install_handler();
    let report = run_scenario(&config);
    if let Some(sig) = interrupt::interrupted() {
        link_protocol::errln!(
            "runtime: interrupted by {}; the runtime was stopped and its state removed",
            interrupt::name(sig)
        );
        return Ok(ExitCode::from(128 + sig as u8));
    }
    let label = config.label();
    // A caller that reads the report (`cargo xtask runtime`) prints the checks itself.
    if std::env::var(runner::ENV_NO_CHECK_LIST).as_deref() != Ok("1") {
        for check in &report.checks {
            link_protocol::errln!("[{label}] {:<27} {}", check.name, check.outcome);
        }
    }
    Ok(match report.outcome.status {
        Status::Passed => ExitCode::from(runner::PASSED),
        Status::Failed => ExitCode::from(runner::FAILED),
        Status::Skipped => {
            link_protocol::errln!(
                "[{label}] SKIPPED — NOT a pass: {}",
                report
                    .outcome
                    .reason
                    .as_deref()
                    .unwrap_or("no reason given")
            );
            ExitCode::from(runner::SKIPPED)
        }
    })
}

fn report(args: &[String]) -> Result<ExitCode, String> {
    let [path, trace_path] = args else {
        return Err(format!("`report` takes REPORT.json and TRACE; {USAGE}"));
    };
    let (path, trace_path) = (PathBuf::from(path), PathBuf::from(trace_path));
    let mut report =
        read_report(&path).map_err(|e| format!("{e}; pass a report written by `runtime`"))?;
    if !trace_path.is_file() {
        return Err(format!(
            "trace {} does not exist: record one with `strace -f -ttt -e trace=process -o {} runtime ...`",
            trace_path.display(),
            trace_path.display()
        ));
    }
    let section = trace::apply_to_report(&mut report, &trace_path).clone();
    write_report(&path, &report).map_err(|e| format!("cannot rewrite {}: {e}", path.display()))?;
    link_protocol::out!("{}", trace::render_table(&section));
    if section.available {
        return Ok(ExitCode::from(runner::PASSED));
    }
    link_protocol::errln!(
        "runtime: trace counts UNAVAILABLE (not zero): {}",
        section.reason.as_deref().unwrap_or("no reason given")
    );
    Ok(ExitCode::from(runner::TRACE_UNAVAILABLE))
}
