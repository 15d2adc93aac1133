//! The statistics behind the comparison: medians, spreads and a hierarchical percentile
//! bootstrap of the Link/Mini ratio of medians (resampling runs, then rounds within each run),
//! driven by a seeded splitmix64 so the same inputs always give the same interval.

use serde::{Deserialize, Serialize};

/// Bootstrap resamples per phase.
pub const RESAMPLES: usize = 4000;

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, good enough to drive a bootstrap.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), by rejection so no index is favoured.
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return (x % n) as usize;
            }
        }
    }
}

/// A stable seed for one phase: FNV-1a of its name.
pub fn seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The `q` quantile (0..=1) of sorted values, interpolating linearly between ranks.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let at = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
        }
    }
}

fn sorted(values: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    v
}

pub fn median(values: &[f64]) -> f64 {
    quantile(&sorted(values.iter().copied()), 0.5)
}

/// One side's figures for one phase, in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Spread {
    /// Samples behind the figures (runs × rounds).
    pub samples: usize,
    /// Runs the samples came from.
    pub runs: usize,
    pub median_ns: f64,
    pub q1_ns: f64,
    pub q3_ns: f64,
    pub min_ns: f64,
    pub max_ns: f64,
    /// The 95% bootstrap interval of the median.
    pub median_low_ns: f64,
    pub median_high_ns: f64,
    /// Each run's own median, in run order (the picture's marks).
    pub run_medians_ns: Vec<f64>,
}

/// An estimate with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// `high / low`: 1 for a point, large for a vague figure.
    pub fn width_factor(&self) -> f64 {
        if self.low > 0.0 {
            self.high / self.low
        } else {
            f64::INFINITY
        }
    }

    /// `2.41× [2.10–2.80]`.
    pub fn ratio_text(&self) -> String {
        format!("{:.2}× [{:.2}–{:.2}]", self.estimate, self.low, self.high)
    }
}

/// Draws one hierarchical resample of `groups` (one group per run) into `out`.
fn resample(groups: &[Vec<f64>], rng: &mut SplitMix64, out: &mut Vec<f64>) {
    out.clear();
    for _ in 0..groups.len() {
        let g = &groups[rng.below(groups.len())];
        for _ in 0..g.len() {
            out.push(g[rng.below(g.len())]);
        }
    }
}

fn non_empty(groups: &[Vec<f64>]) -> Vec<Vec<f64>> {
    groups.iter().filter(|g| !g.is_empty()).cloned().collect()
}

fn medians(groups: &[Vec<f64>], rng: &mut SplitMix64) -> Vec<f64> {
    let mut buf = Vec::new();
    (0..RESAMPLES)
        .map(|_| {
            resample(groups, rng, &mut buf);
            median(&buf)
        })
        .collect()
}

/// Four decimals: plenty for a ratio, and stable through a JSON round trip.
fn r4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Whole nanoseconds.
fn r0(x: f64) -> f64 {
    x.round()
}

fn interval_of(estimate: f64, draws: Vec<f64>, round: fn(f64) -> f64) -> Interval {
    let s = sorted(draws);
    Interval {
        estimate: round(estimate),
        low: round(quantile(&s, 0.025)),
        high: round(quantile(&s, 0.975)),
    }
}

/// One side's figures from its samples grouped by run; `None` without samples.
pub fn spread(groups: &[Vec<f64>], seed: u64) -> Option<Spread> {
    let groups = non_empty(groups);
    if groups.is_empty() {
        return None;
    }
    let all = sorted(groups.iter().flatten().copied());
    let m = quantile(&all, 0.5);
    let ci = interval_of(m, medians(&groups, &mut SplitMix64::new(seed)), r0);
    Some(Spread {
        samples: all.len(),
        runs: groups.len(),
        median_ns: r0(m),
        q1_ns: r0(quantile(&all, 0.25)),
        q3_ns: r0(quantile(&all, 0.75)),
        min_ns: all[0],
        max_ns: all[all.len() - 1],
        median_low_ns: ci.low,
        median_high_ns: ci.high,
        run_medians_ns: groups.iter().map(|g| r0(median(g))).collect(),
    })
}

/// The Link/Mini ratio of medians with its 95% bootstrap interval; `None` when either side has
/// no samples or Mini's median is not positive.
pub fn ratio(mini: &[Vec<f64>], link: &[Vec<f64>], seed: u64) -> Option<Interval> {
    let (mini, link) = (non_empty(mini), non_empty(link));
    if mini.is_empty() || link.is_empty() {
        return None;
    }
    let all = |g: &[Vec<f64>]| g.iter().flatten().copied().collect::<Vec<f64>>();
    let (m, l) = (median(&all(&mini)), median(&all(&link)));
    if m <= 0.0 {
        return None;
    }
    let mut rng = SplitMix64::new(seed ^ 0x5eed);
    let (mut bm, mut bl) = (Vec::new(), Vec::new());
    let draws: Vec<f64> = (0..RESAMPLES)
        .filter_map(|_| {
            resample(&mini, &mut rng, &mut bm);
            resample(&link, &mut rng, &mut bl);
            let d = median(&bm);
            (d > 0.0).then(|| median(&bl) / d)
        })
        .collect();
    Some(interval_of(l / m, draws, r4))
}

