//! The trace parser on real traces (tests/data) and on broken ones.

use super::parse::parse_epoch;
use super::*;
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(data(name)).unwrap()
}

fn phase(name: &str, start: &str, end: &str) -> Phase {
    let (s, e) = (parse_epoch(start).unwrap(), parse_epoch(end).unwrap());
    Phase {
        name: name.into(),
        round: 0,
        start_unix_ns: s,
        end_unix_ns: e,
        duration_ns: e - s,
        cpu_ns: None,
    }
}

/// (execs, executing pids, resident processes) per phase, after asserting availability.
fn counts(name: &str, phases: &[Phase]) -> Vec<(u64, u64, u64)> {
    let section = analyze(&read(name), phases);
    assert!(section.available, "{name}: {:?}", section.reason);
    assert_eq!(section.phases.len(), phases.len());
    for (got, want) in section.phases.iter().zip(phases) {
        assert_eq!((&got.name, got.round), (&want.name, want.round));
    }
    section
        .phases
        .iter()
        .map(|p| (p.execs, p.executing_pids, p.resident_processes))
        .collect()
}

fn unavailable(text: &str, phases: &[Phase]) -> String {
    let section = analyze(text, phases);
    assert!(!section.available, "expected unavailable, got {section:?}");
    assert!(section.phases.is_empty(), "no counts when unavailable");
    section.reason.expect("a reason")
}

fn pipeline_phases() -> Vec<Phase> {
    vec![
        phase("start", "1796068337.573501", "1796068337.580000"),
        phase("pipeline", "1796068337.582000", "1796068337.585000"),
        phase("drain", "1796068337.600000", "1796068337.607400"),
        // wc's exec started at .584015 but completes at .584729: only tr's counts.
        phase("cut", "1796068337.584000", "1796068337.584600"),
    ]
}

#[test]
fn pipeline_counts_resumed_execs_and_live_children() {
    assert_eq!(
        counts("pipeline.trace", &pipeline_phases()),
        vec![(1, 1, 1), (2, 2, 3), (0, 0, 1), (1, 1, 3)]
    );
}

#[test]
fn execs_between_phases_are_counted_outside_them_and_add_up_to_the_whole() {
    let all = pipeline_phases();
    let (start, drain) = (all[0].clone(), all[2].clone());
    let section = analyze(&read("pipeline.trace"), &[start, drain]);
    assert!(section.available, "{:?}", section.reason);
    let in_phases: u64 = section.phases.iter().map(|p| p.execs).sum();
    // sh in `start`; tr and wc in the gap the dropped `pipeline` phase leaves.
    assert_eq!(in_phases, 1);
    assert_eq!(section.outside_phases_execs, Some(2));
    assert_eq!(section.total_execs, Some(3));
    let table = render_table(&section);
    assert!(table.contains("outside every phase"), "{table}");
    assert!(table.contains("whole trace"), "{table}");
}

#[test]
fn path_search_failures_are_not_execs() {
    let phases = [
        phase("search", "1796068342.290000", "1796068342.302700"),
        phase("second", "1796068342.303000", "1796068342.321000"),
        phase("whole", "1796068342.272914", "1796068342.326153"),
    ];
    // `second`: env then true in one pid: two execs, one executing pid.
    // `whole`: ends on the root's exit line, so nothing is resident any more.
    assert_eq!(
        counts("path_search.trace", &phases),
        vec![(0, 0, 1), (2, 1, 2), (4, 3, 0)]
    );
}

#[test]
fn thread_exec_completes_on_the_leader_pid() {
    let phases = [
        phase("before", "1796068427.866031", "1796068427.900000"),
        phase("thread_exec", "1796068428.000000", "1796068428.070000"),
        phase("orphan", "1796068428.100000", "1796068428.300000"),
    ];
    assert_eq!(
        counts("thread_exec_c.trace", &phases),
        vec![(1, 1, 2), (1, 1, 2), (0, 0, 1)]
    );
    let trace = Trace::parse(&read("thread_exec_c.trace")).unwrap();
    let pids: Vec<i32> = trace.execs.iter().map(|e| e.pid).collect();
    assert_eq!(
        pids,
        vec![8728, 8728],
        "the thread 8730 never owns an image"
    );
    assert_eq!(trace.processes.len(), 2, "8730 is a thread: {trace:?}");
}

#[test]
fn pid_changed_marker_is_an_unfinished_exec() {
    let phases = [phase("exec", "1796068427.700000", "1796068427.714000")];
    assert_eq!(counts("thread_exec_py.trace", &phases), vec![(1, 1, 1)]);
}

#[test]
fn process_tree_tells_threads_from_processes() {
    let phases = [
        phase("threads", "1796068439.083637", "1796068439.100000"),
        phase("spawn", "1796068439.100000", "1796068439.200000"),
        phase("kill", "1796068439.200000", "1796068439.300000"),
        phase("end", "1796068439.300000", "1796068439.409400"),
    ];
    assert_eq!(
        counts("process_tree.trace", &phases),
        vec![(1, 1, 2), (2, 2, 3), (0, 0, 2), (0, 0, 1)]
    );
    let trace = Trace::parse(&read("process_tree.trace")).unwrap();
    let pids: Vec<i32> = trace.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![8880, 8882, 8883, 8884]);
    assert!(trace.processes.iter().all(|p| p.ended_ns.is_some()));
    // 8883 printed lines before clone3 returned it: born at its first line.
    assert_eq!(trace.processes[2].born_ns, 1_796_068_439_176_146_000);
}

