//! The timing cycles as pairs: each cycle's figure for a phase (the median of its rounds), the
//! log ratios of the pairs ([`crate::paired`]), and how far each figure is from the precision
//! the run asked for.

use super::{Build, RunRecord};
use crate::paired::{self, LogMean};
use link_report::{PhaseName, Profile, Status};
use std::collections::BTreeMap;

/// Wall time or the runtime's CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    Wall,
    Cpu,
}

/// A cycle's figure for `phase`: the median of its rounds' times (or CPU times); `None` when
/// the cycle has no such phase or no CPU time for it.
pub fn cycle_value(r: &RunRecord, phase: &str, clock: Clock) -> Option<f64> {
    let values: Vec<f64> = r
        .phases
        .iter()
        .filter(|s| s.name == phase)
        .map(|s| match clock {
            Clock::Wall => Some(s.duration_ns as f64),
            Clock::Cpu => s.cpu_ns.map(|c| c as f64),
        })
        .collect::<Option<Vec<f64>>>()?;
    (!values.is_empty())
        .then(|| crate::stats::median(&values))
        .filter(|v| *v > 0.0)
}

/// The passed cycles of `build`, by pair, then by profile.
fn by_pair(cycles: &[RunRecord], build: Build) -> BTreeMap<u32, Vec<&RunRecord>> {
    let mut out: BTreeMap<u32, Vec<&RunRecord>> = BTreeMap::new();
    for r in cycles.iter().filter(|r| r.outcome == Status::Passed) {
        if let Some(c) = r.cycle.filter(|c| c.build == build) {
            out.entry(c.pair).or_default().push(r);
        }
    }
    out
}

fn of<'a>(pair: &[&'a RunRecord], profile: Profile) -> Option<&'a RunRecord> {
    pair.iter().copied().find(|r| r.profile == profile)
}

/// One pair's ln(Link / Mini) of a phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairLog {
    pub pair: u32,
    /// Mini's place in the pair (1: it ran first).
    pub mini_position: u32,
    pub log: f64,
}

/// Per pair of `build` in which both cycles passed and ran the phase.
pub fn link_over_mini(
    cycles: &[RunRecord],
    build: Build,
    phase: &str,
    clock: Clock,
) -> Vec<PairLog> {
    by_pair(cycles, build)
        .iter()
        .filter_map(|(&pair, cycles)| {
            let (m, l) = (of(cycles, Profile::Mini)?, of(cycles, Profile::Link)?);
            let ratio = cycle_value(l, phase, clock)? / cycle_value(m, phase, clock)?;
            Some(PairLog {
                pair,
                mini_position: m.cycle?.position,
                log: ratio.ln(),
            })
        })
        .collect()
}

/// The logs alone.
pub fn logs(p: &[PairLog]) -> Vec<f64> {
    p.iter().map(|p| p.log).collect()
}

/// Per unit of `--against`: ln(new / old) of one side's phase.
pub fn new_over_old(cycles: &[RunRecord], profile: Profile, phase: &str) -> Vec<f64> {
    let old = by_pair(cycles, Build::Old);
    by_pair(cycles, Build::New)
        .iter()
        .filter_map(|(unit, new)| {
            let n = cycle_value(of(new, profile)?, phase, Clock::Wall)?;
            let o = cycle_value(of(old.get(unit)?, profile)?, phase, Clock::Wall)?;
            Some((n / o).ln())
        })
        .collect()
}

/// ln of one side's figure in each passed cycle of `build`.
pub fn side_logs(cycles: &[RunRecord], build: Build, profile: Profile, phase: &str) -> Vec<f64> {
    by_pair(cycles, build)
        .values()
        .filter_map(|pair| cycle_value(of(pair, profile)?, phase, Clock::Wall))
        .map(f64::ln)
        .collect()
}