/// The median of per-run ratios `whole / part` of paired measurements (one pair per run, such
/// as a run's shutdown and its host's exit within it) with a 95% bootstrap interval over runs;
/// `None` without a pair whose `part` is positive. Pairing keeps the runs' shared noise out
/// of the interval, which a ratio of two independent medians would count twice.
pub fn paired_ratio(pairs: &[(f64, f64)], seed: u64) -> Option<Interval> {
    let ratios: Vec<f64> = pairs
        .iter()
        .filter(|(_, part)| *part > 0.0)
        .map(|(whole, part)| whole / part)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let mut rng = SplitMix64::new(seed ^ 0xfa1d);
    let mut buf = Vec::with_capacity(ratios.len());
    let draws: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            buf.clear();
            buf.extend((0..ratios.len()).map(|_| ratios[rng.below(ratios.len())]));
            median(&buf)
        })
        .collect();
    Some(interval_of(median(&ratios), draws, r4))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Synthetic runs: `runs` groups of `rounds` values around `centre`, ±`jitter` (relative).
    fn synthetic(
        rng: &mut SplitMix64,
        runs: usize,
        rounds: usize,
        centre: f64,
        jitter: f64,
    ) -> Vec<Vec<f64>> {
        (0..runs)
            .map(|_| {
                (0..rounds)
                    .map(|_| {
                        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                        centre * (1.0 + jitter * (2.0 * u - 1.0))
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn splitmix_is_the_reference_sequence_and_below_stays_in_range() {
        // First outputs for seed 0 of the reference implementation.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let mut r = SplitMix64::new(7);
        assert!((0..1000).all(|_| r.below(3) < 3));
    }

    #[test]
    fn paired_ratios_keep_shared_noise_out_of_the_interval() {
        // Runs 0.5× to 2× apart, each whole 1.1× its part: a point at 1.1.
        let pairs: Vec<(f64, f64)> = [0.5, 0.8, 1.0, 1.5, 2.0]
            .iter()
            .map(|f| (11.0 * f, 10.0 * f))
            .collect();
        let r = paired_ratio(&pairs, 3).unwrap();
        assert_eq!((r.estimate, r.low, r.high), (1.1, 1.1, 1.1));
        // The unpaired ratio of the same numbers is vague.
        let (wholes, parts): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        let one = |v: Vec<f64>| v.into_iter().map(|x| vec![x]).collect::<Vec<_>>();
        assert!(ratio(&one(parts), &one(wholes), 3).unwrap().width_factor() > 1.5);
        // A part of zero is no pair; none at all, no figure.
        assert!(paired_ratio(&[(1.0, 0.0)], 3).is_none());
        assert!(paired_ratio(&[], 3).is_none());
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 4.0);
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
    }

    #[test]
    fn identical_samples_give_ratio_one_with_a_point_interval() {
        let g = vec![vec![10.0, 11.0, 12.0, 10.5], vec![10.2, 11.5, 10.9, 12.0]];
        let r = ratio(&g, &g, seed("warm_turn")).unwrap();
        assert_eq!(r.estimate, 1.0);
        // Mini and Link are resampled independently, so only a tight interval around 1.
        assert!(r.low > 0.85 && r.high < 1.15, "{r:?}");
        let same = vec![vec![7.0; 5]; 3];
        let r = ratio(&same, &same, 1).unwrap();
        assert_eq!((r.estimate, r.low, r.high), (1.0, 1.0, 1.0));
    }

    #[test]
    fn the_interval_contains_the_true_ratio_of_synthetic_data() {
        let mut rng = SplitMix64::new(42);
        let mut covered = 0;
        for trial in 0..40 {
            let mini = synthetic(&mut rng, 5, 20, 100.0, 0.2);
            let link = synthetic(&mut rng, 5, 20, 250.0, 0.2);
            let r = ratio(&mini, &link, trial).unwrap();
            assert!(r.low <= r.estimate && r.estimate <= r.high, "{r:?}");
            if r.low <= 2.5 && 2.5 <= r.high {
                covered += 1;
            }
        }
        // A 95% interval: nearly every trial covers 2.5 (allow a little bad luck).
        assert!(covered >= 34, "covered {covered}/40");
    }

    #[test]
    fn the_same_inputs_give_the_same_interval() {
        let mut rng = SplitMix64::new(3);
        let mini = synthetic(&mut rng, 3, 1, 100.0, 0.3);
        let link = synthetic(&mut rng, 3, 1, 300.0, 0.3);
        assert_eq!(ratio(&mini, &link, 9), ratio(&mini, &link, 9));
        let s = spread(&mini, 9).unwrap();
        assert_eq!((s.samples, s.runs, s.run_medians_ns.len()), (3, 3, 3));
        assert!(s.min_ns <= s.q1_ns && s.q1_ns <= s.median_ns && s.median_ns <= s.q3_ns);
        assert!(s.median_low_ns <= s.median_ns && s.median_ns <= s.median_high_ns);
    }

    #[test]
    fn no_samples_no_figure() {
        assert!(spread(&[], 1).is_none());
        assert!(spread(&[vec![]], 1).is_none());
        assert!(ratio(&[vec![1.0]], &[], 1).is_none());
        assert!(ratio(&[vec![0.0]], &[vec![1.0]], 1).is_none());
    }
}
