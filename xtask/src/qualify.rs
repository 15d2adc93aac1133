//! `cargo xtask qualify`: the locked build, the spec's confined tests, `runtime --trace`, and a
//! checklist of each item's result.

use crate::outputs::{self, Workspace};
use crate::runtime::{self, Options};
use crate::state;
use anyhow::{Context, Result};
use link_report::Mode;
use std::path::PathBuf;
use xshell::{cmd, Shell};

/// The spec's confined test command, after `cargo`.
pub const TEST_ARGS: [&str; 10] = [
    "test",
    "--locked",
    "--release",
    "-p",
    "link-plugin-link-harness",
    "--test",
    "harness",
    "runtime::",
    "--",
    "--nocapture",
];

/// How one checklist item went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    Passed,
    Failed(String),
    Skipped(String),
    NotRun(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub mark: Mark,
}

/// Runs every step (later ones even after an earlier failure, where they can) and prints
/// the checklist; true only when every item passed.
pub fn run(ws: &Workspace, baseline: Option<PathBuf>, max_regression: f64) -> bool {
    let mut items = Vec::new();
    let built = outputs::build(ws);
    let build_ok = built.is_ok();
    items.push(item(
        "locked release build (the spec's two commands)",
        built.map(|_| Mark::Passed),
    ));
    if !build_ok {
        let why = "the build failed".to_string();
        items.push(not_run(
            "confined tests (runtime::mini, runtime::link, runtime::two_link_agents)",
            &why,
        ));
        items.push(not_run(
            "runtime comparison, confined: Mini and full Link passed",
            &why,
        ));
        items.push(not_run(
            "trace pass: exec counts available on both sides",
            &why,
        ));
    } else {
        items.push(item(
            "confined tests (runtime::mini, runtime::link, runtime::two_link_agents)",
            confined_tests(ws),
        ));
        let opts = Options {
            build: false,
            install: false,
            mode: Mode::Confined,
            rounds: None,
            runs: runtime::DEFAULT_RUNS,
            trace: true,
            allow_skip: false,
            allow_stale: false,
            baseline,
            max_regression,
            junit: None,
            bench_sandbox: false,
            budget: std::time::Duration::from_secs(crate::cycles::DEFAULT_BUDGET_S),
            precision_pct: crate::cycles::DEFAULT_PRECISION_PCT,
            against: None,
        };
        match runtime::run(ws, &opts) {
            Ok(s) => {
                let sides: Vec<String> = s
                    .failures
                    .iter()
                    .filter(|f| !s.trace_problems.contains(f))
                    .cloned()
                    .collect();
                let mark = if !sides.is_empty() {
                    Mark::Failed(sides.join("; "))
                } else if !s.skips.is_empty() {
                    Mark::Skipped(s.skips.join("; "))
                } else {
                    Mark::Passed
                };
                items.push(Item {
                    name: "runtime comparison, confined: Mini and full Link passed".into(),
                    mark,
                });
                let trace = if s.trace_problems.is_empty() {
                    Mark::Passed
                } else {
                    Mark::Failed(s.trace_problems.join("; "))
                };
                items.push(Item {
                    name: "trace pass: exec counts available on both sides".into(),
                    mark: trace,
                });
            }
            Err(e) => {
                let why = format!("{e:#}");
                items.push(Item {
                    name: "runtime comparison, confined: Mini and full Link passed".into(),
                    mark: Mark::Failed(why.clone()),
                });
                items.push(not_run(
                    "trace pass: exec counts available on both sides",
                    &why,
                ));
            }
        }
    }
    link_protocol::out!("{}", render(&items));
    items.iter().all(|i| i.mark == Mark::Passed)
}

