//! The Mini ↔ full Link comparison: built from two reports (and their traced twins), written
//! as `runtime-comparison.json` and `.md`.

use anyhow::{Context, Result};
use link_report::{Mode, Phase, Profile, Report, Status, TracePhase};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Bumped whenever a field of the comparison changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// One comparison of a Mini run and a full Link run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: u32,
    /// `confined` or `diagnostic`, as requested.
    pub mode: Mode,
    pub mini: Side,
    pub link: Side,
    /// One row per (phase, round) of either side, in run order.
    pub phases: Vec<PhaseRow>,
    /// Per-phase counts from the traced runs; empty when no trace pass ran.
    pub execs: Vec<ExecRow>,
    /// What these numbers are not evidence of, and anything that weakens them.
    pub caveats: Vec<String>,
}

/// What one side's report says, reduced to what is compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub profile: Profile,
    pub mode: Mode,
    pub source: String,
    /// The report file and its sha256, so the numbers can be traced back.
    pub report: String,
    pub report_sha256: String,
    pub outcome: Status,
    pub reason: Option<String>,
    /// Checks that did not pass, as `name: outcome`.
    pub checks_not_passed: Vec<String>,
    /// Processes the runtime started (identities in the report).
    pub processes: u64,
    /// The most processes seen in one monitor pass.
    pub peak_sampled_processes: u64,
    /// The largest total RSS of one monitor pass; `None` without samples.
    pub peak_rss_bytes: Option<u64>,
    pub artifacts: u64,
    pub artifact_bytes: u64,
    /// Sum of the phases' durations.
    pub total_phase_ns: u128,
    /// The timeline, for the picture.
    pub phases: Vec<Phase>,
    /// The traced run behind `execs`, when one ran.
    pub traced: Option<TracedSide>,
}

/// The separate strace run of one side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedSide {
    pub report: String,
    pub outcome: Status,
    pub available: bool,
    pub reason: Option<String>,
}

/// One phase on both sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRow {
    pub name: String,
    pub round: u32,
    pub mini_ns: Option<u128>,
    pub link_ns: Option<u128>,
    /// Link / Mini; `None` when either is missing or Mini took no measurable time.
    pub ratio: Option<f64>,
}

/// One phase's trace counts on both sides (`None`: the side has no such phase or no trace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRow {
    pub name: String,
    pub round: u32,
    pub mini: Option<TracePhase>,
    pub link: Option<TracePhase>,
}

/// A report as read from disk.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub path: String,
    pub sha256: String,
    pub report: Report,
}

