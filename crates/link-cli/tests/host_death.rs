//! Nothing orphaned: plugins die with a host killed by SIGKILL, and `link up` on the state of
//! a host that died ends whatever it left running (and only that) before starting again.

use crate::support::{self, state_root};
use link_harness_conformance::fixture::StateRoot;
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
    let started: Vec<_> = plugins.iter().map(|(_, pid, t)| (*pid, *t)).collect();
    let took = kill_host_until_gone(rt, &started);
    eprintln!(
        "{what}: kill -9 of the host to the last of {} plugins gone: {took:?}",
        plugins.len()
    );
    took
}

/// SIGKILLs the host of `rt` (no signal handler, no stop_all) and waits until every process
/// of `started` is gone; returns how long that took.
fn kill_host_until_gone(rt: &mut RuntimeProcess, started: &[(i32, u64)]) -> Duration {
    let host = rt.host_pid();
    let killed = Instant::now();
    rt.kill_group();
    loop {
        let alive: Vec<_> = started
            .iter()
            .filter(|(pid, start)| is_alive(*pid, *start))
            .collect();
        if alive.is_empty() {
            return killed.elapsed();
        }
        if killed.elapsed() > GONE_WITHIN {
            let described: Vec<_> = alive.iter().map(|(pid, _)| describe(*pid)).collect();
            // Fail without leaving them behind for the next test.
            for (pid, _) in &alive {
                support::kill(*pid, 9);
            }
            panic!("still running {GONE_WITHIN:?} after kill -9 of host {host}: {described:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
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

/// A stand-in for a sandbox a killed host left (sh through a link named `bwrap`, blocked
/// reading its stdin) started, as the sandbox plugin starts bwrap, under the tag of `owner`.
/// A link, not a copy: a copy just written can fail to exec with `ETXTBSY` while another
/// test's fork still holds its write descriptor; the command name is the link's either way.
fn leftover_bwrap(dir: &std::path::Path, owner: &std::path::Path) -> Child {
    use std::os::unix::process::CommandExt;
    let bwrap = dir.join("bwrap");
    if !bwrap.exists() {
        std::os::unix::fs::symlink("/bin/sh", &bwrap).unwrap();
    }
    Command::new(&bwrap)
        .arg0(link_confine::leftovers::tag(owner))
        .args(["-c", "read x"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// bubblewrap's sandbox init can outlive a killed host (`--die-with-parent` is armed after
/// the clone, containers/bubblewrap#633). `up` after a host died kills every bwrap started
/// for this state root, and no other. (That real bwraps carry the tag is checked by
/// `host_death_takes_a_running_confined_command_with_it`.)
#[test]
fn host_death_leftover_sandboxes_of_this_state_are_killed_by_the_next_up() {
    let root = state_root();
    let other = state_root();
    let mut mine = leftover_bwrap(other.path(), root.path());
    let mut theirs = leftover_bwrap(other.path(), other.path());
    let run = root.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let dead_host = json!({ "host": 999_999, "plugins": [] });
    std::fs::write(run.join("pids.json"), dead_host.to_string()).unwrap();

    let mut rt = support::up(&root, "mini");
    let said = format!("link: killing bwrap (pid {})", mine.id());
    assert!(
        rt.stderr().contains(&said),
        "no {said:?} in:\n{}",
        rt.stderr()
    );
    let status = mine.try_wait().unwrap().expect("the leftover was killed");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    assert!(
        theirs.try_wait().unwrap().is_none(),
        "another state's sandbox was killed"
    );
    rt.down();
    theirs.kill().unwrap();
    theirs.wait().unwrap();
}

/// Confined full Link with a tool command running: the sandbox plugin's bwrap, the
/// namespace's init and the command die with the host too; the command ran in the runtime's
/// cgroups, which the next start removes (v1 here; v2 in a virtual machine:
/// [`host_death_in_cgroup_v2`]).
#[test]
fn host_death_takes_a_running_confined_command_with_it() {
    if !support::sandbox_available() {
        return;
    }
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "confined");
    // Behind a kept answer the probe runs after `ready`: its bwraps (under its own scratch
    // directory's tag) are not the command's, so the command starts once it is done.
    wait_for_the_probe(&mut rt);
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
    // Each bwrap (and the namespace's init) runs under this state's tag: what the next `up`
    // looks for when one outlives the host.
    let tag = link_confine::leftovers::tag(root.path());
    for (pid, _) in &started {
        let Some(p) = read_proc(*pid).filter(|p| p.comm == "bwrap") else {
            continue;
        };
        assert_eq!(
            p.argv.first().map(String::as_str),
            tag.to_str(),
            "bwrap {pid} not started under the tag of {}",
            root.path().display()
        );
    }
    let cgroups = AgentCgroups::of(&root, host);
    if let Some(c) = &cgroups {
        c.hold_the_command(&started);
    }
    let took = kill_host_until_gone(&mut rt, &started);
    eprintln!(
        "link (confined, running `sleep` in bwrap): kill -9 of the host to the last of {} processes gone: {took:?}",
        started.len()
    );
    // The turn's connection ends with the host; its answer does not matter here.
    let _ = turn.join().unwrap();
    let Some(cgroups) = cgroups else {
        return;
    };
    // The dead runtime's cgroups stay, empty; the next `up` removes them and makes its own,
    // `down` removes those.
    assert!(cgroups.runtime.iter().all(|d| d.is_dir()));
    let mut again = support::up_in(&root, "link", "confined");
    let next = AgentCgroups::of(&root, again.host_pid()).unwrap();
    for dir in &cgroups.runtime {
        assert!(!dir.exists(), "{} outlived its host", dir.display());
    }
    // The pool is made once the runtime is ready.
    let whole = |dir: &std::path::Path| next.pool(dir).len() == link_confine::cgroup::POOL;
    let made = link_harness_conformance::reaper::wait_until(Duration::from_secs(20), || {
        next.runtime.iter().all(|d| whole(d))
    });
    assert!(made, "no whole pool in {:?}", next.runtime);
    for dir in &next.runtime {
        let pool = next.pool(dir);
        assert!(
            pool.iter().all(|c| members(c).is_empty()),
            "{}",
            dir.display()
        );
    }
    again.down();
    for dir in &next.runtime {
        assert!(!dir.exists(), "{} outlived `link down`", dir.display());
    }
}

/// [`host_death_takes_a_running_confined_command_with_it`] inside a virtual machine whose one
/// cgroup hierarchy is v2 (`link_harness_conformance::vm`): this machine's controllers are v1.
#[test]
fn host_death_in_cgroup_v2() {
    link_harness_conformance::vm::rerun_in_cgroup_v2(
        "host_death::host_death_takes_a_running_confined_command_with_it",
    );
}

/// The pids in the cgroup `dir`.
fn members(dir: &std::path::Path) -> Vec<i32> {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    procs.lines().map(|l| l.parse().unwrap()).collect()
}

/// As root where cgroup v1 has memory, pids and cpuacct, or v2 memory and pids
/// (`link_confine::cgroup`): the runtime's cgroup in each hierarchy; `None` (said as a skip)
/// where the machine allows none.
struct AgentCgroups {
    root: std::path::PathBuf,
    runtime: Vec<std::path::PathBuf>,
    v2: bool,
}

impl AgentCgroups {
    /// Those of the runtime whose host is `host`.
    fn of(root: &StateRoot, host: i32) -> Option<AgentCgroups> {
        let parents = match link_confine::cgroup::support() {
            Ok(p) => p,
            Err(why) => {
                assert!(!link_harness_conformance::vm::inside(), "{why}");
                link_harness_conformance::probe::skipped(&format!(
                    "SKIPPED (the agents' cgroups): {why}"
                ));
                return None;
            }
        };
        let v2 = matches!(parents, link_confine::cgroup::Hierarchy::V2(_));
        assert_eq!(v2, link_harness_conformance::vm::inside(), "{parents:?}");
        let prefix = link_confine::cgroup::instance_prefix(root.path());
        let name = link_confine::cgroup::instance_name(&prefix, host).unwrap();
        // v2: the part handed to the plugin, its leaf and the pool.
        let handed = |p: &std::path::Path| match v2 {
            true => p.join(&name).join(link_confine::cgroup::AGENTS),
            false => p.join(&name),
        };
        let runtime = parents.parents().iter().map(|(_, p)| handed(p)).collect();
        Some(AgentCgroups {
            root: root.path().to_owned(),
            runtime,
            v2,
        })
    }

    /// The cgroups of the pool in the runtime's directory `dir` (not v2's leaf of the sandbox
    /// plugin).
    fn pool(&self, dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let entries = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
        let leaves = [
            link_confine::cgroup::PLUGIN_LEAF,
            link_confine::cgroup::HOST_LEAF,
        ];
        let leaf = |p: &std::path::Path| leaves.iter().any(|l| p.file_name().unwrap() == *l);
        entries.filter(|p| p.is_dir() && !leaf(p)).collect()
    }

    /// In each hierarchy one cgroup of the pool holds every process of the command (bwrap,
    /// the namespace's init, the shell's `sleep`) and nothing else, with the command's
    /// default limits. The runtime's directories and the pool are root's; only the files the
    /// sandbox plugin writes in the pool are its uid's. In v2 the sandbox plugin itself runs
    /// in the runtime's leaf for it, and the runtime directory's `cgroup.procs` is its uid's
    /// (the common ancestor v2 needs a mover to write).
    fn hold_the_command(&self, started: &[(i32, u64)]) {
        use std::os::unix::fs::MetadataExt;
        let base = link_confine::identity::base_for(&self.root).unwrap();
        let plugin = link_confine::plugin_ns::plugin_id(base);
        let owner = |p: &std::path::Path| std::fs::metadata(p).unwrap().uid();
        let named = |comm: &str| -> Vec<i32> {
            started
                .iter()
                .filter(|(pid, _)| read_proc(*pid).is_some_and(|p| p.comm == comm))
                .map(|(pid, _)| *pid)
                .collect()
        };
        let sleep = named("sleep");
        assert_eq!(sleep.len(), 1, "{started:?}");
        let mut holding = Vec::new();
        for dir in &self.runtime {
            assert_eq!(owner(dir), 0, "{}", dir.display());
            let pool = self.pool(dir);
            let with: Vec<_> = pool
                .iter()
                .filter(|c| members(c).contains(&sleep[0]))
                .collect();
            assert_eq!(with.len(), 1, "{}: {pool:?}", dir.display());
            let cgroup = with[0];
            assert_eq!(owner(cgroup), 0, "{}", cgroup.display());
            assert_eq!(owner(&cgroup.join("cgroup.procs")), plugin);
            // Nothing but the command: no plugin, no host.
            let plugins = started
                .iter()
                .filter(|(pid, _)| read_proc(*pid).is_some_and(|p| p.comm.starts_with("link")));
            for (pid, _) in plugins {
                assert!(
                    !members(cgroup).contains(pid),
                    "{pid} in {}",
                    cgroup.display()
                );
            }
            holding.push(cgroup.clone());
        }
        let read = |dir: &std::path::Path, file: &str| {
            std::fs::read_to_string(dir.join(file))
                .unwrap()
                .trim()
                .to_owned()
        };
        let memory = (4u64 << 30).to_string();
        if !self.v2 {
            assert_eq!(read(&holding[0], "memory.limit_in_bytes"), memory);
            assert_eq!(read(&holding[1], "pids.max"), "256");
            return;
        }
        assert_eq!(read(&holding[0], "memory.max"), memory);
        assert_eq!(read(&holding[0], "pids.max"), "256");
        let dir = &self.runtime[0];
        assert_eq!(owner(&dir.join("cgroup.procs")), plugin);
        let leaf = dir.join(link_confine::cgroup::PLUGIN_LEAF);
        let sandbox = named("link-plugin-san");
        assert_eq!(sandbox.len(), 1, "{started:?}");
        assert_eq!(members(&leaf), sandbox, "{}", leaf.display());
    }
}

/// `pid`'s program, state, parent and command line, for a failure's message.
fn describe(pid: i32) -> String {
    let p = procfs::process::Process::new(pid);
    let stat = p.as_ref().ok().and_then(|p| p.stat().ok());
    let cmdline = p.and_then(|p| p.cmdline()).unwrap_or_default().join(" ");
    match stat {
        Some(s) => format!(
            "{pid} {} {} (parent {}): {cmdline}",
            s.comm, s.state, s.ppid
        ),
        None => format!("{pid} (gone)"),
    }
}

/// The sandbox probe's scratch directories of the sandbox plugin `pid`.
fn probe_dirs_of(pid: i32) -> Vec<std::path::PathBuf> {
    let prefix = format!("lnk-probe-{pid}-");
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// kill -9 of the host while the sandbox probe runs bubblewrap — during start-up, or just
/// after `ready` when a kept answer let the start go on without it (`probe_cache`): every
/// process started so far (the plugins, the probe, its bwrap and what bwrap started) dies
/// with the host, and `up` on the same state starts again and its probe sweeps the scratch
/// directory the killed probe could not remove.
#[test]
fn host_death_mid_probe_leaves_nothing() {
    if !support::sandbox_available() {
        return;
    }
    let root = state_root();
    let mut rt = support::spec("link", "confined")
        .spawn_in(root.path())
        .expect("spawn link up");
    let host = rt.host_pid();
    let (bwrap, sandbox) = probe_on_a_command(&mut rt);
    // What names the probe's directory (its bwrap and what that started) is checked after the
    // next start instead: bubblewrap's own race (see `link_confine::leftovers`) can
    // leave its sandbox init alive, even one already running at this snapshot, and the next
    // probe ends it.
    let started: Vec<_> = support::tree(host)
        .into_iter()
        .filter(|&(pid, _)| pid != host && !names_the_scratch_dir_of(pid, sandbox))
        .collect();
    let took = kill_host_until_gone(&mut rt, &started);
    eprintln!(
        "link (confined, probe running bwrap {bwrap}): kill -9 of the host to the last \
         of {} processes gone: {took:?}",
        started.len()
    );
    // Empty only when the probe finished its run in the moment before the kill.
    let scratch = probe_dirs_of(sandbox);
    rt.start_again();
    wait_for_the_probe(&mut rt);
    let of_the_probe = || -> Vec<String> {
        naming_the_scratch_dir_of(sandbox)
            .into_iter()
            .filter_map(read_proc)
            .filter(|p| p.state != 'Z')
            .map(|p| format!("{} {} (parent {})", p.pid, p.comm, p.ppid))
            .collect()
    };
    let deadline = Instant::now() + GONE_WITHIN;
    while !of_the_probe().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let left = of_the_probe();
    assert!(
        left.is_empty(),
        "processes of the killed probe left: {left:?}"
    );
    let kept: Vec<_> = scratch.iter().filter(|d| d.exists()).collect();
    assert!(
        kept.is_empty(),
        "the next probe did not sweep the killed one's scratch directory: {kept:?}"
    );
    rt.down();
}

/// `link down` while the sandbox probe runs a command (held there with SIGSTOP, so it cannot
/// finish and clean up first): the host ends the probe and removes the scratch directory the
/// probe could not.
#[test]
fn down_mid_probe_leaves_no_scratch_directory() {
    if !support::sandbox_available() {
        return;
    }
    // The probe may finish between being seen and being stopped.
    let (_root, _rt, probe) = down_while_held("the probe", |_, probe| {
        support::kill(probe, rustix::process::Signal::STOP.as_raw());
        let held = !probe_dirs_of(probe).is_empty();
        if !held {
            support::kill(probe, rustix::process::Signal::CONT.as_raw());
        }
        held
    });
    assert!(
        !link_os::process::running(probe),
        "the probe {probe} outlived the host"
    );
    assert_eq!(probe_dirs_of(probe), Vec::<std::path::PathBuf>::new());
}

/// `link down` while the sandbox probe runs a command (its bwrap held with SIGSTOP, so the
/// probe is still in that run when `down` comes): the host asks the probe to stop, the probe
/// kills and reaps its own sandbox, and nothing of it is left for the host to find: `down`
/// names no leftover, and neither the probe, nor a process of its run, nor its scratch
/// directory remains. Before, the probe was killed outright and its sandbox's processes,
/// adopted by the host, were named as leftovers on every quick `down`. The twin, a process a
/// plugin really left behind and `down` names, is
/// `link::down_kills_what_a_plugin_left_running_and_names_it`.
#[test]
fn down_mid_probe_stops_the_probe_which_leaves_nothing_behind() {
    use rustix::process::{kill_process, Pid, Signal};
    if !support::sandbox_available() {
        return;
    }
    // The probe's bwrap may end between being seen and being held.
    let (_root, rt, probe) = down_while_held("the probe's bwrap", |bwrap, _| {
        let pid = Pid::from_raw(bwrap).expect("a pid");
        kill_process(pid, Signal::STOP).is_ok() && support::stopped(bwrap)
    });
    assert!(
        !rt.stderr().contains("killing leftover"),
        "the stopped probe left processes to the host:\n{}",
        rt.stderr()
    );
    assert!(
        !link_os::process::running(probe),
        "the probe {probe} outlived the host"
    );
    let left: Vec<String> = naming_the_scratch_dir_of(probe)
        .into_iter()
        .map(describe)
        .collect();
    assert!(left.is_empty(), "left: {left:?}");
    assert_eq!(probe_dirs_of(probe), Vec::<std::path::PathBuf>::new());
}

/// A confined full Link whose sandbox probe is caught running a command, held there by
/// `hold(bwrap, probe)` (false: it ended first, and a new start is tried, up to 10), then
/// `link down`, which must succeed: (its state root, the exited runtime, the probe's pid).
fn down_while_held(
    what: &str,
    hold: impl Fn(i32, i32) -> bool,
) -> (StateRoot, RuntimeProcess, i32) {
    for attempt in 1..=10 {
        let root = state_root();
        let mut rt = support::spec("link", "confined")
            .spawn_in(root.path())
            .expect("spawn link up");
        let (bwrap, probe) = probe_on_a_command(&mut rt);
        let held = hold(bwrap, probe);
        support::link_ok(&["down", "--state"], root.path());
        rt.wait_exit();
        if held {
            return (root, rt, probe);
        }
        eprintln!("attempt {attempt}: {what} ended before it was held");
    }
    panic!("{what} was never held in 10 starts");
}

/// Until the sandbox probe of `rt`'s host has run (before `ready`, or behind a kept answer
/// after it), as `host.status` says.
fn wait_for_the_probe(rt: &mut RuntimeProcess) {
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let status = rt.host_call("host.status", json!({})).unwrap();
        let probe = status["sandbox"]["probe"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if probe == "ran" || probe == "cached, confirmed" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the probe never finished: {probe:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The sandbox probe of `rt`'s host, once it runs bwrap on a real command (not
/// `bwrap --version`), whose arguments name the probe's scratch directory: (bwrap, probe).
/// That bwrap lives a few milliseconds: the host's children and theirs are read every 50 µs
/// (a few small files), not by a scan of every process.
fn probe_on_a_command(rt: &mut RuntimeProcess) -> (i32, i32) {
    let host = rt.host_pid();
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let found = children(host).into_iter().find_map(|plugin| {
            children(plugin)
                .into_iter()
                .find(|&bwrap| comm(bwrap) == "bwrap" && names_the_scratch_dir_of(bwrap, plugin))
                .map(|bwrap| (bwrap, plugin))
        });
        if let Some(found) = found {
            return found;
        }
        assert!(
            Instant::now() < deadline && matches!(rt.try_wait(), Ok(None)),
            "no bwrap of the sandbox probe seen while link up started or just after:\n{}",
            rt.stderr()
        );
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// The children of every thread of `pid` (`/proc/PID/task/TID/children`).
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_default()
}

/// Every process whose command line names a scratch directory of the probe `probe`.
fn naming_the_scratch_dir_of(probe: i32) -> Vec<i32> {
    procfs::process::all_processes()
        .unwrap()
        .flatten()
        .map(|p| p.pid)
        .filter(|&pid| names_the_scratch_dir_of(pid, probe))
        .collect()
}

/// Whether the command line of `pid` names a scratch directory of the probe `probe`.
fn names_the_scratch_dir_of(pid: i32, probe: i32) -> bool {
    let marker = format!("lnk-probe-{probe}-");
    procfs::process::Process::new(pid)
        .and_then(|p| p.cmdline())
        .is_ok_and(|c| c.join(" ").contains(&marker))
}