/// The confined tests must not skip silently in a qualification: missing capabilities fail.
fn confined_tests(ws: &Workspace) -> Result<Mark> {
    let state = state::from_env()?;
    let sh = Shell::new()?;
    sh.change_dir(&ws.root);
    sh.set_var("LNK_TEST_STATE_DIR", &state);
    for var in [
        "LNK_REQUIRE_SANDBOX",
        "LNK_REQUIRE_NATIVE",
        "LNK_REQUIRE_RUNTIME",
    ] {
        if std::env::var_os(var).is_none() {
            sh.set_var(var, "1");
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let args = TEST_ARGS;
    link_protocol::errln!(
        "xtask: $ LNK_REQUIRE_SANDBOX=1 LNK_REQUIRE_NATIVE=1 LNK_REQUIRE_RUNTIME=1 cargo {}",
        args.join(" ")
    );
    let out = cmd!(sh, "{cargo} {args...}")
        .quiet()
        .ignore_status()
        .output()
        .context("cannot run the confined tests")?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    link_protocol::out!("{stdout}");
    link_protocol::errln!("{stderr}");
    if !out.status.success() {
        anyhow::bail!("the confined tests failed (output above)");
    }
    Ok(tests_mark(&format!("{stdout}\n{stderr}")))
}

/// A passing test run is `[pass]` only if its cases ran: any `SKIPPED` line, or no case run at
/// all, makes it a skip with the reasons.
fn tests_mark(output: &str) -> Mark {
    let skips: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("SKIPPED") || l.contains("] outcome SKIPPED"))
        .collect();
    if !skips.is_empty() {
        return Mark::Skipped(skips.join("; "));
    }
    let ran = output
        .lines()
        .any(|l| l.starts_with("test result: ok.") && !l.starts_with("test result: ok. 0 passed"));
    if !ran {
        return Mark::Skipped("no test case ran".into());
    }
    Mark::Passed
}

fn item(name: &str, result: Result<Mark>) -> Item {
    Item {
        name: name.into(),
        mark: result.unwrap_or_else(|e| Mark::Failed(format!("{e:#}"))),
    }
}

fn not_run(name: &str, why: &str) -> Item {
    Item {
        name: name.into(),
        mark: Mark::NotRun(why.into()),
    }
}

pub fn render(items: &[Item]) -> String {
    let mut out = String::from("\nqualification checklist\n");
    for i in items {
        let (mark, why) = match &i.mark {
            Mark::Passed => ("[pass]", None),
            Mark::Failed(w) => ("[FAIL]", Some(w)),
            Mark::Skipped(w) => ("[SKIP]", Some(w)),
            Mark::NotRun(w) => ("[ -- ]", Some(w)),
        };
        out.push_str(&format!("  {mark} {}\n", i.name));
        if let Some(w) = why {
            out.push_str(&format!("         {w}\n"));
        }
    }
    let passed = items.iter().all(|i| i.mark == Mark::Passed);
    out.push_str(if passed {
        "  => qualified\n"
    } else {
        "  => NOT qualified\n"
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checklist_shows_each_result() {
        let text = render(&[
            Item {
                name: "build".into(),
                mark: Mark::Passed,
            },
            Item {
                name: "runtime".into(),
                mark: Mark::Skipped("link skipped: no user namespaces".into()),
            },
            not_run("trace", "the build failed"),
        ]);
        assert!(text.contains("[pass] build"));
        assert!(text.contains("[SKIP] runtime\n         link skipped: no user namespaces"));
        assert!(text.contains("[ -- ] trace"));
        assert!(text.ends_with("=> NOT qualified\n"));
    }

    #[test]
    fn test_command_is_the_spec_command() {
        assert_eq!(
            TEST_ARGS.join(" "),
            "test --locked --release -p link-plugin-link-harness --test harness runtime:: -- --nocapture"
        );
    }

    #[test]
    fn a_step_whose_cases_skipped_is_not_a_pass() {
        let ran = "running 3 tests\ntest result: ok. 3 passed; 0 failed; 0 ignored\n";
        assert_eq!(tests_mark(ran), Mark::Passed);
        let skipped = "running 3 tests\nSKIPPED (sandbox not available): no userns\n\
                       test result: ok. 3 passed; 0 failed\n";
        assert_eq!(
            tests_mark(skipped),
            Mark::Skipped("SKIPPED (sandbox not available): no userns".into())
        );
        let none = "running 0 tests\ntest result: ok. 0 passed; 0 failed; 3 filtered out\n";
        assert_eq!(tests_mark(none), Mark::Skipped("no test case ran".into()));
        assert!(render(&[Item {
            name: "confined tests".into(),
            mark: tests_mark(skipped)
        }])
        .contains("[SKIP] confined tests"));
    }
}
