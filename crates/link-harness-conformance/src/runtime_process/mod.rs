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
//!
//! One file each: `mod.rs` the [`RuntimeSpec`] (how `link up` and `link` commands are made) and
//! the blocking helper; `process.rs` the started [`RuntimeProcess`] and its clients; `host.rs`
//! spawning the host, capturing its stderr and ready line, stopping it; `skip.rs` the plugins'
//! runtime tests' start-or-skip ([`up_or_skip`]); `exclusive.rs` the turns ([`exclusive`],
//! [`shared`]) that keep the runtimes of one process from overlapping a scenario run: every
//! [`RuntimeProcess`] holds a shared turn from before its host is spawned until it is stopped.

mod exclusive;
mod host;
mod process;
mod skip;

pub use exclusive::{exclusive, shared, Exclusive, Shared};
pub use host::{NotReady, UpFailure};
pub use process::RuntimeProcess;
pub use skip::up_or_skip;
// Where every runtime test finds them; re-exported here, where the tests start the runtime.
pub use crate::probe::ENV_REQUIRE_RUNTIME;
pub use crate::programs::test_programs;

use crate::fixture::StateRoot;
use crate::programs::HOST;
use crate::reaper::Reaper;
use link_protocol::layout::StateLayout;
use link_protocol::manifest::{ENV_KEYCHAIN, KEYCHAIN_OFF};
use link_protocol::plugin::{Mode, Profile};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// How to run `link up`.
#[derive(Debug, Clone)]
pub struct RuntimeSpec {
    programs: PathBuf,
    profile: Profile,
    mode: Mode,
    env: Vec<(String, String)>,
    isolation: Option<Isolation>,
    monitor_interval_secs: Option<u64>,
    default_model: Option<String>,
    supervised: bool,
    /// Started by the holder of the [`exclusive`] turn: the runtime takes no shared one.
    within_exclusive: bool,
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

impl RuntimeSpec {
    /// `link up --profile PROFILE --state ROOT --mode MODE --programs PROGRAMS` with
    /// `LNK_KEYCHAIN=off`; a minute each to print the ready line and to exit.
    pub fn new(programs: impl Into<PathBuf>, profile: Profile, mode: Mode) -> RuntimeSpec {
        RuntimeSpec {
            programs: programs.into(),
            profile,
            mode,
            env: vec![(ENV_KEYCHAIN.to_owned(), KEYCHAIN_OFF.to_owned())],
            isolation: None,
            monitor_interval_secs: None,
            default_model: None,
            supervised: false,
            within_exclusive: false,
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

    /// With the host's test hooks on (`LNK_TEST_HOOKS=1`). Panics, saying how to build one,
    /// when the host in the programs directory was built without them (`--version` lacks
    /// [`link_protocol::TEST_HOOKS_MARK`]): its tests would fail for a reason they do not name.
    pub fn with_test_hooks(self) -> Self {
        let host = self.programs.join(HOST);
        let hooks = link_protocol::built_with_test_hooks(&host)
            .unwrap_or_else(|e| panic!("cannot ask {} for its version: {e}", host.display()));
        assert!(
            hooks,
            "{} was built without test hooks: build it for tests with `cargo build --release \
             --workspace --bins --examples --features link-cli/test-hooks` (what `bash \
             ci/test.sh` does)",
            host.display()
        );
        self.env(link_protocol::plugin::ENV_TEST_HOOKS, "1")
    }

    /// `--model MODEL`: the model of an agent created without one.
    pub fn default_model(mut self, model: &str) -> Self {
        self.default_model = Some(model.to_owned());
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

    /// The host is spawned through the kit's [`crate::reaper`], which must own every wait of a
    /// runner that is a child subreaper (the scenario); the background reaper is started.
    pub fn supervised(mut self) -> Self {
        self.supervised = true;
        self
    }

    /// Whether the host and `link` commands are spawned through the [`reaper`](crate::reaper):
    /// when [`supervised`](Self::supervised), and whenever this process is a child subreaper
    /// (a scenario ran in it), whose reaper would otherwise collect a plain child's exit.
    fn reaper_owned(&self) -> bool {
        self.supervised || Reaper::is_subreaper()
    }

    /// The runtime is started by the holder of `turn` (the scenario's own host), so it takes
    /// no [`shared`] turn of its own, which would wait for `turn` forever.
    pub(crate) fn within(mut self, _turn: &Exclusive) -> Self {
        self.within_exclusive = true;
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
                for (key, dir) in StateLayout::new(root).host_home_env() {
                    // Owner-only, like everything under a state root.
                    link_protocol::files::private_dir_all(&dir)?;
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
        if let Some(model) = &self.default_model {
            cmd.args(["--model", model]);
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
        RuntimeProcess::spawned(self, StateLayout::new(root))
    }
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
