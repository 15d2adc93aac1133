//! A started `link up` for integration tests: the host on a state root, its stderr captured,
//! a bearer token, requests to the HTTP connection service and calls on the host's control
//! socket, `link status`, `link down`, and a stop (SIGTERM, then SIGKILL) on drop.
//!
//! Every call blocks, and works both in a plain `#[test]` and inside a tokio runtime: the
//! asynchronous clients run on a fresh current-thread runtime in a helper thread, so calls may
//! also come from several threads at once.

use crate::fixture::StateRoot;
use crate::plugin_process::{first_line, kill_and_reap, signal, wait_timeout};
use crate::programs::HOST;
use link_protocol::http::{self, HttpResponse};
use link_protocol::layout::StateLayout;
use link_protocol::plugin::{Mode, Profile, ENV_TEST_HOOKS};
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

/// Set to `1`, a runtime test that cannot start the runtime fails instead of skipping.
pub const ENV_REQUIRE_RUNTIME: &str = "LNK_REQUIRE_RUNTIME";

/// `target/<profile>/`, where cargo puts every program of the workspace: a test executable
/// runs from its `deps/` directory.
pub fn test_programs() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target profile directory")
        .to_path_buf()
}

/// Full Link in `mode` for a plugin's runtime test, with test hooks on and the programs
/// beside the test. `None` (skipped loudly) when it cannot come up because a program is
/// missing or still a placeholder, unless `LNK_REQUIRE_RUNTIME=1` makes that a failure; any
/// other start-up failure fails the test with the host's output.
pub fn up_or_skip(mode: Mode) -> Option<RuntimeProcess> {
    let programs = test_programs();
    if !programs.join(HOST).is_file() {
        return skip(&format!(
            "no `link` in {}; build it with `cargo build -p link-cli`",
            programs.display()
        ));
    }
    let spec = RuntimeSpec::new(programs, Profile::Link, mode)
        .env(ENV_TEST_HOOKS, "1")
        .ready_within(Duration::from_secs(180));
    match spec.up() {
        Ok(rt) => Some(rt),
        Err(f) if f.output().contains("missing programs") || !f.placeholders.is_empty() => skip(
            &format!("{} {}", f.output().trim(), f.placeholders.join(" ")),
        ),
        Err(f) => panic!("link up failed:\n{}", f.output()),
    }
}

fn skip(reason: &str) -> Option<RuntimeProcess> {
    if std::env::var(ENV_REQUIRE_RUNTIME).is_ok_and(|v| v == "1") {
        panic!("{ENV_REQUIRE_RUNTIME}=1 but the runtime cannot start: {reason}");
    }
    eprintln!("SKIPPED (runtime not available): {reason}");
    None
}

/// How to run `link up`.
#[derive(Debug, Clone)]
pub struct RuntimeSpec {
    programs: PathBuf,
    profile: Profile,
    mode: Mode,
    env: Vec<(String, String)>,
    ready_within: Duration,
    exit_within: Duration,
}

impl RuntimeSpec {
    /// `link up --profile PROFILE --mode MODE --programs PROGRAMS` with `LNK_KEYCHAIN=off`;
    /// a minute each to print the ready line and to exit.
    pub fn new(programs: impl Into<PathBuf>, profile: Profile, mode: Mode) -> RuntimeSpec {
        RuntimeSpec {
            programs: programs.into(),
            profile,
            mode,
            env: vec![("LNK_KEYCHAIN".to_owned(), "off".to_owned())],
            ready_within: Duration::from_secs(60),
            exit_within: Duration::from_secs(60),
        }
    }

    /// One more variable for the host (and, where it passes them on, its plugins).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// How long the host may take to print its ready line.
    pub fn ready_within(mut self, timeout: Duration) -> Self {
        self.ready_within = timeout;
        self
    }

    /// How long the host may take to exit once asked to stop.
    pub fn exit_within(mut self, timeout: Duration) -> Self {
        self.exit_within = timeout;
        self
    }

    /// Starts the runtime on a fresh state root, removed when the runtime is dropped.
    pub fn up(self) -> Result<RuntimeProcess, UpFailure> {
        let root = StateRoot::create().unwrap_or_else(|e| panic!("cannot make a state root: {e}"));
        let layout = root.layout().clone();
        RuntimeProcess::start(self, layout, Some(root))
    }

    /// Starts the runtime on an existing state root, which it leaves in place.
    pub fn up_in(self, root: &Path) -> Result<RuntimeProcess, UpFailure> {
        RuntimeProcess::start(self, StateLayout::new(root), None)
    }
}

/// `link up` exited or printed something else instead of its ready line.
#[derive(Debug)]
pub struct UpFailure {
    /// What it printed on stdout instead (empty if nothing).
    pub line: String,
    pub stderr: String,
    /// Plugins whose logs say they are not implemented yet.
    pub placeholders: Vec<String>,
}

