//! The built `runtime` example, as a user runs it.
//!
//! Fault injection on the runner's own output: it runs Mini with its stdout and stderr both on
//! a pipe whose read end is already closed (what `runtime … 2>&1 | head -4` becomes once
//! `head` has exited), so every line it prints fails with `EPIPE`. It must neither abort nor
//! panic, and must still stop everything it started and remove its state root.
//!
//! A host killed by SIGKILL mid-run, under a parent that never reaps (the `non_reaping_init`
//! example, as a container's main process may be): its plugins end by their parent-death
//! signal and are adopted by the runner, which must reap them before it exits and name them in
//! `no_orphans`, so that parent is left with no process at all.
//!
//! `runtime report`'s exit status says whether the trace gave counts: 0 when it did, 4 when
//! they are unavailable (the report says why), 2 for bad input with the report untouched.
//!
//! It needs the debug (or release) programs beside the test executable:
//! `cargo build -p link-cli -p link-plugin-measure -p link-plugin-model -p link-mini-harness
//! -p link-mini-connection -p link-plugin-sandbox --bins --examples -p link-harness-conformance`.
//! When they are missing it is skipped loudly, or fails under `LNK_REQUIRE_RUNTIME=1`.

use link_harness_conformance::runtime_process::{test_programs, ENV_REQUIRE_RUNTIME};
use link_harness_conformance::{programs, read_report, write_report};
use link_protocol::plugin::Profile;
use link_report::{runner, CheckName, Mode, Phase, Report, Status};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The programs and the `runtime` example, or why they cannot be used.
fn built() -> Result<(PathBuf, PathBuf), String> {
    let dir = test_programs();
    let runner = dir.join("examples").join("runtime");
    let mut missing: Vec<String> = programs::required(Profile::Mini)
        .into_iter()
        .filter(|p| !dir.join(p).is_file())
        .map(str::to_owned)
        .collect();
    for example in ["runtime", "non_reaping_init"] {
        if !dir.join("examples").join(example).is_file() {
            missing.push(format!("examples/{example}"));
        }
    }
    if missing.is_empty() {
        Ok((dir, runner))
    } else {
        Err(format!(
            "not built in {}: {}; build them with `cargo build -p link-cli -p link-plugin-measure \
             -p link-plugin-model -p link-mini-harness -p link-mini-connection \
             -p link-plugin-sandbox --bins --examples -p link-harness-conformance`",
            dir.display(),
            missing.join(", ")
        ))
    }
}

/// Processes whose command line, environment or working directory mention `needle`, other
/// than this test itself: (pid, exe, command line).
fn mentioning(needle: &str) -> Vec<(i32, String, String)> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let proc_dir = entry.path();
        let read = |name: &str| {
            std::fs::read(proc_dir.join(name))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default()
        };
        let cmdline = read("cmdline");
        let environ = read("environ");
        let cwd = std::fs::read_link(proc_dir.join("cwd"))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        if [&cmdline, &environ, &cwd]
            .iter()
            .any(|s| s.contains(needle))
        {
            let exe = std::fs::read_link(proc_dir.join("exe"))
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            found.push((pid, exe, cmdline));
        }
    }
    found
}

/// The programs and the runner, or `None` after saying why the test is skipped (a failure
/// under `LNK_REQUIRE_RUNTIME=1`).
fn built_or_skip() -> Option<(PathBuf, PathBuf)> {
    match built() {
        Ok(found) => Some(found),
        Err(reason) => {
            assert!(
                std::env::var(ENV_REQUIRE_RUNTIME).as_deref() != Ok("1"),
                "{ENV_REQUIRE_RUNTIME}=1 but the runtime cannot run: {reason}"
            );
            link_harness_conformance::probe::skipped(&format!(
                "SKIPPED (runtime not available): {reason}"
            ));
            None
        }
    }
}