/// Per pair of `build`: ln(Link / Mini) of the sum of the shared work phases (every phase both
/// sides run that is in a total and not a fixed wait), each the sum of its rounds.
pub fn shared_total(cycles: &[RunRecord], build: Build) -> Vec<f64> {
    let total = |r: &RunRecord| -> f64 {
        r.phases
            .iter()
            .filter(|s| is_shared(&s.name) && PhaseName::is_work(&s.name))
            .map(|s| s.duration_ns as f64)
            .sum()
    };
    by_pair(cycles, build)
        .values()
        .filter_map(|pair| {
            let (m, l) = (
                total(of(pair, Profile::Mini)?),
                total(of(pair, Profile::Link)?),
            );
            (m > 0.0 && l > 0.0).then(|| (l / m).ln())
        })
        .collect()
}

/// A phase both sides run with the same requests (a name this vocabulary does not know is
/// not assumed shared).
pub fn is_shared(name: &str) -> bool {
    name.parse::<PhaseName>().is_ok_and(|p| !p.link_only())
}

/// Pairs of `build` in which both cycles passed.
pub fn pair_count(cycles: &[RunRecord], build: Build) -> usize {
    by_pair(cycles, build)
        .values()
        .filter(|p| of(p, Profile::Mini).is_some() && of(p, Profile::Link).is_some())
        .count()
}

/// The position effect of a shared phase: Link/Mini in pairs where Mini ran first over
/// Link/Mini in pairs where Link ran first (1 when the order does not matter), with Welch's
/// interval; `None` without two pairs of each order.
pub fn position_effect(logs: &[PairLog]) -> Option<crate::stats::Interval> {
    let with = |first: bool| -> Vec<f64> {
        logs.iter()
            .filter(|p| (p.mini_position == 1) == first)
            .map(|p| p.log)
            .collect()
    };
    let (first, second) = (with(true), with(false));
    let w = paired::welch(&second, &first)?;
    let (estimate, low, high) = w.factor();
    let r4 = |x: f64| (x * 1e4).round() / 1e4;
    Some(crate::stats::Interval {
        estimate: r4(estimate),
        low: r4(low),
        high: r4(high),
    })
}

/// Whether a figure reached the precision target: an interval whose upper/lower is at most
/// `1 + 2 × pct / 100` (about ±pct%).
pub fn precise(m: &LogMean, pct: f64) -> bool {
    m.width_factor()
        .is_some_and(|w| w <= 1.0 + 2.0 * pct / 100.0)
}

/// Every figure of the cycles so far that has not reached `pct`, as `name (upper/lower)`:
/// each shared phase's Link/Mini ratio, each Link-only phase's Link time, and with
/// `--against` each side's new/old per phase.
pub fn not_precise(cycles: &[RunRecord], against: bool, pct: f64) -> Vec<String> {
    let names = super::order::phase_names(cycles);
    let mut out = Vec::new();
    let mut check = |label: String, m: Option<LogMean>| match m {
        Some(m) if precise(&m, pct) => {}
        Some(m) => out.push(match m.width_factor() {
            Some(w) => format!("{label} (upper/lower {w:.3})"),
            None => format!("{label} (no interval yet)"),
        }),
        None => out.push(format!("{label} (no figure)")),
    };
    for name in names.iter().filter(|n| !is_fixed_wait(n)) {
        if is_shared(name) {
            let logs = logs(&link_over_mini(cycles, Build::New, name, Clock::Wall));
            check(format!("{name} Link/Mini"), paired::ratio(&logs));
        } else {
            let logs = side_logs(cycles, Build::New, Profile::Link, name);
            check(format!("{name} Link time"), paired::ratio(&logs));
        }
        if against {
            for p in Profile::ALL {
                let logs = new_over_old(cycles, p, name);
                if !logs.is_empty() || is_shared(name) || p == Profile::Link {
                    check(format!("{name} {p} new/old"), paired::ratio(&logs));
                }
            }
        }
    }
    out
}

fn is_fixed_wait(name: &str) -> bool {
    name.parse::<PhaseName>().is_ok_and(|p| p.fixed_wait())
}
