//! The load benchmark's result, `target/load.{json,md}`: its types, its figures from the
//! measuring program's samples, and its Markdown.

use super::Options;
use crate::bench_sandbox::report::{BenchStatus, Goal};
use crate::outputs::Program;
use crate::paired::{self, LogMean};
use crate::stats;
use anyhow::{bail, Result};
use link_report::load::{
    CountSamples, KindFailure, LoadKind, LoadSamples, ProcessCpu, RoundSamples, SAMPLES_VERSION,
};
use serde::{Deserialize, Serialize};

/// Bumped whenever a field of `load.json` changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;
pub const FILE_JSON: &str = "load.json";
pub const FILE_MD: &str = "load.md";
/// Rounds from which a ratio has an interval: few, long rounds, so a wide interval rather
/// than none.
pub const MIN_ROUNDS: usize = 2;
/// The client count issue 43 sets its goals at.
pub const GOAL_CLIENTS: u32 = 32;
/// Issue 43's goals: each kind's ratio to Mini's plain turn at least this.
pub const GOALS: [(LoadKind, f64); 2] = [(LoadKind::LinkWrite, 0.5), (LoadKind::LinkRun, 0.3)];

pub const METHOD: &str = "for each client count, rounds in which each kind runs SECS seconds, \
    in an order rotated from round to round and reversed every other round: CLIENTS clients, \
    each on an agent of its own, send turns one after the other (or, for bare_bwrap, run a bare \
    bubblewrap of /bin/true one after the other) and the turns finished within the window are \
    counted per second; a round with a failed kind, or a kind that finished nothing, is \
    dropped; each kind's ratio is, per round, its turns per second over mini_plain's of the \
    same round, and the figure is the exponential of the mean log ratio with a 95% Student t \
    interval over the rounds (crate::paired, from 2 rounds); a goal (ratio at least G) is met \
    when the whole interval is at or above G, not met when wholly below, otherwise undecided; \
    CPU milliseconds per turn are each process's user and system time with its reaped \
    children's over the last round's window, divided by its turns";

/// `target/load.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoadReport {
    pub schema_version: u32,
    /// `measured`, or `skipped` (nothing measured: `reason`).
    pub status: BenchStatus,
    pub reason: Option<String>,
    pub source: String,
    pub clients: Vec<u32>,
    pub rounds: u32,
    pub secs: f64,
    /// The measuring program's command line.
    pub command: Vec<String>,
    pub programs: Vec<Program>,
    /// One per client count; empty unless measured.
    pub counts: Vec<CountFigures>,
    /// Issue 43's goals at each client count measured; empty unless measured.
    pub goals: Vec<GoalFigure>,
    pub method: String,
    pub warnings: Vec<String>,
    /// Everything the measuring program sampled; `None` unless measured.
    pub samples: Option<LoadSamples>,
    /// Wall time of the whole benchmark, start-up and shutdown included.
    pub elapsed_s: f64,
}

/// One client count's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CountFigures {
    pub clients: u32,
    /// Rounds behind the figures.
    pub rounds: usize,
    /// Rounds dropped, with why.
    pub dropped: Vec<Dropped>,
    pub kinds: Vec<KindFigures>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dropped {
    pub round: u32,
    pub failures: Vec<KindFailure>,
}

/// One kind at one client count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KindFigures {
    pub kind: LoadKind,
    pub median_turns_per_s: f64,
    /// Over `mini_plain` of the same round; `None` for `mini_plain` itself.
    pub ratio: Option<LogMean>,
    /// Each process's CPU milliseconds per turn in the last round that measured the kind.
    pub cpu: Vec<ProcessCpu>,
}

/// A goal of issue 43 at one client count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GoalFigure {
    pub kind: LoadKind,
    pub clients: u32,
    /// The ratio to Mini's plain turn the goal asks at least.
    pub at_least: f64,
    pub ratio: LogMean,
    pub verdict: Goal,
    /// For `link_run`: the floor's (`bare_bwrap`) ratio, what a fresh bubblewrap sandbox per
    /// command can reach at all.
    pub floor: Option<LogMean>,
}

