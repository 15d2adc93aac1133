//! One runtime per state root, and a `link down` that is never lost, for Mini and full Link:
//! the real `link up`, effects checked on disk and in `/proc`.

use crate::support::{self, state_root};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The profiles a test runs on: full Link only where confinement is available.
fn profiles() -> Vec<&'static str> {
    let mut profiles = vec!["mini"];
    if support::sandbox_available() {
        profiles.push("link");
    }
    profiles
}

/// Every process whose environment names `root` (the host and all it started), but this one.
fn processes_of(root: &Path) -> Vec<(i32, String)> {
    let needle = root.as_os_str().as_encoded_bytes();
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
        })
        .filter_map(|pid| {
            let p = link_harness_conformance::reaper::read_proc(pid)?;
            (p.state != 'Z').then(|| (pid, p.comm.clone()))
        })
        .collect()
}

/// Waits until no process of `root` is left; fails naming them after 30 s.
fn assert_none_left(root: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = processes_of(root);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: left running: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every socket (or Mini's link to one) under `dir`.
fn sockets(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            found.extend(sockets(&entry.path()));
        } else if kind.is_socket() || kind.is_symlink() {
            found.push(entry.path());
        }
    }
    found
}

/// Removing `run/` while a runtime runs does not let a second one start on the same data:
/// the second `up` is refused naming the running host, and `link down`, which no longer finds
/// the host's socket, still stops that host and all it started. Before, a second Mini
/// started (and full Link's refusal named its scheduler's data lock).
#[test]
fn a_removed_run_dir_lets_no_second_runtime_start_and_down_still_stops_the_first() {
    for profile in profiles() {
        let root = state_root();
        let mut rt = support::up(&root, profile);
        let host = rt.host_pid();
        std::fs::remove_dir_all(root.path().join("run")).unwrap();
        // Bounded: a second runtime that starts is stopped when `second` is dropped.
        let mut second = support::spec(profile, support::MODE)
            .spawn_in(root.path())
            .unwrap();
        let refused = second.wait_timeout(Duration::from_secs(30));
        let msg = second.stderr();
        assert!(
            refused.is_some_and(|status| !status.success()),
            "{profile}: a second `link up` runs on the state: {msg}"
        );
        assert!(
            msg.contains(&format!("is in use by a running `link up` (pid {host})")),
            "{profile}: {msg}"
        );
        let out = support::link(&["down", "--state"], root.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{profile}: {err}");
        assert!(
            err.contains(&format!("host (pid {host}) does not answer")),
            "{profile}: {err}"
        );
        assert!(
            rt.wait_timeout(Duration::from_secs(30)).is_some(),
            "{profile}: the host still runs after `link down`"
        );
        assert_none_left(root.path(), profile);
    }
}

/// A state root removed and made again while a runtime runs holds a second runtime's files;
/// the first, stopped by a signal, removes none of them (its host and plugins remove only
/// what they made), and the second goes on and stops with `link down`. Before, the first's
/// host deleted the second's sockets and pids file, leaving it unreachable.
#[test]
fn a_runtime_stopped_after_its_root_was_replaced_leaves_the_new_runtimes_files() {
    for profile in profiles() {
        let root = state_root();
        let mut first = support::up(&root, profile);
        let first_host = first.host_pid();
        remove_root(root.path(), profile);
        let mut second = support::up(&root, profile);
        let mut before = sockets(&root.path().join("run"));
        before.sort();
        assert!(before.len() >= 3, "{profile}: {before:?}");
        first.terminate();
        assert!(
            first.wait_timeout(Duration::from_secs(30)).is_some(),
            "{profile}: the first host ignored SIGTERM"
        );
        // Its plugins are gone too: no process but the second runtime's names the root.
        let deadline = Instant::now() + Duration::from_secs(30);
        while support::tree(first_host).len() > 1 {
            assert!(
                Instant::now() < deadline,
                "{profile}: the first's plugins run"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut after = sockets(&root.path().join("run"));
        after.sort();
        assert_eq!(
            after, before,
            "{profile}: stopping the first runtime removed the second's sockets"
        );
        assert!(
            root.path().join("run/pids.json").is_file(),
            "{profile}: the second's pids file is gone"
        );
        assert_eq!(second.status()["state"], "ready", "{profile}");
        second.down();
        assert_none_left(root.path(), profile);
        assert_eq!(sockets(&root.path().join("run")), Vec::<PathBuf>::new());
    }
}

/// Removes the state root, trying again while a plugin writes as the tree goes.
fn remove_root(root: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = std::fs::remove_dir_all(root) {
        assert!(Instant::now() < deadline, "{what}: removing the root: {e}");
    }
}

/// How long a host is given to notice by itself that its root was removed: far more than its
/// check's interval (1 s), so a busy machine does not fail the test.
const NOTICED_WITHIN: Duration = Duration::from_secs(30);

/// A runtime whose state root is removed and made again while it runs stops by itself, in
/// order: its host exits, nothing it started runs, and a runtime started on the path since
/// keeps its sockets and pids file, answers and takes turns. Before, the first ran on
/// detached until killed, and `link down` on the path reached only the second. Its twin:
/// [`a_runtime_whose_root_is_untouched_keeps_running`].
#[test]
fn a_runtime_whose_root_was_replaced_stops_by_itself() {
    use link_harness_conformance::reaper::wait_until;
    for profile in profiles() {
        let root = state_root();
        let mut first = support::up(&root, profile);
        let first_started = support::tree(first.host_pid());
        assert!(first_started.len() >= 3, "{profile}: {first_started:?}");
        remove_root(root.path(), profile);
        std::fs::create_dir(root.path()).unwrap();
        let mut second = support::up(&root, profile);
        // The host and its plugins (not the whole tree: full Link's start has short-lived
        // processes of its own, its sandbox probe's).
        let second_started = second.started_processes();
        let mut before = sockets(&root.path().join("run"));
        before.sort();
        assert!(before.len() >= 3, "{profile}: {before:?}");

        let exited = wait_until(NOTICED_WITHIN, || {
            first.try_wait().is_ok_and(|status| status.is_some())
        });
        assert!(
            exited,
            "{profile}: the first host runs on detached from its removed root: {}",
            first.stderr()
        );
        let _ = first.wait_timeout(Duration::from_secs(5));
        let said = first.stderr();
        assert!(
            said.contains(&format!("its state root {}", root.path().display()))
                && said.contains("stopping the runtime"),
            "{profile}: the first host did not say why it stopped: {said}"
        );
        support::assert_gone(&first_started);

        // The second is whole: every process, socket and the pids file, and it works.
        assert_eq!(
            second.started_processes(),
            second_started,
            "{profile}: the second runtime lost a process"
        );
        let mut after = sockets(&root.path().join("run"));
        after.sort();
        assert_eq!(
            after, before,
            "{profile}: the first runtime's stop removed the second's sockets"
        );
        assert!(
            root.path().join("run/pids.json").is_file(),
            "{profile}: the second's pids file is gone"
        );
        assert_eq!(second.status()["state"], "ready", "{profile}");
        second.create_agent("after");
        let reply = second.turn("after", "still here");
        assert!(
            reply["reply"]
                .as_str()
                .is_some_and(|r| r.contains("still here")),
            "{profile}: {reply}"
        );
        second.down();
        assert_none_left(root.path(), profile);
    }
}

/// The twin of [`a_runtime_whose_root_was_replaced_stops_by_itself`]: a runtime whose root is
/// only written to (a file made and removed in it, its mode set again) keeps running through
/// the same checks, and answers and takes turns after them.
#[test]
fn a_runtime_whose_root_is_untouched_keeps_running() {
    use std::os::unix::fs::PermissionsExt;
    for profile in profiles() {
        let root = state_root();
        let mut rt = support::up(&root, profile);
        let started = rt.started_processes();
        let scratch = root.path().join("scratch");
        std::fs::write(&scratch, b"x").unwrap();
        std::fs::remove_file(&scratch).unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        // Several of the host's checks (one a second) pass meanwhile.
        std::thread::sleep(Duration::from_secs(4));
        assert!(
            matches!(rt.try_wait(), Ok(None)),
            "{profile}: the host stopped with its root in place: {}",
            rt.stderr()
        );
        assert_eq!(rt.started_processes(), started, "{profile}");
        assert_eq!(rt.status()["state"], "ready", "{profile}");
        rt.create_agent("kept");
        let reply = rt.turn("kept", "still here");
        assert!(
            reply["reply"]
                .as_str()
                .is_some_and(|r| r.contains("still here")),
            "{profile}: {reply}"
        );
        rt.down();
        assert_none_left(root.path(), profile);
    }
}

/// How many `up`/`down` pairs each profile runs.
const ROUNDS: usize = 20;

/// `link down` sent in the first milliseconds of `link up` (0 to 3 ms after the host process
/// started) stops that runtime, whatever it was doing: `down` exits 0, the host exits, nothing
/// it started runs, no socket, pids file or control key is left, and the next `up` starts.
/// Before, `down` said no runtime answered and the runtime stayed up in 43 of 50 tries (Mini)
/// and 46 of 50 (full Link).
#[test]
fn down_in_the_first_milliseconds_of_up_is_never_lost() {
    for profile in profiles() {
        let root = state_root();
        let (mut lost, mut by_signal) = (Vec::new(), 0);
        for round in 0..ROUNDS {
            let mut rt = support::spec(profile, support::MODE)
                .spawn_in(root.path())
                .unwrap();
            std::thread::sleep(Duration::from_micros(150 * (round as u64 % 20)));
            let out = support::link(&["down", "--state"], root.path())
                .output()
                .unwrap();
            // A `down` that failed leaves the runtime up (stopped when `rt` is dropped).
            let stopped =
                out.status.code() == Some(0) && rt.wait_timeout(Duration::from_secs(60)).is_some();
            if !stopped {
                lost.push((
                    round,
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                    rt.stderr(),
                ));
                continue;
            }
            by_signal += usize::from(String::from_utf8_lossy(&out.stderr).contains("SIGTERM"));
            assert_none_left(root.path(), profile);
            let run = root.path().join("run");
            assert_eq!(sockets(&run), Vec::<PathBuf>::new(), "{profile} {round}");
            assert!(!run.join("pids.json").exists(), "{profile} {round}");
            assert!(
                !root.path().join("control/key").exists(),
                "{profile} {round}"
            );
        }
        eprintln!(
            "{profile}: {ROUNDS} downs, {} lost, {by_signal} reached the host by SIGTERM",
            lost.len()
        );
        assert!(
            lost.is_empty(),
            "{profile}: {} of {ROUNDS} downs lost: {lost:#?}",
            lost.len()
        );
        // The state root is free: the next `up` starts and stops as usual.
        let mut rt = support::up(&root, profile);
        rt.down();
        assert_none_left(root.path(), profile);
    }
}
