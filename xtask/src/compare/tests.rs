//! Comparisons built from the recorded reports under `tests/data`; shared with the other
//! modules' tests.

use super::order::merge_order;
use super::*;
use crate::stats;
use std::path::PathBuf;

pub(crate) fn fixture(name: &str) -> Loaded {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    load(&path).unwrap()
}

pub(crate) fn timed(index: u32, loaded: &Loaded) -> TimedRun {
    TimedRun {
        index,
        loaded: loaded.clone(),
        noise: Noise {
            cpus: 2,
            load1: Some(0.5),
            load5: Some(0.4),
            load15: Some(0.3),
            cpu_pressure_some_avg10: Some(1.0),
            other_cpu_pct: None,
        },
        cycle: None,
    }
}

/// The same runs as timing cycles: run N of each side is pair N; Mini is first in odd pairs.
pub(crate) fn as_cycles(runs: &[TimedRun]) -> Vec<TimedRun> {
    let mut out: Vec<TimedRun> = Vec::new();
    for r in runs {
        let mini_first = r.index % 2 == 1;
        let position = match (r.loaded.report.profile, mini_first) {
            (Profile::Mini, true) | (Profile::Link, false) => 1,
            _ => 2,
        };
        let mut c = r.clone();
        c.cycle = Some(CycleInfo {
            pair: r.index,
            position,
            build: Build::New,
        });
        out.push(c);
    }
    out
}

fn sampling() -> Sampling {
    Sampling {
        precision_pct: 5.0,
        budget_s: 60.0,
        elapsed_s: 30.0,
        min_pairs: crate::paired::MIN_PAIRS as u32,
        not_reached: Vec::new(),
    }
}

/// A comparison of `pairs` pairs with seeded noise (a shared 20% per pair, 3% per cycle):
/// Link's start-up scaled by `link_startup`, every phase of both sides by `both`.
pub(crate) fn comparison_of_cycles(pairs: u32, link_startup: f64, both: f64) -> Comparison {
    let mut rng = stats::SplitMix64::new(77);
    let mut u = move || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let shared: Vec<f64> = (0..=pairs).map(|_| 1.0 + 0.2 * u()).collect();
    let mut runs = runs_of(pairs, |_, i| shared[i as usize] * both);
    for r in &mut runs {
        for p in &mut r.loaded.report.phases {
            let mut f = 1.0 + 0.03 * u();
            if p.name == "startup" && r.loaded.report.profile == Profile::Link {
                f *= link_startup;
            }
            p.duration_ns = (p.duration_ns as f64 * f) as u128;
        }
    }
    from_runs(&runs)
}

/// `runs` interleaved runs per side, phase durations scaled by `scale(profile, run)`.
pub(crate) fn runs_of(runs: u32, scale: impl Fn(Profile, u32) -> f64) -> Vec<TimedRun> {
    let (mini, link) = (fixture("runtime-mini.json"), fixture("runtime-link.json"));
    let mut out = Vec::new();
    for i in 1..=runs {
        for base in [&mini, &link] {
            let mut t = timed(i, base);
            let f = scale(base.report.profile, i);
            for p in &mut t.loaded.report.phases {
                p.duration_ns = (p.duration_ns as f64 * f) as u128;
            }
            t.loaded.path = format!("target/runtime-runs/{}-{i}.json", base.report.profile);
            // The fixtures' made-up digests differ between sides; real runs share programs.
            for a in &mut t.loaded.report.artifacts {
                a.sha256 = format!("{:064x}", stats::seed(&a.name));
            }
            out.push(t);
        }
    }
    out
}

pub(crate) fn from_runs(runs: &[TimedRun]) -> Comparison {
    let (mt, lt) = (
        fixture("runtime-mini-traced.json"),
        fixture("runtime-link-traced.json"),
    );
    let mini = &representative(runs, Profile::Mini).unwrap().loaded;
    let link = &representative(runs, Profile::Link).unwrap().loaded;
    build(&Inputs {
        mode: Mode::Confined,
        mini,
        link,
        runs,
        runs_requested: (runs.len() / 2) as u32,
        rounds: 1,
        mini_traced: Some(&mt),
        link_traced: Some(&lt),
        cycles: &as_cycles(runs),
        sampling: sampling(),
        against: None,
    })
}

