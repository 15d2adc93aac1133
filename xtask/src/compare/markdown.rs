//! The Markdown page of a comparison, and the per-phase table stderr shows too.

use super::build::ratio;
use super::{Comparison, PhaseStats, Side, TracedSide};
use crate::paired::LogMean;
use crate::stats::Spread;
use link_report::{Profile, Status, TracePhase};
use std::path::Path;

pub fn status_word(s: Status) -> &'static str {
    s.as_str()
}

/// Milliseconds with one decimal.
pub fn ms(ns: u128) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The Markdown page.
pub fn markdown(c: &Comparison) -> String {
    let count = |p: Profile| c.runs.iter().filter(|r| r.profile == p).count();
    let checked = match &c.source_checked {
        Some(how) => format!("checked: {how}"),
        None => "unverified: not checked against a checkout".into(),
    };
    let mut md = format!(
        "# Runtime comparison: Mini vs full Link ({})\n\n\
         Source: mini `{}`, link `{}` ({checked}). {} Mini and {} Link timed runs, interleaved \
         (Mini, Link, Mini, ...), ROUNDS {} each.\n\n",
        c.mode,
        c.mini.source,
        c.link.source,
        count(Profile::Mini),
        count(Profile::Link),
        c.rounds
    );
    if !c.warnings.is_empty() {
        md.push_str("## Warnings\n\n");
        for w in &c.warnings {
            md.push_str(&format!("- **warning**: {w}\n"));
        }
        md.push('\n');
    }
    md.push_str(&stats_markdown(c));
    let copied = |p: Profile| {
        crate::runtime::files(Path::new(""), p, c.mode)
            .report
            .display()
            .to_string()
    };
    md.push_str(&format!(
        "\n## Each side's median run\n\n\
         The run whose phase time without idle is the median of its side's passed runs \
         (mini run {}, link run {}; copied to `{}` / `{}`).\n\n",
        run_index(c, &c.mini),
        run_index(c, &c.link),
        copied(Profile::Mini),
        copied(Profile::Link)
    ));
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
    // A side that did not pass has no figures: a dash, never a zero, and no ratio.
    let both = c.mini.outcome == Status::Passed && c.link.outcome == Status::Passed;
    let fig = |s: &Side, text: String| {
        if s.outcome == Status::Passed {
            text
        } else {
            "—".into()
        }
    };
    let n = |m: u64, l: u64| (both && m > 0).then(|| l as f64 / m as f64);
    row(
        &mut md,
        "processes seen (sampled at phase ends)",
        fig(&c.mini, c.mini.processes.to_string()),
        fig(&c.link, c.link.processes.to_string()),
        n(c.mini.processes, c.link.processes),
    );
    row(
        &mut md,
        "peak processes sampled",
        fig(&c.mini, c.mini.peak_sampled_processes.to_string()),
        fig(&c.link, c.link.peak_sampled_processes.to_string()),
        n(c.mini.peak_sampled_processes, c.link.peak_sampled_processes),
    );
    let rss = |s: &Side| {
        fig(
            s,
            s.peak_rss_bytes
                .map(mib)
                .unwrap_or_else(|| "no samples".into()),
        )
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
    let art = |s: &Side| {
        if s.artifacts == 0 {
            "—".into()
        } else {
            format!("{} ({} programs)", mib(s.artifact_bytes), s.artifacts)
        }
    };
    row(
        &mut md,
        "artifact bytes",
        art(&c.mini),
        art(&c.link),
        (c.mini.artifacts > 0 && c.link.artifacts > 0)
            .then(|| c.link.artifact_bytes as f64 / c.mini.artifact_bytes.max(1) as f64),
    );
    row(
        &mut md,
        "all phases except the fixed idle wait (ms)",
        fig(&c.mini, ms(c.mini.work_phase_ns)),
        fig(&c.link, ms(c.link.work_phase_ns)),
        if both {
            ratio(Some(c.mini.work_phase_ns), Some(c.link.work_phase_ns))
        } else {
            None
        },
    );
    md.push_str(&noise_markdown(c));
    md.push_str(&execs_markdown(c));
    if let Some(b) = &c.sandbox_bench {
        md.push_str(&crate::bench_sandbox::report::markdown(b));
    }
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
    md.push_str("\n## Reports\n\n");
    for r in &c.runs {
        md.push_str(&format!(
            "- {} run {}: `{}` (sha256 {}), {}\n",
            r.profile,
            r.index,
            r.report,
            r.report_sha256,
            status_word(r.outcome)
        ));
    }
    if c.runs.is_empty() {
        md.push_str(&format!(
            "- `{}` (sha256 {}), `{}` (sha256 {})\n",
            c.mini.report, c.mini.report_sha256, c.link.report, c.link.report_sha256
        ));
    }
    md
}

fn run_index(c: &Comparison, s: &Side) -> String {
    c.runs
        .iter()
        .find(|r| r.profile == s.profile && r.report == s.report)
        .map(|r| r.index.to_string())
        .unwrap_or_else(|| "—".into())
}

/// `median (IQR q1–q3)` in ms, or why there is no figure.
fn spread_cell(s: Option<&Spread>, absent: Option<&str>) -> String {
    match s {
        Some(s) => format!(
            "{} (IQR {}–{})",
            fms(s.median_ns),
            fms(s.q1_ns),
            fms(s.q3_ns)
        ),
        None => match absent {
            Some("no such phase") | None => "—".into(),
            Some(why) => cell(why),
        },
    }
}

fn fms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

fn samples(s: Option<&Spread>) -> String {
    s.map(|s| format!("{} ({} cycles)", s.samples, s.runs))
        .unwrap_or_else(|| "—".into())
}

/// `+4.1%`: what a paired test of these pairs could detect.
fn detectable(m: Option<&LogMean>) -> String {
    m.and_then(|m| m.mde)
        .map_or("—".into(), |d| format!("{:.1}%", d * 100.0))
}

/// The Link/Mini cell: the paired figure, Link's own time for Link-only work, or why none.
fn ratio_cell(s: &PhaseStats) -> String {
    if s.link_only {
        return match &s.link_time {
            Some(t) => format!("Link-only: {}", time_text(t)),
            None => "Link-only".into(),
        };
    }
    match (&s.paired, &s.mini_absent, &s.link_absent) {
        (Some(r), _, _) => r.text(),
        (None, Some(why), _) | (None, None, Some(why)) => cell(why),
        (None, None, None) => "—".into(),
    }
}

/// A geometric mean time with its interval, in ms.
fn time_text(t: &LogMean) -> String {
    match (t.low, t.high) {
        (Some(l), Some(h)) => format!("{} ms [{}–{}]", fms(t.estimate), fms(l), fms(h)),
        _ => format!("{} ms", fms(t.estimate)),
    }
}

/// Text fit for a table cell: a `|` would end the cell, a newline the row.
pub fn cell(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// The per-phase table: medians, spreads, sample counts, the paired ratios with intervals, what
/// they could detect, and the same from CPU time.
pub fn stats_markdown(c: &Comparison) -> String {
    let mut md = String::from("## Phases (ms), from paired timing cycles\n\n");
    if let Some(sm) = &c.sampling {
        md.push_str(&format!(
            "{} pairs (each one Mini and one full Link cycle back to back, who goes first \
             alternating) in {:.0} s of a {:.0} s budget, aiming at ±{}% (at least {} pairs).\n\n",
            c.pairs, sm.elapsed_s, sm.budget_s, sm.precision_pct, sm.min_pairs
        ));
    }
    if c.cycles.is_empty() {
        md.push_str(&format!(
            "No timing cycle ran, so no phase has a figure: {}.\n\n",
            [&c.mini, &c.link]
                .iter()
                .filter(|s| s.outcome != Status::Passed)
                .map(|s| cell(&format!(
                    "{} {}: {}",
                    s.profile,
                    status_word(s.outcome),
                    s.reason.as_deref().unwrap_or("no reason given")
                )))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    md.push_str(
        "| phase | Mini median (IQR) | Mini samples | Link median (IQR) | Link samples | Link/Mini [95% CI] | detectable | CPU Link/Mini [95% CI] |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let line = |s: &PhaseStats, label: &str| {
        format!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} |\n",
            spread_cell(s.mini.as_ref(), s.mini_absent.as_deref()),
            samples(s.mini.as_ref()),
            spread_cell(s.link.as_ref(), s.link_absent.as_deref()),
            samples(s.link.as_ref()),
            ratio_cell(s),
            detectable(
                s.paired
                    .as_ref()
                    .or(s.link_time.as_ref().filter(|_| s.link_only))
            ),
            s.cpu_ratio.map_or("—".into(), |r| r.text()),
        )
    };
    for s in c.stats.iter().filter(|s| !s.fixed_wait) {
        match &s.within {
            Some(outer) => md.push_str(&line(s, &format!("{} (within {outer})", s.name))),
            None => md.push_str(&line(s, &s.name)),
        }
    }
    for s in c.stats.iter().filter(|s| s.fixed_wait) {
        md.push_str(&line(s, &format!("{} (fixed wait)", s.name)));
    }
    if let Some(t) = &c.shared_total {
        md.push_str(&format!(
            "\nShared work (every phase both sides run, summed per cycle; no Link-only work): \
             Link/Mini {}.\n",
            t.text()
        ));
    }
    md.push_str(&position_markdown(c));
    md.push_str(&format!(
        "\nMethod: {}. A side that did not pass has no figure (`skipped: …`/`failed: …`, or \
         `—` where the phase does not exist); Link-only work has no ratio and is shown as \
         Link's own time; a phase within another is in no total; `detectable` is the smallest \
         change these pairs could find.\n",
        c.method
    ));
    md.push_str(&host_exit_markdown(c));
    md.push_str(&startup_cpu_markdown(c));
    md.push_str(&ab_markdown(c));
    md
}

/// Whether who ran first in a pair moved the figure.
fn position_markdown(c: &Comparison) -> String {
    let effects: Vec<String> = c
        .stats
        .iter()
        .filter_map(|s| Some(format!("{} {}", s.name, s.position_effect?.ratio_text())))
        .collect();
    if effects.is_empty() {
        return String::new();
    }
    format!(
        "\nOrder effect (Link/Mini in pairs where Mini ran first over pairs where Link ran \
         first; 1 when the order does not matter, Welch interval): {}.\n",
        effects.join(", ")
    )
}

/// `--against`: new/old per side and phase, and the gate's verdict on each.
fn ab_markdown(c: &Comparison) -> String {
    let Some(ab) = &c.ab else {
        return String::new();
    };
    let mut md = format!(
        "\n## Against `{}` (new: target/release; old: that directory)\n\n\
         Units of four cycles (each build on each side, back to back, orders balanced); \
         new/old per side and phase with a paired t interval. A figure regressed when the \
         one-sided paired t test is significant at 5%/{} (Bonferroni) and new/old exceeds \
         {:.0}%.\n\n\
         | phase | side | new/old [95% CI] | detectable | p (slower) | verdict |\n\
         |---|---|---|---|---|---|\n",
        cell(&ab.against),
        ab.tests,
        ab.max_regression
    );
    for r in &ab.rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.phase,
            r.profile,
            r.new_over_old.text(),
            detectable(Some(&r.new_over_old)),
            r.new_over_old
                .p_above
                .map_or("—".into(), |p| format!("{p:.1e}")),
            r.kind.as_str()
        ));
    }
    md
}

