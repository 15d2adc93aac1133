//! The statistics of paired cycles (tango-bench's idea, criterion's test): each pair runs two
//! cycles back to back on the same machine state, so the log of their ratio cancels what the
//! pair shares (a busy second, a slow disk). A Link/Mini or new/old figure is the
//! back-transformed mean of the pairs' log ratios with a Student t interval; a change against a
//! baseline is Welch's two-sample t test on the logs, counted only when it is significant after
//! a Bonferroni correction *and* its estimate exceeds the margin.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Fewer pairs than this give an estimate but no interval (never a zero-width one).
pub const MIN_PAIRS: usize = 10;
/// The confidence of every interval, and the family-wise error rate of a gate.
pub const ALPHA: f64 = 0.05;
/// The power behind a minimum detectable effect.
pub const POWER: f64 = 0.8;
/// A pair's log ratio whose modified z-score (Iglewicz and Hoaglin) exceeds this is named.
pub const OUTLIER_Z: f64 = 3.5;

/// How the paired figures are computed, for the Markdown and the JSON.
pub const METHOD: &str = "paired cycles: each pair runs one Mini and one full Link cycle back \
    to back (the order alternates and is recorded); per pair and phase, the log of Link's \
    over Mini's median for the phase in that cycle; the figure is the exponential of the mean \
    log ratio with a 95% Student t interval over pairs (none below 10 pairs); the minimum \
    detectable effect is what a paired t test at 5% two-sided with 80% power could find. \
    Against a baseline: Welch's t test on the logs (pairs' log ratios for a ratio, cycles' \
    logs for one side's time), Bonferroni-corrected over every gated figure; a change counts \
    only when significant and its estimate exceeds --max-regression. Per-side medians and \
    spreads describe; they are not the test";

/// A ratio with its 95% interval and what the data could detect.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LogMean {
    pub pairs: usize,
    /// exp(mean log ratio).
    pub estimate: f64,
    /// `None` below [`MIN_PAIRS`].
    pub low: Option<f64>,
    pub high: Option<f64>,
    /// The smallest change (a fraction: 0.05 is 5%) a paired test of these pairs would detect
    /// with 80% power at 5%; `None` below [`MIN_PAIRS`].
    pub mde: Option<f64>,
    /// One-sided p-values of the paired t test: the ratio is above 1 / below 1.
    pub p_above: Option<f64>,
    pub p_below: Option<f64>,
}

impl LogMean {
    /// `high / low`, when there is an interval.
    pub fn width_factor(&self) -> Option<f64> {
        Some(self.high? / self.low?)
    }

    /// `2.41× [2.10–2.80]`, or `2.41× (no interval: 4 pairs)`.
    pub fn text(&self) -> String {
        self.text_as(2, "pairs", MIN_PAIRS)
    }

    /// [`LogMean::text`] with `decimals`, counting in `unit` of which an interval needs
    /// `least`: `0.342× [0.291–0.402]`, or `0.342× (no interval: 1 round(s) < 2)`.
    pub fn text_as(&self, decimals: usize, unit: &str, least: usize) -> String {
        let d = decimals;
        match (self.low, self.high) {
            (Some(l), Some(h)) => format!("{:.d$}× [{l:.d$}–{h:.d$}]", self.estimate),
            _ => format!(
                "{:.d$}× (no interval: {} {unit} < {least})",
                self.estimate, self.pairs
            ),
        }
    }

    /// The interval as the comparison's [`crate::stats::Interval`], when there is one.
    pub fn interval(&self) -> Option<crate::stats::Interval> {
        Some(crate::stats::Interval {
            estimate: self.estimate,
            low: self.low?,
            high: self.high?,
        })
    }
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// The sample variance (n − 1).
fn variance(x: &[f64]) -> f64 {
    let m = mean(x);
    x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() as f64 - 1.0)
}

fn t(df: f64) -> StudentsT {
    StudentsT::new(0.0, 1.0, df.max(1.0)).expect("a positive number of degrees of freedom")
}

/// The `q` quantile of Student's t with `df` degrees of freedom.
pub fn t_quantile(q: f64, df: f64) -> f64 {
    t(df).inverse_cdf(q)
}

