//! The sandbox benchmark's result, `target/bench-sandbox.json` (and the comparison's
//! `sandbox_bench`): its types, the figures from the samples, and the text and Markdown that
//! show it. A leaf: the comparison reads it without reaching the benchmark's runs.

use super::schedule::Samples;
use crate::noise::Noise;
use crate::stats::{self, Interval, Spread};
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

/// Issue 14's goal for every ratio.
pub const GOAL: f64 = 1.3;
/// Bumped whenever a field of `bench-sandbox.json` changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;
/// The file the benchmark writes under the target directory.
pub const FILE: &str = "bench-sandbox.json";

pub const METHOD: &str = "each round runs bare_bwrap and cli_exec once, and in evenly spaced \
    rounds also the run, tool and plain turns, in an order changing from round to round; the \
    first 5 rounds are warm-up and discarded; a sample is the wall time from spawn to exit of \
    the command; plugin_path is, per turn round, the run turn's time minus the plain turn's \
    time of the same round, and confined_run the run turn's minus the tool turn's (all through \
    `link turn`, so the client's start cancels); each \
    variant's median has a 95% percentile bootstrap interval and each ratio of medians a 95% \
    percentile bootstrap interval resampling numerator and denominator independently (4000 \
    resamples, crate::stats, seeded from the name with splitmix64); a goal is met when the \
    whole interval is at or below it, not met when wholly above, otherwise undecided";

/// Whether the benchmark measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BenchStatus {
    Measured,
    /// Nothing was measured: bwrap is missing or confinement is unavailable (`reason`).
    Skipped,
    /// Started but could not finish (`reason`); only inside `cargo xtask runtime`, which
    /// records the failure instead of losing the comparison.
    Failed,
}

/// A goal against an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// The whole interval is at or below the goal.
    Met,
    /// The whole interval is above it.
    NotMet,
    /// The interval straddles it.
    Undecided,
}

impl Goal {
    pub fn of(interval: &Interval, max: f64) -> Goal {
        if interval.high <= max {
            Goal::Met
        } else if interval.low > max {
            Goal::NotMet
        } else {
            Goal::Undecided
        }
    }

    /// A floor: met when the whole interval is at or above `min`, not met when wholly below;
    /// without an interval, undecided.
    pub fn at_least(interval: Option<&Interval>, min: f64) -> Goal {
        match interval {
            Some(i) if i.low >= min => Goal::Met,
            Some(i) if i.high < min => Goal::NotMet,
            _ => Goal::Undecided,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Goal::Met => "met",
            Goal::NotMet => "not met",
            Goal::Undecided => "undecided",
        }
    }
}

/// The commands each variant runs, as a person would type them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Commands {
    pub bare_bwrap: String,
    pub cli_exec: String,
    pub run_turn: String,
    pub plain_turn: String,
    /// Absent from a file written before the tool turn was measured.
    #[serde(default)]
    pub tool_turn: Option<String>,
}

/// One variant's figures (nanoseconds) and its samples in the order they ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Variant {
    #[serde(flatten)]
    pub spread: Spread,
    pub samples_ns: Vec<f64>,
}

/// Every variant; `plugin_path` is `run_turn − plain_turn` and `confined_run` is
/// `run_turn − tool_turn`, per turn round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Variants {
    pub bare_bwrap: Variant,
    pub cli_exec: Variant,
    pub plugin_path: Variant,
    pub run_turn: Variant,
    pub plain_turn: Variant,
    /// Both absent from a file written before the tool turn was measured: not zero.
    #[serde(default)]
    pub confined_run: Option<Variant>,
    #[serde(default)]
    pub tool_turn: Option<Variant>,
}

/// `numerator / denominator`, a ratio of medians with its interval, against the goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ratio {
    pub name: String,
    pub numerator: String,
    pub denominator: String,
    pub ratio: Interval,
    pub goal_max: f64,
    pub goal: Goal,
}

pub use crate::outputs::Program;