pub(crate) fn sample() -> Comparison {
    // Five runs each, ±4% apart, so every phase has a small, real spread.
    from_runs(&runs_of(5, |_, i| 0.88 + 0.04 * i as f64))
}

#[test]
fn comparison_from_two_recorded_reports() {
    let c = sample();
    assert_eq!(c.mini.outcome, Status::Passed);
    assert_eq!(c.link.outcome, Status::Passed);
    assert_eq!((c.mini.mode, c.link.mode), (Mode::Confined, Mode::Confined));
    assert_eq!((c.mini.processes, c.link.processes), (5, 13));
    // Host 8 + model 8 + connection 4 + harness 8 + measure 4 MiB, plus the host's 512 KiB.
    assert_eq!(c.mini.peak_rss_bytes, Some(32 * 1_048_576 + 524_288));
    assert_eq!(c.mini.artifacts, 5);

    let names: Vec<&str> = c.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "startup",
            "cold_turn",
            "warm_turn",
            "second_agent",
            "refusals",
            "protected_tools",
            "idle",
            "status_series",
            "shutdown"
        ]
    );
    let tools = c
        .phases
        .iter()
        .find(|p| p.name == "protected_tools")
        .unwrap();
    assert_eq!((tools.mini_ns, tools.ratio), (None, None));
    let startup = &c.phases[0];
    assert_eq!(startup.mini_ns, Some(120_000_000));
    assert_eq!(startup.link_ns, Some(480_000_000));
    assert_eq!(startup.ratio, Some(4.0));

    assert_eq!(c.execs.len(), 9);
    let tools = c
        .execs
        .iter()
        .find(|r| r.name == "protected_tools")
        .unwrap();
    assert!(tools.mini.is_none());
    assert_eq!(tools.link.as_ref().unwrap().execs, 6);
    assert!(c
        .caveats
        .iter()
        .any(|cv| cv.contains("separate traced runs")));
    assert!(c
        .caveats
        .iter()
        .any(|cv| cv.contains("not evidence of: memory totals")));
    assert!(!c.caveats.iter().any(|cv| cv.starts_with("diagnostic")));

    // The vocabulary is written as the same words as before it was typed.
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["mode"], "confined");
    assert_eq!(
        (&v["mini"]["profile"], &v["link"]["profile"]),
        (&"mini".into(), &"link".into())
    );
    assert_eq!(
        (&v["mini"]["mode"], &v["mini"]["outcome"]),
        (&"confined".into(), &"passed".into())
    );
    assert_eq!(v["link"]["traced"]["outcome"], "passed");

    // The JSON round-trips.
    let json = serde_json::to_string_pretty(&c).unwrap();
    let back: Comparison = serde_json::from_str(&json).unwrap();
    assert_eq!(back, c);
}

#[test]
fn markdown_names_both_sides_and_every_phase() {
    let c = sample();
    let md = markdown(&c);
    for p in &c.phases {
        assert!(
            md.contains(&format!("| {} | {} |", p.name, p.round)),
            "{}",
            p.name
        );
    }
    assert!(
        md.contains("| startup | 120.0 (IQR 115.2–124.8) | 5 (5 cycles) | 480.0 (IQR 460.8–499.2) | 5 (5 cycles) | 4.00× (no interval: 5 pairs < 10) | — |"),
        "{md}"
    );
    assert!(md.contains("| idle (fixed wait) |"), "{md}");
    assert!(md.contains("Method: paired cycles"), "{md}");
    assert!(md.contains("| protected_tools | Link-only work |"), "{md}");
    let md = markdown(&comparison_of_cycles(12, 1.0, 1.0));
    assert!(md.contains("12 pairs"), "{md}");
    assert!(
        md.contains("Shared work (every phase both sides run"),
        "{md}"
    );
    assert!(md.contains("Order effect"), "{md}");
    assert!(md.contains("all phases except the fixed idle wait"), "{md}");
    assert!(md.contains("| outcome | passed | passed |"), "{md}");
    assert!(md.contains("## Exec counts"));
    assert!(md.contains("## Caveats"));
}

