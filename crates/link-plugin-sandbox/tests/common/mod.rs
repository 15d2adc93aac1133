//! Shared test support: a state root outside /tmp, the probe gate, and running the binary.
#![allow(dead_code)]

use link_harness_conformance::fixture::StateRoot;
use link_protocol::layout::StateLayout;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

pub const BIN: &str = env!("CARGO_BIN_EXE_link-plugin-sandbox");
pub const PYTHON: &str = "/usr/bin/python3";

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}{}x{}x{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Runs the probe once per test binary; `true` when confinement is enforced. Otherwise prints
/// `SKIPPED: <reason>`, or panics when `LNK_REQUIRE_SANDBOX=1`.
pub fn sandbox_or_skip() -> bool {
    static PROBE: OnceLock<(bool, String)> = OnceLock::new();
    let (ok, reason) = PROBE.get_or_init(|| {
        let out = Command::new(BIN).arg("probe").output().expect("run probe");
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("probe prints JSON");
        let status = report["status"].as_str().unwrap_or("?").to_owned();
        let want = match status.as_str() {
            "enforced" => 0,
            "unavailable" => 2,
            _ => panic!("the sandbox probe says {status}: {report:#}"),
        };
        assert_eq!(out.status.code(), Some(want), "probe exit status");
        (
            status == "enforced",
            report["reason"].as_str().unwrap_or("").to_owned(),
        )
    });
    if *ok {
        return true;
    }
    if std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
        panic!("LNK_REQUIRE_SANDBOX=1 but the sandbox is unavailable: {reason}");
    }
    link_harness_conformance::probe::skipped(&format!("SKIPPED: {reason}"));
    false
}

/// A fresh state root (the testing kit's), with agents' workspaces and homes; removed when
/// the last holder of [`Root::state`] is dropped.
pub struct Root {
    pub layout: StateLayout,
    state: Arc<StateRoot>,
}

impl Root {
    pub fn new() -> Root {
        let state = StateRoot::create().expect("a state root");
        Root {
            layout: state.layout().clone(),
            state: Arc::new(state),
        }
    }
    pub fn path(&self) -> &Path {
        self.layout.root()
    }
    /// The root itself, for plugins started in it.
    pub fn state(&self) -> &Arc<StateRoot> {
        &self.state
    }
    /// Creates and returns the agent's workspace.
    pub fn workspace(&self, agent: &str) -> PathBuf {
        let ws = self.layout.agent_workspace(agent);
        std::fs::create_dir_all(&ws).unwrap();
        ws
    }
    /// Creates and returns the agent's home.
    pub fn home(&self, agent: &str) -> PathBuf {
        let home = self.layout.agent_home(agent);
        std::fs::create_dir_all(&home).unwrap();
        home
    }
}

/// `link-plugin-sandbox exec --workspace WS [--home H] [extra...] -- argv...`
pub fn exec(ws: &Path, home: Option<&Path>, extra: &[&str], argv: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("exec").arg("--workspace").arg(ws);
    if let Some(h) = home {
        cmd.arg("--home").arg(h);
    }
    cmd.args(extra).arg("--").args(argv);
    cmd.output().expect("run exec")
}

/// Runs a Python script confined and parses the one JSON object it prints.
pub fn exec_py(ws: &Path, home: Option<&Path>, script: &str) -> serde_json::Value {
    py_json(&exec(ws, home, &[], &[PYTHON, "-I", "-S", "-c", script]))
}

/// The one JSON object a confined Python script printed; panics unless it exited 0.
pub fn py_json(out: &Output) -> serde_json::Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "confined python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// A Python fork bomb (marked with `token` on its command line): forks sleeping children
/// until a fork fails, writes how many into `held`, holds them 3 s, then prints
/// `{"started": n, "error": errno name or null}`.
pub fn fork_bomb(token: &str) -> String {
    format!(
        r#"# {token}
import errno, json, os, time
n, err = 0, None
while n < 5000:
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    except OSError as e:
        err = errno.errorcode.get(e.errno)
        break
open("held", "w").write(str(n))
time.sleep(3)
print(json.dumps({{"started": n, "error": err}}))"#
    )
}

/// Python helpers prepended to every confined script: `w(path)` and `r(path)` return "ok"
/// or the errno name; `ls(path)` likewise for listing.
pub const PY_PRELUDE: &str = r#"
import errno, json, os, socket
def _e(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def w(p): return _e(lambda: open(p, "w").write("x"))
def r(p): return _e(lambda: open(p).read())
def ls(p): return _e(lambda: os.listdir(p))
"#;

/// Host processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                found.push(pid);
            }
        }
    }
    found
}

/// Host processes (zombies included) whose parent is `ppid`.
pub fn children_of(ppid: u32) -> Vec<u32> {
    link_os::sample::children(ppid as i32)
        .into_iter()
        .map(|pid| pid as u32)
        .collect()
}

/// Polls `cond` every 50 ms for up to `secs` seconds (the kit's
/// [`link_harness_conformance::reaper::wait_until`], the one owner of such polls).
pub fn wait_for(secs: u64, cond: impl FnMut() -> bool) -> bool {
    link_harness_conformance::reaper::wait_until(std::time::Duration::from_secs(secs), cond)
}
