//! Drives a real `link up` for the host's tests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The mode the host's tests run in.
pub const MODE: &str = "confined";

/// A state root under `LNK_TEST_STATE_DIR` (else `~/.cache/lnk-t`), removed on drop.
pub struct StateRoot(PathBuf);

impl StateRoot {
    pub fn new(tag: &str) -> StateRoot {
        let parent = std::env::var_os("LNK_TEST_STATE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/lnk-t"));
        let path = parent.join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        link_protocol::layout::StateLayout::new(&path)
            .check()
            .unwrap();
        StateRoot(path)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for StateRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `link ARGS... STATE` with the freshly built binary.
pub fn link(args: &[&str], state: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_link"));
    cmd.args(args).arg(state);
    cmd
}

fn programs() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_link"))
        .parent()
        .unwrap()
        .to_owned();
    for p in [
        "link-plugin-model",
        "link-plugin-measure",
        "link-mini-harness",
        "link-mini-connection",
    ] {
        assert!(
            dir.join(p).is_file(),
            "{p} is not built in {}: run `cargo build --workspace` (or test with --workspace)",
            dir.display()
        );
    }
    dir
}

/// A running `link up`.
pub struct Runtime {
    child: Child,
    state: PathBuf,
    stderr: Arc<Mutex<String>>,
    rt: tokio::runtime::Runtime,
}

/// An HTTP response.
pub type Resp = link_protocol::http::HttpResponse;

impl Runtime {
    pub fn up(root: &StateRoot, profile: &str) -> Runtime {
        Runtime::up_in(root, profile, MODE)
    }

    pub fn up_in(root: &StateRoot, profile: &str, mode: &str) -> Runtime {
        let mut child = Command::new(env!("CARGO_BIN_EXE_link"))
            .args(["up", "--profile", profile, "--mode", mode, "--state"])
            .arg(root.path())
            .arg("--programs")
            .arg(programs())
            .env("LNK_KEYCHAIN", "off")
            .env("LNK_TEST_HOOKS", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let runtime = Runtime {
            child,
            state: root.path().to_owned(),
            stderr,
            rt,
        };
        let expected = format!(
            "ready {}",
            root.path().join("run/connection.sock").display()
        );
        assert_eq!(
            line.trim_end(),
            expected,
            "host stderr:\n{}",
            runtime.stderr()
        );
        runtime
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn token(&self) -> String {
        let out = link(&["token", "create", "--state"], &self.state)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Resp {
        let socket = self.state.join("run/connection.sock");
        self.rt
            .block_on(link_protocol::http::request(
                &socket, method, path, token, body,
            ))
            .unwrap()
    }

    pub fn post(&self, path: &str, token: &str, body: serde_json::Value) -> Resp {
        self.request(
            "POST",
            path,
            Some(token),
            Some(body.to_string().into_bytes()),
        )
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Resp {
        self.request("GET", path, token, None)
    }

    /// One link-protocol call on the host's control socket.
    pub fn host_call(
        &self,
        route: &str,
        body: serde_json::Value,
    ) -> Result<serde_json::Value, link_protocol::Error> {
        let socket = self.state.join("run/host.sock");
        self.rt
            .block_on(link_protocol::client::call_once(&socket, route, None, body))
    }

    pub fn host_pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn status(&self) -> serde_json::Value {
        let out = link(&["status", "--state"], &self.state).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// (name, pid) of every plugin, from `link status`.
    pub fn plugin_pids(&self) -> Vec<(String, i32)> {
        self.status()["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["pid"].as_i64().unwrap() as i32,
                )
            })
            .collect()
    }

    /// The host and its plugins with their start times, read from /proc now.
    pub fn started_processes(&self) -> Vec<(i32, u64)> {
        let mut pids = vec![self.child.id() as i32];
        pids.extend(self.plugin_pids().into_iter().map(|(_, pid)| pid));
        pids.into_iter()
            .filter_map(|pid| Some((pid, start_time(pid)?)))
            .collect()
    }

    pub fn down(mut self) {
        let out = link(&["down", "--state"], &self.state).output().unwrap();
        assert!(
            out.status.success(),
            "link down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status = self.wait_exit();
        assert!(
            status.success(),
            "host exited {status:?}: {}",
            self.stderr()
        );
    }

    /// Waits (at most a minute) for the host to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "host did not exit: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            kill(self.child.id() as i32, 15);
            let _ = self.child.wait();
        }
    }
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
    pids.extend(link_plugin_measure::sample::descendants(host));
    pids.into_iter()
        .filter_map(|pid| Some((pid, start_time(pid)?)))
        .collect()
}

/// Waits until a descendant of `root` runs a program named `comm`.
pub fn wait_for_process(comm: &str, root: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = link_plugin_measure::sample::descendants(root)
            .into_iter()
            .filter_map(link_plugin_measure::sample::sample_process)
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

/// True when the sandbox probe says confinement is enforced; otherwise prints SKIPPED (or
/// fails under `LNK_REQUIRE_SANDBOX=1`).
pub fn sandbox_available() -> bool {
    let probe = Path::new(env!("CARGO_BIN_EXE_link"))
        .parent()
        .unwrap()
        .join("link-plugin-sandbox");
    let out = Command::new(probe).arg("probe").output().unwrap();
    if out.status.success() {
        return true;
    }
    let reason = String::from_utf8_lossy(&out.stdout);
    assert!(
        std::env::var("LNK_REQUIRE_SANDBOX").as_deref() != Ok("1"),
        "sandbox required but unavailable: {reason}"
    );
    println!("SKIPPED: sandbox unavailable: {reason}");
    false
}