impl LoadReport {
    /// A result with nothing measured yet (`skipped`).
    pub fn empty(opts: &Options, source: &str, command: &[String]) -> LoadReport {
        LoadReport {
            schema_version: SCHEMA_VERSION,
            status: BenchStatus::Skipped,
            reason: None,
            source: source.into(),
            clients: opts.clients.clone(),
            rounds: opts.rounds,
            secs: opts.secs,
            command: command.to_vec(),
            programs: Vec::new(),
            counts: Vec::new(),
            goals: Vec::new(),
            method: METHOD.into(),
            warnings: Vec::new(),
            samples: None,
            elapsed_s: 0.0,
        }
    }

    /// The figures of `samples`, now measured; an error when a client count kept no round.
    pub fn measured(&mut self, samples: LoadSamples) -> Result<()> {
        if samples.samples_version != SAMPLES_VERSION {
            bail!(
                "the measuring program wrote samples version {}, this xtask reads {}: rebuild it",
                samples.samples_version,
                SAMPLES_VERSION
            );
        }
        let counts = samples
            .counts
            .iter()
            .map(figures)
            .collect::<Result<Vec<_>>>()?;
        for c in &counts {
            if !c.dropped.is_empty() {
                self.warnings.push(format!(
                    "{} clients: {} of {} rounds dropped (a kind failed or finished nothing)",
                    c.clients,
                    c.dropped.len(),
                    c.dropped.len() + c.rounds
                ));
            }
        }
        self.goals = counts.iter().flat_map(goals).collect();
        self.counts = counts;
        self.samples = Some(samples);
        self.status = BenchStatus::Measured;
        Ok(())
    }
}

/// Why `round` counts for no figure, if it does not.
fn unusable(round: &RoundSamples) -> Option<Vec<KindFailure>> {
    let mut why = round.failed.clone();
    for kind in LoadKind::ALL {
        let failed = why.iter().any(|f| f.kind == kind);
        match round.rate(kind) {
            Some(r) if r > 0.0 && r.is_finite() => {}
            _ if failed => {}
            Some(_) => why.push(KindFailure {
                kind,
                error: "no turn finished within the window".into(),
            }),
            None => why.push(KindFailure {
                kind,
                error: "not measured".into(),
            }),
        }
    }
    (!why.is_empty()).then_some(why)
}