#[test]
fn the_source_is_unverified_unless_checked_against_the_checkout() {
    let mut c = sample();
    assert!(markdown(&c).contains("(unverified: not checked against a checkout)"));
    c.source_checked = Some("`git rev-parse HEAD`".into());
    let md = markdown(&c);
    assert!(md.contains("(checked: `git rev-parse HEAD`)"), "{md}");
    assert!(!md.contains("unverified"), "{md}");
}

#[test]
fn exec_counts_show_what_no_phase_holds_and_the_whole_trace() {
    let mut c = sample();
    let traced = c
        .link
        .traced
        .as_mut()
        .expect("the sample has a traced Link run");
    assert!(traced.available);
    traced.outside_phases_execs = Some(7);
    traced.total_execs = Some(40);
    let md = markdown(&c);
    // Mini's traced report predates the counts: a dash, never a zero.
    assert!(
        md.contains("| outside every phase | — | — | — | — | 7 | — | — |"),
        "{md}"
    );
    assert!(
        md.contains("| whole trace | — | — | — | — | 40 | — | — |"),
        "{md}"
    );
}

#[test]
fn skipped_side_and_missing_trace_are_caveats() {
    let mini = fixture("runtime-mini.json");
    let mut link = fixture("runtime-link.json");
    link.report.outcome = link_report::Outcome {
        status: Status::Skipped,
        reason: Some("bubblewrap cannot create a user namespace".into()),
    };
    let mut lt = fixture("runtime-link-traced.json");
    lt.report.trace = Some(link_report::TraceSection {
        available: false,
        reason: Some("trace is empty".into()),
        phases: vec![],
        outside_phases_execs: None,
        total_execs: None,
    });
    let runs = vec![timed(1, &mini), timed(1, &link)];
    let c = build(&Inputs {
        mode: Mode::Confined,
        mini: &mini,
        link: &link,
        runs: &runs,
        runs_requested: 1,
        rounds: 1,
        mini_traced: None,
        link_traced: Some(&lt),
        cycles: &[],
        sampling: sampling(),
        against: None,
    });
    assert!(c
        .caveats
        .iter()
        .any(|cv| cv == "link skipped: bubblewrap cannot create a user namespace"));
    assert!(c
        .caveats
        .iter()
        .any(|cv| cv == "link exec counts unavailable: trace is empty"));
    assert!(c.execs.is_empty(), "no available trace on either side");
    let md = markdown(&c);
    assert!(md.contains("**skipped**: bubblewrap"), "{md}");
    // A skipped side has no figures: no zero, no ratio, and the table says why.
    assert!(
        md.contains("No timing cycle ran, so no phase has a figure: link skipped: bubblewrap cannot create a user namespace."),
        "{md}"
    );
    assert!(
        md.contains("| processes seen (sampled at phase ends) | 5 | — | — |"),
        "{md}"
    );
    assert!(!md.contains("| 0.0 |") && !md.contains("| 0 |"), "{md}");
    assert!(c
        .stats
        .iter()
        .all(|s| s.ratio.is_none() && s.paired.is_none()));
    assert!(md.contains("trace **unavailable**: trace is empty"), "{md}");
}