impl UpFailure {
    /// Its stdout line and stderr together.
    pub fn output(&self) -> String {
        format!("{}{}", self.line, self.stderr)
    }

    /// Confined mode is unavailable here: the host names the explicit alternative.
    pub fn unconfinable(&self) -> bool {
        self.stderr.contains("--mode diagnostic")
    }
}

impl std::fmt::Display for UpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "link up did not report ready ({:?}); its stderr:\n{}",
            self.line, self.stderr
        )
    }
}

/// One run of the host process.
struct Host {
    child: Child,
    stderr: Arc<Mutex<String>>,
    ready_line: String,
}

/// A running `link up`; stopped on drop (SIGTERM, then SIGKILL after the exit timeout).
pub struct RuntimeProcess {
    spec: RuntimeSpec,
    layout: StateLayout,
    host: Host,
    token: OnceLock<String>,
    // Dropped after the host is stopped.
    _root: Option<StateRoot>,
}

impl RuntimeProcess {
    fn start(
        spec: RuntimeSpec,
        layout: StateLayout,
        root: Option<StateRoot>,
    ) -> Result<RuntimeProcess, UpFailure> {
        let host = spawn(&spec, &layout)?;
        Ok(RuntimeProcess {
            spec,
            layout,
            host,
            token: OnceLock::new(),
            _root: root,
        })
    }

    pub fn layout(&self) -> &StateLayout {
        &self.layout
    }

    pub fn root(&self) -> &Path {
        self.layout.root()
    }

    pub fn programs(&self) -> &Path {
        &self.spec.programs
    }

    pub fn mode(&self) -> Mode {
        self.spec.mode
    }

    /// The host's ready line as printed, newline included.
    pub fn ready_line(&self) -> &str {
        &self.host.ready_line
    }

    pub fn host_pid(&self) -> i32 {
        self.host.child.id() as i32
    }

    /// What the host has written to stderr so far.
    pub fn stderr(&self) -> String {
        lock(&self.host.stderr).clone()
    }

    /// `link ARGS --state ROOT` with the programs' `link`.
    fn cli(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.spec.programs.join(HOST));
        cmd.args(args).arg("--state").arg(self.root());
        cmd
    }

    /// Runs `link ARGS --state ROOT`; panics unless it succeeds. Its stdout.
    fn cli_ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self
            .cli(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run link {}: {e}", args.join(" ")));
        assert!(
            out.status.success(),
            "link {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A new bearer token (`link token create`).
    pub fn create_token(&self) -> String {
        let out = self.cli_ok(&["token", "create"]);
        String::from_utf8(out)
            .expect("a token is text")
            .trim()
            .to_owned()
    }

    /// The token [`http`](Self::http) uses, created on first use.
    pub fn token(&self) -> &str {
        self.token.get_or_init(|| self.create_token())
    }

    /// One request to the connection service; panics if it gets no answer.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> HttpResponse {
        let socket = self.layout.connection_socket();
        block_on(|| http::request(&socket, method, path, token, body))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// `POST` of a JSON body with `token`.
    pub fn post(&self, path: &str, token: &str, body: Value) -> HttpResponse {
        let bytes = body.to_string().into_bytes();
        self.request("POST", path, Some(token), Some(bytes))
    }

    /// `GET` with `token`, if any.
    pub fn get(&self, path: &str, token: Option<&str>) -> HttpResponse {
        self.request("GET", path, token, None)
    }

    /// A JSON request with [`token`](Self::token): the status and the JSON body.
    pub fn http(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let socket = self.layout.connection_socket();
        let token = self.token();
        let resp = block_on(|| http::json(&socket, method, path, Some(token), body.as_ref()))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        (resp.status, resp.json())
    }

    /// Creates an agent; panics unless 201. The answer.
    pub fn create_agent(&self, name: &str) -> Value {
        let (status, body) = self.http("POST", "/v1/agents", Some(json!({ "name": name })));
        assert_eq!(status, 201, "create {name}: {body}");
        body
    }

    /// Runs one turn; panics unless 200. The answer.
    pub fn turn(&self, agent: &str, message: &str) -> Value {
        let path = format!("/v1/agents/{agent}/turns");
        let (status, body) = self.http("POST", &path, Some(json!({ "message": message })));
        assert_eq!(status, 200, "turn {message:?} of {agent}: {body}");
        body
    }

    /// The agent's conversation; panics unless `GET /v1/agents/{agent}` answers 200.
    pub fn conversation(&self, agent: &str) -> Vec<Value> {
        let (status, body) = self.http("GET", &format!("/v1/agents/{agent}"), None);
        assert_eq!(status, 200, "{body}");
        body["conversation"]
            .as_array()
            .expect("a conversation")
            .clone()
    }

    /// One call on the host's control socket.
    pub fn host_call(&self, route: &str, body: Value) -> Result<Value, link_protocol::Error> {
        let socket = self.layout.host_socket();
        block_on(|| link_protocol::client::call_once(&socket, route, None, body))
    }

    /// Asks the host (test hooks on) to make `plugin` call `route` through the router as
    /// itself: `{ok, result?, code?, message?}`.
    pub fn call_as(&self, plugin: &str, route: &str, agent: &str, body: Value) -> Value {
        let body = json!({"plugin": plugin, "route": route, "agent": agent, "body": body});
        self.host_call(link_protocol::routes::HOST_DEBUG_CALL, body)
            .unwrap_or_else(|e| panic!("host.debug_call {plugin} {route}: {e}"))
    }

    /// `link status`, parsed.
    pub fn status(&self) -> Value {
        serde_json::from_slice(&self.cli_ok(&["status"])).expect("link status prints JSON")
    }

    /// (name, pid) of every plugin, from `link status`.
    pub fn plugin_pids(&self) -> Vec<(String, i32)> {
        self.status()["plugins"]
            .as_array()
            .expect("plugins")
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().expect("name").to_owned(),
                    p["pid"].as_i64().expect("pid") as i32,
                )
            })
            .collect()
    }

    /// The host and its plugins with their start times, read from /proc now.
    pub fn started_processes(&self) -> Vec<(i32, u64)> {
        let mut pids = vec![self.host_pid()];
        pids.extend(self.plugin_pids().into_iter().map(|(_, pid)| pid));
        pids.into_iter()
            .filter_map(|pid| Some((pid, crate::reaper::read_proc(pid)?.start_time_ticks)))
            .collect()
    }

    /// `link down`, then waits for the host to exit; panics unless both succeed.
    pub fn down(&mut self) {
        self.cli_ok(&["down"]);
        let status = self.wait_exit();
        assert!(
            status.success(),
            "host exited {status:?}: {}",
            self.stderr()
        );
    }

    /// Waits for the host to exit; panics if it does not within the exit timeout.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let within = self.spec.exit_within;
        match wait_timeout(&mut self.host.child, within) {
            Some(status) => status,
            None => panic!("host did not exit within {within:?}: {}", self.stderr()),
        }
    }

    /// `down`, then `up` again on the same state root.
    pub fn restart(&mut self) {
        self.down();
        self.host = spawn(&self.spec, &self.layout)
            .unwrap_or_else(|f| panic!("link up (restart) failed:\n{}", f.output()));
    }
}