/// Reads and decodes one report.
pub fn load(path: &Path) -> Result<Loaded> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let report: Report = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a runtime report", path.display()))?;
    Ok(Loaded {
        path: path.display().to_string(),
        sha256: hex(&Sha256::digest(&bytes)),
        report,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The two timed reports and, when a trace pass ran, the traced ones.
pub struct Inputs<'a> {
    pub mode: Mode,
    pub mini: &'a Loaded,
    pub link: &'a Loaded,
    pub mini_traced: Option<&'a Loaded>,
    pub link_traced: Option<&'a Loaded>,
}

/// Builds the comparison.
pub fn build(input: &Inputs<'_>) -> Comparison {
    let mini = side(input.mini, input.mini_traced);
    let link = side(input.link, input.link_traced);
    let phases = phase_rows(&input.mini.report.phases, &input.link.report.phases);
    let execs = exec_rows(input.mini_traced, input.link_traced);
    let caveats = caveats(input, &mini, &link);
    Comparison {
        schema_version: SCHEMA_VERSION,
        mode: input.mode,
        mini,
        link,
        phases,
        execs,
        caveats,
    }
}

fn side(loaded: &Loaded, traced: Option<&Loaded>) -> Side {
    let r = &loaded.report;
    Side {
        profile: r.profile,
        mode: r.mode,
        source: r.source.clone(),
        report: loaded.path.clone(),
        report_sha256: loaded.sha256.clone(),
        outcome: r.outcome.status,
        reason: r.outcome.reason.clone(),
        checks_not_passed: r
            .checks
            .iter()
            .filter(|c| c.outcome != Status::Passed)
            .map(|c| format!("{}: {}", c.name, c.outcome))
            .collect(),
        processes: r.processes.len() as u64,
        peak_sampled_processes: r
            .samples
            .iter()
            .map(|s| s.processes.len() as u64)
            .max()
            .unwrap_or(0),
        peak_rss_bytes: r.samples.iter().map(|s| s.rss_bytes()).max(),
        artifacts: r.artifacts.len() as u64,
        artifact_bytes: r.artifacts.iter().map(|a| a.bytes).sum(),
        total_phase_ns: r.phases.iter().map(|p| p.duration_ns).sum(),
        phases: r.phases.clone(),
        traced: traced.map(|t| {
            let section = t.report.trace.as_ref();
            TracedSide {
                report: t.path.clone(),
                outcome: t.report.outcome.status,
                available: section.is_some_and(|s| s.available),
                reason: match section {
                    Some(s) => s.reason.clone(),
                    None => Some("the traced report has no trace section".into()),
                },
            }
        }),
    }
}

type Key = (String, u32);

/// Rows in run order: Mini's phases, with Link-only ones placed after their predecessor.
fn phase_rows(mini: &[Phase], link: &[Phase]) -> Vec<PhaseRow> {
    let key = |p: &Phase| (p.name.clone(), p.round);
    let mini_keys: Vec<Key> = mini.iter().map(key).collect();
    let link_keys: Vec<Key> = link.iter().map(key).collect();
    merge_order(&mini_keys, &link_keys)
        .into_iter()
        .map(|(name, round)| {
            let find = |all: &[Phase]| {
                all.iter()
                    .find(|p| p.name == name && p.round == round)
                    .map(|p| p.duration_ns)
            };
            let (mini_ns, link_ns) = (find(mini), find(link));
            PhaseRow {
                ratio: ratio(mini_ns, link_ns),
                name,
                round,
                mini_ns,
                link_ns,
            }
        })
        .collect()
}

fn merge_order(first: &[Key], second: &[Key]) -> Vec<Key> {
    let mut out: Vec<Key> = Vec::new();
    for k in first {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    for (i, k) in second.iter().enumerate() {
        if out.contains(k) {
            continue;
        }
        let at = match i
            .checked_sub(1)
            .and_then(|p| out.iter().position(|o| *o == second[p]))
        {
            Some(prev) => prev + 1,
            None if i == 0 => 0,
            None => out.len(),
        };
        out.insert(at, k.clone());
    }
    out
}

fn ratio(mini: Option<u128>, link: Option<u128>) -> Option<f64> {
    let (m, l) = (mini?, link?);
    // Four decimals: plenty for a ratio, and stable through a JSON round trip.
    (m > 0)
        .then(|| (l as f64 / m as f64 * 1e4).round() / 1e4)
        .filter(|r| r.is_finite())
}

fn exec_rows(mini: Option<&Loaded>, link: Option<&Loaded>) -> Vec<ExecRow> {
    let phases = |l: Option<&Loaded>| -> Vec<TracePhase> {
        l.and_then(|l| l.report.trace.as_ref())
            .filter(|t| t.available)
            .map(|t| t.phases.clone())
            .unwrap_or_default()
    };
    let (m, l) = (phases(mini), phases(link));
    if m.is_empty() && l.is_empty() {
        return Vec::new();
    }
    let key = |p: &TracePhase| (p.name.clone(), p.round);
    let keys = merge_order(
        &m.iter().map(key).collect::<Vec<_>>(),
        &l.iter().map(key).collect::<Vec<_>>(),
    );
    keys.into_iter()
        .map(|(name, round)| {
            let find = |all: &[TracePhase]| {
                all.iter()
                    .find(|p| p.name == name && p.round == round)
                    .cloned()
            };
            ExecRow {
                mini: find(&m),
                link: find(&l),
                name,
                round,
            }
        })
        .collect()
}

fn caveats(input: &Inputs<'_>, mini: &Side, link: &Side) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for side in [mini, link] {
        if side.outcome != Status::Passed {
            add(format!(
                "{} {}: {}",
                side.profile,
                status_word(side.outcome),
                side.reason.as_deref().unwrap_or("no reason given")
            ));
        }
        if side.mode != input.mode {
            add(format!(
                "{} ran in {} mode, not the requested {}",
                side.profile, side.mode, input.mode
            ));
        }
        if let Some(t) = side.traced.as_ref().filter(|t| !t.available) {
            add(format!(
                "{} exec counts unavailable: {}",
                side.profile,
                t.reason.as_deref().unwrap_or("no reason given")
            ));
        }
    }
    if mini.source != link.source {
        add(format!(
            "the sides ran different sources: mini {} vs link {}",
            mini.source, link.source
        ));
    }
    if [input.mode, mini.mode, link.mode].contains(&Mode::Diagnostic) {
        add(
            "diagnostic mode: protected run and file tools are disabled; this is not confined \
             qualification and its process counts are not a secure deployment's"
                .into(),
        );
    }
    add(
        "peak RSS is the largest total of one monitor pass over the runtime's processes, \
         not a memory total"
            .into(),
    );
    add("artifact bytes are the programs each side used as built here, not shipped bytes".into());
    if input.mini_traced.is_some() || input.link_traced.is_some() {
        add(
            "exec counts come from separate traced runs (ROUNDS 1), never from the timed runs"
                .into(),
        );
    }
    for r in [&input.mini.report, &input.link.report] {
        for n in &r.coverage.not_evidence_of {
            add(format!("not evidence of: {n}"));
        }
    }
    out
}

pub fn status_word(s: Status) -> &'static str {
    s.as_str()
}

