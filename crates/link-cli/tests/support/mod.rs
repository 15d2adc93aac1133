//! Drives a real `link up` for the host's tests.

#![allow(dead_code)]

use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::runtime_process::{self, RuntimeProcess, RuntimeSpec};
use link_protocol::plugin::Profile;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The mode the host's tests run in.
pub const MODE: &str = "confined";

/// An HTTP response.
pub type Resp = link_protocol::http::HttpResponse;

/// A fresh state root; removed on drop.
pub fn state_root() -> StateRoot {
    StateRoot::create().expect("a state root")
}

/// `link ARGS... STATE` with the freshly built binary.
pub fn link(args: &[&str], state: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_link"));
    cmd.args(args).arg(state);
    cmd
}

/// Runs `link ARGS... STATE` to its end and asserts it succeeded (its stderr otherwise).
pub fn link_ok(args: &[&str], state: &Path) -> std::process::Output {
    let out = link(args, state).output().unwrap();
    assert!(
        out.status.success(),
        "link {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` with `stdin` written to its standard input; its whole output.
pub fn output_with_stdin(cmd: &mut Command, stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let written = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    // A command that refuses before it reads (`model-key set` on a refused state root) may
    // have closed its end already: its output says why, not a broken pipe here.
    if let Err(e) = written {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing stdin: {e}"
        );
    }
    child.wait_with_output().unwrap()
}

/// Runs `link up --profile PROFILE --mode MODE --state ROOT` to its end: for a start that
/// must be refused (one that is not would run until killed).
pub fn up_refused(root: &Path, profile: &str) -> std::process::Output {
    let args = ["up", "--profile", profile, "--mode", MODE, "--state"];
    let out = link(&args, root).output().unwrap();
    assert!(
        !out.status.success(),
        "link up on {} started",
        root.display()
    );
    out
}

fn programs() -> PathBuf {
    let dir = runtime_process::test_programs();
    for p in link_protocol::manifest::programs_of(Profile::Mini) {
        assert!(
            dir.join(p).is_file(),
            "{p} is not built in {}: run `cargo build --workspace` (or test with --workspace)",
            dir.display()
        );
    }
    dir
}

/// `link up --profile PROFILE --mode MODE` on `root` with test hooks on; it must print
/// `ready <connection socket>`.
pub fn up_in(root: &StateRoot, profile: &str, mode: &str) -> RuntimeProcess {
    let rt = spec(profile, mode)
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    let expected = format!(
        "ready {}",
        root.path().join("run/connection.sock").display()
    );
    assert_eq!(
        rt.ready_line().trim_end(),
        expected,
        "host stderr:\n{}",
        rt.stderr()
    );
    rt
}

/// `link up --profile PROFILE --mode MODE` with the built programs and test hooks on.
pub fn spec(profile: &str, mode: &str) -> RuntimeSpec {
    RuntimeSpec::new(programs(), profile.parse().unwrap(), mode.parse().unwrap()).with_test_hooks()
}

/// [`up_in`] in the tests' [`MODE`].
pub fn up(root: &StateRoot, profile: &str) -> RuntimeProcess {
    up_in(root, profile, MODE)
}

fn start_time(pid: i32) -> Option<u64> {
    procfs::process::Process::new(pid)
        .ok()?
        .stat()
        .ok()
        .map(|s| s.starttime)
}

pub fn kill(pid: i32, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Whether `pid` is stopped (state `T`), waiting briefly for a SIGSTOP just sent to land.
pub fn stopped(pid: i32) -> bool {
    use link_harness_conformance::reaper::read_proc;
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        match read_proc(pid) {
            Some(p) if p.state == 'T' => return true,
            Some(p) if p.state != 'Z' => std::thread::sleep(Duration::from_micros(100)),
            _ => return false,
        }
    }
    false
}

/// Every (pid, start time) is gone from /proc (or is a different, newer process).
pub fn assert_gone(started: &[(i32, u64)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let alive: Vec<_> = started
            .iter()
            .filter(|(pid, t)| start_time(*pid) == Some(*t))
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still running after the runtime stopped: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The host and every descendant, with start times, read from /proc now.
pub fn tree(host: i32) -> Vec<(i32, u64)> {
    let mut pids = vec![host];
    pids.extend(link_os::sample::descendants(host));
    pids.into_iter()
        .filter_map(|pid| Some((pid, start_time(pid)?)))
        .collect()
}

/// Waits until a descendant of `root` runs a program named `comm`.
pub fn wait_for_process(comm: &str, root: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = link_os::sample::descendants(root)
            .into_iter()
            .filter_map(link_os::sample::sample_process)
            .any(|p| p.name == comm);
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {comm} process appeared under {root}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True when the sandbox probe says confinement is enforced; a skip when it is unavailable
/// (exit 2); a failure when the probe is broken (exit 1) or `LNK_REQUIRE_SANDBOX=1`. The kit's
/// `probe::sandbox_or_skip` decides, as for every test.
pub fn sandbox_available() -> bool {
    let programs = Path::new(env!("CARGO_BIN_EXE_link")).parent().unwrap();
    link_harness_conformance::probe::sandbox_or_skip(programs)
}

/// Sends one turn of agent `k` with `message` on `socket` from a thread of its own, so the test
/// can act on the runtime (kill, stop) while the turn is in flight.
pub fn turn_in_thread(
    socket: PathBuf,
    token: String,
    message: &str,
) -> std::thread::JoinHandle<Result<link_protocol::http::HttpResponse, link_protocol::Error>> {
    let body = serde_json::json!({ "message": message });
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(link_protocol::http::json(
            &socket,
            "POST",
            "/v1/agents/k/turns",
            Some(&token),
            Some(&body),
        ))
    })
}

/// The built programs of full Link, hard-linked beside the build (Landlock lets plugins run
/// only what is under the programs directory), with one plugin wrapped: a shell script that
/// runs `prelude`, then execs the real program (`NAME.real`) in the same process.
pub struct Wrapped(PathBuf);

impl Wrapped {
    pub fn new(plugin: &str, prelude: &str) -> Wrapped {
        use link_protocol::routes::programs;
        use std::os::unix::fs::PermissionsExt;
        let built = runtime_process::test_programs();
        let dir = built.join(format!("lnk-wrapped-{}-{}", plugin, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in link_protocol::manifest::programs_of(Profile::Link)
            .iter()
            .chain(&[programs::HOST])
        {
            let to = match *name {
                n if n == plugin => format!("{n}.real"),
                other => other.to_owned(),
            };
            std::fs::hard_link(built.join(name), dir.join(to)).unwrap();
        }
        let wrapper = dir.join(plugin);
        let script = format!("#!/bin/sh\n{prelude}\nexec \"$0.real\" \"$@\"\n");
        std::fs::write(&wrapper, script).unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o700)).unwrap();
        Wrapped(dir)
    }

    /// The programs directory, for `RuntimeSpec::new`.
    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Drop for Wrapped {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
