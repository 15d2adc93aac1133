//! The contract between the host and a plugin it starts.
//!
//! The host passes everything in the environment (`LNK_*`, below), with `HOME` and `XDG_*`
//! pointing inside the state root. A plugin binds its socket, then prints exactly one line on
//! stdout, `ready {"routes": [...]}`, and never writes to stdout again; logs go to stderr.
//! SIGTERM asks it to stop its helpers and exit.

use crate::manifest::{Plugin, Session};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const ENV_PLUGIN: &str = "LNK_PLUGIN";
pub const ENV_STATE: &str = "LNK_STATE";
pub const ENV_SOCKET: &str = "LNK_SOCKET";
pub const ENV_DATA: &str = "LNK_DATA";
pub const ENV_MODE: &str = "LNK_MODE";
pub const ENV_PROFILE: &str = "LNK_PROFILE";
pub const ENV_PROGRAMS: &str = "LNK_PROGRAMS";
pub const ENV_MONITOR_INTERVAL: &str = "LNK_MONITOR_INTERVAL";
/// The model of an agent created without one (`link up --model`, else
/// [`crate::model::LOCAL`]), and of an agent stored before agents had a model.
pub const ENV_MODEL_DEFAULT: &str = "LNK_MODEL_DEFAULT";
/// `1` asks for the test hooks. A plugin obeys it, but gets it only from a host built with
/// test hooks (`link-cli`'s `test-hooks` feature): a release host ignores it and passes none
/// of the [`TEST_VARIABLES`] on ([`Contract::test_hooks`]).
pub const ENV_TEST_HOOKS: &str = "LNK_TEST_HOOKS";

/// Whether this process was asked for its test hooks.
pub fn test_hooks_asked() -> bool {
    std::env::var(ENV_TEST_HOOKS).is_ok_and(|v| v == "1")
}

/// `var`'s value in milliseconds when this process was asked for its test hooks (and the
/// value is a positive number); `None` otherwise, so a release run keeps its real limits.
pub fn test_millis(var: &str) -> Option<std::time::Duration> {
    test_hooks_asked()
        .then(|| std::env::var(var).ok())
        .flatten()
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(std::time::Duration::from_millis)
}

/// The variables only test hooks read: passed to plugins only with [`Contract::test_hooks`].
pub const TEST_VARIABLES: &[&str] = &[
    ENV_TEST_HOOKS,
    ENV_TEST_HEADER_TIMEOUT_MS,
    ENV_TEST_MAX_CONNECTIONS,
    ENV_TEST_MODEL_TIMEOUT_MS,
    ENV_TEST_DEADLINE_MS,
];

pub use link_report::{Mode, Profile};

/// What a plugin learns from the host at start.
#[derive(Debug, Clone)]
pub struct PluginEnv {
    pub name: String,
    pub state: PathBuf,
    pub socket: PathBuf,
    pub data: PathBuf,
    pub mode: Mode,
    pub profile: Profile,
    /// [`ENV_MODEL_DEFAULT`]; [`crate::model::LOCAL`] when it is not set.
    pub default_model: crate::model::Model,
    pub test_hooks: bool,
}

impl PluginEnv {
    /// Reads the `LNK_*` variables; the error names the missing one.
    pub fn from_env() -> Result<Self, String> {
        let var = |k: &str| {
            std::env::var(k).map_err(|_| {
                format!("{k} is not set: plugins are started by `link up`, not by hand")
            })
        };
        Ok(PluginEnv {
            name: var(ENV_PLUGIN)?,
            state: var(ENV_STATE)?.into(),
            socket: var(ENV_SOCKET)?.into(),
            data: var(ENV_DATA)?.into(),
            mode: var(ENV_MODE)?.parse()?,
            profile: var(ENV_PROFILE)?.parse()?,
            default_model: match std::env::var(ENV_MODEL_DEFAULT) {
                Ok(m) => m.parse().map_err(|e| format!("{ENV_MODEL_DEFAULT}: {e}"))?,
                Err(_) => crate::model::Model::local(),
            },
            test_hooks: test_hooks_asked(),
        })
    }

    pub fn layout(&self) -> crate::layout::StateLayout {
        crate::layout::StateLayout::new(&self.state)
    }
}