/// Milliseconds with one decimal.
pub fn ms(ns: u128) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

fn opt_ms(ns: Option<u128>) -> String {
    ns.map(ms).unwrap_or_else(|| "—".into())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The Markdown page.
pub fn markdown(c: &Comparison) -> String {
    let mut md = format!(
        "# Runtime comparison: Mini vs full Link ({})\n\n\
         Source: mini `{}`, link `{}`.\n\n",
        c.mode, c.mini.source, c.link.source
    );
    md.push_str("| | Mini | Link | Link/Mini |\n|---|---|---|---|\n");
    let row = |md: &mut String, what: &str, m: String, l: String, r: Option<f64>| {
        let r = r.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "—".into());
        md.push_str(&format!("| {what} | {m} | {l} | {r} |\n"));
    };
    row(
        &mut md,
        "outcome",
        side_outcome(&c.mini),
        side_outcome(&c.link),
        None,
    );
    row(
        &mut md,
        "mode",
        c.mini.mode.to_string(),
        c.link.mode.to_string(),
        None,
    );
    let n = |m: u64, l: u64| (m > 0).then(|| l as f64 / m as f64);
    row(
        &mut md,
        "processes started",
        c.mini.processes.to_string(),
        c.link.processes.to_string(),
        n(c.mini.processes, c.link.processes),
    );
    row(
        &mut md,
        "peak processes sampled",
        c.mini.peak_sampled_processes.to_string(),
        c.link.peak_sampled_processes.to_string(),
        n(c.mini.peak_sampled_processes, c.link.peak_sampled_processes),
    );
    let rss = |s: &Side| {
        s.peak_rss_bytes
            .map(mib)
            .unwrap_or_else(|| "no samples".into())
    };
    row(
        &mut md,
        "peak RSS (one monitor pass)",
        rss(&c.mini),
        rss(&c.link),
        c.mini
            .peak_rss_bytes
            .zip(c.link.peak_rss_bytes)
            .and_then(|(m, l)| n(m, l)),
    );
    row(
        &mut md,
        "artifact bytes",
        format!(
            "{} ({} programs)",
            mib(c.mini.artifact_bytes),
            c.mini.artifacts
        ),
        format!(
            "{} ({} programs)",
            mib(c.link.artifact_bytes),
            c.link.artifacts
        ),
        n(c.mini.artifact_bytes, c.link.artifact_bytes),
    );
    row(
        &mut md,
        "all phases (ms)",
        ms(c.mini.total_phase_ns),
        ms(c.link.total_phase_ns),
        ratio(Some(c.mini.total_phase_ns), Some(c.link.total_phase_ns)),
    );

    md.push_str(
        "\n## Phases (ms)\n\n| phase | round | Mini | Link | Link/Mini |\n|---|---|---|---|---|\n",
    );
    for p in &c.phases {
        let r = p
            .ratio
            .map(|r| format!("{r:.2}×"))
            .unwrap_or_else(|| "—".into());
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            p.name,
            p.round,
            opt_ms(p.mini_ns),
            opt_ms(p.link_ns),
            r
        ));
    }
    md.push_str(&execs_markdown(c));
    for s in [&c.mini, &c.link] {
        if !s.checks_not_passed.is_empty() {
            md.push_str(&format!(
                "\n{} checks not passed: {}\n",
                s.profile,
                s.checks_not_passed.join(", ")
            ));
        }
    }
    md.push_str("\n## Caveats\n\n");
    for cv in &c.caveats {
        md.push_str(&format!("- {cv}\n"));
    }
    md.push_str(&format!(
        "\nReports: `{}` (sha256 {}), `{}` (sha256 {}).\n",
        c.mini.report, c.mini.report_sha256, c.link.report, c.link.report_sha256
    ));
    md
}