/// Four decimals, stable through a JSON round trip.
fn r4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// The paired figure from per-pair log ratios; `None` without a pair.
pub fn ratio(log_ratios: &[f64]) -> Option<LogMean> {
    ratio_from(log_ratios, MIN_PAIRS)
}

/// [`ratio`] with an interval from `min_pairs` pairs on (at least 2): for few, long pairs,
/// such as the load benchmark's rounds, where a wide interval beats none.
pub fn ratio_from(log_ratios: &[f64], min_pairs: usize) -> Option<LogMean> {
    let n = log_ratios.len();
    if n == 0 {
        return None;
    }
    let m = mean(log_ratios);
    let mut out = LogMean {
        pairs: n,
        estimate: r4(m.exp()),
        low: None,
        high: None,
        mde: None,
        p_above: None,
        p_below: None,
    };
    if n < min_pairs.max(2) {
        return Some(out);
    }
    let df = (n - 1) as f64;
    let se = (variance(log_ratios) / n as f64).sqrt();
    let q = t_quantile(1.0 - ALPHA / 2.0, df);
    out.low = Some(r4((m - q * se).exp()));
    out.high = Some(r4((m + q * se).exp()));
    out.mde = Some(r4(mde(se, df)));
    let dist = t(df);
    let stat = if se > 0.0 {
        m / se
    } else {
        m.signum() * f64::INFINITY
    };
    out.p_above = Some(1.0 - dist.cdf(stat));
    out.p_below = Some(dist.cdf(stat));
    Some(out)
}

/// The smallest true change (fraction) a t test with standard error `se` (log scale) and `df`
/// degrees of freedom detects with [`POWER`] at [`ALPHA`] two-sided.
pub fn mde(se: f64, df: f64) -> f64 {
    ((t_quantile(1.0 - ALPHA / 2.0, df) + t_quantile(POWER, df)) * se).exp() - 1.0
}

/// Welch's two-sample t test of `after` against `before` (both logs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Welch {
    /// mean(after) − mean(before): the log of the change.
    pub diff: f64,
    pub se: f64,
    pub t: f64,
    pub df: f64,
    /// One-sided: after is larger / smaller.
    pub p_above: f64,
    pub p_below: f64,
}

impl Welch {
    /// The change as a factor (1.25 is 25% more), with its 95% interval.
    pub fn factor(&self) -> (f64, f64, f64) {
        let q = t_quantile(1.0 - ALPHA / 2.0, self.df);
        (
            self.diff.exp(),
            (self.diff - q * self.se).exp(),
            (self.diff + q * self.se).exp(),
        )
    }
}

/// Welch's test; `None` when either side has fewer than two values.
pub fn welch(before: &[f64], after: &[f64]) -> Option<Welch> {
    let (n1, n2) = (before.len() as f64, after.len() as f64);
    if n1 < 2.0 || n2 < 2.0 {
        return None;
    }
    let (v1, v2) = (variance(before) / n1, variance(after) / n2);
    let se = (v1 + v2).sqrt();
    let diff = mean(after) - mean(before);
    // Welch–Satterthwaite; two constant samples have no spread, and then any difference is sure.
    let df = if se > 0.0 {
        (v1 + v2).powi(2) / (v1.powi(2) / (n1 - 1.0) + v2.powi(2) / (n2 - 1.0))
    } else {
        n1 + n2 - 2.0
    };
    let stat = if se > 0.0 {
        diff / se
    } else if diff == 0.0 {
        0.0
    } else {
        diff.signum() * f64::INFINITY
    };
    let dist = t(df);
    Some(Welch {
        diff,
        se,
        t: stat,
        df,
        p_above: 1.0 - dist.cdf(stat),
        p_below: dist.cdf(stat),
    })
}

