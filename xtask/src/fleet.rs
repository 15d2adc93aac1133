//! `cargo xtask fleet DIR...`: one table of the comparisons several machines made (each DIR a
//! machine's `target/runtime-*` outputs, e.g. a CI artifact). Per machine: what it is (kernel,
//! distribution, architecture, bubblewrap, Landlock, the user-namespace sysctls), each side's
//! outcome and the headline Link/Mini ratio with its interval; a machine whose side skipped or
//! failed stands as such, never as a figure. Machines that measured different sources, or
//! machines of one architecture that ran different builds of a program (another toolchain or
//! flags: not the release being qualified), are refused unless `--allow-mixed`, and said
//! either way. Builds of different architectures differ by nature and are not compared.

use crate::compare::{cell, status_word, Comparison, Side};
use crate::paired::LogMean;
use crate::svg::esc;
use anyhow::{bail, Context, Result};
use link_report::machine::Machine;
use link_report::{Mode, PhaseName, Status};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// 2: `machines[].programs`.
pub const SCHEMA_VERSION: u32 = 2;

/// The fleet table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fleet {
    pub schema_version: u32,
    pub machines: Vec<Row>,
    /// Said when the machines measured different sources (and allowed).
    pub warnings: Vec<String>,
}

/// One machine's row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Row {
    /// The directory's name (a CI artifact's name, say).
    pub name: String,
    pub comparison: String,
    /// `None`: a comparison written before machines were recorded.
    pub machine: Option<Machine>,
    pub mode: Mode,
    pub source: String,
    pub mini: SideRow,
    pub link: SideRow,
    /// Link/Mini over the shared work: only when both sides passed.
    pub shared_ratio: Option<LogMean>,
    /// `passed` when both sides passed, else the worst side's status.
    pub outcome: Status,
    /// The programs its runs used, by name, with their sha256 (from the sides' run reports);
    /// `None` when no report could be read (said in the warnings).
    pub programs: Option<Programs>,
}

/// Program name → sha256.
pub type Programs = BTreeMap<String, String>;

/// One machine's outputs as read: its name (the directory's), its comparison, and the
/// programs its run reports name, or why they could not be read.
pub struct Measured {
    pub name: String,
    pub path: PathBuf,
    pub comparison: Comparison,
    pub programs: Result<Programs, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SideRow {
    pub outcome: Status,
    pub reason: Option<String>,
    /// Execs of the traced run's phases; `None` without a usable trace.
    pub execs: Option<u64>,
}

/// Where a machine's comparison is: `DIR/` or `DIR/target/`, confined before diagnostic.
fn find_comparison(dir: &Path) -> Result<PathBuf> {
    let names = [
        "runtime-comparison.json",
        "runtime-comparison-diagnostic.json",
    ];
    for base in [dir.to_path_buf(), dir.join("target")] {
        for n in names {
            let p = base.join(n);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    bail!(
        "{} holds no runtime-comparison.json (nor under target/): pass the directories that \
         hold each machine's `target/runtime-*` outputs",
        dir.display()
    )
}

/// Reads every machine's comparison (errors name the file) and its run reports' programs.
pub fn load(dirs: &[PathBuf]) -> Result<Vec<Measured>> {
    if dirs.is_empty() {
        bail!("no machine given: pass one directory of `target/runtime-*` outputs per machine");
    }
    let mut out = Vec::new();
    for dir in dirs {
        let path = find_comparison(dir)?;
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let c: Comparison = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a runtime comparison this xtask reads (schema {}); rerun `cargo \
                 xtask runtime` there",
                path.display(),
                crate::compare::SCHEMA_VERSION
            )
        })?;
        let name = dir
            .canonicalize()
            .unwrap_or_else(|_| dir.clone())
            .file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
        let programs = programs_of(&path, &c);
        out.push(Measured {
            name,
            path,
            comparison: c,
            programs,
        });
    }
    Ok(out)
}