/// Start-up's CPU time, and the floor it puts under start-up on this machine.
fn startup_cpu_markdown(c: &Comparison) -> String {
    let Some(cpu) = &c.startup_cpu else {
        return String::new();
    };
    let figure = |ns: Option<f64>| ns.map_or("—".into(), |ns| format!("{:.1} ms", ns / 1e6));
    let mut md = String::from(
        "\nStart-up CPU time (the host and every process it started that still ran, all \
         their threads, summed from `/proc/PID/task/*/schedstat` when the ready line came; \
         exited processes and threads and the sandbox probe started after `ready` are not in \
         it), median of passed cycles:",
    );
    for s in &cpu.sides {
        let processes = s.processes.map_or("—".into(), |n| n.to_string());
        md.push_str(&format!(
            " {} {} ({processes} processes; {} cycles);",
            s.profile,
            figure(s.median_ns),
            s.runs
        ));
    }
    if let Some(r) = &cpu.ratio {
        md.push_str(&format!(" Link/Mini {}.", r.ratio_text()));
    } else {
        md.pop();
        md.push('.');
    }
    md.push_str(&format!(
        " On {} CPUs no start-up can be shorter than its CPU time / {}:",
        cpu.cpus, cpu.cpus
    ));
    for s in &cpu.sides {
        let over = s.over_floor.map_or("—".into(), |r| r.ratio_text());
        md.push_str(&format!(
            " {} {}, start-up {over} of it;",
            s.profile,
            figure(s.floor_ns)
        ));
    }
    md.pop();
    md.push_str(".\n");
    md
}