#[test]
fn a_runner_whose_output_is_closed_still_cleans_up() {
    let Some((dir, runner)) = built_or_skip() else {
        return;
    };
    // A parent of its own for the runner's state root, so "removed" is "the parent is empty"
    // and every process of the run mentions it.
    let home = PathBuf::from(std::env::var("HOME").expect("HOME"));
    let base = home.join(".cache/lnk-t");
    let parent = base.join(format!("c{}", std::process::id()));
    let out_dir = base.join(format!("c{}-out", std::process::id()));
    for d in [&parent, &out_dir] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    let report = out_dir.join("report.json");

    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let started = Instant::now();
    let mut child = Command::new(&runner)
        .arg(&dir)
        .arg(&report)
        .args(["mini", "diagnostic", "closed-output-test", "1"])
        .env("LNK_TEST_STATE_DIR", &parent)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("a second write end"))
        .stderr(writer)
        .spawn()
        .expect("starting the runtime example");
    let status = wait_or_kill(&mut child, Duration::from_secs(600));
    eprintln!(
        "runner exited {status:?} after {:?} with stdout and stderr closed",
        started.elapsed()
    );

    // Nothing of the run may be left: give stragglers a moment, then name (and kill) them.
    let needle = parent.display().to_string();
    let wait_until = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let left = mentioning(&needle);
        if left.is_empty() || Instant::now() > wait_until {
            break left;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for (pid, _, _) in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let remaining: Vec<_> = std::fs::read_dir(&parent)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let report_text = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&parent);
    let _ = std::fs::remove_dir_all(&out_dir);

    assert!(
        status.signal().is_none() && !status.core_dumped(),
        "the runner was killed by signal {:?} (6 is the abort of a panic in a panic) when its \
         output was closed",
        status.signal()
    );
    assert!(
        status.code() == Some(runner::PASSED.into()),
        "the runner exited {status:?} (101 is a panic; 1 a failed run) when its output was \
         closed; its report's outcome: {}",
        report_text
            .find("\"outcome\"")
            .map(|at| report_text[at..].chars().take(400).collect::<String>())
            .unwrap_or_else(|| "(no report)".to_owned())
    );
    assert!(
        left.is_empty(),
        "processes of the run are still running after the runner exited: {left:#?}"
    );
    assert!(
        remaining.is_empty(),
        "the runner left its state root behind: {remaining:?}"
    );
    assert!(
        report_text.contains("\"outcome\""),
        "the runner wrote no report to {} with its output closed",
        report.display()
    );
    assert_report_is_this_runs(&report_text, &dir);
}

