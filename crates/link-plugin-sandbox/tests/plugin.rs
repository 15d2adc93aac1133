//! Plugin mode: the test starts the binary as a plugin (so it is the plugin's parent) and
//! calls `sandbox.exec` over the plugin's socket.

use crate::common::*;
use link_harness_conformance::plugin_process::{PluginProcess, PluginSpec};
use link_protocol::plugin::Mode;
use link_protocol::{Client, ErrorCode};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

struct Plugin {
    process: PluginProcess,
    client: Client,
}

async fn start(root: &Root, mode: Mode) -> Plugin {
    let process = PluginSpec::new(BIN, "link-plugin-sandbox")
        .mode(mode)
        .ready_within(Duration::from_secs(30))
        .start_in(root.state());
    assert_eq!(process.ready().routes, ["sandbox.exec"]);
    let client = process.client().await;
    Plugin { process, client }
}

impl Plugin {
    async fn exec(&mut self, agent: &str, body: Value) -> Result<Value, link_protocol::Error> {
        tokio::time::timeout(
            Duration::from_secs(60),
            self.client.call("sandbox.exec", Some(agent), body),
        )
        .await
        .expect("answer in time")
    }
    fn stop(mut self) {
        let status = self.process.terminate_within(Duration::from_secs(10));
        assert!(status.success());
    }
}

fn sh(script: &str) -> Value {
    json!(["/bin/sh", "-c", script])
}

/// The command exited 0 and no limit ended or restricted it.
fn ran_within_its_limits(r: &Value) {
    let got = (r["exit_code"].clone(), r["limit_hit"].clone());
    assert_eq!(got, (json!(0), Value::Null), "{r}");
}