#[test]
fn intervals_contain_the_medians_and_runs_are_kept() {
    let c = sample();
    assert_eq!(c.schema_version, 4);
    assert_eq!(c.runs.len(), 10);
    assert_eq!((c.cycles.len(), c.pairs), (10, 5));
    let order: Vec<(Profile, u32)> = c.runs.iter().map(|r| (r.profile, r.index)).collect();
    assert_eq!(
        order[..4],
        [
            (Profile::Mini, 1),
            (Profile::Link, 1),
            (Profile::Mini, 2),
            (Profile::Link, 2)
        ]
    );
    // The median run (scale 1.0 is run 3) stands for each side.
    assert!(c.mini.report.ends_with("mini-3.json"), "{}", c.mini.report);
    assert_eq!(c.mini.phases[0].duration_ns, 120_000_000);
    for s in &c.stats {
        if let Some(r) = s.ratio {
            assert!(
                r.low <= r.estimate && r.estimate <= r.high,
                "{}: {r:?}",
                s.name
            );
        }
        for sp in [&s.mini, &s.link].into_iter().flatten() {
            assert!(sp.median_low_ns <= sp.median_ns && sp.median_ns <= sp.median_high_ns);
            assert_eq!(sp.run_medians_ns.len(), 5);
        }
        // Five pairs: an estimate, never a zero-width interval.
        if let Some(p) = s.paired {
            assert_eq!((p.low, p.high), (None, None), "{}", s.name);
        }
    }
    let tools = c
        .stats
        .iter()
        .find(|s| s.name == "protected_tools")
        .unwrap();
    assert_eq!(tools.mini_absent.as_deref(), Some("Link-only work"));
    assert!(tools.link_only && tools.ratio.is_none() && tools.paired.is_none());
    let twelve = comparison_of_cycles(12, 1.0, 1.0);
    for s in twelve
        .stats
        .iter()
        .filter(|s| !s.link_only && !s.fixed_wait)
    {
        let r = s
            .ratio
            .unwrap_or_else(|| panic!("{} has an interval", s.name));
        assert!(
            r.low <= r.estimate && r.estimate <= r.high,
            "{}: {r:?}",
            s.name
        );
        assert!(s.paired.unwrap().mde.is_some());
    }
    let idle = c.stats.iter().find(|s| s.name == "idle").unwrap();
    assert!(idle.fixed_wait);
    // Same scale on both sides: each ratio is the fixture's, exactly.
    let startup = c.stats.iter().find(|s| s.name == "startup").unwrap();
    assert_eq!(startup.paired.unwrap().estimate, 4.0);
    // A deterministic figure: building again gives the same intervals.
    assert_eq!(sample().stats, c.stats);
}

#[test]
fn mismatched_programs_are_refused_by_name() {
    let runs = runs_of(2, |_, _| 1.0);
    same_programs(runs.iter().map(|r| &r.loaded)).unwrap();
    let mut runs = runs;
    runs[3].loaded.report.artifacts[0].sha256 = "ff".repeat(32);
    let name = runs[3].loaded.report.artifacts[0].name.clone();
    let err = same_programs(runs.iter().map(|r| &r.loaded))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("program `{name}` differs")), "{err}");
    assert!(err.contains("link-2.json"), "{err}");
}

#[test]
fn other_work_during_a_cycle_is_told_from_the_cycles_own() {
    let quiet = Noise {
        cpus: 2,
        load1: Some(2.5),
        cpu_pressure_some_avg10: Some(30.0),
        other_cpu_pct: Some(3.0),
        ..Noise::default()
    };
    // A cycle's own processes raise load and pressure: not a complaint about the cycle.
    assert_eq!(quiet.cycle_complaint(), None);
    let disturbed = Noise {
        other_cpu_pct: Some(45.0),
        ..quiet
    };
    assert_eq!(
        disturbed.cycle_complaint().as_deref(),
        Some("other work used 45% of the CPUs")
    );
    let mut runs = runs_of(12, |_, _| 1.0);
    runs[5].noise = disturbed;
    let c = from_runs(&runs);
    assert!(
        c.warnings.iter().any(|w| w
            == "other work disturbed 1 of 24 cycles, first link cycle 3 (other work used 45% of \
                the CPUs); close other work and run again"),
        "{:?}",
        c.warnings
    );
    // The readings themselves, from this machine: other work is never negative.
    let a = CpuTicks::now().expect("/proc/stat and /proc/self/stat");
    std::thread::sleep(std::time::Duration::from_millis(30));
    let b = CpuTicks::now().unwrap();
    assert!(b.other_percent_since(&a, 2).is_some_and(|p| p >= 0.0));
}