fn side_outcome(s: &Side) -> String {
    match &s.reason {
        Some(r) if s.outcome != Status::Passed => format!("**{}**: {r}", status_word(s.outcome)),
        _ => status_word(s.outcome).to_string(),
    }
}

fn execs_markdown(c: &Comparison) -> String {
    let traced = [&c.mini, &c.link].iter().any(|s| s.traced.is_some());
    if !traced {
        return "\nExec counts: no trace pass ran (use `cargo xtask runtime --trace`).\n".into();
    }
    let mut md = String::from(
        "\n## Exec counts (separate traced runs)\n\n\
         execs = successful execve/execveat; pids = distinct executing pids; \
         resident = processes alive at the phase's end.\n\n\
         | phase | round | Mini execs | Mini pids | Mini resident | Link execs | Link pids | Link resident |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let cells = |t: &Option<TracePhase>| match t {
        Some(t) => format!(
            "{} | {} | {}",
            t.execs, t.executing_pids, t.resident_processes
        ),
        None => "— | — | —".into(),
    };
    for r in &c.execs {
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.name,
            r.round,
            cells(&r.mini),
            cells(&r.link)
        ));
    }
    for s in [&c.mini, &c.link] {
        if let Some(t) = s.traced.as_ref().filter(|t| !t.available) {
            md.push_str(&format!(
                "\n{} trace **unavailable**: {}\n",
                s.profile,
                t.reason.as_deref().unwrap_or("no reason given")
            ));
        }
    }
    md
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    pub(crate) fn fixture(name: &str) -> Loaded {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name);
        load(&path).unwrap()
    }

    pub(crate) fn sample() -> Comparison {
        let (mini, link) = (fixture("runtime-mini.json"), fixture("runtime-link.json"));
        let (mt, lt) = (
            fixture("runtime-mini-traced.json"),
            fixture("runtime-link-traced.json"),
        );
        build(&Inputs {
            mode: Mode::Confined,
            mini: &mini,
            link: &link,
            mini_traced: Some(&mt),
            link_traced: Some(&lt),
        })
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
            md.contains("| startup | 0 | 120.0 | 480.0 | 4.00× |"),
            "{md}"
        );
        assert!(md.contains("| outcome | passed | passed |"), "{md}");
        assert!(md.contains("## Exec counts"));
        assert!(md.contains("## Caveats"));
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
        });
        let c = build(&Inputs {
            mode: Mode::Confined,
            mini: &mini,
            link: &link,
            mini_traced: None,
            link_traced: Some(&lt),
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
        assert!(md.contains("trace **unavailable**: trace is empty"), "{md}");
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
}
