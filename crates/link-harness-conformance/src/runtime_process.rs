//! The one way the kit starts `link up`: [`RuntimeSpec`] says how (programs, profile, mode,
//! environment, timings), [`RuntimeProcess`] is the started host on a state root, its stderr
//! captured, with a bearer token, requests to the HTTP connection service and calls on the
//! host's control socket, `link status`, `link down`, and a stop (SIGTERM, then SIGKILL) on
//! drop. Integration tests, the scenario and the `link-cli` bench all start it here.
//!
//! `link` never sees the runner's HOME: it runs with HOME and `XDG_{CONFIG,CACHE,DATA,STATE}_HOME`
//! inside the state root (`<root>/home/link`, made before it starts), or with the whole isolated
//! environment of a [`StateRoot`] when the spec is [`isolated_by`](RuntimeSpec::isolated_by) one.
//!
//! Every call blocks, and works both in a plain `#[test]` and inside a tokio runtime: the
//! asynchronous clients run on a fresh current-thread runtime in a helper thread, so calls may
//! also come from several threads at once.

use crate::fixture::StateRoot;
use crate::plugin_process::{kill_and_reap, signal, wait_timeout};
use crate::programs::HOST;
use crate::reaper::{self, Owned};
use link_protocol::http::{self, HttpResponse};
use link_protocol::layout::StateLayout;
use link_protocol::plugin::{Mode, Profile, ENV_TEST_HOOKS};
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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
    isolation: Option<Isolation>,
    monitor_interval_secs: Option<u64>,
    supervised: bool,
    own_process_group: bool,
    ready_within: Duration,
    exit_within: Duration,
}

/// A [`StateRoot`]'s isolated environment, as [`StateRoot::isolate`] sets it.
#[derive(Debug, Clone)]
struct Isolation {
    env: Vec<(String, String)>,
    dir: Option<PathBuf>,
}

/// Why `link up` did not print its ready line.
#[derive(Debug)]
pub enum NotReady {
    /// It exited first.
    Exited(ExitStatus),
    /// It was still starting when [`ready_within`](RuntimeSpec::ready_within) ran out.
    Timeout(Duration),
    /// The runner caught this signal ([`crate::interrupt`]) while waiting.
    Interrupted(i32),
    /// Its state could not be read.
    Wait(String),
}