impl Drop for RuntimeProcess {
    fn drop(&mut self) {
        // Never leave plugins behind, even when a test failed half-way.
        stop(&mut self.host.child, self.spec.exit_within);
    }
}

/// Starts `link up` and waits for its ready line.
fn spawn(spec: &RuntimeSpec, layout: &StateLayout) -> Result<Host, UpFailure> {
    let mut child = Command::new(spec.programs.join(HOST))
        .args(["up", "--profile", spec.profile.as_str()])
        .args(["--mode", spec.mode.as_str()])
        .arg("--state")
        .arg(layout.root())
        .arg("--programs")
        .arg(&spec.programs)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", spec.programs.join(HOST).display()));
    let (stderr, stderr_done) = capture(child.stderr.take().expect("piped stderr"));
    let lines = first_line(child.stdout.take().expect("piped stdout"));
    let line = lines.recv_timeout(spec.ready_within).unwrap_or_default();
    if line.starts_with("ready ") {
        return Ok(Host {
            child,
            stderr,
            ready_line: line,
        });
    }
    stop(&mut child, spec.exit_within);
    let _ = stderr_done.recv_timeout(Duration::from_secs(10));
    let stderr = lock(&stderr).clone();
    Err(UpFailure {
        line,
        stderr,
        placeholders: placeholders(layout),
    })
}

/// Collects everything `err` gives; the receiver hears when it ends.
fn capture(mut err: impl Read + Send + 'static) -> (Arc<Mutex<String>>, mpsc::Receiver<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&text);
    let (done, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            lock(&sink).push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let _ = done.send(());
    });
    (text, ended)
}

/// SIGTERM (the host then stops its plugins in order), SIGKILL if it is still there after
/// `within`; reaped either way.
fn stop(child: &mut Child, within: Duration) {
    signal(child, rustix::process::Signal::TERM);
    if wait_timeout(child, within).is_none() {
        kill_and_reap(child);
    }
}

/// Plugins whose logs say they are placeholders.
fn placeholders(layout: &StateLayout) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(layout.log_dir()) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let text = std::fs::read_to_string(e.path()).ok()?;
        text.contains("not implemented yet").then(|| {
            format!(
                "({} is not implemented yet)",
                e.file_name().to_string_lossy()
            )
        })
    })
    .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the future `make` gives on a fresh current-thread runtime in a helper thread, so it
/// can be awaited from synchronous code, from inside another runtime, and from many threads.
pub fn block_on<T: Send, F: std::future::Future<Output = T>>(make: impl FnOnce() -> F + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(make())
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
