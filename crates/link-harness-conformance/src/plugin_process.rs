//! One plugin binary started the way the host starts it, with the test as its parent (so a
//! full Link plugin's `Peers::Parent` check lets the test call it directly).
//!
//! The plugin gets the host's contract ([`plugin::Contract::apply`], the one definition of
//! it) plus `LNK_KEYCHAIN=off` and `RUST_LOG=debug`, on a fresh [`StateRoot`]; stdout is piped for the ready line (and drained after it, so a late write
//! never meets EPIPE), stderr goes to the plugin's log file. It is killed and reaped on drop;
//! the state root goes when the last plugin started in it is dropped.

use crate::child::{first_line, kill_and_reap, signal, wait_timeout};
use crate::fixture::StateRoot;
use link_protocol::layout::StateLayout;
use link_protocol::manifest::{ENV_KEYCHAIN, KEYCHAIN_OFF};
use link_protocol::plugin::{self, Mode, Profile, Ready};
use link_protocol::{Client, ErrorCode, Request};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

/// How long a plugin may take to print its ready line, and to exit after SIGTERM: generous,
/// as a loaded 2-core machine may be slow to start a debug binary.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// What to start: the binary, its package name, and how the host would run it.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    exe: PathBuf,
    name: String,
    profile: Profile,
    mode: Mode,
    /// Changes to the host's environment: `Some` sets, `None` removes.
    env: Vec<(String, Option<String>)>,
    ready_within: Duration,
}

impl PluginSpec {
    /// `exe` run as plugin `name` of full Link in diagnostic mode.
    pub fn new(exe: impl Into<PathBuf>, name: &str) -> PluginSpec {
        PluginSpec {
            exe: exe.into(),
            name: name.to_owned(),
            profile: Profile::Link,
            mode: Mode::Diagnostic,
            env: Vec::new(),
            ready_within: PATIENCE,
        }
    }

    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets (or overrides) one variable.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_owned(), Some(value.into())));
        self
    }

    /// Removes one variable the spec would otherwise set (`LNK_KEYCHAIN`, say).
    pub fn env_remove(mut self, key: &str) -> Self {
        self.env.push((key.to_owned(), None));
        self
    }

    /// How long to wait for the ready line (default [`PATIENCE`]).
    pub fn ready_within(mut self, timeout: Duration) -> Self {
        self.ready_within = timeout;
        self
    }

    /// The command the host would run for this plugin on `layout`, environment included,
    /// stdout piped; makes the directories the host makes. For runs that expect no ready line.
    pub fn command(&self, layout: &StateLayout) -> Command {
        let programs = self.exe.parent().unwrap_or(Path::new("/"));
        let declared = link_protocol::manifest::find(&self.name);
        let contract = plugin::Contract {
            plugin: declared.unwrap_or_else(|| {
                panic!(
                    "{} is no plugin of link_protocol::manifest: name the plugin by its program",
                    self.name
                )
            }),
            layout,
            programs,
            profile: self.profile,
            mode: self.mode,
            monitor_interval: 1.0,
            default_model: &link_protocol::model::Model::local(),
            // Plugins started alone, for their tests.
            test_hooks: true,
        };
        contract
            .create_dirs()
            .unwrap_or_else(|e| panic!("cannot prepare {}: {e}", self.name));
        let mut cmd = Command::new(&self.exe);
        contract.apply(&mut cmd);
        cmd.env(ENV_KEYCHAIN, KEYCHAIN_OFF).env("RUST_LOG", "debug");
        for (key, value) in &self.env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        cmd
    }

    /// Starts the plugin on a fresh state root and waits for its ready line.
    pub fn start(self) -> PluginProcess {
        let root = StateRoot::create().unwrap_or_else(|e| panic!("cannot make a state root: {e}"));
        self.start_in(&Arc::new(root))
    }

    /// Starts the plugin on `root` (shared with other plugins of the test) and waits for its
    /// ready line.
    pub fn start_in(self, root: &Arc<StateRoot>) -> PluginProcess {
        let mut p = PluginProcess {
            spec: self,
            child: None,
            ready: Ready::default(),
            ready_line: String::new(),
            root: Arc::clone(root),
        };
        p.spawn();
        p
    }
}

/// A running plugin; killed and reaped on drop.
pub struct PluginProcess {
    spec: PluginSpec,
    child: Option<Child>,
    ready: Ready,
    ready_line: String,
    root: Arc<StateRoot>,
}