#[test]
fn pid_namespace_children_are_not_phantoms() {
    let phases = [
        phase("sandbox", "1796068750.630837", "1796068750.700000"),
        phase("inner", "1796068750.700000", "1796068750.711000"),
        phase("after", "1796068750.711000", "1796068750.712600"),
    ];
    assert_eq!(
        counts("bwrap_pidns.trace", &phases),
        vec![(2, 2, 3), (1, 1, 3), (0, 0, 1)]
    );
    let trace = Trace::parse(&read("bwrap_pidns.trace")).unwrap();
    let pids: Vec<i32> = trace.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![16257, 16258, 16259, 16260], "no pid 2 or 3");
}

#[test]
fn pid_namespace_threads_and_early_children() {
    let phases = [
        phase("start", "1796068798.596077", "1796068798.615000"),
        phase("tree", "1796068798.615000", "1796068798.700000"),
        phase("kill", "1796068798.700000", "1796068798.800000"),
        phase("end", "1796068798.800000", "1796068798.940000"),
    ];
    assert_eq!(
        counts("bwrap_pidns_tree.trace", &phases),
        vec![(2, 2, 3), (2, 2, 5), (0, 0, 4), (0, 0, 2)]
    );
    let trace = Trace::parse(&read("bwrap_pidns_tree.trace")).unwrap();
    let pids: Vec<i32> = trace.processes.iter().map(|p| p.pid).collect();
    // 17913 is the namespaced thread; 17926 printed before `clone3 ... = 5` returned.
    assert_eq!(pids, vec![17905, 17907, 17912, 17914, 17926, 17928]);
    assert!(trace.processes.iter().all(|p| p.ended_ns.is_some()));
}

#[test]
fn a_call_strace_could_not_decode_is_counted_around() {
    // A real capture: each `true` is killed through its pidfd right after its exec, and
    // strace wrote one of them as `???( <unfinished ...>` / `<... ??? resumed>) = ?`.
    let text = read("killed_after_exec.trace");
    assert!(text.contains(" ???( <unfinished ...>\n"));
    assert!(text.contains(" <... ??? resumed>) = ?\n"));
    let trace = Trace::parse(&text).expect("an undecoded call is not malformed");
    let execs = text
        .lines()
        .filter(|l| {
            (l.contains(" execve(") && l.ends_with(") = 0"))
                || l.ends_with("<... execve resumed>) = 0")
        })
        .count();
    assert_eq!(trace.execs.len(), execs);
    assert_eq!(execs, 13, "python and twelve `true`");
    // python and the twelve children, every one ended (by its exit or SIGKILL).
    assert_eq!(trace.processes.len(), 13);
    assert!(trace.processes.iter().all(|p| p.ended_ns.is_some()));
    let whole = phase("whole", "1796137160.383750", "1796137161.016090");
    assert_eq!(
        counts("killed_after_exec.trace", &[whole]),
        vec![(13, 13, 0)]
    );

    // Without the kill line the call stays unfinished: still a truncated trace.
    let cut: String = text
        .lines()
        .filter(|l| !l.starts_with("26871 ") || !l.contains("+++ killed"))
        .filter(|l| !l.contains("<... ??? resumed>"))
        .map(|l| format!("{l}\n"))
        .collect();
    let reason = unavailable(&cut, &[phase("a", "1796137160.383750", "1796137161.0")]);
    assert!(reason.contains("never completed"), "{reason}");
}

#[test]
fn empty_traces_are_unavailable() {
    let phases = pipeline_phases();
    for text in ["", "\n", "  \n\n"] {
        assert!(unavailable(text, &phases).contains("empty"));
    }
}

#[test]
fn a_line_cut_mid_way_is_truncated() {
    let text = read("pipeline.trace");
    let cut = &text[..text.find("<... execve resumed>) = 0").unwrap() + 12];
    let reason = unavailable(cut, &pipeline_phases());
    assert!(
        reason.contains("truncated") && reason.contains("mid-way"),
        "{reason}"
    );
}

#[test]
fn an_unfinished_call_never_resumed_is_truncated() {
    let text = read("pipeline.trace");
    let head: String = text.lines().take(11).map(|l| format!("{l}\n")).collect();
    assert!(head.ends_with("<unfinished ...>\n"));
    let reason = unavailable(&head, &pipeline_phases());
    assert!(
        reason.contains("truncated") && reason.contains("never completed"),
        "{reason}"
    );
}

#[test]
fn a_root_that_never_exits_is_truncated() {
    let text = read("pipeline.trace");
    let head: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
    let reason = unavailable(&head, &[phase("a", "1796068337.573501", "1796068337.5800")]);
    assert!(reason.contains("never exited"), "{reason}");
}

