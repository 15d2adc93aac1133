//! The Markdown page of a comparison, and the per-phase table stderr shows too.

use super::build::ratio;
use super::{Comparison, PhaseStats, Side};
use crate::stats::Spread;
use link_report::{Profile, Status, TracePhase};

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
    let mut md = format!(
        "# Runtime comparison: Mini vs full Link ({})\n\n\
         Source: mini `{}`, link `{}`. {} Mini and {} Link timed runs, interleaved \
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
    md.push_str(&format!(
        "\n## Each side's median run\n\n\
         The run whose phase time without idle is the median of its side's passed runs \
         (mini run {}, link run {}; copied to `runtime-mini.json` / `runtime-link.json`).\n\n",
        run_index(c, &c.mini),
        run_index(c, &c.link)
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
        "processes started",
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
        md.push_str(&crate::bench_sandbox::markdown(b));
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
            Some(why) => why.replace('|', "/"),
        },
    }
}

fn fms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

fn samples(s: Option<&Spread>) -> String {
    s.map(|s| format!("{} ({} runs)", s.samples, s.runs))
        .unwrap_or_else(|| "—".into())
}

/// The per-phase table: medians, spreads, sample counts and ratios with intervals.
pub fn stats_markdown(c: &Comparison) -> String {
    let mut md = String::from(
        "## Phases (ms): median (IQR), samples, Link/Mini ratio of medians [95% interval]\n\n\
         | phase | Mini median (IQR) | Mini samples | Link median (IQR) | Link samples | Link/Mini [95% CI] |\n\
         |---|---|---|---|---|---|\n",
    );
    let line = |s: &PhaseStats, label: &str| {
        format!(
            "| {label} | {} | {} | {} | {} | {} |\n",
            spread_cell(s.mini.as_ref(), s.mini_absent.as_deref()),
            samples(s.mini.as_ref()),
            spread_cell(s.link.as_ref(), s.link_absent.as_deref()),
            samples(s.link.as_ref()),
            s.ratio
                .map(|r| r.ratio_text())
                .unwrap_or_else(|| "—".into())
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
    md.push_str(&format!(
        "\nMethod: {}. A side that did not pass has no figure (`skipped: …`/`failed: …`, or \
         `—` where the phase does not exist); idle is a fixed wait, shown apart; a phase \
         within another is in no total.\n",
        c.method
    ));
    md.push_str(&host_exit_markdown(c));
    md.push_str(&startup_cpu_markdown(c));
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
         it), median of passed runs:",
    );
    for s in &cpu.sides {
        let processes = s.processes.map_or("—".into(), |n| n.to_string());
        md.push_str(&format!(
            " {} {} ({processes} processes; {} runs);",
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
         process exited, seen on its pidfd), median of each run's own ratio [95% interval]:",
    );
    for e in &c.host_exit {
        let figure = match (&e.ratio, &e.absent) {
            (Some(r), _) => format!(
                "{} (+{} ms; {} runs)",
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
