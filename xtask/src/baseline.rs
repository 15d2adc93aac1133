//! `--baseline FILE --max-regression P`: every figure of this run against an earlier
//! `runtime-comparison.json`, from the raw timing cycles both keep (criterion's idea, tested as
//! tango-bench pairs them): for each phase, the Link/Mini ratio (the pairs' log ratios, then
//! and now) and each side's own time (the cycles' logs), Link-only phases included. Each is
//! Welch's t test on the logs; a figure regressed only when the test is significant at 5%
//! divided by the number of figures judged (Bonferroni) *and* the estimated change exceeds
//! P%; improved likewise the other way; otherwise it did not change.

use crate::compare::pairs::{self, Clock};
use crate::compare::{Build, Comparison, MIN_BASELINE_SCHEMA, SCHEMA_VERSION};
use crate::paired::{self, Kind, Welch};
use anyhow::{bail, Context, Result};
use link_report::{PhaseName, Profile};
use std::path::Path;

/// Which figure of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// Link/Mini, from the pairs.
    Ratio,
    /// One side's own time, from its cycles.
    Time(Profile),
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Figure::Ratio => f.write_str("Link/Mini"),
            Figure::Time(p) => write!(f, "{p} time"),
        }
    }
}

/// One figure, then and now.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub phase: String,
    pub figure: Figure,
    /// exp(mean log) then and now: a ratio, or a time in ns.
    pub before: f64,
    pub now: f64,
    /// Welch's test of now against then; `None` with fewer than two values on a side.
    pub test: Option<Welch>,
    pub kind: Kind,
}

impl Change {
    fn value(&self, v: f64) -> String {
        match self.figure {
            Figure::Ratio => format!("{v:.2}×"),
            Figure::Time(_) => format!("{:.2} ms", v / 1e6),
        }
    }

    /// `startup link time: 15.20 ms → 19.01 ms, +25.1% [+18.0%, +32.6%], Welch t 6.1, df 31,
    /// one-sided p 4.1e-7`.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "{} {}: {} → {}",
            self.phase,
            self.figure,
            self.value(self.before),
            self.value(self.now)
        );
        if let Some(w) = &self.test {
            let (e, lo, hi) = w.factor();
            let pct = |f: f64| format!("{:+.1}%", (f - 1.0) * 100.0);
            let p = if e >= 1.0 { w.p_above } else { w.p_below };
            out.push_str(&format!(
                ", {} [{}, {}], Welch t {:.2}, df {:.0}, one-sided p {p:.1e}",
                pct(e),
                pct(lo),
                pct(hi),
                w.t,
                w.df
            ));
        }
        out
    }
}

/// The verdict against a baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub max_regression: f64,
    /// Figures tested: the Bonferroni divisor.
    pub tests: usize,
    pub changes: Vec<Change>,
    /// Phases only one of the two comparisons has, as `phase (new|gone)`.
    pub unmatched: Vec<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        !self.changes.iter().any(|c| c.kind == Kind::Regressed)
    }

    pub fn regressions(&self) -> Vec<&Change> {
        self.changes
            .iter()
            .filter(|c| c.kind == Kind::Regressed)
            .collect()
    }

    /// A table of every figure's verdict.
    pub fn render(&self) -> String {
        let mut out =
            format!(
            "baseline comparison: every phase's Link/Mini ratio and each side's time; a change \
             counts only when Welch's t test on the logs is significant at 5%/{} (Bonferroni) \
             and the estimate is beyond {:.0}%\n{:<16} {:<10} {:>10} {:>10} {:>9} {:>9} {:>13}\n",
            self.tests, self.max_regression, "phase", "figure", "baseline", "now", "change", "p",
            "verdict"
        );
        for c in &self.changes {
            let (change, p) = match &c.test {
                Some(w) => {
                    let e = w.factor().0;
                    let p = if e >= 1.0 { w.p_above } else { w.p_below };
                    (format!("{:+.1}%", (e - 1.0) * 100.0), format!("{p:.1e}"))
                }
                None => ("—".into(), "—".into()),
            };
            out.push_str(&format!(
                "{:<16} {:<10} {:>10} {:>10} {:>9} {:>9} {:>13}\n",
                c.phase,
                c.figure.to_string(),
                c.value(c.before),
                c.value(c.now),
                change,
                p,
                c.kind.as_str()
            ));
        }
        for u in &self.unmatched {
            out.push_str(&format!("{u}\n"));
        }
        out
    }
}