#[tokio::test(flavor = "current_thread")]
async fn sandbox_exec_runs_caps_times_out_and_refuses() {
    if !sandbox_or_skip() {
        return;
    }
    let root = Root::new();
    let ws = root.workspace("a1");
    let home = root.home("a1");
    let other_ws = root.workspace("a2");
    let mut p = start(&root, Mode::Confined).await;

    // Allowed: runs in the workspace, output and files come back.
    let r = p
        .exec(
            "a1",
            json!({"argv": sh("echo out; echo err >&2; echo data > made.txt; echo $HOME > home.txt; exit 4"),
                   "workspace": ws, "home": home, "timeout_ms": 30000, "output_cap": 4096,
                   "env": {"LANG": "C.UTF-8"}}),
        )
        .await
        .unwrap();
    assert_eq!(r["exit_code"], 4, "{r}");
    assert_eq!(r["stdout"], "out\n");
    assert_eq!(r["stderr"], "err\n");
    assert_eq!(r["timed_out"], false);
    assert_eq!(r["missing_command"], false);
    assert!(r["duration_ms"].is_u64());
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "data\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("home.txt")).unwrap(),
        "/home/agent\n"
    );

    // Output over the cap is cut and reported, not silently dropped.
    let r = p
        .exec(
            "a1",
            json!({"argv": sh("head -c 100000 /dev/zero | tr '\\0' a; echo done >&2"),
                   "workspace": ws, "output_cap": 1000}),
        )
        .await
        .unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["stdout"].as_str().unwrap().len(), 1000);
    assert_eq!(r["stdout_truncated"], true);
    assert_eq!(r["stderr"], "done\n");
    assert_eq!(r["stderr_truncated"], false);

    // Past its limit the command is killed with its whole tree: nothing left in /proc.
    let marker = format!("4000.{}", std::process::id() as u64 * 1000 + 9);
    let r = p
        .exec(
            "a1",
            json!({"argv": sh(&format!("sleep {marker} & sleep {marker}1 & sleep {marker}2")),
                   "workspace": ws, "timeout_ms": 1500}),
        )
        .await
        .unwrap();
    assert_eq!(r["timed_out"], true, "{r}");
    assert_eq!(r["limit_hit"], json!({"limit": "time", "ms": 1500}), "{r}");
    assert_eq!(r["signal"], 9);
    assert_eq!(r["exit_code"], Value::Null);
    assert!(r["duration_ms"].as_u64().unwrap() >= 1500);
    let left = processes_with(&marker);
    assert!(left.is_empty(), "processes left after the kill: {left:?}");
    let plugin_pid = p.process.pid();
    assert!(
        wait_for(10, || children_of(plugin_pid).is_empty()),
        "unreaped children of the plugin: {:?}",
        children_of(plugin_pid)
    );

    // A missing command is reported as such.
    let r = p
        .exec(
            "a1",
            json!({"argv": ["no-such-command-lnk"], "workspace": ws}),
        )
        .await
        .unwrap();
    assert_eq!(r["exit_code"], 127, "{r}");
    assert_eq!(r["missing_command"], true);

    // Refused: workspaces and homes that are not the agent's own.
    let outside = root.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::os::unix::fs::symlink(&other_ws, ws.join("escape")).unwrap();
    for (what, body) in [
        (
            "outside the agents dir",
            json!({"argv": ["true"], "workspace": outside}),
        ),
        (
            "another agent's workspace",
            json!({"argv": ["true"], "workspace": other_ws}),
        ),
        (
            "a symlink out",
            json!({"argv": ["true"], "workspace": ws.join("escape")}),
        ),
        (
            "dot-dot",
            json!({"argv": ["true"], "workspace": ws.join("../../a2/workspace")}),
        ),
        (
            "a directory inside its own workspace",
            json!({"argv": ["true"], "workspace": ws.join("sub")}),
        ),
        (
            "another agent's home",
            json!({"argv": ["true"], "workspace": ws, "home": root.home("a2")}),
        ),
    ] {
        let e = p.exec("a1", body).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::Forbidden), "{what}: {e}");
    }
    assert!(!outside.join("x").exists());
    // The same agent's own workspace through its real path still works.
    let r = p
        .exec("a1", json!({"argv": ["true"], "workspace": ws}))
        .await
        .unwrap();
    assert_eq!(r["exit_code"], 0);

    // Environment names off the allow-list are refused, allowed ones pass.
    let e = p
        .exec(
            "a1",
            json!({"argv": ["true"], "workspace": ws, "env": {"AWS_SECRET": "x"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{e}");
    let r = p
        .exec(
            "a1",
            json!({"argv": sh("echo $TERM; env | cut -d= -f1 | sort | tr '\\n' ' '"),
                           "workspace": ws, "env": {"TERM": "dumb"}}),
        )
        .await
        .unwrap();
    let out = r["stdout"].as_str().unwrap();
    assert!(out.starts_with("dumb\n"), "{r}");
    for name in out.lines().nth(1).unwrap().split_whitespace() {
        assert!(
            ["HOME", "PATH", "LANG", "LC_ALL", "TERM", "PWD", "SHLVL", "_", "OLDPWD"]
                .contains(&name),
            "unexpected variable {name} inside: {r}"
        );
    }
    p.stop();
}

#[tokio::test(flavor = "current_thread")]
async fn diagnostic_mode_refuses_sandbox_exec() {
    let root = Root::new();
    let ws = root.workspace("a1");
    let mut p = start(&root, Mode::Diagnostic).await;
    let e = p
        .exec("a1", json!({"argv": ["true"], "workspace": ws}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Unavailable), "{e}");
    assert!(
        e.to_string()
            .contains("run tool disabled in diagnostic mode"),
        "{e}"
    );
    p.stop();
}

#[tokio::test(flavor = "current_thread")]
async fn limits_end_or_refuse_what_exceeds_them_and_say_which() {
    if !sandbox_or_skip() {
        return;
    }
    let root = Root::new();
    let ws = root.workspace("a1");
    let mut p = start(&root, Mode::Confined).await;
    let exec =
        |argv: Value, limits: Value| json!({"argv": argv, "workspace": ws, "limits": limits});

    // Memory: an allocation past the limit fails, a small twin succeeds.
    let alloc = "import sys\ntry:\n  b = bytearray(int(sys.argv[1]))\n  print('ok')\nexcept MemoryError:\n  print('MemoryError')";
    for (bytes, want) in [(8 << 20, "ok\n"), (512 << 20, "MemoryError\n")] {
        let argv = json!([PYTHON, "-I", "-S", "-c", alloc, bytes.to_string()]);
        let r = p
            .exec("a1", exec(argv, json!({"memory_bytes": 256u64 << 20})))
            .await
            .unwrap();
        assert_eq!(r["stdout"], want, "{bytes} bytes: {r}");
    }

    // File size: writing past it kills the writer (SIGXFSZ), and the result names the limit;
    // on the host the file stopped at the limit. The twin below the limit is whole.
    let write = |n: u32, name: &str| sh(&format!("head -c {n} /dev/zero > {name}"));
    let limits = json!({"file_size_bytes": 1u64 << 20});
    let r = p
        .exec("a1", exec(write(512 << 10, "small"), limits.clone()))
        .await
        .unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(
        std::fs::metadata(ws.join("small")).unwrap().len(),
        512 << 10
    );
    let r = p
        .exec("a1", exec(write(4 << 20, "big"), limits))
        .await
        .unwrap();
    assert_eq!(
        r["limit_hit"],
        json!({"limit": "file_size", "bytes": 1u64 << 20}),
        "{r}"
    );
    assert_eq!(r["signal"], libc::SIGXFSZ, "{r}");
    assert!(std::fs::metadata(ws.join("big")).unwrap().len() <= 1 << 20);

    // CPU time: a busy loop is stopped at its CPU limit (SIGXCPU), a short one is not.
    let r = p
        .exec("a1", exec(sh("true"), json!({"cpu_seconds": 1})))
        .await
        .unwrap();
    assert_eq!(r["limit_hit"], Value::Null, "{r}");
    let r = p
        .exec(
            "a1",
            exec(sh("while :; do :; done"), json!({"cpu_seconds": 1})),
        )
        .await
        .unwrap();
    assert_eq!(
        r["limit_hit"],
        json!({"limit": "cpu_time", "seconds": 1}),
        "{r}"
    );

    // Workspace quota: what is left of it bounds each write; once full, nothing more can be
    // written (the result names the quota) while removing still works.
    let quota = json!({"workspace_bytes": 2u64 << 20});
    let q = root.workspace("q1");
    let in_q = |argv: Value| json!({"argv": argv, "workspace": q, "limits": quota});
    let r = p.exec("q1", in_q(write(1 << 20, "first"))).await.unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = p.exec("q1", in_q(write(4 << 20, "second"))).await.unwrap();
    assert_eq!(
        r["limit_hit"],
        json!({"limit": "workspace_quota", "bytes": 2u64 << 20}),
        "{r}"
    );
    let used: u64 = ["first", "second"]
        .iter()
        .map(|f| std::fs::metadata(q.join(f)).unwrap().len())
        .sum();
    assert!(
        used <= (2 << 20) + (64 << 10),
        "{used} bytes in a 2 MiB quota"
    );
    // Full: a new file is refused (the shell cannot create it) and the result says why.
    let r = p.exec("q1", in_q(write(1 << 10, "third"))).await.unwrap();
    assert_eq!(r["limit_hit"]["limit"], "workspace_full", "full: {r}");
    // It says how much was used of which bound: the bytes, as counted by the walk.
    let hit = &r["limit_hit"];
    assert_eq!(hit["bytes"], 2u64 << 20, "{r}");
    assert!(hit["used_bytes"].as_u64().unwrap() >= 2 << 20, "{r}");
    assert_eq!(hit["used_entries"], 2, "{r}");
    assert!(
        r["stderr"].as_str().unwrap().contains("Permission denied"),
        "{r}"
    );
    assert!(!q.join("third").exists());
    let r = p.exec("q1", in_q(sh("rm second"))).await.unwrap();
    assert_eq!(r["exit_code"], 0, "removal is still allowed: {r}");
    let r = p.exec("q1", in_q(write(1 << 10, "fourth"))).await.unwrap();
    assert_eq!(r["exit_code"], 0, "room again after the removal: {r}");

    // A request past a maximum, or a misspelt limit, is refused before anything runs.
    for bad in [json!({"processes": 1_000_000}), json!({"cpu": 1})] {
        let e = p
            .exec("a1", exec(json!(["true"]), bad.clone()))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{bad}: {e}");
    }
    p.stop();
}

/// The quota covers the workspace and the home together, in bytes and in entries, and holds
/// while a command runs: a command that keeps writing files each under what is left, or keeps
/// making empty files, is stopped for the quota (not its time limit), and the next command
/// finds the workspace full until something is removed. Each has a twin within the quota.
#[tokio::test(flavor = "current_thread")]
async fn the_quota_holds_for_workspace_and_home_while_a_command_runs() {
    if !sandbox_or_skip() {
        return;
    }
    let root = Root::new();
    let mut p = start(&root, Mode::Confined).await;
    let (ws, home) = (root.workspace("a1"), root.home("a1"));
    let limits = json!({"workspace_bytes": 8u64 << 20, "workspace_entries": 100});
    let exec = |script: &str| json!({"argv": sh(script), "workspace": ws, "home": home, "limits": limits, "timeout_ms": 60_000});

    // Preallocation, which the file size limit does not bound, is refused (`EOPNOTSUPP`) and
    // takes no space; the twin, writing, is below.
    let r = p
        .exec("a1", exec(": > pre; fallocate -n -l 1G pre"))
        .await
        .unwrap();
    assert_ne!(r["exit_code"], 0, "{r}");
    assert!(r["stderr"].as_str().unwrap().contains("unsupported"), "{r}");
    assert!(std::fs::metadata(ws.join("pre")).unwrap().blocks() < 2048);
    // The home counts: 6 MiB there leaves 2 MiB, so 3 MiB in the workspace is cut short.
    let r = p
        .exec("a1", exec("head -c 6291456 /dev/zero > ~/h"))
        .await
        .unwrap();
    ran_within_its_limits(&r);
    let r = p
        .exec("a1", exec("head -c 1048576 /dev/zero > w"))
        .await
        .unwrap();
    assert_eq!(r["exit_code"], 0, "the twin within what is left: {r}");
    let r = p
        .exec("a1", exec("head -c 3145728 /dev/zero > w2"))
        .await
        .unwrap();
    assert_eq!(r["limit_hit"]["limit"], "workspace_quota", "{r}");
    let r = p.exec("a1", exec("rm -f ~/h w w2")).await.unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");

    // Bytes, while it runs: files of 1 MiB each, which the file size limit lets through, one
    // after another until stopped.
    // Bounded, so that without the check the command ends by itself (and the test fails).
    // Long enough (seconds) that no check can come only after it ends.
    let forever =
        |make: &str, n: u32| format!("i=0; while [ $i -lt {n} ]; do i=$((i+1)); {make}; done");
    let r = p
        .exec(
            "a1",
            exec(&forever("head -c 1048576 /dev/zero > f$i", 2000)),
        )
        .await
        .unwrap();
    assert_eq!(
        r["limit_hit"],
        json!({"limit": "workspace_quota", "bytes": 8u64 << 20}),
        "{r}"
    );
    assert_eq!(
        (r["timed_out"].clone(), r["signal"].clone()),
        (json!(false), json!(9)),
        "{r}"
    );
    let r = p.exec("a1", exec("echo more > more")).await.unwrap();
    assert_eq!(r["limit_hit"]["limit"], "workspace_full", "{r}");
    assert!(!ws.join("more").exists());
    // Removing takes one command (which began full, so makes nothing), writing the next.
    let r = p.exec("a1", exec("rm -f f*")).await.unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = p.exec("a1", exec("echo more > more")).await.unwrap();
    ran_within_its_limits(&r);
    assert!(ws.join("more").exists());

    // Entries, while it runs: empty files cost no block but are counted.
    let r = p
        .exec("a1", exec(&forever(": > e$i", 20000)))
        .await
        .unwrap();
    assert_eq!(
        r["limit_hit"],
        json!({"limit": "workspace_entries", "entries": 100}),
        "{r}"
    );
    let made = std::fs::read_dir(&ws).unwrap().count();
    assert!(
        made > 100,
        "{made} entries: the quota was passed before the stop"
    );
    let r = p.exec("a1", exec("mkdir d")).await.unwrap();
    assert_eq!(r["limit_hit"]["limit"], "workspace_full", "{r}");
    assert!(!ws.join("d").exists());
    let r = p.exec("a1", exec("rm -f e*")).await.unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    // The twin: below the quota of entries, 50 files and a directory are made.
    let r = p
        .exec(
            "a1",
            exec("i=0; while [ $i -lt 50 ]; do i=$((i+1)); : > e$i; done; mkdir d"),
        )
        .await
        .unwrap();
    ran_within_its_limits(&r);
    assert!(ws.join("d").is_dir() && ws.join("e50").exists());
    p.stop();
}

/// As root every agent has its own uid, so one agent's fork bomb, held at its process limit,
/// leaves another agent's commands running normally.
#[tokio::test(flavor = "current_thread")]
async fn one_agents_fork_bomb_leaves_another_agent_running() {
    if !sandbox_or_skip() {
        return;
    }
    let root = Root::new();
    let (ws, other) = (root.workspace("a1"), root.workspace("a2"));
    let mut p = start(&root, Mode::Confined).await;
    let mut second = p.process.client().await;
    let token = unique("bomb");
    let bomb = fork_bomb(&token);
    let body = json!({"argv": [PYTHON, "-I", "-S", "-c", bomb], "workspace": ws, "limits": {"processes": 64}});
    let held = ws.join("held");
    let fine = async {
        while !held.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let body = json!({"argv": sh("echo fine; /bin/true && id -u"), "workspace": other});
        second.call("sandbox.exec", Some("a2"), body).await.unwrap()
    };
    let (bombed, fine) = tokio::join!(p.exec("a1", body), fine);
    let bombed = bombed.unwrap();
    let got: Value = serde_json::from_str(bombed["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(got["error"], "EAGAIN", "{bombed}");
    assert!(
        (30..64).contains(&got["started"].as_u64().unwrap()),
        "{got}"
    );
    assert_eq!(fine["exit_code"], 0, "{fine}");
    let lines: Vec<&str> = fine["stdout"].as_str().unwrap().lines().collect();
    assert_eq!(lines[0], "fine", "{fine}");
    if rustix::process::geteuid().is_root() {
        let uid_a2: u32 = lines[1].parse().unwrap();
        let uid_a1 = std::fs::metadata(&held).unwrap().uid();
        assert!(
            uid_a1 != uid_a2 && uid_a1 != 0 && uid_a2 != 0,
            "a1 {uid_a1}, a2 {uid_a2}"
        );
    }
    assert!(
        wait_for(10, || processes_with(&token).is_empty()),
        "the bomb's processes outlived it"
    );
    p.stop();
}

/// Two commands of one agent never overlap (the walks before and after each must not race a
/// running command of the same workspace); another agent's do.
#[tokio::test(flavor = "current_thread")]
async fn one_agents_commands_run_one_at_a_time() {
    if !sandbox_or_skip() {
        return;
    }
    let root = Root::new();
    let (ws, other) = (root.workspace("a1"), root.workspace("a2"));
    let mut p = start(&root, Mode::Confined).await;
    let mut second = p.process.client().await;
    let mut third = p.process.client().await;
    // Fails with 9 if another command of the workspace holds the directory.
    let exclusive = sh("mkdir held || exit 9; sleep 0.5; rmdir held");
    let body = json!({"argv": exclusive, "workspace": ws});
    let (a, b) = tokio::join!(
        p.exec("a1", body.clone()),
        second.call("sandbox.exec", Some("a1"), body.clone())
    );
    assert_eq!(
        (
            a.unwrap()["exit_code"].clone(),
            b.unwrap()["exit_code"].clone()
        ),
        (json!(0), json!(0))
    );
    // The twin: another agent's command runs while a1's is still running — it finishes
    // first, though it starts after a1's and a1's never ends by itself (its time limit does).
    let long = json!({"argv": sh("touch started; sleep 30"), "workspace": ws, "timeout_ms": 4000});
    let started = ws.join("started");
    let a1 = async {
        let r = p.exec("a1", long).await.unwrap();
        (r, std::time::Instant::now())
    };
    let a2 = async {
        while !started.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let body = json!({"argv": ["true"], "workspace": other});
        let r = third.call("sandbox.exec", Some("a2"), body).await.unwrap();
        (r, std::time::Instant::now())
    };
    let ((r1, done1), (r2, done2)) = tokio::join!(a1, a2);
    assert_eq!(r1["timed_out"], true, "{r1}");
    assert_eq!(r2["exit_code"], 0, "{r2}");
    assert!(done2 < done1, "a2 waited for a1's command");
    p.stop();
}

/// A command that waits for its agent's earlier one past its request's deadline is answered
/// `timeout` at that deadline, while the earlier one still runs, and never runs: its caller
/// was told it timed out. The earlier command runs until this test lets it end, which it does
/// only once that answer is in. Its twin, queued behind the same command with time to spare,
/// runs after it.
#[tokio::test(flavor = "current_thread")]
async fn a_command_that_waited_past_its_deadline_does_not_run() {
    use link_protocol::message::{NotAfter, Request};
    if !sandbox_or_skip() {
        return;
    }
    let root = Root::new();
    let ws = root.workspace("a1");
    let mut p = start(&root, Mode::Confined).await;
    let (mut late, mut in_time) = (p.process.client().await, p.process.client().await);
    let queued = |id, marker: &str, within| Request {
        id,
        route: "sandbox.exec".into(),
        agent: Some("a1".parse().unwrap()),
        caller: None,
        body: json!({"argv": sh(&format!("touch {marker}")), "workspace": ws}),
        not_after: Some(NotAfter::within(Duration::from_millis(within))),
        call: None,
        parent: None,
    };
    let (started, release) = (ws.join("started"), ws.join("release"));
    let held = "touch started; while [ ! -e release ]; do sleep 0.02; done; touch finished";
    let first = json!({"argv": sh(held), "workspace": ws});
    let queue = async {
        while !started.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (a, b) = (queued(1, "late", 300), queued(1, "in_time", 60_000));
        let given_up = async {
            let answer = late.send(&a).await;
            let finished = ws.join("finished").exists();
            std::fs::write(&release, "").unwrap();
            (answer, finished)
        };
        tokio::join!(given_up, in_time.send(&b))
    };
    let (first, ((late, finished), in_time)) = tokio::join!(p.exec("a1", first), queue);
    ran_within_its_limits(&first.unwrap());
    let late = late.unwrap_err();
    assert_eq!(late.code(), Some(ErrorCode::Timeout), "{late}");
    assert!(
        !finished,
        "answered only once the earlier command had ended"
    );
    assert!(!ws.join("late").exists(), "the late command ran: {late}");
    ran_within_its_limits(&in_time.unwrap());
    assert!(ws.join("in_time").exists());
    p.stop();
}

/// As root where cgroup v1 has memory, pids and cpuacct, or cgroup v2 memory and pids
/// (`link_confine::cgroup`; v2 is seen in a virtual machine:
/// [`the_same_bounds_hold_in_cgroup_v2`]): an agent's processes share one memory, process and
/// CPU bound. Three processes of 120 MiB each pass a 256 MiB
/// limit together though each is within it alone: the kernel kills one, and the reply says
/// so; their twin of 40 MiB each runs. A command forking 40 processes under a bound of 24 is
/// refused forks by the cgroup (its `pids.events`), its twin forking 10 is not. Three
/// processes of 0.6 s of CPU time each pass a limit of 1 s together (none alone): the command
/// is stopped for it; one of them alone runs (3 s and 6 s in the virtual machine, whose
/// emulation is slow).
#[tokio::test(flavor = "current_thread")]
async fn an_agents_processes_share_one_memory_process_and_cpu_bound() {
    if !sandbox_or_skip() {
        return;
    }
    let parents = match link_confine::cgroup::support() {
        Ok(p) => p,
        Err(why) => {
            assert!(!link_harness_conformance::vm::inside(), "{why}");
            link_harness_conformance::probe::skipped(&format!(
                "SKIPPED (the agents' cgroups): {why}"
            ));
            return;
        }
    };
    let v2 = matches!(parents, link_confine::cgroup::Hierarchy::V2(_));
    assert_eq!(v2, link_harness_conformance::vm::inside(), "{parents:?}");
    let root = Root::new();
    let ws = root.workspace("a1");
    let cgroups = link_confine::cgroup::RuntimeCgroups::create(&parents, root.path()).unwrap();
    cgroups.pool_maker(None)().unwrap();
    let (value, fds) = cgroups.handed();
    for fd in fds {
        // The plugin inherits them, as from the host.
        link_os::reaper::inherit(fd).unwrap();
    }
    let process = PluginSpec::new(BIN, "link-plugin-sandbox")
        .mode(Mode::Confined)
        .env(link_confine::cgroup::ENV_FDS, value)
        .ready_within(Duration::from_secs(30))
        .start_in(root.state());
    let client = process.client().await;
    let mut p = Plugin { process, client };
    // One command at a time: each takes `cmd-0` of the pool in each hierarchy.
    let dirs: Vec<_> = cgroups.dirs().map(|(_, d)| d.join("cmd-0")).collect();
    let seen = Seen::of(&dirs);
    // Each child holds its memory until the parent has its own and has heard from both (a
    // pipe, not a sleep: on a busy machine they still overlap).
    let alloc = "import os, sys\n\
        n = int(sys.argv[1]) << 20\n\
        ready_r, ready_w = os.pipe()\n\
        go_r, go_w = os.pipe()\n\
        kids = []\n\
        for _ in range(2):\n  pid = os.fork()\n  if pid == 0:\n    os.close(ready_r)\n    os.close(go_w)\n    b = b'x' * n\n    os.write(ready_w, b'.')\n    os.close(ready_w)\n    os.read(go_r, 1)\n    os._exit(0)\n  kids.append(pid)\n\
        os.close(ready_w)\n\
        os.close(go_r)\n\
        b = b'x' * n\n\
        got = b''\n\
        while len(got) < 2:\n  c = os.read(ready_r, 2)\n  if not c:\n    break\n  got += c\n\
        os.close(go_w)\n\
        print([os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids])";
    let limit = 256u64 << 20;
    let memory = |mib: u32| {
        json!({
            "argv": [PYTHON, "-I", "-S", "-c", alloc, mib.to_string()],
            "workspace": ws,
            "limits": {"memory_bytes": limit},
        })
    };
    // The command sees its cgroups as its own root: no host path, no runtime's digest.
    let own = json!({"argv": ["/bin/cat", "/proc/self/cgroup"], "workspace": ws});
    let r = p.exec("a1", own).await.unwrap();
    ran_within_its_limits(&r);
    let lines = r["stdout"].as_str().unwrap();
    let root_line = if v2 { "0::/\n" } else { ":memory:/\n" };
    assert!(lines.contains(root_line), "{r}");
    assert!(!lines.contains("link-"), "{r}");

    let r = p.exec("a1", memory(40)).await.unwrap();
    ran_within_its_limits(&r);
    assert_eq!(r["stdout"], "[0, 0]\n", "{r}");
    assert_eq!(seen.oom_kills(), 0);
    let r = p.exec("a1", memory(120)).await.unwrap();
    assert_eq!(
        r["limit_hit"],
        json!({"limit": "memory", "bytes": limit}),
        "{r}"
    );
    // On the host: the kernel killed in the agent's cgroup, which never held more than it,
    // memory and swap together.
    assert!(seen.oom_kills() >= 1);
    seen.limits_memory_and_swap(limit);
    let peak = seen.peak_memory();
    assert!(peak <= limit, "peak {peak}");

    // Every child stays until the parent has forked them all (a pipe, not a sleep).
    let forks = "import os, sys\n\
        go_r, go_w = os.pipe()\n\
        started, err = 0, None\n\
        for _ in range(int(sys.argv[1])):\n  try:\n    pid = os.fork()\n  except OSError as e:\n    err = e.errno\n    break\n  if pid == 0:\n    os.close(go_w)\n    os.read(go_r, 1)\n    os._exit(0)\n  started += 1\n\
        print(started, err)\n\
        os.close(go_w)";
    let fork = |n: u32| {
        json!({
            "argv": [PYTHON, "-I", "-S", "-c", forks, n.to_string()],
            "workspace": ws,
            "limits": {"processes": 24},
        })
    };
    let refused = || Seen::field(&seen.pids, "pids.events", "max ");
    let r = p.exec("a1", fork(10)).await.unwrap();
    ran_within_its_limits(&r);
    assert_eq!(r["stdout"], "10 None\n", "{r}");
    assert_eq!(refused(), 0);
    let r = p.exec("a1", fork(40)).await.unwrap();
    let said = r["stdout"].as_str().unwrap().to_owned();
    let (started, err) = said.trim().split_once(' ').unwrap();
    assert!(started.parse::<u32>().unwrap() < 24, "{r}");
    assert_eq!(err, libc::EAGAIN.to_string(), "{r}");
    // The cgroup refused it, before the agent's own process limit (which counts only the
    // agent's uid; the cgroup counts bwrap and its init too).
    assert!(refused() >= 1, "{r}");

    let burn = "import os, sys, time\n\
        kids, child = [], False\n\
        for _ in range(int(sys.argv[1]) - 1):\n  pid = os.fork()\n  if pid == 0:\n    child = True\n    break\n  kids.append(pid)\n\
        end = time.process_time() + float(sys.argv[2])\n\
        while time.process_time() < end:\n  pass\n\
        if child:\n  os._exit(0)\n\
        for k in kids:\n  os.waitpid(k, 0)\n\
        print('done')";
    // Under the virtual machine's emulation a command's start alone takes up to two seconds
    // of CPU time: there the limit is 6 s and each process burns 3 s.
    let (limit_s, each): (u64, f64) = match link_harness_conformance::vm::inside() {
        true => (6, 3.0),
        false => (1, 0.6),
    };
    let each_ns = (each * 1e9) as u64;
    let each = each.to_string();
    let cpu = |n: u32| {
        json!({
            "argv": [PYTHON, "-I", "-S", "-c", burn, n.to_string(), each],
            "workspace": ws,
            "limits": {"cpu_seconds": limit_s},
        })
    };
    let used = || seen.cpu_ns();
    let before = used();
    let r = p.exec("a1", cpu(1)).await.unwrap();
    ran_within_its_limits(&r);
    assert_eq!(r["stdout"], "done\n", "{r}");
    let between = used();
    let r = p.exec("a1", cpu(3)).await.unwrap();
    assert_eq!(
        r["limit_hit"],
        json!({"limit": "cpu_time", "seconds": limit_s}),
        "{r}"
    );
    assert_eq!(r["signal"], 9, "{r}");
    // On the host: the agent's cgroup counted both, and the three were stopped past 1 s
    // together, well before their 1.8 s.
    let (first, second) = (between - before, used() - between);
    assert!(first >= each_ns * 5 / 6, "the twin used {first} ns");
    assert!(
        (limit_s * 1_000_000_000..limit_s * 1_700_000_000).contains(&second),
        "the three used {second} ns"
    );

    p.stop();
    // In v1 a process the plugin put in an agent's cgroup need not be this runtime's (one
    // of its uid): removing the cgroups moves it out, never kills it. In v2 the plugin moves
    // only what is in the runtime's directory already, and the parent may hold no process:
    // it is killed.
    let mut stray = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    for dir in &dirs {
        std::fs::write(dir.join("cgroup.procs"), stray.id().to_string()).unwrap();
    }
    drop(cgroups);
    assert!(dirs.iter().all(|d| !d.exists()));
    // A process killed leaves its cgroup before it is a zombie: waited for, a little.
    let mut ended = stray.try_wait().unwrap();
    if v2 {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while ended.is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            ended = stray.try_wait().unwrap();
        }
    }
    match v2 {
        true => assert!(ended.is_some(), "the stray outlived its cgroup"),
        false => assert!(ended.is_none(), "the stray was killed"),
    }
    let _ = stray.kill();
    stray.wait().unwrap();
}

/// [`an_agents_processes_share_one_memory_process_and_cpu_bound`] inside a virtual machine
/// whose one cgroup hierarchy is v2 (`link_harness_conformance::vm`): this machine's
/// controllers are v1.
#[test]
fn the_same_bounds_hold_in_cgroup_v2() {
    link_harness_conformance::vm::rerun_in_cgroup_v2(
        "plugin::an_agents_processes_share_one_memory_process_and_cpu_bound",
    );
}

/// The files of the pool's first cgroup that show, on the host's side, what the kernel
/// counted: v1 (one directory per controller) or v2 (one for all).
struct Seen {
    memory: std::path::PathBuf,
    pids: std::path::PathBuf,
    cpu: std::path::PathBuf,
    v2: bool,
}

impl Seen {
    fn of(dirs: &[std::path::PathBuf]) -> Seen {
        match dirs {
            [one] => Seen {
                memory: one.clone(),
                pids: one.clone(),
                cpu: one.clone(),
                v2: true,
            },
            [memory, pids, cpu] => Seen {
                memory: memory.clone(),
                pids: pids.clone(),
                cpu: cpu.clone(),
                v2: false,
            },
            _ => panic!("cgroups {dirs:?}"),
        }
    }

    fn read(dir: &std::path::Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    fn field(dir: &std::path::Path, file: &str, key: &str) -> u64 {
        Self::read(dir, file)
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{file} has no {key}"))
    }

    fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        Self::field(&self.memory, file, "oom_kill ")
    }

    /// The most memory the cgroup held.
    fn peak_memory(&self) -> u64 {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        Self::read(&self.memory, file).trim().parse().unwrap()
    }

    /// Memory and swap together are bounded by `limit` where the kernel counts swap.
    fn limits_memory_and_swap(&self, limit: u64) {
        let (memory, swap, want) = match self.v2 {
            true => ("memory.max", "memory.swap.max", "0".to_owned()),
            false => (
                "memory.limit_in_bytes",
                "memory.memsw.limit_in_bytes",
                limit.to_string(),
            ),
        };
        assert_eq!(Self::read(&self.memory, memory).trim(), limit.to_string());
        if self.memory.join(swap).exists() {
            assert_eq!(Self::read(&self.memory, swap).trim(), want);
        }
    }

    /// The CPU time its processes used, in nanoseconds.
    fn cpu_ns(&self) -> u64 {
        match self.v2 {
            true => Self::field(&self.cpu, "cpu.stat", "usage_usec ") * 1000,
            false => Self::read(&self.cpu, "cpuacct.usage")
                .trim()
                .parse()
                .unwrap(),
        }
    }
}