/// The programs the sides' run reports name; a side without a report (`(none)`: it failed
/// before writing one) names none.
fn programs_of(comparison: &Path, c: &Comparison) -> Result<Programs, String> {
    let dir = comparison.parent().unwrap_or(Path::new("."));
    let mut programs = Programs::new();
    for side in [&c.mini, &c.link] {
        if side.report == "(none)" {
            continue;
        }
        let report = beside(dir, Path::new(&side.report));
        let loaded = crate::compare::load(&report).map_err(|e| format!("{e:#}"))?;
        for a in loaded.report.artifacts {
            programs.insert(a.name, a.sha256);
        }
    }
    Ok(programs)
}

/// The table; `Err` when the machines measured different sources, or machines of one
/// architecture ran different builds, and `allow_mixed` is off.
pub fn build(machines: &[Measured], allow_mixed: bool) -> Result<Fleet> {
    let rows: Vec<Row> = machines.iter().map(row).collect();
    let mut warnings: Vec<String> = machines
        .iter()
        .filter_map(|m| {
            let why = m.programs.as_ref().err()?;
            Some(format!("{}: its programs are unknown ({why})", m.name))
        })
        .collect();
    let mut mixed: Vec<String> = mixed_sources(&rows).into_iter().collect();
    mixed.extend(mixed_builds(&rows));
    if !mixed.is_empty() && !allow_mixed {
        bail!(
            "{}; qualify one commit, built once per architecture, everywhere, or pass \
             --allow-mixed to compare them",
            mixed.join("; ")
        );
    }
    warnings.extend(mixed);
    Ok(Fleet {
        schema_version: SCHEMA_VERSION,
        machines: rows,
        warnings,
    })
}

/// Where a report the comparison names by the path it had on its machine is in this copy of
/// that machine's outputs: under the comparison's directory as it was under the machine's
/// (`runtime-runs/link-1.json`), else by its file name there, else where it was.
fn beside(dir: &Path, recorded: &Path) -> PathBuf {
    let tail: Vec<&std::ffi::OsStr> = recorded.iter().rev().take(2).collect();
    let candidates = [
        tail.iter().rev().fold(dir.to_path_buf(), |p, c| p.join(c)),
        dir.join(tail.first().copied().unwrap_or_default()),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| recorded.to_path_buf())
}