#[test]
fn noise_is_parsed_and_called_out() {
    // Read from this machine's /proc by procfs, as the kernel wrote them (two decimals).
    let here = Noise::sample();
    let load = here.load1.expect("Linux has /proc/loadavg");
    assert_eq!((load * 100.0).round() / 100.0, load);
    let busy = Noise {
        cpus: 2,
        load1: Some(3.5),
        cpu_pressure_some_avg10: Some(12.5),
        ..Noise::default()
    };
    let why = busy.complaint().unwrap();
    assert!(
        why.contains("load average 3.50 on 2 CPUs") && why.contains("12.5%"),
        "{why}"
    );
    assert!(Noise {
        cpus: 2,
        load1: Some(0.3),
        ..Noise::default()
    }
    .complaint()
    .is_none());

    let mut runs = runs_of(3, |p, i| {
        if p == Profile::Link && i == 2 {
            3.0
        } else {
            1.0
        }
    });
    runs[0].noise = busy;
    let c = from_runs(&runs);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("busy before mini run 1")),
        "{:?}",
        c.warnings
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.starts_with("phase startup:") && w.contains("3 pairs give no interval")),
        "{:?}",
        c.warnings
    );
    assert!(markdown(&c).contains("**warning**: phase startup"));
    // An outlying pair is named.
    let mut runs = runs_of(12, |p, i| {
        if p == Profile::Link && i == 7 {
            3.0
        } else {
            1.0
        }
    });
    for r in &mut runs {
        for p in &mut r.loaded.report.phases {
            p.duration_ns += u128::from(r.index) * 1000 * (p.duration_ns % 7 + 1);
        }
    }
    let c = from_runs(&runs);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.starts_with("phase startup: pair(s) 7 lie far")),
        "{:?}",
        c.warnings
    );
}

#[test]
fn one_failed_run_fails_its_side_which_then_has_no_figure_and_no_ratio() {
    let mut runs = runs_of(12, |_, _| 1.0);
    runs[3].loaded.report.outcome = link_report::Outcome {
        status: Status::Failed,
        reason: Some("cold_turn timed out | then more".into()),
    };
    let c = from_runs(&runs);
    assert_eq!(c.link.outcome, Status::Failed);
    assert_eq!(
        c.link.reason.as_deref(),
        Some("run 2: cold_turn timed out | then more")
    );
    let startup = c.stats.iter().find(|s| s.name == "startup").unwrap();
    assert!(startup.link.is_none() && startup.link_time.is_none());
    assert!(startup.ratio.is_none() && startup.paired.is_none() && startup.cpu_ratio.is_none());
    assert_eq!(
        startup.link_absent.as_deref(),
        Some("failed: run 2: cold_turn timed out | then more")
    );
    assert_eq!(startup.mini.as_ref().unwrap().samples, 12);
    assert!(c.shared_total.is_none());
    // The reason's `|` does not end the table cell.
    let md = markdown(&c);
    assert!(
        md.contains("failed: run 2: cold_turn timed out \\| then more"),
        "{md}"
    );
}

#[test]
fn merge_keeps_run_order() {
    let k = |s: &str| (s.to_string(), 0u32);
    let merged = merge_order(
        &[k("a"), k("b"), k("d")],
        &[k("a"), k("b"), k("c"), k("d"), k("e")],
    );
    assert_eq!(merged, vec![k("a"), k("b"), k("c"), k("d"), k("e")]);
    let merged = merge_order(&[k("b")], &[k("a"), k("b")]);
    assert_eq!(merged, vec![k("a"), k("b")]);
}

/// Adds a `host_exit` phase of `share` × each run's shutdown to every run.
fn with_host_exit(runs: &mut [TimedRun], share: f64) {
    for r in runs {
        let phases = &mut r.loaded.report.phases;
        let shutdown = phases
            .iter()
            .find(|p| p.name == "shutdown")
            .unwrap()
            .clone();
        let took = (shutdown.duration_ns as f64 * share) as u128;
        phases.push(link_report::Phase {
            name: "host_exit".into(),
            end_unix_ns: shutdown.start_unix_ns + took,
            duration_ns: took,
            ..shutdown
        });
    }
}