#[test]
fn malformed_traces_are_unavailable_with_the_line() {
    let text = read("pipeline.trace");
    let phases = pipeline_phases();

    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(5, "this is not strace output");
    let reason = unavailable(&(lines.join("\n") + "\n"), &phases);
    assert!(reason.contains("malformed at line 6"), "{reason}");

    // Recorded without -f: no pid column.
    let no_pids: String = text
        .lines()
        .map(|l| format!("{}\n", l.split_once(' ').unwrap().1.trim_start()))
        .collect();
    assert!(unavailable(&no_pids, &phases).contains("strace -f"));

    // Recorded with -tt instead of -ttt.
    let clock = text.replace("1796068337.", "19:46:33.");
    assert!(unavailable(&clock, &phases).contains("-ttt"));

    // A resumed call with no start.
    let orphan: String = text
        .lines()
        .filter(|l| !l.contains("execve(\"/usr/bin/tr\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let reason = unavailable(&orphan, &phases);
    assert!(reason.contains("never started"), "{reason}");
}

#[test]
fn phases_outside_the_trace_are_refused() {
    let text = read("pipeline.trace");
    let reason = unavailable(&text, &[phase("x", "1700000000.0", "1700000001.0")]);
    assert!(reason.contains("does not match"), "{reason}");
    assert!(unavailable(&text, &[]).contains("no phases"));
}

#[test]
fn apply_to_report_fills_the_section_and_serializes() {
    let mut report = Report {
        phases: pipeline_phases(),
        ..Report::new(link_report::Profile::Mini, link_report::Mode::Confined)
    };
    apply_to_report(&mut report, &data("pipeline.trace"));
    let section = report.trace.clone().unwrap();
    assert!(section.available);
    assert_eq!(section.phases[1].execs, 2);
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    assert_eq!(json["trace"]["available"], true);
    assert_eq!(json["trace"]["phases"][1]["resident_processes"], 3);

    apply_to_report(&mut report, &data("missing.trace"));
    let section = report.trace.unwrap();
    assert!(!section.available);
    assert!(section.reason.unwrap().contains("cannot read trace"));
}

#[test]
fn table_lists_each_phase_or_the_reason() {
    let section = analyze(&read("pipeline.trace"), &pipeline_phases());
    let table = render_table(&section);
    assert_eq!(
        table.lines().count(),
        1 + 4 + 2,
        "{table}: a header, the phases, outside and whole"
    );
    assert!(table.lines().next().unwrap().contains("executing pids"));
    assert!(table.contains("pipeline"), "{table}");
    let table = render_table(&analyze("", &pipeline_phases()));
    assert!(
        table.starts_with("trace unavailable: trace is empty"),
        "{table}"
    );
}

/// Says the live test is skipped for `why`, or fails it under `LNK_REQUIRE_NATIVE=1`.
fn skip_strace(why: &str) {
    let run = crate::probe::require_or_skip(
        "strace",
        crate::probe::ProbeStatus::Unavailable,
        why,
        crate::probe::ENV_REQUIRE_NATIVE,
    );
    assert!(!run, "an unavailable strace is never run");
}

/// Records a fresh trace with the installed strace, so a format change shows up here.
/// Without strace, or where ptrace is refused, it is skipped loudly, or fails under
/// `LNK_REQUIRE_NATIVE=1` (CI installs strace).
#[test]
fn live_strace_recording_is_counted() {
    let Ok(strace) = which_strace() else {
        skip_strace("strace is not installed (apt-get install -y strace)");
        return;
    };
    let dir = live_dir();
    let out = dir.join("live.trace");
    let start = link_os::sample::unix_ns();
    let status = std::process::Command::new(strace)
        .args(["-f", "-ttt", "-e", "trace=process", "-o"])
        .arg(&out)
        .args(["/bin/sh", "-c", "/bin/true & wait; /bin/true"])
        .status()
        .unwrap();
    let end = link_os::sample::unix_ns();
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    std::fs::remove_dir_all(&dir).ok();
    if !status.success() || text.is_empty() {
        skip_strace(&format!(
            "strace cannot trace here ({status}, {} bytes of trace; ptrace refused?)",
            text.len()
        ));
        return;
    }
    let trace = Trace::parse(&text).unwrap();
    // Widen the phase to the trace itself: the clocks agree but the bounds must be inside.
    let whole = Phase {
        name: "whole".into(),
        start_unix_ns: trace.first_ns.max(start),
        end_unix_ns: trace.last_ns.min(end),
        ..Phase::default()
    };
    let counted = trace.count(&whole);
    assert_eq!(counted.execs, 3, "sh, true, true:\n{text}");
    assert_eq!(counted.resident_processes, 0, "{text}");
}

fn which_strace() -> Result<PathBuf, ()> {
    ["/usr/bin/strace", "/bin/strace", "/usr/local/bin/strace"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or(())
}

fn live_dir() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let dir = PathBuf::from(home).join(format!(
        ".cache/lnk-t/trace-{}-{}",
        std::process::id(),
        link_os::sample::unix_ns()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