/// Variables that pass from the host's environment to every plugin; everything else is
/// dropped, except what a plugin's manifest entry gives it ([`Plugin::env`]).
pub const PASSTHROUGH: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "RUST_LOG",
    crate::manifest::ENV_KEYCHAIN,
    ENV_TEST_HOOKS,
];

/// The variables that pass to one plugin only, declared with it in the manifest.
pub use crate::manifest::{
    ENV_MODEL_REMOTE_URL, ENV_SANDBOX_UID_BASE, ENV_TEST_DEADLINE_MS, ENV_TEST_HEADER_TIMEOUT_MS,
    ENV_TEST_MAX_CONNECTIONS, ENV_TEST_MODEL_TIMEOUT_MS,
};

/// Whether the model forwards: [`ENV_MODEL_REMOTE_URL`] set and not empty in this (the
/// host's) environment, which passes it to the model alone ([`Plugin::env`]) and which
/// the model reads the same way. Only then is the model on the network.
pub fn model_forwards() -> bool {
    std::env::var_os(ENV_MODEL_REMOTE_URL).is_some_and(|url| !url.is_empty())
}
/// No longer read: the key is kept by the secret plugin (`link model-key set`), and `link up`
/// refuses to start while it is set, so it reaches no plugin's environment.
pub const ENV_MODEL_REMOTE_KEY: &str = "LNK_MODEL_REMOTE_KEY";

/// Every variable that passes from the host's environment to `plugin`: [`PASSTHROUGH`] and
/// its own ([`Plugin::env`]), the [`TEST_VARIABLES`] only when `test_hooks`.
pub fn passthrough_for(plugin: &Plugin, test_hooks: bool) -> impl Iterator<Item = &'static str> {
    PASSTHROUGH
        .iter()
        .chain(plugin.env)
        .copied()
        .filter(move |k| test_hooks || !TEST_VARIABLES.contains(k))
}

/// The private directories `plugin` may write: its home, and its data area if it keeps one
/// ([`Plugin::data`]: only then is it made and writable; every other plugin's is named, not
/// made, and its Landlock domain lets it make none). The host makes them
/// ([`Contract::create_dirs`]) and grants them (its Landlock rules).
pub fn own_dirs(layout: &crate::layout::StateLayout, plugin: &Plugin) -> Vec<PathBuf> {
    let mut dirs = vec![layout.home(plugin.program)];
    if plugin.data {
        dirs.push(layout.data(plugin.program));
    }
    dirs
}

use crate::layout::home_env;

/// The host's side of [`PluginEnv`]: what one plugin of one runtime is started with. The
/// host, the testing kit and the bench all start plugins through [`Contract::apply`].
#[derive(Debug, Clone)]
pub struct Contract<'a> {
    pub plugin: &'a Plugin,
    pub layout: &'a crate::layout::StateLayout,
    pub programs: &'a Path,
    pub profile: Profile,
    pub mode: Mode,
    pub monitor_interval: f64,
    /// The model of an agent created without one ([`ENV_MODEL_DEFAULT`]).
    pub default_model: &'a crate::model::Model,
    /// Whether the [`TEST_VARIABLES`] pass from the host's environment: only a host built
    /// with test hooks, that was asked for them, passes them.
    pub test_hooks: bool,
}