/// One client count's figures; an error when every round was dropped.
pub fn figures(c: &CountSamples) -> Result<CountFigures> {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for round in &c.rounds {
        match unusable(round) {
            Some(failures) => dropped.push(Dropped {
                round: round.round,
                failures,
            }),
            None => kept.push(round),
        }
    }
    if kept.is_empty() {
        let first = dropped
            .first()
            .and_then(|d| d.failures.first())
            .map_or("no round ran".to_owned(), |f| {
                format!("{}: {}", f.kind, f.error)
            });
        bail!(
            "{} clients: every one of {} rounds failed, nothing measured (first: {first})",
            c.clients,
            c.rounds.len()
        );
    }
    let rates = |kind: LoadKind| -> Vec<f64> {
        kept.iter()
            .map(|r| r.rate(kind).expect("a kept round has every kind"))
            .collect()
    };
    let base = rates(LoadKind::MiniPlain);
    let kinds = LoadKind::ALL
        .iter()
        .map(|&kind| {
            let of = rates(kind);
            let logs: Vec<f64> = of.iter().zip(&base).map(|(k, b)| (k / b).ln()).collect();
            KindFigures {
                kind,
                median_turns_per_s: round2(stats::median(&of)),
                ratio: (kind != LoadKind::MiniPlain)
                    .then(|| paired::ratio_from(&logs, MIN_ROUNDS))
                    .flatten(),
                cpu: c
                    .cpu
                    .iter()
                    .find(|k| k.kind == kind)
                    .map(|k| k.processes.clone())
                    .unwrap_or_default(),
            }
        })
        .collect();
    Ok(CountFigures {
        clients: c.clients,
        rounds: kept.len(),
        dropped,
        kinds,
    })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Issue 43's goals at one client count, each judged by its whole interval.
pub fn goals(c: &CountFigures) -> Vec<GoalFigure> {
    let ratio = |kind: LoadKind| c.kinds.iter().find(|k| k.kind == kind)?.ratio;
    GOALS
        .iter()
        .filter_map(|&(kind, at_least)| {
            let r = ratio(kind)?;
            Some(GoalFigure {
                kind,
                clients: c.clients,
                at_least,
                ratio: r,
                verdict: Goal::at_least(r.interval().as_ref(), at_least),
                floor: (kind == LoadKind::LinkRun)
                    .then(|| ratio(LoadKind::BareBwrap))
                    .flatten(),
            })
        })
        .collect()
}

/// `0.342× [0.291–0.402]`, or `0.342× (no interval: 1 round(s) < 2)`.
pub fn ratio_text(r: &LogMean) -> String {
    r.text_as(3, "round(s)", MIN_ROUNDS)
}

/// Each process's CPU milliseconds per turn, those under 0.05 left out, after their total.
fn cpu_text(cpu: &[ProcessCpu]) -> String {
    let total: f64 = cpu.iter().map(|p| p.ms_per_turn).sum();
    let parts: Vec<String> = cpu
        .iter()
        .filter(|p| p.ms_per_turn >= 0.05)
        .map(|p| {
            format!(
                "{} {:.2}",
                p.process.trim_start_matches("link-plugin-"),
                p.ms_per_turn
            )
        })
        .collect();
    format!("{total:.2}: {}", parts.join(", "))
}

/// `load.md`, also printed.
pub fn markdown(l: &LoadReport) -> String {
    let mut out = String::from("# Throughput under load\n\n");
    out.push_str(&format!(
        "Source `{}`; clients {:?}; {} rounds of {} s per kind, confined. Each ratio is a \
         kind's turns per second over Mini's plain turn's in the same round: the geometric \
         mean over rounds with its 95% interval. `bare bwrap (floor)` is a bare bubblewrap \
         per command in CLIENTS parallel loops, what `run: true` with a fresh sandbox per \
         command cannot beat.\n",
        l.source, l.clients, l.rounds, l.secs
    ));
    if l.status == BenchStatus::Skipped {
        out.push_str(&format!(
            "\n**SKIPPED**, nothing measured: {}\n",
            l.reason.as_deref().unwrap_or("no reason given")
        ));
    }
    for c in &l.counts {
        out.push_str(&format!(
            "\n## {} clients ({} rounds kept, {} dropped)\n\n",
            c.clients,
            c.rounds,
            c.dropped.len()
        ));
        out.push_str(
            "| kind | median turns/s | ÷ Mini plain (95% interval) | CPU ms per turn, last round |\n\
             |---|---:|---|---|\n",
        );
        for k in &c.kinds {
            let ratio = match &k.ratio {
                _ if k.kind == LoadKind::MiniPlain => "1 (baseline)".to_owned(),
                Some(r) => ratio_text(r),
                None => "not measured".to_owned(),
            };
            out.push_str(&format!(
                "| {} | {:.1} | {ratio} | {} |\n",
                k.kind.label(),
                k.median_turns_per_s,
                cpu_text(&k.cpu)
            ));
        }
        for d in &c.dropped {
            for f in &d.failures {
                out.push_str(&format!(
                    "\nRound {} dropped: {} failed: {}\n",
                    d.round,
                    f.kind.label(),
                    f.error
                ));
            }
        }
        let goals: Vec<&GoalFigure> = l.goals.iter().filter(|g| g.clients == c.clients).collect();
        if !goals.is_empty() {
            let own = if c.clients == GOAL_CLIENTS {
                "the issue's own count".to_owned()
            } else {
                format!("the issue sets them at {GOAL_CLIENTS} clients")
            };
            out.push_str(&format!(
                "\nIssue 43's goals at {} clients ({own}):\n\n",
                c.clients
            ));
            for g in goals {
                out.push_str(&format!(
                    "- {} ≥ {}× Mini plain: **{}** ({})",
                    g.kind.label(),
                    g.at_least,
                    g.verdict.word(),
                    ratio_text(&g.ratio)
                ));
                if let Some(f) = &g.floor {
                    out.push_str(&format!(
                        "; the floor, a bare bwrap per command: {}",
                        ratio_text(f)
                    ));
                }
                out.push('\n');
            }
        }
    }
    if !l.warnings.is_empty() {
        out.push_str("\nWarnings:\n\n");
        for w in &l.warnings {
            out.push_str(&format!("- {w}\n"));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use link_report::load::{KindCpu, KindRate};

    /// A round with these turns per second, in the kinds' order.
    fn round(n: u32, rates: [f64; 5]) -> RoundSamples {
        RoundSamples {
            round: n,
            order: LoadKind::ALL.to_vec(),
            rates: LoadKind::ALL
                .iter()
                .zip(rates)
                .map(|(&kind, turns_per_s)| KindRate { kind, turns_per_s })
                .collect(),
            failed: Vec::new(),
        }
    }

    fn count(clients: u32, rounds: Vec<RoundSamples>) -> CountSamples {
        CountSamples {
            clients,
            rounds,
            cpu: LoadKind::ALL
                .iter()
                .map(|&kind| KindCpu {
                    kind,
                    processes: vec![
                        ProcessCpu {
                            process: "link (host)".into(),
                            ms_per_turn: 0.5,
                        },
                        ProcessCpu {
                            process: "link-plugin-sandbox".into(),
                            ms_per_turn: 2.0,
                        },
                    ],
                })
                .collect(),
        }
    }

    /// Samples whose ratios are about `write` and `run` (and the floor 0.25), a little spread.
    pub fn samples(clients: u32, write: f64, run: f64) -> LoadSamples {
        let rounds = (0..6)
            .map(|i| {
                let wobble = 1.0 + 0.01 * (i as f64 - 2.5);
                let mini = 1000.0 * (1.0 + 0.1 * i as f64);
                round(
                    i,
                    [
                        mini,
                        0.9 * mini * wobble,
                        write * mini * wobble,
                        run * mini / wobble,
                        0.25 * mini * wobble,
                    ],
                )
            })
            .collect();
        LoadSamples {
            samples_version: SAMPLES_VERSION,
            rounds: 6,
            secs: 1.0,
            counts: vec![count(clients, rounds)],
        }
    }

    fn report(s: LoadSamples) -> LoadReport {
        let opts = Options {
            clients: s.counts.iter().map(|c| c.clients).collect(),
            rounds: s.rounds,
            secs: s.secs,
            allow_stale: false,
        };
        let mut l = LoadReport::empty(&opts, "abc", &["load".into()]);
        l.measured(s).unwrap();
        l
    }

    fn verdict(l: &LoadReport, kind: LoadKind) -> Goal {
        l.goals.iter().find(|g| g.kind == kind).unwrap().verdict
    }

    #[test]
    fn goals_are_met_not_met_or_undecided_by_the_whole_interval() {
        let l = report(samples(32, 0.6, 0.15));
        assert_eq!(verdict(&l, LoadKind::LinkWrite), Goal::Met);
        assert_eq!(verdict(&l, LoadKind::LinkRun), Goal::NotMet);
        let run = l
            .goals
            .iter()
            .find(|g| g.kind == LoadKind::LinkRun)
            .unwrap();
        let floor = run.floor.expect("the run goal has the floor beside it");
        assert!((floor.estimate - 0.25).abs() < 0.01, "{floor:?}");
        assert!(l
            .goals
            .iter()
            .all(|g| g.kind != LoadKind::LinkWrite || g.floor.is_none()));
        // An interval across the goal: undecided.
        let mut s = samples(32, 0.5, 0.3);
        for (i, r) in s.counts[0].rounds.iter_mut().enumerate() {
            let swing = if i % 2 == 0 { 1.2 } else { 1.0 / 1.2 };
            r.rates[2].turns_per_s *= swing;
            r.rates[3].turns_per_s /= swing;
        }
        let l = report(s);
        assert_eq!(verdict(&l, LoadKind::LinkWrite), Goal::Undecided);
        assert_eq!(verdict(&l, LoadKind::LinkRun), Goal::Undecided);
        let md = markdown(&l);
        assert!(
            md.contains("Link write ≥ 0.5× Mini plain: **undecided**"),
            "{md}"
        );
        assert!(
            md.contains("the floor, a bare bwrap per command: 0.250×"),
            "{md}"
        );
        assert!(md.contains("(the issue's own count)"), "{md}");
        assert!(md.contains("| Mini plain | "), "{md}");
        assert!(md.contains("2.50: link (host) 0.50, sandbox 2.00"), "{md}");
    }

    #[test]
    fn the_ratio_is_the_geometric_mean_with_an_interval_from_two_rounds() {
        let c = count(
            8,
            vec![
                round(0, [100.0, 50.0, 40.0, 10.0, 20.0]),
                round(1, [200.0, 100.0, 80.0, 20.0, 40.0]),
            ],
        );
        let f = figures(&c).unwrap();
        let write = f.kinds[2].ratio.unwrap();
        assert_eq!(
            (write.estimate, write.low, write.high),
            (0.4, Some(0.4), Some(0.4))
        );
        assert_eq!(f.kinds[0].ratio, None, "the baseline has none");
        assert_eq!(f.kinds[0].median_turns_per_s, 150.0, "the median of two");
        let one = figures(&count(8, vec![round(0, [100.0, 50.0, 40.0, 10.0, 20.0])])).unwrap();
        let r = one.kinds[3].ratio.unwrap();
        assert_eq!((r.low, r.high), (None, None));
        assert!(ratio_text(&r).contains("no interval"), "{}", ratio_text(&r));
        assert!(goals(&one).iter().all(|g| g.verdict == Goal::Undecided));
    }

    #[test]
    fn a_failed_round_is_dropped_and_every_round_failed_is_an_error() {
        let mut s = samples(8, 0.6, 0.15);
        let failed = &mut s.counts[0].rounds[1];
        failed.rates.retain(|r| r.kind != LoadKind::LinkRun);
        failed.failed.push(KindFailure {
            kind: LoadKind::LinkRun,
            error: "HTTP 500: boom".into(),
        });
        // A kind that finished no turn in its window counts for nothing either.
        s.counts[0].rounds[4].rates[2].turns_per_s = 0.0;
        let l = report(s.clone());
        let c = &l.counts[0];
        assert_eq!(c.rounds, 4);
        let dropped: Vec<u32> = c.dropped.iter().map(|d| d.round).collect();
        assert_eq!(dropped, [1, 4]);
        assert_eq!(c.dropped[0].failures[0].error, "HTTP 500: boom");
        assert!(c.kinds.iter().skip(1).all(|k| k.ratio.unwrap().pairs == 4));
        assert!(
            l.warnings
                .iter()
                .any(|w| w.contains("2 of 6 rounds dropped")),
            "{:?}",
            l.warnings
        );
        assert!(markdown(&l).contains("Round 1 dropped: Link run: true failed: HTTP 500: boom"));
        // Every round failed: no figure, an error naming the first failure.
        for r in &mut s.counts[0].rounds {
            r.failed.push(KindFailure {
                kind: LoadKind::MiniPlain,
                error: "refused".into(),
            });
        }
        let mut l = LoadReport::empty(
            &Options {
                clients: vec![8],
                rounds: 6,
                secs: 1.0,
                allow_stale: false,
            },
            "abc",
            &[],
        );
        let err = l.measured(s).unwrap_err().to_string();
        assert!(
            err.contains("8 clients: every one of 6 rounds failed"),
            "{err}"
        );
        assert!(err.contains("mini_plain: refused"), "{err}");
    }

    #[test]
    fn the_result_reads_back_and_a_skip_has_no_figure() {
        let l = report(samples(32, 0.6, 0.15));
        let text = serde_json::to_string(&l).unwrap();
        // Reads back (floats to the last bit or so: serde_json parses them fast, not exactly).
        let back: LoadReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.goals.len(), l.goals.len());
        assert_eq!(back.counts[0].kinds.len(), LoadKind::ALL.len());
        assert_eq!(back.samples.unwrap().counts[0].rounds.len(), 6);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["goals"][1]["kind"], "link_run");
        assert_eq!(v["goals"][1]["verdict"], "not_met");
        let mut skipped = LoadReport::empty(
            &Options {
                clients: vec![8],
                rounds: 2,
                secs: 1.0,
                allow_stale: false,
            },
            "abc",
            &[],
        );
        skipped.reason = Some("bwrap is not on PATH".into());
        assert!(skipped.counts.is_empty() && skipped.samples.is_none());
        assert!(markdown(&skipped).contains("**SKIPPED**, nothing measured: bwrap is not on PATH"));
    }
}