#[test]
fn host_exit_lies_within_shutdown_in_no_total_and_gives_each_side_its_overhead() {
    let plain = from_runs(&runs_of(5, |_, i| 0.88 + 0.04 * i as f64));
    let mut runs = runs_of(5, |_, i| 0.88 + 0.04 * i as f64);
    with_host_exit(&mut runs, 0.8);
    let c = from_runs(&runs);
    // In no total: the sides' totals are what they were without it.
    assert_eq!(c.link.total_phase_ns, plain.link.total_phase_ns);
    assert_eq!(c.mini.work_phase_ns, plain.mini.work_phase_ns);
    let exit = c.stats.iter().find(|s| s.name == "host_exit").unwrap();
    assert_eq!(exit.within.as_deref(), Some("shutdown"));
    assert!(!exit.fixed_wait);
    assert_eq!(c.host_exit.len(), 2);
    for e in &c.host_exit {
        let r = e.ratio.expect("each side has a ratio");
        assert!((r.estimate - 1.25).abs() < 0.01, "{:?}: {r:?}", e.profile);
        assert!(r.low <= r.estimate && r.estimate <= r.high);
        assert!(e.absent.is_none());
        assert!(e.median_over_ns.is_some_and(|ns| ns > 0.0), "{e:?}");
    }
    let md = markdown(&c);
    assert!(md.contains("| host_exit (within shutdown) |"), "{md}");
    assert!(md.contains("Shutdown / the host's own exit time"), "{md}");
    // Without the phase: no ratio, and why.
    let none = plain
        .host_exit
        .iter()
        .find(|e| e.profile == Profile::Link)
        .unwrap();
    assert!(none.ratio.is_none());
    assert!(none
        .absent
        .as_deref()
        .unwrap()
        .contains("no host_exit phase"));
}

#[test]
fn startup_cpu_gives_each_side_its_median_its_floor_and_the_ratio() {
    let mut runs = runs_of(4, |_, _| 1.0);
    // Without the figure (older reports) there is no line, not a zero.
    assert_eq!(from_runs(&runs).startup_cpu, None);
    assert!(!markdown(&from_runs(&runs)).contains("Start-up CPU"));
    for r in &mut runs {
        let (ms, processes) = match r.loaded.report.profile {
            Profile::Mini => (10 + r.index as u64, 5),
            Profile::Link => (30 + r.index as u64, 13),
        };
        r.loaded.report.startup_cpu = Some(link_report::StartupCpu {
            cpu_ns: ms * 1_000_000,
            processes,
        });
    }
    let c = from_runs(&runs);
    let cpu = c.startup_cpu.as_ref().expect("measured");
    let [mini, link] = [&cpu.sides[0], &cpu.sides[1]];
    assert_eq!(
        (mini.profile, mini.runs, mini.processes),
        (Profile::Mini, 4, Some(5))
    );
    assert_eq!(mini.median_ns, Some(12.5e6));
    assert_eq!(link.median_ns, Some(32.5e6));
    assert_eq!(link.processes, Some(13));
    let cpus = cpu.cpus as f64;
    assert!(cpus >= 1.0);
    assert_eq!(link.floor_ns, Some(32.5e6 / cpus));
    // Each run's start-up over its own floor.
    let startup_ns = |p: Profile, i: u32| {
        let r = runs
            .iter()
            .find(|r| r.loaded.report.profile == p && r.index == i);
        let phases = &r.unwrap().loaded.report.phases;
        phases
            .iter()
            .find(|s| s.name == "startup")
            .unwrap()
            .duration_ns as f64
    };
    let own: Vec<f64> = (1..=4)
        .map(|i| startup_ns(Profile::Link, i) / ((30 + i) as f64 * 1e6 / cpus))
        .collect();
    let over = link.over_floor.expect("paired");
    assert_eq!(over.estimate, (stats::median(&own) * 1e4).round() / 1e4);
    assert!(over.low <= over.estimate && over.estimate <= over.high);
    let ratio = cpu.ratio.expect("both sides measured");
    assert_eq!(ratio.estimate, 2.6);
    assert!(ratio.low <= 2.6 && 2.6 <= ratio.high, "{ratio:?}");
    let md = markdown(&c);
    assert!(md.contains("mini 12.5 ms (5 processes; 4 cycles)"), "{md}");
    assert!(md.contains("link 32.5 ms (13 processes; 4 cycles)"), "{md}");
    assert!(md.contains("Link/Mini 2.60×"), "{md}");
    // A failed run's figure is not in its side's.
    runs[1].loaded.report.outcome.status = Status::Failed;
    let link = &from_runs(&runs).startup_cpu.unwrap().sides[1];
    assert_eq!(link.runs, 3);
    // A side without the figure shows none, and there is no ratio.
    for r in runs
        .iter_mut()
        .filter(|r| r.loaded.report.profile == Profile::Link)
    {
        r.loaded.report.startup_cpu = None;
    }
    let c = from_runs(&runs);
    let cpu = c.startup_cpu.as_ref().unwrap();
    assert_eq!((cpu.sides[1].median_ns, cpu.ratio), (None, None));
    let md = markdown(&c);
    assert!(md.contains("link — (— processes; 0 cycles)"), "{md}");
    assert!(!md.contains("Link/Mini 2."), "{md}");
}