impl Contract<'_> {
    /// Makes the plugin's home, run and log directories, and its data area if it keeps one
    /// ([`Plugin::data`]).
    pub fn create_dirs(&self) -> std::io::Result<()> {
        // The XDG directories inside the home are named, not made: a program makes the ones
        // it uses, as the XDG spec expects, and five fewer directories per plugin is a
        // measurable part of start-up on a fresh state root.
        // Through the root's descriptor, never following a link: a plugin may plant one in
        // its own area, and the host may be root (`safe_root`).
        let root = crate::safe_root::RootDir::open(self.layout.root())?;
        let mut dirs = own_dirs(self.layout, self.plugin);
        dirs.push(self.layout.plugin_run_dir(self.plugin.program));
        dirs.push(self.layout.log_dir());
        for dir in &dirs {
            root.dir_all(dir).map_err(|e| {
                std::io::Error::new(e.kind(), format!("creating {}: {e}", dir.display()))
            })?;
        }
        Ok(())
    }

    /// Sets `cmd` up as the plugin: a cleared environment with [`PASSTHROUGH`] (and the
    /// plugin's own [`Plugin::env`] variables), `HOME`/`XDG_*`
    /// inside its own home, the `LNK_*` variables; `/` its working directory; stdin closed,
    /// stdout piped for the ready line, and its own process group (a terminal's Ctrl-C reaches the host, which stops
    /// plugins in order); for a plugin of [`Session::Own`], a session of its own (whose one
    /// group it leads). The caller sets stderr (the plugin's log) and confinement.
    pub fn apply(&self, cmd: &mut std::process::Command) {
        self.apply_from(cmd, |k| std::env::var_os(k));
    }

    /// [`apply`](Self::apply) with the host's environment read through `var`.
    fn apply_from(
        &self,
        cmd: &mut std::process::Command,
        var: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) {
        use std::os::unix::process::CommandExt;
        let (layout, name) = (self.layout, self.plugin.program);
        let passthrough =
            passthrough_for(self.plugin, self.test_hooks).filter_map(|k| var(k).map(|v| (k, v)));
        cmd.env_clear()
            .envs(passthrough)
            .envs(home_env(&layout.home(name)))
            .env(ENV_PLUGIN, name)
            .env(ENV_STATE, layout.root())
            .env(ENV_SOCKET, layout.plugin_socket(name))
            .env(ENV_DATA, layout.data(name))
            .env(ENV_MODE, self.mode.as_str())
            .env(ENV_PROFILE, self.profile.as_str())
            .env(ENV_PROGRAMS, self.programs)
            .env(ENV_MONITOR_INTERVAL, self.monitor_interval.to_string())
            .env(ENV_MODEL_DEFAULT, self.default_model.as_str())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            // Not the host's working directory, which a view's covers would leave reachable
            // by relative paths beneath them.
            .current_dir("/");
        if self.plugin.session == Session::Own {
            // SAFETY: setsid(2) only, between fork and exec. The child of a fork never leads
            // a process group, so it cannot fail with EPERM; any failure stops the start.
            unsafe { cmd.pre_exec(|| Ok(rustix::process::setsid().map(drop)?)) };
        } else {
            cmd.process_group(0);
        }
    }
}

/// The ready line's payload.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ready {
    /// Routes this plugin owns and serves on its socket.
    #[serde(default)]
    pub routes: Vec<String>,
}

/// Prints the one ready line on stdout.
pub fn announce_ready(routes: &[&str]) -> std::io::Result<()> {
    let ready = Ready {
        routes: routes.iter().map(|r| r.to_string()).collect(),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {}", serde_json::to_string(&ready)?)?;
    out.flush()
}

/// Parses a line printed by a plugin; `None` if it is not a ready line.
pub fn parse_ready(line: &str) -> Option<Ready> {
    let rest = line.trim_end().strip_prefix("ready")?;
    if rest.trim().is_empty() {
        return Some(Ready::default());
    }
    serde_json::from_str(rest.trim()).ok()
}

/// Binds a Unix listener, replacing a stale socket file left by a crashed run. The socket is
/// noted as this process's ([`crate::files::made`]): [`crate::files::remove_made`] removes it
/// when the process stops, and never a socket another process bound at the same path since.
pub fn bind(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    crate::files::made(path);
    Ok(listener)
}

/// SIGTERM and SIGINT, caught from the moment this is made: a signal that arrives before
/// anyone awaits [`recv`](Self::recv) is kept, not acted on by the default handler.
pub struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Installs the handlers; needs a running tokio runtime.
    pub fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves on the next SIGTERM or SIGINT.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Resolves on SIGTERM or SIGINT; the handlers are installed when this is called, not when
/// it is first awaited.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    let mut signals = ShutdownSignals::new().expect("installing SIGTERM and SIGINT handlers");
    async move { signals.recv().await }
}

/// Why a plugin could not start: its contract with the host is broken, or it could not make
/// itself non-dumpable.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Contract(String),
    #[error("cannot make the plugin non-dumpable (prctl PR_SET_DUMPABLE 0): {0}")]
    Dumpable(std::io::Error),
}

/// What every plugin does first: logging to stderr ([`init_logging`]), itself made
/// non-dumpable, and the contract read from the environment ([`PluginEnv::from_env`]).
///
/// Non-dumpable because a plugin's memory and `/proc/PID/environ` hold what its callers
/// trust it with (tokens, the model key): the kernel then refuses them (and ptrace) to every
/// process without `CAP_SYS_PTRACE`, even one of the same uid and capabilities, whose
/// Landlock domain does not already refuse it. `exec` resets the setting, so it is made here,
/// in the plugin's own image, not by the host before it.
pub fn start() -> Result<PluginEnv, StartError> {
    init_logging();
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| StartError::Dumpable(e.into()))?;
    PluginEnv::from_env().map_err(StartError::Contract)
}

