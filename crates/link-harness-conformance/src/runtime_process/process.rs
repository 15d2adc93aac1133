//! [`RuntimeProcess`]: a started `link up` on its state root, and everything a test or the
//! scenario asks of it: its ready line and stderr, a bearer token, requests to the HTTP
//! connection service, calls on the host's control socket, `link status`, `link down`, a
//! restart, and a stop (SIGTERM, then SIGKILL) on drop.

use super::host::{self, Host};
use super::{block_on, lock, shared, NotReady, RuntimeSpec, Shared, UpFailure};
use crate::fixture::StateRoot;
use crate::reaper;
use link_protocol::http::{self, HttpResponse};
use link_protocol::layout::StateLayout;
use link_protocol::plugin::Mode;
use link_protocol::routes::Route as _;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::sync::OnceLock;
use std::time::Duration;

/// A running `link up`; stopped on drop (SIGTERM, then SIGKILL after the exit timeout).
///
/// It holds a [`shared`](super::shared) turn from before its host is spawned until after the
/// host is stopped and reaped (unless its spec is [`within`](RuntimeSpec::within) the
/// exclusive turn), so no scenario run of this process overlaps it.
pub struct RuntimeProcess {
    spec: RuntimeSpec,
    layout: StateLayout,
    host: Host,
    token: OnceLock<String>,
    // Dropped after the host is stopped, in this order: the state root, then the turn.
    _root: Option<StateRoot>,
    _turn: Option<Shared>,
}

impl RuntimeProcess {
    /// The turn a runtime of `spec` holds: a shared one, unless its starter holds the
    /// exclusive one.
    fn take_turn(spec: &RuntimeSpec) -> Option<Shared> {
        (!spec.within_exclusive).then(shared)
    }

    /// Starts `link up` on `layout` and waits for its ready line (see [`RuntimeSpec::up`]).
    pub(super) fn start(
        spec: RuntimeSpec,
        layout: StateLayout,
        root: Option<StateRoot>,
    ) -> Result<RuntimeProcess, UpFailure> {
        let turn = Self::take_turn(&spec);
        let host = host::spawn_ready(&spec, &layout)?;
        Ok(RuntimeProcess {
            spec,
            layout,
            host,
            token: OnceLock::new(),
            _root: root,
            _turn: turn,
        })
    }

    /// Spawns `link up` on `layout` without waiting (see [`RuntimeSpec::spawn_in`]).
    pub(super) fn spawned(spec: RuntimeSpec, layout: StateLayout) -> std::io::Result<Self> {
        let turn = Self::take_turn(&spec);
        let host = host::spawn(&spec, &layout)?;
        Ok(RuntimeProcess {
            spec,
            layout,
            host,
            token: OnceLock::new(),
            _root: None,
            _turn: turn,
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
        host::wait_ready(&mut self.host, self.spec.ready_within)
    }

    /// `link ARGS --state ROOT` with the spec's environment (see [`RuntimeSpec::cli`]).
    pub fn command(&self, args: &[&str]) -> Command {
        self.spec
            .cli(self.root(), args)
            .unwrap_or_else(|e| panic!("cannot prepare link {}: {e}", args.join(" ")))
    }

    /// Runs `link ARGS --state ROOT` to completion: through the reaper within `within` when
    /// the spec is [supervised](RuntimeSpec::supervised) or this process a child subreaper,
    /// else as a plain child.
    pub fn run(&self, args: &[&str], within: Duration) -> std::io::Result<Output> {
        let mut cmd = self.command(args);
        if self.spec.reaper_owned() {
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
        let peer = link_protocol::client::connection_peer(&self.layout);
        block_on(|| http::request_to(&socket, peer, method, path, token, body))
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
        self.http_with(method, path, &[], body)
    }

    /// [`http`](Self::http) with more request headers.
    pub fn http_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> (u16, Value) {
        let (socket, token) = (self.layout.connection_socket(), self.token());
        let peer = link_protocol::client::connection_peer(&self.layout);
        let bytes = body.map(|b| b.to_string().into_bytes());
        let resp = block_on(|| {
            http::request_with(&socket, peer, method, path, Some(token), headers, bytes)
        })
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

    /// Sends one turn with the `Idempotency-Key` `key`: the status and the JSON body.
    pub fn turn_keyed(&self, agent: &str, message: &str, key: &str) -> (u16, Value) {
        let path = format!("/v1/agents/{agent}/turns");
        let body = json!({ "message": message });
        self.http_with("POST", &path, &[("idempotency-key", key)], Some(body))
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

    /// One call on the host's control socket, on a connection that presented the runtime's
    /// control key (as `link` does).
    pub fn host_call(&self, route: &str, body: Value) -> Result<Value, link_protocol::Error> {
        use link_protocol::client::{control_call_once, Peer};
        block_on(|| control_call_once(&self.layout, Peer::Any, route, body))
    }

    /// Asks the host (test hooks on) to make `plugin` call `route` through the router as
    /// itself: `{ok, result?, code?, message?}`.
    pub fn call_as(&self, plugin: &str, route: &str, agent: &str, body: Value) -> Value {
        let body = json!({"plugin": plugin, "route": route, "agent": agent, "body": body});
        self.host_call(link_protocol::routes::host::DebugCall::NAME, body)
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

    /// The pid of plugin `name`; panics, naming the plugins that run, when it is not one.
    pub fn plugin_pid(&self, name: &str) -> i32 {
        let pids = self.plugin_pids();
        pids.iter()
            .find(|(n, _)| n == name)
            .map(|(_, pid)| *pid)
            .unwrap_or_else(|| panic!("no plugin {name} runs: {pids:?}"))
    }

    /// The host and its plugins with their start times, read from /proc now.
    pub fn started_processes(&self) -> Vec<(i32, u64)> {
        let mut pids = vec![self.host_pid()];
        pids.extend(self.plugin_pids().into_iter().map(|(_, pid)| pid));
        pids.into_iter()
            .filter_map(|pid| Some((pid, reaper::read_proc(pid)?.start_time_ticks)))
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

    /// Waits for the host to exit (and its stderr to be read to the end); panics if it does
    /// not within the exit timeout.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let within = self.spec.exit_within;
        match self.host.wait_timeout(within) {
            Some(status) => status,
            None => panic!("host did not exit within {within:?}: {}", self.stderr()),
        }
    }

    /// The host's exit status if it has exited.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.host.child.try_wait()
    }

    /// Waits up to `within` for the host to exit, then until [`stderr`](Self::stderr) holds
    /// all it wrote; `None` if it still runs.
    pub fn wait_timeout(&mut self, within: Duration) -> Option<ExitStatus> {
        self.host.wait_timeout(within)
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
        self.start_again();
    }

    /// `up` again on the same state root once the host has exited (it stopped itself, or
    /// was killed); panics if it still runs or the new one does not become ready.
    pub fn start_again(&mut self) {
        let exited = matches!(self.host.child.try_wait(), Ok(Some(_)));
        assert!(exited, "the host still runs: stop it before starting again");
        self.host = host::spawn_ready(&self.spec, &self.layout)
            .unwrap_or_else(|f| panic!("link up (again) failed:\n{}", f.output()));
    }
}

impl Drop for RuntimeProcess {
    fn drop(&mut self) {
        // Never leave plugins behind, even when a test failed half-way.
        host::stop(&mut self.host.child, self.spec.exit_within);
    }
}