/// `target/bench-sandbox.json`, and the comparison's `sandbox_bench`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxBench {
    pub schema_version: u32,
    pub status: BenchStatus,
    /// Why nothing (or not everything) was measured; `None` when measured.
    pub reason: Option<String>,
    pub source: String,
    /// Timed rounds of bare_bwrap and cli_exec, of them with a turn pair, and warm-up rounds.
    pub rounds: u32,
    pub turn_rounds: u32,
    pub warmup_rounds: u32,
    pub commands: Commands,
    pub programs: Vec<Program>,
    pub noise_before: Option<Noise>,
    pub noise_after: Option<Noise>,
    /// `None` unless measured: never zeros.
    pub variants: Option<Variants>,
    /// `cli_exec/bare_bwrap` and `plugin_path/bare_bwrap`; empty unless measured.
    pub ratios: Vec<Ratio>,
    pub method: String,
    pub warnings: Vec<String>,
    /// Wall time of the whole benchmark, start-up and shutdown included.
    pub elapsed_s: f64,
}

/// The variants and ratios from the samples.
pub fn figures(s: &Samples) -> Result<(Variants, Vec<Ratio>)> {
    let less = |of: &[f64], base: &[f64]| -> Vec<f64> {
        of.iter().zip(base).map(|(of, base)| of - base).collect()
    };
    let plugin = less(&s.run_turn, &s.plain_turn);
    let confined = less(&s.run_turn, &s.tool_turn);
    let variant = |name: &str, samples: &[f64]| -> Result<Variant> {
        let spread = stats::spread(&[samples.to_vec()], stats::seed(name))
            .ok_or_else(|| anyhow!("no {name} sample"))?;
        Ok(Variant {
            spread,
            samples_ns: samples.to_vec(),
        })
    };
    let variants = Variants {
        bare_bwrap: variant("bare_bwrap", &s.bare_bwrap)?,
        cli_exec: variant("cli_exec", &s.cli_exec)?,
        plugin_path: variant("plugin_path", &plugin)?,
        run_turn: variant("run_turn", &s.run_turn)?,
        plain_turn: variant("plain_turn", &s.plain_turn)?,
        confined_run: Some(variant("confined_run", &confined)?),
        tool_turn: Some(variant("tool_turn", &s.tool_turn)?),
    };
    let ratio = |num: &str, samples: &Vec<f64>| -> Result<Ratio> {
        let name = format!("{num}/bare_bwrap");
        let (bare, num_samples) = (
            std::slice::from_ref(&s.bare_bwrap),
            std::slice::from_ref(samples),
        );
        let r = stats::ratio(bare, num_samples, stats::seed(&name))
            .ok_or_else(|| anyhow!("no ratio {name}: bare bwrap took no measurable time"))?;
        Ok(Ratio {
            goal: Goal::of(&r, GOAL),
            name,
            numerator: num.into(),
            denominator: "bare_bwrap".into(),
            ratio: r,
            goal_max: GOAL,
        })
    };
    let ratios = vec![
        ratio("cli_exec", &s.cli_exec)?,
        ratio("plugin_path", &plugin)?,
        ratio("confined_run", &confined)?,
    ];
    Ok((variants, ratios))
}