/// Logs to stderr (the host sends it to `<state>/log/<plugin>.log`); `RUST_LOG` filters.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A log line that cannot be written (stderr full or closed) is dropped: the default
        // writer's fallback is `eprintln!`, which panics in exactly that case.
        .with_writer(|| crate::say::QuietStderr)
        .log_internal_errors(false)
        .with_ansi(false)
        .try_init();
}

/// Binds the plugin's socket, announces the routes `service` serves, and serves them until
/// SIGTERM or SIGINT; then removes the socket. The usual body of a plugin's `main`.
pub async fn serve_service<S: Send + Sync + 'static>(
    env: &PluginEnv,
    peers: crate::server::Peers,
    service: crate::server::Service<S>,
) -> std::io::Result<()> {
    let routes = service.routes().to_vec();
    serve_plugin(env, &routes, peers, service.handler(&env.name)).await
}

/// Binds the plugin's socket, announces readiness with `routes`, and serves until SIGTERM or
/// SIGINT; then removes the socket.
pub async fn serve_plugin(
    env: &PluginEnv,
    routes: &[&str],
    peers: crate::server::Peers,
    handler: crate::server::Handler,
) -> std::io::Result<()> {
    let listener = bind(&env.socket)?;
    let handler = if env.test_hooks {
        with_debug_call(env.layout().router_socket(), handler)
    } else {
        handler
    };
    let serve = async move {
        crate::server::serve(listener, peers, handler).await;
        Ok(())
    };
    run_until_stopped(&env.socket, routes, serve).await
}

/// Announces readiness with `routes`, runs `serve` until it ends or SIGTERM/SIGINT arrives,
/// then removes `socket` if it is still the one it bound. For plugins that serve something other than routes (HTTP).
pub async fn run_until_stopped(
    socket: &std::path::Path,
    routes: &[&str],
    serve: impl std::future::Future<Output = std::io::Result<()>>,
) -> std::io::Result<()> {
    // Caught before the ready line, so a stop that follows it at once still cleans up.
    let stop = shutdown_signal();
    announce_ready(routes)?;
    let result = tokio::select! {
        r = serve => r,
        _ = stop => Ok(()),
    };
    crate::files::remove_made(socket);
    result
}