impl PluginProcess {
    /// Starts `exe` as plugin `name` of `profile` in `mode` on a fresh state root, with
    /// `extra_env` added to the host's environment, and waits for its ready line.
    pub fn start(
        exe: impl Into<PathBuf>,
        name: &str,
        profile: Profile,
        mode: Mode,
        extra_env: &[(&str, &str)],
    ) -> PluginProcess {
        let spec = extra_env
            .iter()
            .fold(PluginSpec::new(exe, name), |spec, (k, v)| spec.env(k, *v));
        spec.profile(profile).mode(mode).start()
    }

    fn spawn(&mut self) {
        let spec = &self.spec;
        let name = spec.name.as_str();
        let layout = self.root.layout();
        let log = layout.log_file(name);
        let mut cmd = spec.command(layout);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        cmd.stderr(file);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", spec.exe.display()));
        let lines = first_line(child.stdout.take().expect("piped stdout"));
        let Ok(line) = lines.recv_timeout(spec.ready_within) else {
            kill_and_reap(&mut child);
            panic!(
                "{name} printed no ready line within {:?}; its log:\n{}",
                spec.ready_within,
                read(&log)
            );
        };
        let Some(ready) = plugin::parse_ready(&line) else {
            kill_and_reap(&mut child);
            panic!(
                "{name} printed {line:?}, not a ready line; its log:\n{}",
                read(&log)
            );
        };
        self.child = Some(child);
        self.ready = ready;
        self.ready_line = line;
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("started").id()
    }

    /// The state root, to start another plugin in it with [`PluginSpec::start_in`].
    pub fn root(&self) -> &Arc<StateRoot> {
        &self.root
    }

    pub fn layout(&self) -> &StateLayout {
        self.root.layout()
    }

    pub fn socket(&self) -> PathBuf {
        self.layout().plugin_socket(self.name())
    }

    /// The ready line's payload.
    pub fn ready(&self) -> &Ready {
        &self.ready
    }

    /// The ready line as printed, newline included.
    pub fn ready_line(&self) -> &str {
        &self.ready_line
    }

    pub fn log_file(&self) -> PathBuf {
        self.layout().log_file(self.name())
    }

    /// What the plugin has written to stderr so far.
    pub fn log_text(&self) -> String {
        read(&self.log_file())
    }

    /// A connection to the plugin's socket.
    pub async fn client(&self) -> Client {
        let socket = self.socket();
        Client::connect(&socket)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", socket.display()))
    }

    /// One call on a fresh connection, as the host's router would make it for no caller.
    pub async fn call(
        &self,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> Result<Value, link_protocol::Error> {
        self.call_as(None, route, agent, body).await
    }

    /// One call on a fresh connection with `caller` set, as the router forwards a call from
    /// another plugin.
    pub async fn call_as(
        &self,
        caller: Option<&str>,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> Result<Value, link_protocol::Error> {
        let mut client = Client::connect(&self.socket()).await?;
        client
            .send(&Request {
                id: 1,
                route: route.to_owned(),
                agent: agent.map(link_protocol::AgentId::parse).transpose()?,
                caller: caller.map(str::to_owned),
                body,
                ..Default::default()
            })
            .await
    }

    /// The code and message a call (as [`call_as`](Self::call_as)) is refused with; panics
    /// if it succeeds or fails without a code.
    pub async fn refusal(
        &self,
        caller: Option<&str>,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> (ErrorCode, String) {
        let err = match self.call_as(caller, route, agent, body.clone()).await {
            Ok(v) => panic!("{route} {body}: expected a refusal, got {v}"),
            Err(e) => e,
        };
        let code = err
            .code()
            .unwrap_or_else(|| panic!("{route} {body}: {err}"));
        (code, err.to_string())
    }

    /// Sends SIGTERM and waits up to [`PATIENCE`] for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.terminate_within(PATIENCE)
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit; panics if it does not come.
    pub fn terminate_within(&mut self, timeout: Duration) -> ExitStatus {
        let name = self.spec.name.clone();
        let child = self.child.as_mut().expect("started");
        signal(child, rustix::process::Signal::TERM);
        wait_timeout(child, timeout).unwrap_or_else(|| {
            panic!(
                "{name} did not exit within {timeout:?} of SIGTERM; its log:\n{}",
                self.log_text()
            )
        })
    }

    /// SIGKILLs the plugin (if it still runs) and reaps it; the state root stays.
    pub fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            kill_and_reap(child);
        }
    }

    /// Kills the plugin if it still runs, then starts it again on the same state root.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