/// Reads an earlier comparison.
pub fn load(path: &Path) -> Result<Comparison> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read baseline {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("baseline {} is not JSON", path.display()))?;
    let schema = value["schema_version"].as_u64().unwrap_or(0);
    if !(u64::from(MIN_BASELINE_SCHEMA)..=u64::from(SCHEMA_VERSION)).contains(&schema) {
        bail!(
            "baseline {} has comparison schema {schema}, this run reads {MIN_BASELINE_SCHEMA} to \
             {SCHEMA_VERSION} (a baseline must keep its raw timing cycles); record a new \
             baseline with this version",
            path.display()
        );
    }
    serde_json::from_value(value).with_context(|| {
        format!(
            "baseline {} is not a runtime-comparison.json (schema {SCHEMA_VERSION})",
            path.display()
        )
    })
}

/// The figures of one phase in one comparison: (figure, logs).
fn figures(c: &Comparison, phase: &str) -> Vec<(Figure, Vec<f64>)> {
    let mut out = Vec::new();
    if pairs::is_shared(phase) {
        let logs = pairs::link_over_mini(&c.cycles, Build::New, phase, Clock::Wall);
        out.push((Figure::Ratio, pairs::logs(&logs)));
    }
    for p in Profile::ALL {
        let logs = pairs::side_logs(&c.cycles, Build::New, p, phase);
        if !logs.is_empty() {
            out.push((Figure::Time(p), logs));
        }
    }
    out
}

fn mean_exp(x: &[f64]) -> f64 {
    (x.iter().sum::<f64>() / x.len().max(1) as f64).exp()
}