fn with_debug_call(router: PathBuf, inner: crate::server::Handler) -> crate::server::Handler {
    use crate::routes::host::{DebugCallReply, PluginDebugBody, PLUGIN_DEBUG_CALL};
    crate::server::handler(move |req: crate::Request| {
        let inner = inner.clone();
        let router = router.clone();
        async move {
            if req.route != PLUGIN_DEBUG_CALL {
                return inner(req).await;
            }
            let call: PluginDebugBody = crate::server::body(&req)?;
            let result =
                crate::client::call_once(&router, &call.route, req.agent.as_deref(), call.body)
                    .await;
            let reply = match result {
                Ok(v) => DebugCallReply {
                    ok: true,
                    result: Some(v),
                    code: None,
                    message: None,
                },
                Err(e) => DebugCallReply {
                    ok: false,
                    result: None,
                    code: e.code(),
                    message: Some(e.to_string()),
                },
            };
            serde_json::to_value(reply).map_err(|e| crate::RemoteError::internal(e.to_string()))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::ffi::OsString;

    /// The variables `plugin` is started with when the host's environment holds all of
    /// PATH, the remote model's URL and key, and the test variables.
    fn started_env(plugin: &str) -> BTreeMap<String, Option<String>> {
        started_env_with(plugin, false)
    }

    fn started_env_with(plugin: &str, test_hooks: bool) -> BTreeMap<String, Option<String>> {
        let layout = crate::layout::StateLayout::new("/lnk-state");
        let contract = Contract {
            plugin: crate::manifest::find(plugin).expect("a declared plugin"),
            layout: &layout,
            programs: Path::new("/programs"),
            profile: Profile::Mini,
            mode: Mode::Diagnostic,
            monitor_interval: 1.0,
            default_model: &crate::model::Model::local(),
            test_hooks,
        };
        let host = |k: &str| -> Option<OsString> {
            match k {
                "PATH" => Some("/usr/bin".into()),
                k if TEST_VARIABLES.contains(&k) => Some("1".into()),
                ENV_MODEL_REMOTE_URL => Some("http://127.0.0.1:9".into()),
                ENV_MODEL_REMOTE_KEY => Some("sk-secret-4711".into()),
                _ => None,
            }
        };
        let mut cmd = std::process::Command::new("/bin/true");
        contract.apply_from(&mut cmd, host);
        cmd.get_envs()
            .map(|(k, v)| {
                let v = v.map(|v| v.to_string_lossy().into_owned());
                (k.to_string_lossy().into_owned(), v)
            })
            .collect()
    }

    #[test]
    fn the_remote_model_address_reaches_only_the_model_plugin_and_the_key_none() {
        let model = started_env("link-plugin-model");
        assert!(!model.contains_key(ENV_MODEL_REMOTE_KEY), "{model:?}");
        assert_eq!(
            model[ENV_MODEL_REMOTE_URL].as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(model["PATH"].as_deref(), Some("/usr/bin"));
        for other in [
            "link-mini-harness",
            "link-plugin-link-harness",
            "link-plugin-secret",
        ] {
            let env = started_env(other);
            assert_eq!(env["PATH"].as_deref(), Some("/usr/bin"), "{other}");
            assert_eq!(env[ENV_PLUGIN].as_deref(), Some(other));
            for secret in [ENV_MODEL_REMOTE_KEY, ENV_MODEL_REMOTE_URL] {
                assert!(!env.contains_key(secret), "{other} gets {secret}: {env:?}");
            }
        }
    }

    #[test]
    fn test_variables_pass_only_from_a_host_with_test_hooks() {
        // Between them, these three are given every test variable.
        let plugins = [
            "link-mini-connection",
            "link-plugin-model",
            "link-mini-harness",
        ];
        for k in TEST_VARIABLES {
            let mut given = 0;
            for plugin in plugins {
                let release = started_env_with(plugin, false);
                let tested = started_env_with(plugin, true);
                assert!(!release.contains_key(*k), "{k}: {release:?}");
                assert_eq!(release["PATH"].as_deref(), Some("/usr/bin"));
                given += usize::from(tested.get(*k).is_some_and(|v| v.as_deref() == Some("1")));
            }
            assert!(given > 0, "no plugin is given {k}");
        }
    }

    /// (pid, process group, session) of `/bin/cat` started as `plugin` by the contract.
    fn started_ids(plugin: &str) -> (u32, u32, u32) {
        let layout = crate::layout::StateLayout::new("/lnk-state");
        let contract = Contract {
            plugin: crate::manifest::find(plugin).expect("a declared plugin"),
            layout: &layout,
            programs: Path::new("/programs"),
            profile: Profile::Link,
            mode: Mode::Diagnostic,
            monitor_interval: 1.0,
            default_model: &crate::model::Model::local(),
            test_hooks: false,
        };
        let mut cmd = std::process::Command::new("/bin/cat");
        cmd.arg("/proc/self/stat");
        contract.apply_from(&mut cmd, |_| None);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        use procfs::FromRead;
        let stat = procfs::process::Stat::from_read(out.stdout.as_slice()).unwrap();
        (stat.pid as u32, stat.pgrp as u32, stat.session as u32)
    }

    #[test]
    fn only_the_sandbox_plugin_leads_a_session_and_every_plugin_a_group() {
        let (pid, group, session) = started_ids(crate::manifest::SANDBOX.program);
        assert_eq!((group, session), (pid, pid));
        // As /proc shows it, like the child's: 0 when the session's leader is outside this
        // pid namespace (as a CI runner may start the tests), which rustix's `getsid` cannot
        // return.
        let ours = procfs::process::Process::myself()
            .and_then(|me| me.stat())
            .unwrap()
            .session as u32;
        let (pid, group, session) = started_ids("link-plugin-model");
        assert_eq!((group, session), (pid, ours));
    }

    #[test]
    fn no_plugin_of_its_own_gets_a_variable_every_plugin_gets() {
        for plugin in crate::manifest::ALL {
            for v in plugin.env {
                assert!(
                    !PASSTHROUGH.contains(v),
                    "{v}, {}'s own, is also passed to every plugin",
                    plugin.program
                );
            }
        }
    }
}