/// Indices of the values whose modified z-score exceeds [`OUTLIER_Z`] (none when the median
/// absolute deviation is 0, where every value but the median would be one).
pub fn outliers(x: &[f64]) -> Vec<usize> {
    if x.len() < 3 {
        return Vec::new();
    }
    let med = crate::stats::median(x);
    let dev: Vec<f64> = x.iter().map(|v| (v - med).abs()).collect();
    let mad = crate::stats::median(&dev);
    if mad <= 0.0 {
        return Vec::new();
    }
    dev.iter()
        .enumerate()
        .filter(|(_, d)| 0.6745 * **d / mad > OUTLIER_Z)
        .map(|(i, _)| i)
        .collect()
}

/// What a gate decides about one figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Improved,
    Regressed,
    NoChange,
    /// Too few samples on one side to test.
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

/// The gate: significant at `ALPHA / tests` one-sided *and* the estimated factor beyond the
/// margin `max_regression` (percent).
pub fn judge(factor: f64, p_above: f64, p_below: f64, tests: usize, max_regression: f64) -> Kind {
    let alpha = ALPHA / tests.max(1) as f64;
    let margin = 1.0 + max_regression.max(0.0) / 100.0;
    if p_above < alpha && factor > margin {
        Kind::Regressed
    } else if p_below < alpha && factor < 1.0 / margin {
        Kind::Improved
    } else {
        Kind::NoChange
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::SplitMix64;

    /// A standard normal draw (Box–Muller) from the seeded generator.
    fn normal(rng: &mut SplitMix64) -> f64 {
        let u = |r: &mut SplitMix64| ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let (a, b) = (u(rng), u(rng));
        (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
    }

    /// The hard case the comparison meets: one sample per cycle, a between-cycle (shared by
    /// the pair) log-normal spread of 30%, a within-pair spread of 8%, the odd outlying cycle.
    /// `n` pairs of (mini, link) with Link `shift` times Mini.
    fn pairs(rng: &mut SplitMix64, n: usize, ratio: f64) -> Vec<(f64, f64)> {
        (0..n)
            .map(|_| {
                let shared = 0.3 * normal(rng);
                let mini = (10.0f64.ln() + shared + 0.08 * normal(rng)).exp();
                let link = (10.0f64.ln() + ratio.ln() + shared + 0.08 * normal(rng)).exp();
                (mini, link)
            })
            .collect()
    }

    fn logs(p: &[(f64, f64)]) -> Vec<f64> {
        p.iter().map(|(m, l)| (l / m).ln()).collect()
    }

    const TRIALS: usize = 1000;
    /// Every shared phase and each side's time: about the number of figures the gate judges.
    const GATED: usize = 30;

    #[test]
    fn the_paired_interval_covers_the_true_ratio_in_most_trials() {
        let mut rng = SplitMix64::new(37);
        let covered = (0..TRIALS)
            .filter(|_| {
                let r = ratio(&logs(&pairs(&mut rng, MIN_PAIRS, 2.0))).unwrap();
                r.low.unwrap() <= 2.0 && 2.0 <= r.high.unwrap()
            })
            .count();
        eprintln!("coverage {covered}/{TRIALS}");
        assert!(covered as f64 >= 0.90 * TRIALS as f64, "{covered}/{TRIALS}");
    }

    #[test]
    fn a_thirty_percent_shift_is_found_and_none_is_rarely_claimed_against_a_baseline() {
        let mut rng = SplitMix64::new(41);
        let mut found = 0;
        let mut false_alarms = 0;
        for _ in 0..TRIALS {
            let before = logs(&pairs(&mut rng, MIN_PAIRS, 2.0));
            let same = logs(&pairs(&mut rng, MIN_PAIRS, 2.0));
            let worse = logs(&pairs(&mut rng, MIN_PAIRS, 2.6));
            let gate = |after: &[f64]| {
                let w = welch(&before, after).unwrap();
                judge(w.factor().0, w.p_above, w.p_below, GATED, 10.0)
            };
            found += usize::from(gate(&worse) == Kind::Regressed);
            false_alarms += usize::from(gate(&same) != Kind::NoChange);
        }
        holds_its_power("baseline gate", found, false_alarms);
    }

    /// The gate's goal over [`TRIALS`]: the shift found in at least 90%, no change claimed in
    /// more than 5%.
    fn holds_its_power(gate: &str, found: usize, false_alarms: usize) {
        eprintln!("{gate}: found {found}/{TRIALS}, {false_alarms} false alarms");
        assert!(
            found as f64 >= 0.90 * TRIALS as f64,
            "{gate}: found {found}/{TRIALS}"
        );
        assert!(
            false_alarms as f64 <= 0.05 * TRIALS as f64,
            "{gate}: {false_alarms}/{TRIALS} false alarms"
        );
    }

    #[test]
    fn a_thirty_percent_shift_is_found_in_a_paired_ab_and_none_is_rarely_claimed() {
        let mut rng = SplitMix64::new(43);
        let (mut found, mut false_alarms) = (0, 0);
        for _ in 0..TRIALS {
            let gate = |shift: f64, rng: &mut SplitMix64| {
                let r = ratio(&logs(&pairs(rng, MIN_PAIRS, shift))).unwrap();
                judge(
                    r.estimate,
                    r.p_above.unwrap(),
                    r.p_below.unwrap(),
                    GATED,
                    10.0,
                )
            };
            found += usize::from(gate(1.3, &mut rng) == Kind::Regressed);
            false_alarms += usize::from(gate(1.0, &mut rng) != Kind::NoChange);
        }
        holds_its_power("paired gate", found, false_alarms);
    }

    #[test]
    fn pairing_removes_the_noise_the_pair_shares() {
        let mut rng = SplitMix64::new(5);
        let p = pairs(&mut rng, 40, 2.0);
        let paired = ratio(&logs(&p)).unwrap();
        // The same values unpaired: Welch on each side's logs.
        let (m, l): (Vec<f64>, Vec<f64>) = p.iter().map(|(m, l)| (m.ln(), l.ln())).unzip();
        let (_, lo, hi) = welch(&m, &l).unwrap().factor();
        // On the log scale the paired interval is less than half as wide.
        let paired_width = paired.width_factor().unwrap().ln();
        assert!(
            paired_width < (hi / lo).ln() / 2.0,
            "{paired:?} vs {lo}-{hi}"
        );
    }

    #[test]
    fn the_same_inputs_give_the_same_figure_and_too_few_pairs_no_interval() {
        let mut rng = SplitMix64::new(9);
        let l = logs(&pairs(&mut rng, 12, 1.5));
        assert_eq!(ratio(&l), ratio(&l));
        let few = ratio(&l[..MIN_PAIRS - 1]).unwrap();
        assert_eq!((few.low, few.high, few.mde), (None, None, None));
        assert!(
            few.text().contains("no interval: 9 pairs"),
            "{}",
            few.text()
        );
        assert!(ratio(&[]).is_none());
        // Identical pairs: a point, and a sure verdict either way.
        let same = ratio(&[0.0; 12]).unwrap();
        assert_eq!(
            (same.estimate, same.low, same.high),
            (1.0, Some(1.0), Some(1.0))
        );
    }

    #[test]
    fn an_outlying_pair_is_named() {
        let mut x = vec![0.1, 0.12, 0.09, 0.11, 0.1, 0.08, 0.13, 0.1];
        assert!(outliers(&x).is_empty());
        x.push(1.5);
        assert_eq!(outliers(&x), vec![8]);
        assert!(
            outliers(&[1.0, 1.0, 1.0, 9.0]).is_empty(),
            "MAD 0: no claim"
        );
    }

    #[test]
    fn the_gate_needs_both_significance_and_size() {
        // Significant but small: no change at a 10% margin.
        assert_eq!(judge(1.05, 1e-9, 1.0, 10, 10.0), Kind::NoChange);
        // Large but not significant after the correction.
        assert_eq!(judge(1.5, 0.01, 0.99, 10, 10.0), Kind::NoChange);
        assert_eq!(judge(1.5, 0.001, 0.999, 10, 10.0), Kind::Regressed);
        assert_eq!(judge(0.5, 0.999, 0.001, 10, 10.0), Kind::Improved);
        // The minimum detectable effect shrinks with the spread.
        assert!(mde(0.01, 20.0) < mde(0.05, 20.0));
        assert!((mde(0.05, 1e6) - ((1.96 + 0.8416) * 0.05f64).exp() + 1.0).abs() < 1e-3);
    }
}