/// Compares `new` with `old`, figure by figure.
pub fn compare(old: &Comparison, new: &Comparison, max_regression: f64) -> Result<Verdict> {
    if old.mode != new.mode {
        bail!(
            "baseline ran in {} mode but this run is {}; compare like with like",
            old.mode,
            new.mode
        );
    }
    let names = |c: &Comparison| -> Vec<String> {
        c.stats
            .iter()
            .filter(|s| !s.name.parse::<PhaseName>().is_ok_and(|p| p.fixed_wait()))
            .map(|s| s.name.clone())
            .collect()
    };
    let (before_names, now_names) = (names(old), names(new));
    let mut changes = Vec::new();
    for phase in &now_names {
        if !before_names.contains(phase) {
            continue;
        }
        let then = figures(old, phase);
        for (figure, now) in figures(new, phase) {
            let Some((_, before)) = then.iter().find(|(f, _)| *f == figure) else {
                continue;
            };
            changes.push(Change {
                phase: phase.clone(),
                figure,
                before: mean_exp(before),
                now: mean_exp(&now),
                test: paired::welch(before, &now),
                kind: Kind::Unmeasured,
            });
        }
    }
    let tests = changes.iter().filter(|c| c.test.is_some()).count();
    for c in &mut changes {
        if let Some(w) = &c.test {
            c.kind = paired::judge(w.factor().0, w.p_above, w.p_below, tests, max_regression);
        }
    }
    let mut unmatched: Vec<String> = now_names
        .iter()
        .filter(|n| !before_names.contains(n))
        .map(|n| format!("{n} (new)"))
        .collect();
    unmatched.extend(
        before_names
            .iter()
            .filter(|n| !now_names.contains(n))
            .map(|n| format!("{n} (gone)")),
    );
    Ok(Verdict {
        max_regression,
        tests,
        changes,
        unmatched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::{comparison_of_cycles, sample};

    #[test]
    fn a_comparison_against_itself_is_no_change_everywhere() {
        let c = comparison_of_cycles(12, 1.0, 1.0);
        let v = compare(&c, &c, 10.0).unwrap();
        assert!(v.passed());
        assert!(v.unmatched.is_empty());
        assert!(v.tests > 0);
        assert!(
            v.changes.iter().all(|ch| ch.kind == Kind::NoChange),
            "{}",
            v.render()
        );
        assert!(!v.render().contains("REGRESSED"));
    }

    #[test]
    fn a_slower_link_start_up_regresses_with_both_figures_and_the_test_named() {
        let old = comparison_of_cycles(12, 1.0, 1.0);
        let slow = comparison_of_cycles(12, 1.3, 1.0);
        let v = compare(&old, &slow, 10.0).unwrap();
        assert!(!v.passed(), "{}", v.render());
        let bad = v.regressions();
        let figures: Vec<(String, Figure)> =
            bad.iter().map(|c| (c.phase.clone(), c.figure)).collect();
        assert!(
            figures.contains(&("startup".into(), Figure::Ratio)),
            "{figures:?}"
        );
        assert!(figures.contains(&("startup".into(), Figure::Time(Profile::Link))));
        // Mini did not change, nor did any other phase.
        assert!(bad.iter().all(|c| c.phase == "startup"), "{}", v.render());
        assert!(!figures.contains(&("startup".into(), Figure::Time(Profile::Mini))));
        let text = bad[0].describe();
        assert!(text.contains("Welch t") && text.contains("→"), "{text}");
        // A margin beyond the change lets the same figures pass.
        assert!(compare(&old, &slow, 40.0).unwrap().passed());
    }

    #[test]
    fn a_slowdown_both_sides_share_is_seen_in_each_sides_time() {
        let old = comparison_of_cycles(12, 1.0, 1.0);
        let both = comparison_of_cycles(12, 1.0, 1.3);
        let v = compare(&old, &both, 10.0).unwrap();
        let bad: Vec<(String, Figure)> = v
            .regressions()
            .iter()
            .map(|c| (c.phase.clone(), c.figure))
            .collect();
        assert!(
            bad.contains(&("warm_turn".into(), Figure::Time(Profile::Mini))),
            "{bad:?}"
        );
        assert!(bad.contains(&("warm_turn".into(), Figure::Time(Profile::Link))));
        assert!(
            !bad.iter().any(|(_, f)| *f == Figure::Ratio),
            "{}",
            v.render()
        );
    }

    #[test]
    fn link_only_phases_are_judged_on_links_time() {
        let old = comparison_of_cycles(12, 1.0, 1.0);
        let mut slow_tools = comparison_of_cycles(12, 1.0, 1.0);
        for r in &mut slow_tools.cycles {
            for p in r.phases.iter_mut().filter(|p| p.name == "protected_tools") {
                p.duration_ns = p.duration_ns * 3 / 2;
            }
        }
        let v = compare(&old, &slow_tools, 10.0).unwrap();
        let bad = v.regressions();
        assert_eq!(bad.len(), 1, "{}", v.render());
        assert_eq!(
            (bad[0].phase.as_str(), bad[0].figure),
            ("protected_tools", Figure::Time(Profile::Link))
        );
    }

    #[test]
    fn unmatched_phases_old_schemas_and_other_modes() {
        let old = comparison_of_cycles(12, 1.0, 1.0);
        let mut new = comparison_of_cycles(12, 1.0, 1.0);
        new.stats.retain(|s| s.name != "protected_tools");
        let v = compare(&old, &new, 10.0).unwrap();
        assert_eq!(v.unmatched, vec!["protected_tools (gone)"]);
        let dir = std::env::temp_dir().join(format!("xtask-baseline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let legacy = dir.join("old.json");
        let mut two = sample();
        two.schema_version = 2;
        std::fs::write(&legacy, serde_json::to_string(&two).unwrap()).unwrap();
        let err = load(&legacy).unwrap_err().to_string();
        assert!(err.contains("record a new baseline"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
        new.mode = link_report::Mode::Diagnostic;
        let err = compare(&old, &new, 10.0).unwrap_err().to_string();
        assert!(err.contains("like with like"), "{err}");
    }
}