impl RuntimeSpec {
    /// `link up --profile PROFILE --state ROOT --mode MODE --programs PROGRAMS` with
    /// `LNK_KEYCHAIN=off`; a minute each to print the ready line and to exit.
    pub fn new(programs: impl Into<PathBuf>, profile: Profile, mode: Mode) -> RuntimeSpec {
        RuntimeSpec {
            programs: programs.into(),
            profile,
            mode,
            env: vec![("LNK_KEYCHAIN".to_owned(), "off".to_owned())],
            isolation: None,
            monitor_interval_secs: None,
            supervised: false,
            own_process_group: false,
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

    /// `--monitor-interval SECS` for the host's monitor.
    pub fn monitor_interval(mut self, secs: u64) -> Self {
        self.monitor_interval_secs = Some(secs);
        self
    }

    /// Every `link` of this spec runs with only `root`'s isolated environment (its HOME and
    /// XDG_* dirs, `LNK_KEYCHAIN=off`, PATH and locale) in `root`'s directory, exactly as
    /// [`StateRoot::isolate`] prepares a command, instead of the runner's environment.
    pub fn isolated_by(mut self, root: &StateRoot) -> Self {
        let mut probe = Command::new(HOST);
        root.isolate(&mut probe);
        let env = probe
            .get_envs()
            .filter_map(|(k, v)| {
                Some((
                    k.to_string_lossy().into_owned(),
                    v?.to_string_lossy().into_owned(),
                ))
            })
            .collect();
        let dir = probe.get_current_dir().map(Path::to_path_buf);
        self.isolation = Some(Isolation { env, dir });
        self
    }

    /// The host is spawned through the kit's [`reaper`], which must own every wait of a
    /// runner that is a child subreaper (the scenario); the background reaper is started.
    pub fn supervised(mut self) -> Self {
        self.supervised = true;
        self
    }

    /// The host gets its own process group, so a terminal's Ctrl-C reaches only the runner,
    /// which stops the host in order; [`RuntimeProcess::kill_group`] can then end it all.
    pub fn own_process_group(mut self) -> Self {
        self.own_process_group = true;
        self
    }

    pub fn programs(&self) -> &Path {
        &self.programs
    }

    /// `link ARGS --state ROOT` with the programs' `link` and this spec's environment: the one
    /// place a `link` command of the kit is made. Creates the isolated home first.
    pub fn cli(&self, root: &Path, args: &[&str]) -> std::io::Result<Command> {
        let mut cmd = Command::new(self.programs.join(HOST));
        cmd.args(args).arg("--state").arg(root);
        self.environment(&mut cmd, root)?;
        Ok(cmd)
    }

    /// HOME and XDG_* inside `root` (or the isolation's), then the spec's variables.
    fn environment(&self, cmd: &mut Command, root: &Path) -> std::io::Result<()> {
        match &self.isolation {
            Some(iso) => {
                cmd.env_clear();
                cmd.envs(iso.env.iter().map(|(k, v)| (k, v)));
                if let Some(dir) = &iso.dir {
                    cmd.current_dir(dir);
                }
            }
            None => {
                for (key, dir) in home_env(&StateLayout::new(root)) {
                    std::fs::create_dir_all(&dir)?;
                    cmd.env(key, dir);
                }
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        Ok(())
    }

    /// The `link up` command on `root`.
    fn up_command(&self, root: &Path) -> std::io::Result<Command> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(self.programs.join(HOST));
        cmd.args(["up", "--profile", self.profile.as_str()])
            .arg("--state")
            .arg(root)
            .args(["--mode", self.mode.as_str()])
            .arg("--programs")
            .arg(&self.programs);
        if let Some(secs) = self.monitor_interval_secs {
            cmd.args(["--monitor-interval", &secs.to_string()]);
        }
        self.environment(&mut cmd, root)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if self.own_process_group {
            cmd.process_group(0);
        }
        Ok(cmd)
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

    /// Spawns `link up` on an existing state root without waiting for it: the caller times
    /// [`RuntimeProcess::wait_ready`] and, ready or not, stops the host itself. Its clients
    /// need the ready host.
    pub fn spawn_in(self, root: &Path) -> std::io::Result<RuntimeProcess> {
        let layout = StateLayout::new(root);
        let host = spawn(&self, &layout)?;
        Ok(RuntimeProcess {
            spec: self,
            layout,
            host,
            token: OnceLock::new(),
            _root: None,
        })
    }
}

/// HOME and the XDG base directories of `link` itself: `<root>/home/link/...`, beside the
/// plugins' homes, with the same subdirectories the host gives a plugin.
pub fn home_env(layout: &StateLayout) -> Vec<(&'static str, PathBuf)> {
    let home = layout.home(HOST);
    vec![
        ("XDG_CONFIG_HOME", home.join(".config")),
        ("XDG_CACHE_HOME", home.join(".cache")),
        ("XDG_DATA_HOME", home.join(".local/share")),
        ("XDG_STATE_HOME", home.join(".local/state")),
        ("HOME", home),
    ]
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

/// The host's process: a plain child, or one owned by the kit's [`reaper`].
enum HostChild {
    Plain(Child),
    Owned(Owned),
}

impl HostChild {
    fn child(&mut self) -> &mut Child {
        match self {
            HostChild::Plain(c) => c,
            HostChild::Owned(o) => &mut o.child,
        }
    }

    fn pid(&self) -> i32 {
        match self {
            HostChild::Plain(c) => c.id() as i32,
            HostChild::Owned(o) => o.pid(),
        }
    }

    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        match self {
            HostChild::Plain(c) => c.try_wait(),
            HostChild::Owned(o) => o.try_wait(),
        }
    }

    fn wait_timeout(&mut self, within: Duration) -> Option<ExitStatus> {
        match self {
            HostChild::Plain(c) => wait_timeout(c, within),
            HostChild::Owned(o) => o.wait_timeout(within).ok().flatten(),
        }
    }

    fn signal(&mut self, sig: rustix::process::Signal) {
        match self {
            HostChild::Plain(c) => signal(c, sig),
            HostChild::Owned(o) => {
                let _ = o.signal(sig);
            }
        }
    }

    fn kill(&mut self) {
        match self {
            HostChild::Plain(c) => kill_and_reap(c),
            HostChild::Owned(o) => o.kill_and_wait(),
        }
    }
}

/// One run of the host process.
struct Host {
    child: HostChild,
    stderr: Arc<Mutex<String>>,
    // In mutexes so a RuntimeProcess can be shared by the threads of one test.
    stderr_done: Mutex<mpsc::Receiver<()>>,
    lines: Mutex<mpsc::Receiver<String>>,
    /// Lines it printed before its ready line.
    before_ready: String,
    /// Its ready line, newline included, once printed.
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
        let host = spawn_ready(&spec, &layout)?;
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

    /// The host's ready line as printed, newline included (empty until it is ready).
    pub fn ready_line(&self) -> &str {
        &self.host.ready_line
    }

    pub fn host_pid(&self) -> i32 {
        self.host.child.pid()
    }

    /// What the host has written to stderr so far.
    pub fn stderr(&self) -> String {
        lock(&self.host.stderr).clone()
    }

    /// Waits for `ready <socket>` on the host's stdout (lines before it are kept), its early
    /// exit, the ready timeout or an interrupt; the socket it names.
    pub fn wait_ready(&mut self) -> Result<PathBuf, NotReady> {
        wait_ready(&mut self.host, self.spec.ready_within)
    }

    /// `link ARGS --state ROOT` with the spec's environment (see [`RuntimeSpec::cli`]).
    pub fn command(&self, args: &[&str]) -> Command {
        self.spec
            .cli(self.root(), args)
            .unwrap_or_else(|e| panic!("cannot prepare link {}: {e}", args.join(" ")))
    }

    /// Runs `link ARGS --state ROOT` to completion: through the reaper within `within` when
    /// the spec is [supervised](RuntimeSpec::supervised), else as a plain child.
    pub fn run(&self, args: &[&str], within: Duration) -> std::io::Result<Output> {
        let mut cmd = self.command(args);
        if self.spec.supervised {
            reaper::global().output(&mut cmd, within)
        } else {
            cmd.output()
        }
    }

    /// Runs `link ARGS --state ROOT`; panics unless it succeeds. Its stdout.
    fn cli_ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self
            .run(args, Duration::from_secs(120))
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
        match self.host.child.wait_timeout(within) {
            Some(status) => status,
            None => panic!("host did not exit within {within:?}: {}", self.stderr()),
        }
    }

    /// The host's exit status if it has exited.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.host.child.try_wait()
    }

    /// Waits up to `within` for the host to exit; `None` if it still runs.
    pub fn wait_timeout(&mut self, within: Duration) -> Option<ExitStatus> {
        self.host.child.wait_timeout(within)
    }

    /// Sends SIGTERM to the host (unless it has been collected): it then stops its plugins
    /// in order.
    pub fn terminate(&mut self) {
        self.host.child.signal(rustix::process::Signal::TERM);
    }

    /// SIGKILLs the host's process group (it has one of its own only with
    /// [`own_process_group`](RuntimeSpec::own_process_group)), then the host, and collects it.
    pub fn kill_group(&mut self) {
        if self.spec.own_process_group && matches!(self.host.child.try_wait(), Ok(None)) {
            if let Some(pg) = rustix::process::Pid::from_raw(self.host_pid()) {
                let _ = rustix::process::kill_process_group(pg, rustix::process::Signal::KILL);
            }
        }
        self.host.child.kill();
    }

    /// `down`, then `up` again on the same state root.
    pub fn restart(&mut self) {
        self.down();
        self.host = spawn_ready(&self.spec, &self.layout)
            .unwrap_or_else(|f| panic!("link up (restart) failed:\n{}", f.output()));
    }
}

impl Drop for RuntimeProcess {
    fn drop(&mut self) {
        // Never leave plugins behind, even when a test failed half-way.
        stop(&mut self.host.child, self.spec.exit_within);
    }
}

/// Spawns `link up` (its stdout lines and stderr read in the background).
fn spawn(spec: &RuntimeSpec, layout: &StateLayout) -> std::io::Result<Host> {
    let mut cmd = spec.up_command(layout.root())?;
    let mut child = if spec.supervised {
        HostChild::Owned(reaper::global().spawn(&mut cmd)?)
    } else {
        HostChild::Plain(cmd.spawn()?)
    };
    let (stderr, stderr_done) = capture(child.child().stderr.take().expect("piped stderr"));
    let lines = lines(child.child().stdout.take().expect("piped stdout"));
    Ok(Host {
        child,
        stderr,
        stderr_done: Mutex::new(stderr_done),
        lines: Mutex::new(lines),
        before_ready: String::new(),
        ready_line: String::new(),
    })
}

/// Starts `link up` and waits for its ready line; stops it again if that does not come.
fn spawn_ready(spec: &RuntimeSpec, layout: &StateLayout) -> Result<Host, UpFailure> {
    let mut host = spawn(spec, layout)
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", spec.programs.join(HOST).display()));
    if wait_ready(&mut host, spec.ready_within).is_ok() {
        return Ok(host);
    }
    stop(&mut host.child, spec.exit_within);
    let _ = lock(&host.stderr_done).recv_timeout(Duration::from_secs(10));
    let stderr = lock(&host.stderr).clone();
    Err(UpFailure {
        line: std::mem::take(&mut host.before_ready),
        stderr,
        placeholders: placeholders(layout),
    })
}

/// Polls for the ready line every 50 ms, checking for an exit, the deadline and interrupts.
fn wait_ready(host: &mut Host, within: Duration) -> Result<PathBuf, NotReady> {
    let deadline = Instant::now() + within;
    let mut open = true;
    loop {
        if let Some(sig) = crate::interrupt::interrupted() {
            return Err(NotReady::Interrupted(sig));
        }
        match host.child.try_wait() {
            Ok(Some(status)) => return Err(NotReady::Exited(status)),
            Ok(None) => {}
            Err(e) => return Err(NotReady::Wait(e.to_string())),
        }
        if Instant::now() >= deadline {
            return Err(NotReady::Timeout(within));
        }
        if !open {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        match lock(&host.lines).recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                if let Some(socket) = line.trim().strip_prefix("ready ") {
                    host.ready_line = format!("{line}\n");
                    return Ok(PathBuf::from(socket.trim()));
                }
                host.before_ready.push_str(&line);
                host.before_ready.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => open = false,
        }
    }
}

/// Every line `out` gives, read to its end so the writer never meets a closed pipe.
fn lines(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    rx
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
fn stop(child: &mut HostChild, within: Duration) {
    child.signal(rustix::process::Signal::TERM);
    if child.wait_timeout(within).is_none() {
        child.kill();
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