/// Said when the machines measured more than one source.
fn mixed_sources(rows: &[Row]) -> Option<String> {
    let mut sources: Vec<&str> = rows
        .iter()
        .map(|r| r.source.as_str())
        .filter(|s| *s != "(not measured)")
        .collect();
    sources.sort_unstable();
    sources.dedup();
    (sources.len() > 1).then(|| {
        format!(
            "the machines measured different sources: {}",
            rows.iter()
                .map(|r| format!("{} {}", r.name, r.source))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// One line per program that machines of one architecture ran in more than one build.
fn mixed_builds(rows: &[Row]) -> Vec<String> {
    // (architecture, program) → sha256 → the machines that ran that build.
    let mut builds: BTreeMap<(&str, &str), BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for r in rows {
        let arch = r.machine.as_ref().map_or("unknown", |m| m.arch.as_str());
        for (program, sha) in r.programs.iter().flatten() {
            builds
                .entry((arch, program))
                .or_default()
                .entry(sha)
                .or_default()
                .push(&r.name);
        }
    }
    builds
        .into_iter()
        .filter(|(_, by_sha)| by_sha.len() > 1)
        .map(|((arch, program), by_sha)| {
            let each: Vec<String> = by_sha
                .iter()
                .map(|(sha, names)| format!("{} on {}", short(sha), names.join(", ")))
                .collect();
            format!(
                "machines of architecture {arch} ran different builds of `{program}`: {}",
                each.join("; ")
            )
        })
        .collect()
}

/// A sha256 as people compare it: its first 12 digits.
fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn row(m: &Measured) -> Row {
    let (name, path, c) = (&m.name, &m.path, &m.comparison);
    let both = c.mini.outcome == Status::Passed && c.link.outcome == Status::Passed;
    let outcome = [c.mini.outcome, c.link.outcome]
        .into_iter()
        .max_by_key(|s| match s {
            Status::Passed => 0,
            Status::Skipped => 1,
            Status::Failed => 2,
        })
        .unwrap_or(Status::Failed);
    Row {
        name: name.to_string(),
        comparison: path.display().to_string(),
        machine: c.machine.clone(),
        mode: c.mode,
        source: c.link.source.clone(),
        mini: side_row(c, &c.mini),
        link: side_row(c, &c.link),
        shared_ratio: c.shared_total.filter(|_| both),
        outcome,
        programs: m.programs.as_ref().ok().cloned(),
    }
}

fn side_row(c: &Comparison, s: &Side) -> SideRow {
    let traced = s.traced.as_ref().filter(|t| t.available);
    let execs = traced.map(|_| {
        c.execs
            .iter()
            .filter(|r| PhaseName::in_total(&r.name))
            .filter_map(|r| match s.profile {
                link_report::Profile::Mini => r.mini.as_ref(),
                link_report::Profile::Link => r.link.as_ref(),
            })
            .map(|t| t.execs)
            .sum()
    });
    SideRow {
        outcome: s.outcome,
        reason: s.reason.clone(),
        execs: execs.filter(|_| s.outcome == Status::Passed),
    }
}

fn side_cell(s: &SideRow) -> String {
    match s.outcome {
        Status::Passed => "passed".into(),
        other => format!(
            "{}: {}",
            status_word(other),
            s.reason.as_deref().unwrap_or("no reason given")
        ),
    }
}

/// The row's outcome; a diagnostic run's pass is said to be unconfined (never qualification).
fn outcome_text(r: &Row) -> String {
    match (r.outcome, r.mode) {
        (Status::Passed, Mode::Diagnostic) => format!("{} ({UNCONFINED})", status_word(r.outcome)),
        _ => status_word(r.outcome).to_string(),
    }
}

/// What a diagnostic row's pass and ratio are: not a confined runtime's.
const UNCONFINED: &str = "diagnostic: unconfined";

fn ratio_text(r: &Row) -> String {
    let figure = ratio_figure(r);
    match (&r.shared_ratio, r.mode) {
        (Some(_), Mode::Diagnostic) => format!("{figure}, {UNCONFINED}"),
        _ => figure,
    }
}

fn ratio_figure(r: &Row) -> String {
    match (&r.shared_ratio, r.outcome) {
        (Some(m), _) => match (m.low, m.high) {
            (Some(lo), Some(hi)) => {
                format!("{:.2}× ({lo:.2}–{hi:.2}, {} pairs)", m.estimate, m.pairs)
            }
            _ => format!("{:.2}× (no interval: {} pairs)", m.estimate, m.pairs),
        },
        (None, Status::Passed) => "— (no paired cycles)".into(),
        (None, other) => format!("— ({})", status_word(other)),
    }
}

fn machine_cells(m: Option<&Machine>) -> [String; 6] {
    let Some(m) = m else {
        return std::array::from_fn(|_| "unknown (an older comparison)".to_string());
    };
    [
        m.kernel.clone(),
        m.distribution.clone(),
        m.arch.clone(),
        m.bwrap_version.clone().unwrap_or_else(|| "unknown".into()),
        m.landlock_abi.map_or("none".into(), |a| a.to_string()),
        if m.userns_sysctls.is_empty() {
            "no such sysctl".into()
        } else {
            m.userns_sysctls.join(", ")
        },
    ]
}

pub fn markdown(f: &Fleet) -> String {
    let mut md = String::from("# Fleet qualification: Mini vs full Link per machine\n\n");
    for w in &f.warnings {
        md.push_str(&format!("- **warning**: {w}\n"));
    }
    if !f.warnings.is_empty() {
        md.push('\n');
    }
    md.push_str(
        "| machine | outcome | kernel | distribution | arch | bubblewrap | Landlock ABI | \
         user-namespace sysctls | mode | Mini | Link | shared work Link/Mini (95% CI) | \
         Mini execs | Link execs | source |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &f.machines {
        let execs = |s: &SideRow| s.execs.map_or("—".into(), |n| n.to_string());
        let mut cells = vec![r.name.clone(), outcome_text(r)];
        cells.extend(machine_cells(r.machine.as_ref()));
        cells.extend([
            r.mode.to_string(),
            side_cell(&r.mini),
            side_cell(&r.link),
            ratio_text(r),
            execs(&r.mini),
            execs(&r.link),
            format!("`{}`", r.source),
        ]);
        let cells: Vec<String> = cells.iter().map(|c| cell(c)).collect();
        md.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    let count = |s: Status| f.machines.iter().filter(|r| r.outcome == s).count();
    let unconfined = f
        .machines
        .iter()
        .filter(|r| r.outcome == Status::Passed && r.mode == Mode::Diagnostic)
        .count();
    let passed = match unconfined {
        0 => count(Status::Passed).to_string(),
        n => format!(
            "{} ({n} of them diagnostic: unconfined, not a qualification)",
            count(Status::Passed)
        ),
    };
    md.push_str(&format!(
        "\n{} machine(s): {passed} passed, {} skipped, {} failed. A machine whose side did not \
         pass has no ratio.\n",
        f.machines.len(),
        count(Status::Skipped),
        count(Status::Failed)
    ));
    md
}

/// One line per machine: the ratio with its interval on a log axis, or why there is none.
pub fn svg(f: &Fleet) -> String {
    let (w, row_h, top, left, axis_w) = (900.0, 28.0, 50.0, 260.0, 560.0);
    let (lo, hi) = (0.5f64.ln(), 4.0f64.ln());
    let x = |r: f64| left + (r.ln().clamp(lo, hi) - lo) / (hi - lo) * axis_w;
    let h = top + row_h * (f.machines.len() as f64 + 1.0) + 20.0 * f.warnings.len() as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<text x=\"10\" y=\"20\" font-size=\"15\">\
         Fleet: shared work Link/Mini per machine (95% CI, log axis 0.5–4×)</text>\n"
    );
    for tick in [0.5, 1.0, 2.0, 4.0] {
        out.push_str(&format!(
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"#ccc\"/>\
             <text x=\"{0:.1}\" y=\"{3}\" text-anchor=\"middle\">{tick}×</text>\n",
            x(tick),
            top - 10.0,
            h - 20.0 * f.warnings.len() as f64 - 10.0,
            top - 14.0
        ));
    }
    for (i, r) in f.machines.iter().enumerate() {
        let y = top + row_h * (i as f64 + 0.5);
        out.push_str(&format!(
            "<text x=\"10\" y=\"{:.1}\">{}</text>\n",
            y + 4.0,
            esc(&r.name)
        ));
        match &r.shared_ratio {
            Some(m) => {
                if let (Some(a), Some(b)) = (m.low, m.high) {
                    out.push_str(&format!(
                        "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" \
                         stroke=\"#333\" stroke-width=\"2\"/>\n",
                        x(a),
                        x(b)
                    ));
                }
                out.push_str(&format!(
                    "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"#1f77b4\"/>\
                     <text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
                    x(m.estimate),
                    left + axis_w + 10.0,
                    y + 4.0,
                    esc(&ratio_text(r))
                ));
            }
            None => {
                let why = match r.outcome {
                    Status::Passed => "no paired cycles".to_string(),
                    _ => format!("Mini {} · Link {}", side_cell(&r.mini), side_cell(&r.link)),
                };
                out.push_str(&format!(
                    "<text x=\"{left}\" y=\"{:.1}\" fill=\"#b00\">{}</text>\n",
                    y + 4.0,
                    esc(&why.chars().take(110).collect::<String>())
                ));
            }
        }
    }
    for (i, warning) in f.warnings.iter().enumerate() {
        out.push_str(&format!(
            "<text x=\"10\" y=\"{:.1}\" fill=\"#b00\">warning: {}</text>\n",
            h - 20.0 * (f.warnings.len() - i) as f64 + 5.0,
            esc(warning)
        ));
    }
    out.push_str("</svg>\n");
    out
}

/// Writes `fleet.{json,md,svg}` into `out`; the paths written.
pub fn write(out: &Path, f: &Fleet) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let files = [
        (
            out.join("fleet.json"),
            serde_json::to_string_pretty(f)? + "\n",
        ),
        (out.join("fleet.md"), markdown(f)),
        (out.join("fleet.svg"), svg(f)),
    ];
    for (path, body) in &files {
        std::fs::write(path, body).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(files.into_iter().map(|(p, _)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::comparison_of_cycles;

    fn machine(kernel: &str) -> Machine {
        Machine {
            hostname: "h".into(),
            kernel: kernel.into(),
            distribution: "Ubuntu 24.04.1 LTS".into(),
            arch: "aarch64".into(),
            cpus: 4,
            userns_sysctls: vec!["kernel.apparmor_restrict_unprivileged_userns=1".into()],
            bwrap_version: Some("0.9.0".into()),
            landlock_abi: Some(6),
        }
    }

    fn fleet_of(cs: Vec<Comparison>) -> Vec<Measured> {
        cs.into_iter()
            .enumerate()
            .map(|(i, c)| Measured {
                name: format!("m{i}"),
                path: PathBuf::from(format!("m{i}/c.json")),
                comparison: c,
                programs: Ok(Programs::new()),
            })
            .collect()
    }

    #[test]
    fn a_machine_that_skipped_or_failed_stands_as_such_never_as_a_figure() {
        let mut passed = comparison_of_cycles(12, 1.2, 1.2);
        passed.machine = Some(machine("6.8.0-45-generic"));
        let mut skipped = comparison_of_cycles(12, 1.2, 1.2);
        skipped.link.outcome = Status::Skipped;
        skipped.link.reason = Some("confinement unavailable: AppArmor | userns".into());
        let mut failed = comparison_of_cycles(12, 1.2, 1.2);
        failed.mini.outcome = Status::Failed;
        failed.mini.reason = Some("link-plugin-model killed by signal 9".into());
        let f = build(&fleet_of(vec![passed, skipped, failed]), false).unwrap();
        assert_eq!(
            f.machines.iter().map(|r| r.outcome).collect::<Vec<_>>(),
            [Status::Passed, Status::Skipped, Status::Failed]
        );
        assert!(f.machines[0].shared_ratio.is_some());
        assert!(f.machines[1].shared_ratio.is_none() && f.machines[2].shared_ratio.is_none());
        let md = markdown(&f);
        assert!(md.contains("6.8.0-45-generic"), "{md}");
        assert!(
            md.contains("apparmor_restrict_unprivileged_userns=1"),
            "{md}"
        );
        assert!(
            md.contains("skipped: confinement unavailable: AppArmor \\| userns"),
            "{md}"
        );
        assert!(
            md.contains("— (skipped)") && md.contains("— (failed)"),
            "{md}"
        );
        assert!(md.contains("unknown (an older comparison)"), "{md}");
        assert!(md.contains("1 passed, 1 skipped, 1 failed"), "{md}");
        let pic = svg(&f);
        assert!(
            pic.contains("link-plugin-model killed by signal 9"),
            "{pic}"
        );
        assert_eq!(pic.matches("<circle").count(), 1, "{pic}");
        // The table renders as one GFM table, every row whole.
        let html = {
            let mut out = String::new();
            let opts = pulldown_cmark::Options::ENABLE_TABLES;
            pulldown_cmark::html::push_html(&mut out, pulldown_cmark::Parser::new_ext(&md, opts));
            out
        };
        assert_eq!(html.matches("<tr>").count(), 4, "{html}");
    }

    #[test]
    fn a_diagnostic_machine_passes_only_as_unconfined() {
        let confined = comparison_of_cycles(12, 1.2, 1.2);
        let mut diagnostic = comparison_of_cycles(12, 1.2, 1.2);
        diagnostic.mode = Mode::Diagnostic;
        let f = build(&fleet_of(vec![confined, diagnostic]), false).unwrap();
        let md = markdown(&f);
        let row = |name: &str| md.lines().find(|l| l.starts_with(name)).unwrap_or_default();
        let rows = [row("| m0 |"), row("| m1 |")];
        assert!(
            !rows[0].is_empty() && !rows[0].contains("unconfined"),
            "{md}"
        );
        assert!(
            rows[1].contains("| passed (diagnostic: unconfined) |"),
            "{md}"
        );
        assert!(rows[1].contains("pairs), diagnostic: unconfined |"), "{md}");
        assert!(
            md.contains("2 (1 of them diagnostic: unconfined, not a qualification) passed"),
            "{md}"
        );
        assert!(svg(&f).contains("diagnostic: unconfined"));
    }

    fn built(arch: &str) -> Comparison {
        let mut c = comparison_of_cycles(12, 1.0, 1.0);
        c.machine = Some(Machine {
            arch: arch.into(),
            ..machine("6.8.0-45-generic")
        });
        c
    }

    fn with_programs(mut machines: Vec<Measured>, shas: &[&str]) -> Vec<Measured> {
        for (m, sha) in machines.iter_mut().zip(shas) {
            m.programs = Ok(Programs::from([
                ("link".to_string(), sha.to_string()),
                ("link-plugin-model".to_string(), "f".repeat(64)),
            ]));
        }
        machines
    }

    #[test]
    fn one_architecture_running_two_builds_is_refused_unless_allowed_and_said() {
        let machines = || fleet_of(vec![built("x86_64"), built("x86_64"), built("aarch64")]);
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let c = "c".repeat(64);
        let mixed = with_programs(machines(), &[&a, &b, &c]);
        let refused = build(&mixed, false).unwrap_err().to_string();
        assert!(
            refused.contains("machines of architecture x86_64 ran different builds of `link`")
                && refused.contains("aaaaaaaaaaaa on m0")
                && refused.contains("bbbbbbbbbbbb on m1")
                && refused.contains("--allow-mixed"),
            "{refused}"
        );
        assert!(!refused.contains("aarch64"), "{refused}");
        assert!(!refused.contains("link-plugin-model"), "{refused}");
        let f = build(&mixed, true).unwrap();
        assert_eq!(f.warnings.len(), 1, "{:?}", f.warnings);
        assert!(markdown(&f).contains("ran different builds of `link`"));
        // The twin: one build per architecture, the other architecture's own.
        let same = with_programs(machines(), &[&a, &a, &c]);
        let f = build(&same, false).unwrap();
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        assert_eq!(f.machines[2].programs.as_ref().unwrap()["link"], c);
    }

    #[test]
    fn programs_are_read_from_the_reports_beside_the_comparison_or_said_unknown() {
        let dir = std::env::temp_dir().join(format!("lnk-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = comparison_of_cycles(12, 1.0, 1.0);
        // As written on the machine that ran it: paths of that machine.
        c.mini.report = "/elsewhere/target/runtime-mini.json".into();
        c.link.report = "/elsewhere/target/runtime-runs/link-1.json".into();
        let report = |profile, name: &str| {
            let mut r = link_report::Report::new(profile, Mode::Confined);
            r.artifacts.push(link_report::records::Artifact {
                name: name.into(),
                sha256: "d".repeat(64),
                ..Default::default()
            });
            serde_json::to_vec(&r).unwrap()
        };
        let comparison = dir.join("runtime-comparison.json");
        std::fs::write(&comparison, serde_json::to_vec(&c).unwrap()).unwrap();
        std::fs::write(
            dir.join("runtime-mini.json"),
            report(link_report::Profile::Mini, "link-mini-harness"),
        )
        .unwrap();
        let missing = load(std::slice::from_ref(&dir)).unwrap();
        let f = build(&missing, false).unwrap();
        assert!(
            f.warnings[0].contains("its programs are unknown")
                && f.warnings[0].contains("link-1.json"),
            "{:?}",
            f.warnings
        );
        assert_eq!(f.machines[0].programs, None);
        std::fs::create_dir_all(dir.join("runtime-runs")).unwrap();
        std::fs::write(
            dir.join("runtime-runs/link-1.json"),
            report(link_report::Profile::Link, "link"),
        )
        .unwrap();
        let read = load(std::slice::from_ref(&dir)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let f = build(&read, false).unwrap();
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        let programs = f.machines[0].programs.clone().unwrap();
        assert_eq!(
            programs.keys().collect::<Vec<_>>(),
            ["link", "link-mini-harness"]
        );
    }

    #[test]
    fn mixed_sources_are_refused_unless_allowed_and_then_said() {
        let a = comparison_of_cycles(12, 1.0, 1.0);
        let mut b = comparison_of_cycles(12, 1.0, 1.0);
        b.link.source = "other".into();
        b.mini.source = "other".into();
        let machines = fleet_of(vec![a, b]);
        let refused = build(&machines, false).unwrap_err().to_string();
        assert!(refused.contains("different sources") && refused.contains("--allow-mixed"));
        let f = build(&machines, true).unwrap();
        assert_eq!(f.warnings.len(), 1);
        assert!(markdown(&f).contains("**warning**: the machines measured different sources"));
        assert!(svg(&f).contains("warning: the machines measured different sources"));
    }
}
