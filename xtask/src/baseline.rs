//! `--baseline FILE --max-regression P`: each phase's Link/Mini ratio against an earlier
//! `runtime-comparison.json`, judged from the intervals (criterion's idea): a phase regressed
//! only when its whole 95% interval lies above the baseline ratio × (1 + P/100), improved only
//! when the whole interval lies below the baseline ratio ÷ (1 + P/100), and otherwise it did
//! not change, however its point estimate moved.

use crate::compare::{Comparison, SCHEMA_VERSION};
use crate::stats::Interval;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// What one phase did against the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Improved,
    Regressed,
    NoChange,
    /// One of the two comparisons has no ratio for the phase (a side skipped, no such phase).
    Unmeasured,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Improved => "improved",
            Kind::Regressed => "REGRESSED",
            Kind::NoChange => "no change",
            Kind::Unmeasured => "not measured",
        }
    }
}

/// One phase, then and now.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub phase: String,
    pub baseline: Option<Interval>,
    pub now: Option<Interval>,
    pub kind: Kind,
}

impl Change {
    /// `cold_turn: Link/Mini 3.10× [2.90–3.30] vs baseline 2.40× (limit 3.00×)`.
    pub fn describe_with(&self, limit: f64) -> String {
        match (self.now, self.baseline) {
            (Some(n), Some(b)) => format!(
                "{}: Link/Mini {} vs baseline {:.2}× (limit {:.2}×)",
                self.phase,
                n.ratio_text(),
                b.estimate,
                b.estimate * (1.0 + limit / 100.0)
            ),
            _ => format!("{}: not measured on both", self.phase),
        }
    }
}

/// The verdict against a baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub max_regression: f64,
    pub changes: Vec<Change>,
    /// Phases only one of the two comparisons has, as `phase (new|gone)`.
    pub unmatched: Vec<String>,
}