/// The short table.
pub fn render(b: &SandboxBench) -> String {
    let mut out = format!(
        "sandbox benchmark: {} rounds of bare bwrap and CLI exec, {} of them with the turns, \
         {} warm-up rounds discarded\n",
        b.rounds, b.turn_rounds, b.warmup_rounds
    );
    let (Some(v), BenchStatus::Measured) = (&b.variants, b.status) else {
        let word = match b.status {
            BenchStatus::Failed => "FAILED",
            _ => "SKIPPED",
        };
        out.push_str(&format!(
            "*** {word}, nothing measured: {} ***\n",
            b.reason.as_deref().unwrap_or("no reason given")
        ));
        return out;
    };
    out.push_str(&format!(
        "{:<14} {:>10} {:>19} {:>8}\n",
        "variant", "median ms", "95% interval", "samples"
    ));
    let ms = |ns: f64| format!("{:.2}", ns / 1e6);
    for (name, var, note) in [
        ("bare_bwrap", Some(&v.bare_bwrap), ""),
        ("cli_exec", Some(&v.cli_exec), ""),
        (
            "plugin_path",
            Some(&v.plugin_path),
            "  (run turn − plain turn)",
        ),
        (
            "confined_run",
            v.confined_run.as_ref(),
            "  (run turn − tool turn)",
        ),
        ("  run_turn", Some(&v.run_turn), ""),
        ("  tool_turn", v.tool_turn.as_ref(), ""),
        ("  plain_turn", Some(&v.plain_turn), ""),
    ] {
        let Some(var) = var else {
            out.push_str(&format!("{name:<14} {:>10}\n", "not measured"));
            continue;
        };
        let s = &var.spread;
        out.push_str(&format!(
            "{name:<14} {:>10} {:>19} {:>8}{note}\n",
            ms(s.median_ns),
            format!("[{}–{}]", ms(s.median_low_ns), ms(s.median_high_ns)),
            s.samples
        ));
    }
    out.push_str(&format!(
        "\n{:<26} {:<24} {:<8} {}\n",
        "ratio", "estimate [95% interval]", "goal", "verdict"
    ));
    for r in &b.ratios {
        out.push_str(&format!(
            "{:<26} {:<24} {:<8} {}\n",
            r.name.replace('/', " / "),
            r.ratio.ratio_text(),
            format!("≤ {:.2}×", r.goal_max),
            r.goal.word()
        ));
    }
    for w in &b.warnings {
        out.push_str(&format!("WARNING: {w}\n"));
    }
    out.push_str(&format!("({:.1} s)\n", b.elapsed_s));
    out
}

/// The Markdown section of the runtime comparison.
pub fn markdown(b: &SandboxBench) -> String {
    format!(
        "\n## Sandbox benchmark\n\nConfined `run` on the plugin path and CLI `exec` against \
         one bare bwrap run (`bench-sandbox.json`; method: {}).\n\n```\n{}```\n",
        b.method,
        render(b)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_are_decided_only_by_the_whole_interval() {
        let i = |low, high| Interval {
            estimate: (low + high) / 2.0,
            low,
            high,
        };
        assert_eq!(Goal::of(&i(1.1, 1.3), 1.3), Goal::Met);
        assert_eq!(Goal::of(&i(1.31, 1.5), 1.3), Goal::NotMet);
        assert_eq!(Goal::of(&i(1.2, 1.4), 1.3), Goal::Undecided);
        assert_eq!(Goal::NotMet.word(), "not met");
    }

    #[test]
    fn figures_give_every_variant_and_every_ratio() {
        let s = Samples {
            bare_bwrap: vec![4e6, 4.2e6, 3.9e6, 4.1e6, 4.0e6],
            cli_exec: vec![6e6, 6.2e6, 5.9e6, 6.1e6, 6.0e6],
            run_turn: vec![30e6, 31e6, 29e6],
            tool_turn: vec![26e6, 26e6, 25e6],
            plain_turn: vec![24e6, 25e6, 23e6],
        };
        let (v, r) = figures(&s).unwrap();
        assert_eq!(v.plugin_path.samples_ns, vec![6e6, 6e6, 6e6]);
        assert_eq!(v.plugin_path.spread.median_ns, 6e6);
        let confined = v.confined_run.as_ref().unwrap();
        assert_eq!(confined.samples_ns, vec![4e6, 5e6, 4e6]);
        assert_eq!(confined.spread.median_ns, 4e6);
        assert_eq!(v.bare_bwrap.spread.samples, 5);
        let names: Vec<&str> = r.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cli_exec/bare_bwrap",
                "plugin_path/bare_bwrap",
                "confined_run/bare_bwrap"
            ]
        );
        assert_eq!(r[2].ratio.estimate, 1.0);
        assert_eq!(r[0].ratio.estimate, 1.5);
        assert!(r[0].ratio.low <= 1.5 && 1.5 <= r[0].ratio.high);
        assert_eq!(r[0].goal, Goal::NotMet);
        let empty = Samples::default();
        assert!(figures(&empty).is_err(), "no samples, no figures");
    }
}
