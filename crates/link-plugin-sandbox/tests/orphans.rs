//! Nothing the sandbox starts outlives it. This test process makes itself a child subreaper,
//! as the runtime runner and the host are: a process that the probe, `exec` or the plugin
//! left behind would be reparented to it, alive or as a zombie to reap. Being a subreaper is
//! process-wide, hence this one test in its own binary.

mod common;
use common::*;
use link_harness_conformance::plugin_process::PluginSpec;
use link_protocol::plugin::Mode;
use rustix::process::Signal;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Fails when this process has any child at all: running, or a zombie waiting to be reaped.
fn assert_nothing_adopted(after: &str) {
    let me = std::process::id();
    let left: Vec<String> = children_of(me)
        .into_iter()
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} {}", comm.trim())
        })
        .collect();
    // ECHILD: no child, alive or exited; anything else means one was adopted.
    let waited = link_os::reaper::peek_children();
    assert!(
        left.is_empty() && waited.is_err(),
        "after {after}, this subreaper adopted {left:?} (waitid: {waited:?})"
    );
}

fn exec_status(ws: &std::path::Path, extra: &[&str], argv: &[&str]) -> Option<i32> {
    let out = exec(ws, None, extra, argv);
    out.status.code()
}

#[test]
fn no_process_outlives_the_probe_exec_or_the_plugin() {
    link_os::reaper::become_subreaper().expect("PR_SET_CHILD_SUBREAPER");

    // The probe runs bwrap on a real command: its namespace init must not be left to us.
    let probe = Command::new(BIN)
        .arg("probe")
        .output()
        .expect("run the probe");
    assert_nothing_adopted("the probe");
    if !sandbox_or_skip() {
        return;
    }
    assert_eq!(probe.status.code(), Some(0));

    // `exec`: a plain command, one leaving a background process, one past its time limit.
    let root = Root::new();
    let ws = root.workspace("a1");
    assert_eq!(exec_status(&ws, &[], &["/bin/true"]), Some(0));
    assert_nothing_adopted("exec /bin/true");
    let marker = format!("5000.{}", std::process::id() as u64 * 1000 + 3);
    let background = format!("sleep {marker} & exit 3");
    assert_eq!(
        exec_status(&ws, &[], &["/bin/sh", "-c", &background]),
        Some(3)
    );
    assert_nothing_adopted("exec with a background process");
    let both = format!("sleep {marker} & sleep {marker}");
    let timed = ["--timeout", "1"];
    assert_eq!(
        exec_status(&ws, &timed, &["/bin/sh", "-c", &both]),
        Some(124)
    );
    assert_nothing_adopted("exec past its time limit");
    assert!(processes_with(&marker).is_empty());
    for (signal, name) in [(Signal::TERM, "SIGTERM"), (Signal::INT, "SIGINT")] {
        stop_exec_with(signal, name, &ws, &marker);
    }

    // The plugin: a finished run, then a run still going when the plugin is stopped.
    let mut plugin = PluginSpec::new(BIN, "link-plugin-sandbox")
        .mode(Mode::Confined)
        .ready_within(Duration::from_secs(30))
        .start_in(root.state());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = plugin.client().await;
        let body = json!({"argv": ["/bin/sh", "-c", background], "workspace": ws});
        let r = client.call("sandbox.exec", Some("a1"), body).await.unwrap();
        assert_eq!(r["exit_code"], 3, "{r}");
        let pid = plugin.pid();
        assert!(
            wait_for(10, || children_of(pid).is_empty()),
            "unreaped children of the plugin: {:?}",
            children_of(pid)
        );

        let body = json!({"argv": ["/bin/sh", "-c", both], "workspace": ws,
                          "timeout_ms": 120_000});
        let stop = async {
            let end = tokio::time::Instant::now() + Duration::from_secs(30);
            while processes_with(&marker).len() < 4 {
                assert!(tokio::time::Instant::now() < end, "the run never started");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            plugin.terminate_within(Duration::from_secs(30))
        };
        let (_, status) = tokio::join!(client.call("sandbox.exec", Some("a1"), body), stop);
        assert!(status.success(), "the plugin's exit: {status:?}");
    });
    assert!(
        processes_with(&marker).is_empty(),
        "the run outlived the plugin"
    );
    assert_nothing_adopted("the plugin, stopped during a run");
}

/// `exec` stopped by `signal` (SIGTERM, or the SIGINT of a Ctrl-C) while its command runs: it
/// kills and reaps everything the command started, says so, and only then dies of the signal,
/// leaving nothing for its parent, this subreaper, to adopt. Before, it died of the signal at
/// once and left its sandbox to die on its own.
fn stop_exec_with(signal: Signal, name: &str, ws: &std::path::Path, marker: &str) {
    let both = format!("sleep {marker} & sleep {marker}");
    let mut cmd = Command::new(BIN);
    cmd.args(["exec", "--workspace"])
        .arg(ws)
        .args(["--", "/bin/sh", "-c", &both])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // As a terminal's foreground command, whose signals are at their defaults: a test run
    // started as a shell's background job has SIGINT ignored, which `exec` rightly keeps.
    // SAFETY: signal(2) in the child between fork and exec, async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            libc::signal(signal.as_raw(), libc::SIG_DFL);
            Ok(())
        })
    };
    let child = cmd.spawn().expect("run exec");
    // The sleeps themselves (bwrap's command line names the marker too).
    let sleeping = || {
        processes_with(marker)
            .into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c == "sleep\n")
            })
            .count()
    };
    assert!(
        wait_for(30, || sleeping() == 2),
        "the command never started"
    );
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(signal.as_raw()),
        "exec stopped by {name}: {:?}, {stderr}",
        out.status
    );
    assert!(
        stderr.contains(&format!("stopped by {name}")),
        "exec does not say it was stopped: {stderr}"
    );
    assert!(
        processes_with(marker).is_empty(),
        "the run outlived exec stopped by {name}"
    );
    assert_nothing_adopted(&format!("exec stopped by {name}"));
}