#[test]
fn a_failed_cycle_fails_its_side_by_name_and_takes_its_ratios() {
    let runs = runs_of(12, |_, _| 1.0);
    let mut cycles = as_cycles(&runs);
    let link_cycle_4 = cycles
        .iter_mut()
        .find(|c| c.index == 4 && c.loaded.report.profile == Profile::Link)
        .unwrap();
    link_cycle_4.loaded.report.outcome = link_report::Outcome {
        status: Status::Failed,
        reason: Some("startup: link-plugin-auth was killed by signal 9".into()),
    };
    let (mt, lt) = (
        fixture("runtime-mini-traced.json"),
        fixture("runtime-link-traced.json"),
    );
    let c = build(&Inputs {
        mode: Mode::Confined,
        mini: &representative(&runs, Profile::Mini).unwrap().loaded,
        link: &representative(&runs, Profile::Link).unwrap().loaded,
        runs: &runs,
        runs_requested: 12,
        rounds: 1,
        mini_traced: Some(&mt),
        link_traced: Some(&lt),
        cycles: &cycles,
        sampling: sampling(),
        against: None,
    });
    assert_eq!(c.link.outcome, Status::Failed);
    assert_eq!(
        c.link.reason.as_deref(),
        Some("new cycle 4: startup: link-plugin-auth was killed by signal 9")
    );
    assert!(c
        .stats
        .iter()
        .all(|s| s.ratio.is_none() && s.paired.is_none()));
    assert!(c.stats.iter().all(|s| s.link.is_none()));
    assert!(
        c.stats.iter().any(|s| s.mini.is_some()),
        "Mini keeps its description"
    );
    let md = markdown(&c);
    assert!(!md.contains("× ["), "no ratio anywhere: {md}");
}

/// The step summary as GitHub renders it (CommonMark with GFM tables): a reason with the
/// characters a table cell must escape stays whole, in its cell.
#[test]
fn the_markdown_renders_with_every_reason_whole_in_its_cell() {
    use pulldown_cmark::{html, Options, Parser};
    let reason = "startup: link-plugin-auth | killed by signal 9 (a|b)";
    let mut runs = runs_of(12, |_, _| 1.0);
    runs[3].loaded.report.outcome = link_report::Outcome {
        status: Status::Failed,
        reason: Some(reason.into()),
    };
    let md = markdown(&from_runs(&runs));
    let mut page = String::new();
    html::push_html(&mut page, Parser::new_ext(&md, Options::ENABLE_TABLES));
    let whole = format!("failed: run 2: {reason}");
    let cell = |text: &str| format!("<td>{text}</td>");
    // The outcome row and every phase row where Link has no figure carry it whole.
    assert!(
        page.contains(&cell(&format!("<strong>failed</strong>: run 2: {reason}"))),
        "{page}"
    );
    assert!(page.contains(&cell(&whole)), "{page}");
    // No row has more cells than its header: nothing was split.
    for table in page.split("<table>").skip(1) {
        let table = &table[..table.find("</table>").unwrap()];
        let header = table.matches("<th").count();
        for row in table.split("<tr>").skip(2) {
            assert!(row.matches("<td").count() <= header, "{row}");
        }
    }
}
