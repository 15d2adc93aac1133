//! `--baseline FILE`: each phase's change against an earlier `runtime-comparison.json`.

use crate::compare::{ms, Comparison, Side, SCHEMA_VERSION};
use anyhow::{bail, Context, Result};
use link_report::Profile;
use std::path::Path;

/// Changes smaller than this never fail: timer and scheduler noise on short phases.
pub const NOISE_FLOOR_NS: u128 = 5_000_000;

/// One phase of one side, then and now.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub side: Profile,
    pub phase: String,
    pub round: u32,
    pub old_ns: u128,
    pub new_ns: u128,
    /// (new - old) / old, in percent.
    pub percent: f64,
    pub regressed: bool,
}

/// The verdict against a baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub max_regression: f64,
    pub changes: Vec<Change>,
    /// Phases only one of the two comparisons has, as `side phase/round (new|gone)`.
    pub unmatched: Vec<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        !self.changes.iter().any(|c| c.regressed)
    }

    pub fn regressions(&self) -> Vec<&Change> {
        self.changes.iter().filter(|c| c.regressed).collect()
    }

    /// A table of every change, worst first marked.
    pub fn render(&self) -> String {
        let mut out = format!(
            "baseline comparison (fails past +{:.0}% and +{} ms)\n{:<6} {:<16} {:>5} {:>11} {:>11} {:>9}\n",
            self.max_regression,
            ms(NOISE_FLOOR_NS),
            "side",
            "phase",
            "round",
            "before ms",
            "now ms",
            "change"
        );
        for c in &self.changes {
            out.push_str(&format!(
                "{:<6} {:<16} {:>5} {:>11} {:>11} {:>+8.1}%{}\n",
                c.side,
                c.phase,
                c.round,
                ms(c.old_ns),
                ms(c.new_ns),
                c.percent,
                if c.regressed { "  REGRESSION" } else { "" }
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

/// Compares `new` with `old`, phase by phase on each side.
pub fn compare(old: &Comparison, new: &Comparison, max_regression: f64) -> Result<Verdict> {
    if old.schema_version != new.schema_version {
        bail!(
            "baseline has comparison schema {} but this run writes {}; record a new baseline",
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
    for (side, o, n) in [
        (Profile::Mini, &old.mini, &new.mini),
        (Profile::Link, &old.link, &new.link),
    ] {
        compare_side(side, o, n, &mut verdict);
    }
    Ok(verdict)
}

fn compare_side(name: Profile, old: &Side, new: &Side, v: &mut Verdict) {
    for p in &new.phases {
        let Some(before) = old
            .phases
            .iter()
            .find(|o| o.name == p.name && o.round == p.round)
        else {
            v.unmatched
                .push(format!("{name} {}/{} (new)", p.name, p.round));
            continue;
        };
        let (old_ns, new_ns) = (before.duration_ns, p.duration_ns);
        let percent = if old_ns == 0 {
            if new_ns == 0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (new_ns as f64 - old_ns as f64) / old_ns as f64 * 100.0
        };
        let regressed =
            percent > v.max_regression && new_ns.saturating_sub(old_ns) >= NOISE_FLOOR_NS;
        v.changes.push(Change {
            side: name,
            phase: p.name.clone(),
            round: p.round,
            old_ns,
            new_ns,
            percent,
            regressed,
        });
    }
    for o in &old.phases {
        if !new
            .phases
            .iter()
            .any(|p| p.name == o.name && p.round == o.round)
        {
            v.unmatched
                .push(format!("{name} {}/{} (gone)", o.name, o.round));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::sample;

    fn scale(side: &mut Side, phase: &str, factor: f64) {
        let p = side.phases.iter_mut().find(|p| p.name == phase).unwrap();
        p.duration_ns = (p.duration_ns as f64 * factor) as u128;
    }

    #[test]
    fn identical_runs_pass() {
        let c = sample();
        let v = compare(&c, &c, 25.0).unwrap();
        assert!(v.passed());
        assert_eq!(v.changes.len(), c.mini.phases.len() + c.link.phases.len());
        assert!(v.changes.iter().all(|ch| ch.percent == 0.0));
        assert!(v.unmatched.is_empty());
    }

    #[test]
    fn a_slower_phase_past_the_limit_fails() {
        let old = sample();
        let mut new = sample();
        scale(&mut new.link, "startup", 1.30); // 480 → 624 ms: +30 %
        scale(&mut new.mini, "idle", 1.20); // +20 %: within 25 %
        scale(&mut new.mini, "startup", 0.5); // faster is fine
        let v = compare(&old, &new, 25.0).unwrap();
        assert!(!v.passed());
        let bad = v.regressions();
        assert_eq!(bad.len(), 1);
        assert_eq!(
            (bad[0].side.as_str(), bad[0].phase.as_str()),
            ("link", "startup")
        );
        assert!((bad[0].percent - 30.0).abs() < 0.01);
        assert!(v.render().contains("REGRESSION"));
        // A looser limit passes the same numbers.
        assert!(compare(&old, &new, 35.0).unwrap().passed());
    }

    #[test]
    fn tiny_phases_never_fail_on_noise() {
        let old = sample();
        let mut new = sample();
        scale(&mut new.mini, "refusals", 1.8); // 5 → 9 ms: +80 % but only 4 ms
        let v = compare(&old, &new, 25.0).unwrap();
        assert!(v.passed(), "{}", v.render());
    }

    #[test]
    fn unmatched_phases_and_other_modes() {
        let old = sample();
        let mut new = sample();
        new.link.phases.retain(|p| p.name != "protected_tools");
        new.mini.phases.push(link_report::Phase {
            name: "extra".into(),
            ..Default::default()
        });
        let v = compare(&old, &new, 25.0).unwrap();
        assert!(v.passed());
        assert_eq!(
            v.unmatched,
            vec!["mini extra/0 (new)", "link protected_tools/0 (gone)"]
        );
        new.mode = link_report::Mode::Diagnostic;
        let err = compare(&old, &new, 25.0).unwrap_err().to_string();
        assert!(err.contains("like with like"), "{err}");
    }
}