/// Each side's shutdown against its host's own exit time.
fn host_exit_markdown(c: &Comparison) -> String {
    if c.host_exit.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\nShutdown / the host's own exit time (`host_exit`: from `link down` until the host \
         process exited, seen on its pidfd), median of each cycle's own ratio [95% interval]:",
    );
    for e in &c.host_exit {
        let figure = match (&e.ratio, &e.absent) {
            (Some(r), _) => format!(
                "{} (+{} ms; {} cycles)",
                r.ratio_text(),
                e.median_over_ns
                    .map_or("—".into(), |ns| format!("{:.2}", ns / 1e6)),
                e.runs
            ),
            (None, Some(why)) => why.clone(),
            (None, None) => "—".into(),
        };
        md.push_str(&format!(" {} {figure};", e.profile));
    }
    md.pop();
    md.push_str(".\n");
    md
}

fn noise_markdown(c: &Comparison) -> String {
    if c.runs.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\n## Machine load before each run\n\n\
         | run | load 1/5/15 min | CPUs | CPU pressure some avg10 |\n|---|---|---|---|\n",
    );
    let f = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "—".into());
    for r in &c.runs {
        md.push_str(&format!(
            "| {} {} | {}/{}/{} | {} | {} |\n",
            r.profile,
            r.index,
            f(r.noise.load1),
            f(r.noise.load5),
            f(r.noise.load15),
            r.noise.cpus,
            r.noise
                .cpu_pressure_some_avg10
                .map(|p| format!("{p:.1}%"))
                .unwrap_or_else(|| "not available".into())
        ));
    }
    md
}

fn side_outcome(s: &Side) -> String {
    match &s.reason {
        Some(r) if s.outcome != Status::Passed => {
            format!("**{}**: {}", status_word(s.outcome), cell(r))
        }
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
    // Execs no phase holds (before start-up, between phases, after shutdown): with them the
    // rows add up to the whole trace (`host_exit` lies within `shutdown`).
    let whole = |s: &Side, pick: fn(&TracedSide) -> Option<u64>| match s
        .traced
        .as_ref()
        .filter(|t| t.available)
        .and_then(pick)
    {
        Some(n) => format!("{n} | — | —"),
        None => "— | — | —".into(),
    };
    if !c.execs.is_empty() {
        for (label, pick) in [
            (
                "outside every phase",
                (|t| t.outside_phases_execs) as fn(&TracedSide) -> Option<u64>,
            ),
            ("whole trace", |t| t.total_execs),
        ] {
            md.push_str(&format!(
                "| {label} | — | {} | {} |\n",
                whole(&c.mini, pick),
                whole(&c.link, pick)
            ));
        }
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