#[test]
fn a_host_killed_mid_run_leaves_nothing_to_a_non_reaping_init() {
    let Some((dir, runner)) = built_or_skip() else {
        return;
    };
    let home = PathBuf::from(std::env::var("HOME").expect("HOME"));
    let parent = home.join(format!(".cache/lnk-t/k{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).unwrap();
    let report = parent.with_extension("json");
    let mut init = Command::new(dir.join("examples").join("non_reaping_init"))
        .arg(&runner)
        .arg(&dir)
        .arg(&report)
        .args(["mini", "diagnostic", "host-killed-test", "1"])
        .env("LNK_TEST_STATE_DIR", &parent)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the non-reaping init");
    let progress = lines_of(init.stderr.take().expect("piped stderr"));
    let killed = kill_host_after(&progress, "check cold_turn passed", &parent);
    let status = wait_or_kill(&mut init, Duration::from_secs(600));
    let mut left = String::new();
    std::io::Read::read_to_string(&mut init.stdout.take().unwrap(), &mut left).unwrap();
    let said: Vec<String> = progress.try_iter().collect();
    let written = read_report(&report);
    let _ = std::fs::remove_dir_all(&parent);
    let _ = std::fs::remove_file(&report);

    let host = killed.unwrap_or_else(|e| panic!("{e}; the runner said: {said:#?}"));
    let written = written.expect("the runner's report");
    let orphans = written
        .checks
        .iter()
        .find(|c| c.name == CheckName::NoOrphans)
        .expect("a no_orphans check");
    assert!(
        left.is_empty(),
        "the runner exited leaving these to its non-reaping parent (host {host} was killed \
         by SIGKILL after the cold turn):\n{left}\nwhile no_orphans {:?}: {}",
        orphans.outcome,
        orphans.detail
    );
    assert_eq!(
        status.code(),
        Some(runner::FAILED.into()),
        "the run must fail once its host is killed"
    );
    assert_eq!(orphans.outcome, Status::Passed, "{}", orphans.detail);
    for plugin in link_protocol::manifest::programs_of(Profile::Mini) {
        assert!(
            orphans.detail.contains(&format!("{plugin} (pid")),
            "no_orphans does not name {plugin} as adopted and reaped: {}",
            orphans.detail
        );
    }
}

#[test]
fn a_plugin_killed_mid_run_is_named_as_the_first_cause() {
    let Some((dir, runner)) = built_or_skip() else {
        return;
    };
    let home = PathBuf::from(std::env::var("HOME").expect("HOME"));
    let parent = home.join(format!(".cache/lnk-t/p{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).unwrap();
    let report = parent.with_extension("json");
    let mut run = Command::new(&runner)
        .arg(&dir)
        .arg(&report)
        .args(["mini", "diagnostic", "plugin-killed-test", "1"])
        .env("LNK_TEST_STATE_DIR", &parent)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the runner");
    let progress = lines_of(run.stderr.take().expect("piped stderr"));
    // The monitor, as in the finding: the idle phase then fails on its missing socket, later.
    let victim = "link-plugin-measure";
    let killed = kill_after(&progress, "check cold_turn passed", &parent, |exe, _| {
        exe.ends_with(&format!("/{victim}"))
    });
    let status = wait_or_kill(&mut run, Duration::from_secs(600));
    let said: Vec<String> = progress.try_iter().collect();
    let written = read_report(&report);
    let _ = std::fs::remove_dir_all(&parent);
    let _ = std::fs::remove_file(&report);

    killed.unwrap_or_else(|e| panic!("{e}; the runner said: {said:#?}"));
    let written = written.expect("the runner's report");
    assert_eq!(
        status.code(),
        Some(runner::FAILED.into()),
        "the run must fail: {said:#?}"
    );
    assert_eq!(written.outcome.status, Status::Failed);
    let reason = written.outcome.reason.unwrap_or_default();
    let stopped = reason
        .find("link up stopped on its own")
        .unwrap_or_else(|| panic!("the reason does not lead with the host's own stop: {reason}"));
    let named = reason
        .find(victim)
        .unwrap_or_else(|| panic!("the reason does not name {victim}: {reason}"));
    let then = reason
        .find("; then ")
        .unwrap_or_else(|| panic!("the reason does not say what failed then: {reason}"));
    assert!(stopped == 0 && named < then, "{reason}");
}

/// Each line `from` prints, as it comes.
fn lines_of(from: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(from)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits for a `progress` line holding `cue`, then SIGKILLs the host (`link up`) of the run
/// whose state is under `parent`; its pid, or why it could not.
fn kill_host_after(
    progress: &std::sync::mpsc::Receiver<String>,
    cue: &str,
    parent: &Path,
) -> Result<i32, String> {
    kill_after(progress, cue, parent, |exe, cmdline| {
        exe.ends_with("/link") && cmdline.split(' ').nth(1) == Some("up")
    })
}

/// Waits for a `progress` line holding `cue`, then SIGKILLs the one process of the run whose
/// state is under `parent` that `which(exe, cmdline)` picks; its pid, or why it could not.
fn kill_after(
    progress: &std::sync::mpsc::Receiver<String>,
    cue: &str,
    parent: &Path,
    which: impl Fn(&str, &str) -> bool,
) -> Result<i32, String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match progress.recv_timeout(left) {
            Ok(line) if line.contains(cue) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("the runner never printed {cue:?}: {e}")),
        }
    }
    let found: Vec<i32> = mentioning(&parent.display().to_string())
        .into_iter()
        .filter(|(_, exe, cmdline)| which(exe, cmdline))
        .map(|(pid, _, _)| pid)
        .collect();
    let [target] = found[..] else {
        return Err(format!("expected one process to kill, found {found:?}"));
    };
    let pid = rustix::process::Pid::from_raw(target).expect("a positive pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)
        .map_err(|e| format!("kill -9 of {target}: {e}"))?;
    Ok(target)
}

/// `child`'s exit status; killed (and the test failed) if it runs past `limit`.
fn wait_or_kill(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{child:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The report is the runner's own, not a leftover: it names these programs.
fn assert_report_is_this_runs(report: &str, dir: &Path) {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let shown = serde_json::to_string(&dir.display().to_string()).unwrap();
    assert!(
        report.contains(shown.trim_matches('"')),
        "the report does not name the programs directory {}",
        dir.display()
    );
}

/// A phase of a report, from strace's `-ttt` times.
fn phase(name: &str, start: &str, end: &str) -> Phase {
    let ns = |t: &str| {
        let (s, frac) = t.split_once('.').unwrap();
        s.parse::<u128>().unwrap() * 1_000_000_000 + format!("{frac:0<9}").parse::<u128>().unwrap()
    };
    let (start, end) = (ns(start), ns(end));
    Phase {
        name: name.into(),
        round: 0,
        start_unix_ns: start,
        end_unix_ns: end,
        duration_ns: end - start,
        cpu_ns: None,
    }
}

#[test]
fn runtime_report_exits_by_whether_the_trace_gave_counts() {
    let Some((_, runner)) = built_or_skip() else {
        return;
    };
    let home = PathBuf::from(std::env::var("HOME").expect("HOME"));
    let dir = home.join(format!(".cache/lnk-t/report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let path = dir.join("report.json");
    let mut report = Report::new(Profile::Mini, Mode::Confined);
    // The phases of the recorded pipeline trace (its exec happens inside the second).
    report.phases = vec![
        phase("start", "1796068337.573501", "1796068337.580000"),
        phase("pipeline", "1796068337.582000", "1796068337.585000"),
    ];
    write_report(&path, &report).unwrap();
    let report_cmd = |trace: &Path| {
        Command::new(&runner)
            .arg("report")
            .arg(&path)
            .arg(trace)
            .output()
            .expect("running `runtime report`")
    };
    let trace_of = |path: &Path| read_report(path).unwrap().trace.expect("a trace section");

    let counted = report_cmd(&data.join("pipeline.trace"));
    assert_eq!(
        counted.status.code(),
        Some(runner::PASSED.into()),
        "{counted:?}"
    );
    let section = trace_of(&path);
    assert!(section.available, "{:?}", section.reason);
    assert_eq!(section.phases[1].execs, 2);

    let garbage = dir.join("garbage.trace");
    std::fs::write(&garbage, "this is not an strace -ttt recording\n").unwrap();
    let unavailable = report_cmd(&garbage);
    assert_eq!(
        unavailable.status.code(),
        Some(runner::TRACE_UNAVAILABLE.into()),
        "{unavailable:?}"
    );
    let stderr = String::from_utf8_lossy(&unavailable.stderr);
    assert!(stderr.contains("UNAVAILABLE (not zero)"), "{stderr}");
    let section = trace_of(&path);
    assert!(!section.available && section.phases.is_empty());
    assert!(section.reason.is_some());

    // Bad input: a trace that does not exist leaves the report as it was.
    let before = std::fs::read(&path).unwrap();
    let missing = report_cmd(&dir.join("no-such.trace"));
    assert_eq!(
        missing.status.code(),
        Some(runner::BAD_INPUT.into()),
        "{missing:?}"
    );
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    std::fs::remove_dir_all(&dir).unwrap();
}