/// Judges one phase: only an interval wholly past the margin counts.
pub fn judge(baseline: Option<Interval>, now: Option<Interval>, max_regression: f64) -> Kind {
    let (Some(b), Some(n)) = (baseline, now) else {
        return Kind::Unmeasured;
    };
    let factor = 1.0 + max_regression.max(0.0) / 100.0;
    if n.low > b.estimate * factor {
        Kind::Regressed
    } else if n.high < b.estimate / factor {
        Kind::Improved
    } else {
        Kind::NoChange
    }
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

    /// A table of every phase's verdict.
    pub fn render(&self) -> String {
        let mut out = format!(
            "baseline comparison of Link/Mini ratios (a change counts only when the 95% interval \
             lies wholly beyond the baseline ratio by more than {:.0}%)\n{:<24} {:>10} {:>26} {:>13}\n",
            self.max_regression, "phase", "baseline", "now [95% CI]", "verdict"
        );
        let f = |i: Option<Interval>, full: bool| match i {
            Some(i) if full => i.ratio_text(),
            Some(i) => format!("{:.2}×", i.estimate),
            None => "—".into(),
        };
        for c in &self.changes {
            out.push_str(&format!(
                "{:<24} {:>10} {:>26} {:>13}\n",
                c.phase,
                f(c.baseline, false),
                f(c.now, true),
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
    let c: Comparison = serde_json::from_str(&text).with_context(|| {
        format!(
            "baseline {} is not a runtime-comparison.json (schema {SCHEMA_VERSION})",
            path.display()
        )
    })?;
    Ok(c)
}

/// Compares `new` with `old`, phase by phase, on the Link/Mini ratio.
pub fn compare(old: &Comparison, new: &Comparison, max_regression: f64) -> Result<Verdict> {
    if old.schema_version != new.schema_version {
        bail!(
            "baseline has comparison schema {} but this run writes {} (intervals need repeated \
             runs); record a new baseline with this version",
            old.schema_version,
            new.schema_version
        );
    }
    if old.mode != new.mode {
        bail!(
            "baseline ran in {} mode but this run is {}; compare like with like",
            old.mode,
            new.mode
        );
    }
    let mut verdict = Verdict {
        max_regression,
        changes: Vec::new(),
        unmatched: Vec::new(),
    };
    for s in &new.stats {
        let Some(before) = old.stats.iter().find(|o| o.name == s.name) else {
            verdict.unmatched.push(format!("{} (new)", s.name));
            continue;
        };
        verdict.changes.push(Change {
            phase: s.name.clone(),
            baseline: before.ratio,
            now: s.ratio,
            kind: judge(before.ratio, s.ratio, max_regression),
        });
    }
    for o in &old.stats {
        if !new.stats.iter().any(|s| s.name == o.name) {
            verdict.unmatched.push(format!("{} (gone)", o.name));
        }
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::{from_runs, runs_of, sample};
    use link_report::Profile;

    fn iv(estimate: f64, low: f64, high: f64) -> Option<Interval> {
        Some(Interval {
            estimate,
            low,
            high,
        })
    }

    #[test]
    fn the_verdict_follows_the_intervals() {
        let base = iv(2.0, 1.8, 2.2);
        assert_eq!(judge(base, base, 25.0), Kind::NoChange);
        // Wholly above 2.0 × 1.25 = 2.5.
        assert_eq!(judge(base, iv(3.0, 2.6, 3.4), 25.0), Kind::Regressed);
        // Point estimate past the limit, but the interval overlaps it: noise, not a change.
        assert_eq!(judge(base, iv(2.8, 2.3, 3.4), 25.0), Kind::NoChange);
        // Wholly below 2.0 / 1.25 = 1.6.
        assert_eq!(judge(base, iv(1.2, 1.1, 1.5), 25.0), Kind::Improved);
        assert_eq!(judge(None, base, 25.0), Kind::Unmeasured);
    }

    #[test]
    fn a_comparison_against_itself_is_no_change_everywhere() {
        let c = sample();
        let v = compare(&c, &c, 25.0).unwrap();
        assert!(v.passed());
        assert!(v.unmatched.is_empty());
        for ch in &v.changes {
            let want = if ch.now.is_some() {
                Kind::NoChange
            } else {
                Kind::Unmeasured
            };
            assert_eq!(ch.kind, want, "{}", ch.phase);
        }
        assert!(!v.render().contains("REGRESSED"));
    }

    #[test]
    fn a_clear_slowdown_of_link_regresses_and_noise_does_not() {
        let old = sample();
        // Link 60% slower in every phase, a little spread: a regression everywhere it is measured.
        let slow = from_runs(&runs_of(5, |p, i| {
            let base = 0.88 + 0.04 * i as f64;
            if p == Profile::Link {
                base * 1.6
            } else {
                base
            }
        }));
        let v = compare(&old, &slow, 25.0).unwrap();
        assert!(!v.passed());
        let bad = v.regressions();
        assert!(bad.iter().any(|d| d.phase == "startup"));
        let text = bad[0].describe_with(25.0);
        assert!(
            text.contains("vs baseline 4.00×") && text.contains("limit 5.00×"),
            "{text}"
        );
        assert!(v.render().contains("REGRESSED"));
        // A looser limit lets the same figures pass.
        assert!(compare(&old, &slow, 80.0).unwrap().passed());

        // Within noise: a run of Link at +40%, the others as before; the interval overlaps.
        let noisy = from_runs(&runs_of(5, |p, i| {
            let base = 0.88 + 0.04 * i as f64;
            if p == Profile::Link && i == 5 {
                base * 1.4
            } else {
                base
            }
        }));
        let v = compare(&old, &noisy, 25.0).unwrap();
        assert!(v.passed(), "{}", v.render());
    }

    #[test]
    fn unmatched_phases_old_schemas_and_other_modes() {
        let old = sample();
        let mut new = sample();
        new.stats.retain(|s| s.name != "protected_tools");
        let v = compare(&old, &new, 25.0).unwrap();
        assert_eq!(v.unmatched, vec!["protected_tools (gone)"]);
        let mut legacy = sample();
        legacy.schema_version = 1;
        let err = compare(&legacy, &new, 25.0).unwrap_err().to_string();
        assert!(err.contains("record a new baseline"), "{err}");
        new.mode = link_report::Mode::Diagnostic;
        let err = compare(&old, &new, 25.0).unwrap_err().to_string();
        assert!(err.contains("like with like"), "{err}");
    }
}
