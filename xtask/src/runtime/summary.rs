//! What one `runtime` invocation comes to: the failures and skips that decide its exit status,
//! and the table it prints.

use super::Options;
use crate::baseline::Verdict;
use crate::compare::{self, status_word, Comparison};
use crate::exit;
use crate::outputs::Workspace;
use link_report::{Profile, Status};
use std::path::PathBuf;

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
            exit::FAILED
        } else if !self.skips.is_empty() && !allow_skip {
            exit::SKIPPED
        } else {
            exit::PASSED
        }
    }
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

pub(super) fn print_summary(ws: &Workspace, s: &Summary, opts: &Options) {
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
