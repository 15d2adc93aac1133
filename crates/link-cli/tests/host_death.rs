//! Nothing orphaned: plugins die with a host killed by SIGKILL, and `link up` on the state of
//! a host that died ends whatever it left running (and only that) before starting again.

use crate::support::{self, state_root};
use link_harness_conformance::reaper::{is_alive, read_proc};
use link_harness_conformance::runtime_process::RuntimeProcess;
use serde_json::json;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Generous: the death signal is immediate, this only bounds a broken run.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// (name, pid, start time) of every plugin of `rt`.
fn plugins(rt: &RuntimeProcess) -> Vec<(String, i32, u64)> {
    let plugins: Vec<_> = rt
        .plugin_pids()
        .into_iter()
        .map(|(name, pid)| {
            let start = read_proc(pid)
                .unwrap_or_else(|| panic!("{name} (pid {pid}) is not running"))
                .start_time_ticks;
            (name, pid, start)
        })
        .collect();
    assert!(!plugins.is_empty(), "no plugins in link status");
    plugins
}

/// SIGKILLs the host of `rt` and waits until every plugin is gone; returns how long that took.
fn kill_host_and_wait(rt: &mut RuntimeProcess, what: &str) -> Duration {
    let plugins = plugins(rt);
    let host = rt.host_pid();
    let killed = Instant::now();
    // SIGKILL, then the host is collected: no signal handler, no stop_all.
    rt.kill_group();
    let took = loop {
        let alive: Vec<_> = plugins
            .iter()
            .filter(|(_, pid, start)| is_alive(*pid, *start))
            .collect();
        if alive.is_empty() {
            break killed.elapsed();
        }
        if killed.elapsed() > GONE_WITHIN {
            // Fail without leaving them behind for the next test.
            for (_, pid, _) in &alive {
                support::kill(*pid, 9);
            }
            panic!("{what}: plugins still running {GONE_WITHIN:?} after kill -9 of host {host}: {alive:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    eprintln!(
        "{what}: kill -9 of the host to the last of {} plugins gone: {took:?}",
        plugins.len()
    );
    took
}

#[test]
fn host_death_takes_every_mini_plugin_with_it_and_up_starts_clean() {
    let root = state_root();
    let mut rt = support::up(&root, "mini");
    let pids_file = rt.layout().pids_file();
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&pids_file).unwrap()).unwrap();
    assert_eq!(
        recorded["plugins"].as_array().unwrap().len(),
        rt.plugin_pids().len(),
        "{recorded}"
    );
    kill_host_and_wait(&mut rt, "mini (confined)");
    drop(rt);
    // The dead host's pids file and sockets are still there; a new `up` ends nobody.
    assert!(pids_file.exists());
    let mut rt = support::up(&root, "mini");
    assert!(
        !rt.stderr().contains("link: killing"),
        "killed something of a set that was already gone:\n{}",
        rt.stderr()
    );
    let token = rt.create_token();
    let created = rt.post("/v1/agents", &token, json!({ "name": "after" }));
    assert_eq!(created.status, 201, "{:?}", created.json());
    rt.down();
    assert!(!pids_file.exists(), "a clean exit leaves no pids file");
}

#[test]
fn host_death_takes_every_link_plugin_with_it_in_diagnostic_mode() {
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "diagnostic");
    kill_host_and_wait(&mut rt, "link (diagnostic)");
}

fn sleeper() -> (Child, u64) {
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let start = read_proc(child.id() as i32).unwrap().start_time_ticks;
    (child, start)
}

#[test]
fn host_death_survivors_recorded_are_killed_by_the_next_up_and_reused_pids_are_not() {
    let root = state_root();
    let (mut survivor, survivor_start) = sleeper();
    let (mut bystander, bystander_start) = sleeper();
    let run = root.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let file = json!({
        "host": 999_999,
        "plugins": [
            { "name": "link-plugin-model", "pid": survivor.id(), "start_time": survivor_start },
            // The pid is live, but it is not the process that was recorded: a reused pid.
            { "name": "link-plugin-auth", "pid": bystander.id(), "start_time": bystander_start + 1 },
        ]
    });
    std::fs::write(run.join("pids.json"), file.to_string()).unwrap();
    // A socket the survivor "serves": removed only once the survivor is dead.
    std::fs::write(run.join("host.sock"), "").unwrap();

    let mut rt = support::up(&root, "mini");
    let stderr = rt.stderr();
    let killed = format!("link: killing link-plugin-model (pid {})", survivor.id());
    assert!(stderr.contains(&killed), "no {killed:?} in:\n{stderr}");
    assert_eq!(
        stderr.matches("link: killing").count(),
        1,
        "killed more than the survivor:\n{stderr}"
    );
    let killed_line = stderr.find(&killed).unwrap();
    let removed = stderr
        .find("removing stale socket")
        .expect("stale socket removed");
    assert!(
        killed_line < removed,
        "sockets removed before the survivor was killed:\n{stderr}"
    );
    let status = survivor
        .try_wait()
        .unwrap()
        .expect("the survivor was killed");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{status:?}"
    );
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "a process with a reused pid was killed"
    );
    assert!(is_alive(bystander.id() as i32, bystander_start));
    rt.down();
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

/// Confined full Link with a tool command running: the sandbox plugin's bwrap, the
/// namespace's init and the command die with the host too.
#[test]
fn host_death_takes_a_running_confined_command_with_it() {
    if !support::sandbox_available() {
        return;
    }
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "confined");
    let token = rt.create_token();
    assert_eq!(
        rt.post("/v1/agents", &token, json!({ "name": "k" })).status,
        201
    );
    let socket = root.path().join("run/connection.sock");
    let turn = support::turn_in_thread(socket, token, "run: sleep 30");
    support::wait_for_process("sleep", rt.host_pid());
    let host = rt.host_pid();
    let started: Vec<_> = support::tree(host)
        .into_iter()
        .filter(|(pid, _)| *pid != host)
        .collect();
    let names: Vec<_> = started
        .iter()
        .filter_map(|(pid, _)| read_proc(*pid).map(|p| p.comm))
        .collect();
    assert!(names.iter().any(|n| n == "bwrap"), "{names:?}");
    let killed = Instant::now();
    rt.kill_group();
    let took = loop {
        let alive: Vec<_> = started
            .iter()
            .filter(|(pid, start)| is_alive(*pid, *start))
            .collect();
        if alive.is_empty() {
            break killed.elapsed();
        }
        if killed.elapsed() > GONE_WITHIN {
            for (pid, _) in &alive {
                support::kill(*pid, 9);
            }
            panic!("still running {GONE_WITHIN:?} after kill -9 of host {host}: {alive:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    eprintln!(
        "link (confined, running `sleep` in bwrap): kill -9 of the host to the last of {} processes gone: {took:?}",
        started.len()
    );
    // The turn's connection ends with the host; its answer does not matter here.
    let _ = turn.join().unwrap();
}
