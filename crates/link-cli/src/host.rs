//! `link up`: the host's life — lock, start, serve, supervise, stop, reap.

use crate::plugins::{self, describe, Launch, Plugin};
use crate::UpArgs;
use anyhow::{bail, Context, Result};
use link_protocol::control_key::ControlKey;
use link_protocol::layout::StateLayout;
use link_protocol::pids::{start_time, PidsFile, RecordedPlugin};
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes::programs;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

/// Grace between SIGTERM and SIGKILL when stopping a plugin.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long `up` waits for a previous run's surviving plugins to die once SIGKILLed.
const SURVIVOR_WAIT: Duration = Duration::from_secs(10);
/// The sandbox probe answers in tens of milliseconds; this bounds one that is stuck.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

pub use link_protocol::routes::host::{HostStatus, PluginStatus, SandboxStatus};

/// State shared by the control socket, the router and the supervisor.
pub struct Shared {
    pub layout: StateLayout,
    pub profile: Profile,
    pub mode: Mode,
    pub plugins: Mutex<Vec<PluginStatus>>,
    pub phase: Mutex<&'static str>,
    pub stop: Notify,
    /// Set, with the reason, when the runtime starts stopping.
    pub stopping: tokio::sync::watch::Sender<Option<String>>,
    pub router: crate::router::Router,
    /// Set once the sandbox probe proved confinement.
    pub sandbox: Mutex<Option<SandboxStatus>>,
}

impl Shared {
    /// Who must serve `plugin`'s socket: the pid the host started for it.
    pub fn peer_of(&self, plugin: &str) -> link_protocol::client::Peer {
        let plugins = self.plugins.lock().expect("lock");
        match plugins.iter().find(|p| p.name == plugin) {
            Some(p) => link_protocol::client::Peer::Pid(p.pid),
            // Not started (yet): no process may answer for it.
            None => link_protocol::client::Peer::Pid(0),
        }
    }

    pub fn status(&self) -> HostStatus {
        HostStatus {
            profile: self.profile,
            mode: self.mode,
            pid: std::process::id(),
            state: (*self.phase.lock().expect("lock")).to_owned(),
            confinement: confinement_summary(self.mode).to_owned(),
            plugins: self.plugins.lock().expect("lock").clone(),
            sandbox: self.sandbox.lock().expect("lock").clone(),
        }
    }

    pub fn status_json(&self) -> serde_json::Value {
        serde_json::to_value(self.status()).expect("a status serializes")
    }

    fn set_plugin_state(&self, name: &str, state: &str) {
        for p in self
            .plugins
            .lock()
            .expect("lock")
            .iter_mut()
            .filter(|p| p.name == name)
        {
            p.state = state.to_owned();
        }
    }
}

/// The state root and its top directories, owner-only (0700): made so, or made so again if
/// an earlier run or another program left them open, so nothing beneath them is reachable by
/// another local user whatever its own mode. Made through the root's descriptor, so a link
/// in place of one of them is refused, never followed and chmodded (`safe_root`).
fn make_private_dirs(layout: &StateLayout) -> Result<()> {
    let root = link_protocol::safe_root::RootDir::open(layout.root())
        .with_context(|| format!("opening the state root {}", layout.root().display()))?;
    for dir in ["", "run", "log", "auth", "home", "data", "control"] {
        root.private_dir(Path::new(dir))
            .with_context(|| format!("making {} owner-only", layout.root().join(dir).display()))?;
    }
    Ok(())
}

fn confinement_summary(mode: Mode) -> &'static str {
    match mode {
        Mode::Confined => "plugins under Landlock, no_new_privs and seccomp (the sandbox plugin: a Landlock domain without filesystem rules and its own seccomp filter; its commands: bubblewrap + Landlock + the full filter)",
        Mode::Diagnostic => "diagnostic: plugins unconfined; run and file tools disabled; not evidence of confinement",
    }
}

/// The remote model key once came from the environment, where every plugin started with it
/// could read it; now it is kept by the secret plugin. A start that still sets it stops, so
/// the key is neither silently ignored nor passed on.
fn refuse_key_in_environment() -> Result<()> {
    use link_protocol::plugin::ENV_MODEL_REMOTE_KEY;
    if std::env::var_os(ENV_MODEL_REMOTE_KEY).is_some() {
        bail!(
            "{ENV_MODEL_REMOTE_KEY} is set, but Link no longer takes the remote model key from \
             the environment: unset it, start full Link, and store the key with \
             `link model-key set --state DIR` (it reads the key on standard input); nothing \
             was started"
        );
    }
    Ok(())
}

/// A release build has no test hooks: asking for them changes nothing, and the host says so
/// rather than let a user believe they are on.
fn say_test_hooks_are_ignored() {
    use link_protocol::plugin::ENV_TEST_HOOKS;
    if !crate::TEST_HOOKS_BUILT && std::env::var_os(ENV_TEST_HOOKS).is_some() {
        link_protocol::errln!(
            "link: {ENV_TEST_HOOKS} is ignored: this build has no test hooks (only builds made \
             for tests, with the testing kit, have them)"
        );
    }
}

/// Runs the host in the foreground until it is asked to stop or a plugin dies.
pub fn up(args: UpArgs) -> Result<i32> {
    // State is private: everything the host and the plugins it starts (which inherit the
    // umask) create is owner-only, whatever umask `link up` was started with.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let root = crate::commands::absolute(&args.state)?;
    let layout = StateLayout::new(root);
    layout.check()?;
    // Before anything is made or opened there: nobody else may be able to swap it.
    link_protocol::safe_root::check(layout.root())?;
    refuse_key_in_environment()?;
    say_test_hooks_are_ignored();
    let programs = match &args.programs {
        Some(p) => crate::commands::absolute(p)?,
        None => std::env::current_exe()?
            .parent()
            .context("link has no directory")?
            .to_owned(),
    };
    let missing = plugins::missing_programs(&programs, args.profile);
    if !missing.is_empty() {
        bail!(
            "missing programs in {}: {}; build them with `cargo build --locked --release` (see README.md)",
            programs.display(),
            missing.join(", ")
        );
    }
    make_private_dirs(&layout)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Caught before the lock is taken: from then on `link down` may stop this host by
    // SIGTERM (`commands::down`, before the control socket is bound), which must end start-up
    // in order, not kill the host midway.
    let mut signals = {
        let _runtime = rt.enter();
        link_protocol::plugin::ShutdownSignals::new()?
    };
    let lock = rt.block_on(crate::state_lock::take(&layout, &mut signals))?;
    clean_after_dead_host(&layout)?;
    if args.mode == Mode::Confined {
        check_confinement()?;
    }
    // Orphans of a killed plugin's helpers are re-parented to us, so we can reap them.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .context("setting the host as child subreaper")?;
    let code = rt.block_on(run(args, layout.clone(), programs, signals));
    // Plugins remove their own sockets, but one that was killed cannot.
    crate::state_lock::remove_own_files(&lock, &layout);
    code
}

async fn run(
    args: UpArgs,
    layout: StateLayout,
    programs: PathBuf,
    mut signals: link_protocol::plugin::ShutdownSignals,
) -> Result<i32> {
    let shared = Arc::new(Shared {
        layout: layout.clone(),
        profile: args.profile,
        mode: args.mode,
        plugins: Mutex::new(Vec::new()),
        phase: Mutex::new("starting"),
        stop: Notify::new(),
        stopping: tokio::sync::watch::channel(None).0,
        router: crate::router::Router::default(),
        sandbox: Mutex::new(None),
    });
    let launch = Launch {
        layout: &layout,
        programs: &programs,
        profile: args.profile,
        mode: args.mode,
        monitor_interval: args.monitor_interval,
    };
    if args.mode == Mode::Confined {
        launch.refuse_reachable(&layout.control_dir())?;
    }
    // Made before the socket is bound, so whoever finds the socket finds this run's key.
    let key = ControlKey::create(&layout.control_key_file()).with_context(|| {
        format!(
            "writing the control key {}",
            layout.control_key_file().display()
        )
    })?;
    tokio::spawn(crate::control::serve(
        shared.clone(),
        link_protocol::plugin::bind(&layout.host_socket())?,
        key,
    ));
    if args.profile == Profile::Link {
        let listener = link_protocol::plugin::bind(&layout.router_socket())?;
        tokio::spawn(crate::router::serve(shared.clone(), listener));
    }
    let (died_tx, mut died) = mpsc::unbounded_channel();
    let mut started: Vec<Plugin> = Vec::new();
    // Full Link's tools need bubblewrap as well as Landlock: prove it while plugins start.
    let confined_link = args.profile == Profile::Link && args.mode == Mode::Confined;
    let mut probe = confined_link.then(|| Probe::start(&programs));
    let all_started = start_all(
        &launch,
        &shared,
        &mut started,
        died_tx,
        &mut died,
        &mut signals,
    )
    .await;
    shared.router.started();
    let outcome = match (all_started, probe.as_mut()) {
        (Ok(()), Some(probe)) => probe_answer(probe, &shared, &mut died, &mut signals)
            .await
            .map(|found| *shared.sandbox.lock().expect("lock") = Some(found)),
        (outcome, _) => outcome,
    };
    let (code, reason) = match outcome {
        Err(e) => {
            link_protocol::errln!("link: {}", crate::error_text(&e));
            (1, format!("{e:#}"))
        }
        Ok(()) => {
            if args.profile == Profile::Link {
                let listener = link_protocol::plugin::bind(&layout.connection_socket())?;
                tokio::spawn(crate::endpoint::serve(shared.clone(), listener));
            }
            *shared.phase.lock().expect("lock") = "ready";
            link_protocol::outln!("ready {}", layout.connection_socket().display());
            supervise(&shared, &mut died, &mut signals, probe.as_mut()).await
        }
    };
    shared.stopping.send_replace(Some(reason));
    *shared.phase.lock().expect("lock") = "stopping";
    // Before `reap_strays`, while the probe's process is still this host's unreaped child
    // (after that its pid could name another process).
    if let Some(probe) = probe.as_mut() {
        probe.stop().await;
    }
    stop_all(&shared, &mut started).await;
    // A probe killed after the grace leaves processes, reaped here, and a scratch directory
    // only the host can now remove.
    reap_strays();
    if confined_link {
        link_plugin_sandbox::probe::sweep_dead_probe_dirs();
    }
    Ok(code)
}

async fn start_all(
    launch: &Launch<'_>,
    shared: &Shared,
    started: &mut Vec<Plugin>,
    died_tx: mpsc::UnboundedSender<(&'static str, ExitStatus)>,
    died: &mut mpsc::UnboundedReceiver<(&'static str, ExitStatus)>,
    signals: &mut link_protocol::plugin::ShutdownSignals,
) -> Result<()> {
    // Spawned together, recorded at once (a host killed now leaves none running), then each
    // ready line is awaited in order; they come in while the others start. No plugin waits
    // for another: the router holds a call for an owner that is still starting. Each command
    // is prepared here while the spawner threads fork the ones before (`crate::spawner`).
    let mut prepared: Result<()> = Ok(());
    let mut forking = Vec::new();
    for spec in plugins::start_order(launch.profile) {
        match launch.command(spec) {
            Ok((cmd, forker)) => forking.push((spec, crate::spawner::spawn(cmd, forker))),
            Err(e) => {
                prepared = Err(e);
                break;
            }
        }
    }
    for (spec, child) in forking {
        match launch.adopt(spec, child.wait(), died_tx.clone()) {
            Ok(plugin) => {
                shared.router.admit(spec, plugin.pid);
                // From here the plugin is in `started` on every way out, so a failure stops
                // it in order (SIGTERM, grace) with the rest.
                started.push(plugin);
            }
            Err(e) if prepared.is_ok() => prepared = Err(e),
            Err(_) => {}
        }
    }
    prepared?;
    record_pids(launch.layout, started)?;
    for plugin in started.iter_mut() {
        let (name, pid) = (plugin.name, plugin.pid);
        let ready = tokio::select! {
            r = plugin.ready(launch) => r,
            Some((dead, status)) = died.recv() => {
                Err(died_during_start_up(launch.layout, dead, &status))
            }
            _ = signals.recv() => Err(anyhow::anyhow!("interrupted during start-up")),
            _ = shared.stop.notified() => {
                Err(anyhow::anyhow!("stopped by `link down` during start-up"))
            }
        };
        ready.with_context(|| format!("starting {name} (pid {pid})"))?;
        register(launch, shared, plugin)?;
    }
    if launch.profile == Profile::Mini {
        publish_connection(launch.layout)?;
    }
    Ok(())
}

/// A ready plugin in `link status`, and (full Link) its routes in the router: a claim of a
/// route the table gives another owner stops start-up.
fn register(launch: &Launch<'_>, shared: &Shared, plugin: &Plugin) -> Result<()> {
    shared.plugins.lock().expect("lock").push(PluginStatus {
        name: plugin.name.into(),
        pid: plugin.pid,
        state: "ready".into(),
    });
    // Only full Link routes calls; Mini's harness serves the agent routes itself.
    if launch.profile == Profile::Link {
        let socket = launch.layout.plugin_socket(plugin.name);
        if let Err(e) = shared
            .router
            .register(plugin.spec, plugin.pid, &plugin.routes, socket)
        {
            bail!(
                "{e}; refusing to start (is {} the program of this release?)",
                plugin.name
            );
        }
    }
    Ok(())
}

/// Mini's connection service serves its socket in its own directory; clients find it at
/// `run/connection.sock`, a link the host makes where no plugin may write.
fn publish_connection(layout: &StateLayout) -> Result<()> {
    let link = layout.connection_socket();
    let target = layout.plugin_socket(programs::MINI_CONNECTION);
    let relative = target.strip_prefix(layout.run_dir()).unwrap_or(&target);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(relative, &link)
        .with_context(|| format!("linking {} to {}", link.display(), target.display()))
}

/// The probe's answer start-up goes on with, unless the runtime is stopped, a plugin dies or
/// the probe takes longer than [`PROBE_TIMEOUT`] meanwhile: a stuck probe must not keep
/// `link down` waiting.
async fn probe_answer(
    probe: &mut Probe,
    shared: &Shared,
    died: &mut mpsc::UnboundedReceiver<(&'static str, ExitStatus)>,
    signals: &mut link_protocol::plugin::ShutdownSignals,
) -> Result<SandboxStatus> {
    tokio::select! {
        found = tokio::time::timeout(PROBE_TIMEOUT, probe.answer()) => found.unwrap_or_else(|_| {
            bail!(
                "the sandbox probe did not answer within {PROBE_TIMEOUT:?}; run \
                 `link-plugin-sandbox probe` (or `cargo xtask doctor`) to see where it stops"
            )
        }),
        _ = shared.stop.notified() => {
            bail!("stopped by `link down` during start-up, while the sandbox probe ran")
        }
        _ = signals.recv() => bail!("interrupted during start-up, while the sandbox probe ran"),
        Some((dead, status)) = died.recv() => {
            Err(died_during_start_up(&shared.layout, dead, &status))
        }
    }
}

fn died_during_start_up(layout: &StateLayout, dead: &str, status: &ExitStatus) -> anyhow::Error {
    anyhow::anyhow!(
        "{dead} exited during start-up ({}); see {}",
        describe(Some(status)),
        layout.log_file(dead).display()
    )
}

/// Waits for a stop request or a plugin's death; returns the exit code and the reason.
async fn supervise(
    shared: &Shared,
    died: &mut mpsc::UnboundedReceiver<(&'static str, ExitStatus)>,
    signals: &mut link_protocol::plugin::ShutdownSignals,
    probe: Option<&mut Probe>,
) -> (i32, String) {
    let confirmed = async {
        match probe {
            Some(probe) => probe.confirm(shared).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        reason = confirmed => {
            link_protocol::errln!("link: {reason}; stopping the runtime");
            (1, reason)
        }
        _ = signals.recv() => (0, "stopped by a signal".into()),
        _ = shared.stop.notified() => (0, "stopped by `link down`".into()),
        Some((name, status)) = died.recv() => {
            shared.set_plugin_state(name, "exited");
            let reason = format!("plugin {name} exited unexpectedly ({})", describe(Some(&status)));
            link_protocol::errln!("link: {reason}; stopping the runtime");
            (1, reason)
        }
    }
}

/// Stops plugins in reverse start order: SIGTERM, grace, SIGKILL; each is reaped.
async fn stop_all(shared: &Shared, started: &mut Vec<Plugin>) {
    while let Some(mut plugin) = started.pop() {
        shared.set_plugin_state(plugin.name, "stopping");
        if plugin.exited.borrow().is_none() {
            let pid = rustix::process::Pid::from_raw(plugin.pid).expect("pid");
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let waited = tokio::time::timeout(STOP_GRACE, plugin.exited.wait_for(Option::is_some))
                .await
                .is_ok();
            if !waited {
                link_protocol::errln!(
                    "link: {} did not stop within {STOP_GRACE:?}; killing it",
                    plugin.name
                );
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                let _ = plugin.exited.wait_for(Option::is_some).await;
            }
        }
        shared.set_plugin_state(plugin.name, "exited");
    }
}

/// Kills and reaps any descendant left behind (a killed plugin's helpers, adopted by us).
fn reap_strays() {
    // Every descendant is under a child: with no child at all (one waitid) nothing is left,
    // and the scan of /proc, milliseconds long, is not needed.
    if !has_children() {
        return;
    }
    let me = std::process::id() as i32;
    for pid in link_plugin_measure::sample::descendants(me) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let name = link_plugin_measure::sample::sample_process(pid.as_raw_nonzero().get())
                .map(|s| s.name)
                .unwrap_or_default();
            link_protocol::errln!(
                "link: killing leftover process {} ({name})",
                pid.as_raw_nonzero()
            );
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
        }
    }
}

/// Whether this process has a child, exited or running (any thread's: wait(2) sees them all).
fn has_children() -> bool {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let any = WaitIdOptions::NOHANG | WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    !matches!(waitid(WaitId::All, any), Err(rustix::io::Errno::CHILD))
}

/// What a host that died left on `layout`: its plugins still running (ended first, as they
/// may serve the sockets), its sandboxes, its pids file and sockets. `up` clears them before
/// it starts, `down` when no host answers; the caller holds the lock (`state_lock`).
pub(crate) fn clean_after_dead_host(layout: &StateLayout) -> Result<()> {
    kill_survivors(layout)?;
    // The dead host's key opens nothing now; `up` writes a new one anyway.
    let _ = std::fs::remove_file(layout.control_key_file());
    remove_stale_sockets(layout)
}

/// Rewrites the pids file with every plugin started so far.
fn record_pids(layout: &StateLayout, started: &[Plugin]) -> Result<()> {
    let file = PidsFile {
        host: std::process::id(),
        plugins: started
            .iter()
            .filter_map(|p| {
                Some(RecordedPlugin {
                    name: p.name.to_owned(),
                    pid: p.pid,
                    start_time: start_time(p.pid)?,
                })
            })
            .collect(),
    };
    let path = layout.pids_file();
    let bytes = serde_json::to_vec_pretty(&file)?;
    link_protocol::files::write_atomic(&path, &path.with_extension("json.tmp"), &bytes, 0o600)
        .with_context(|| format!("writing {}", path.display()))
}

/// Plugins a killed host left running, from its pids file: each whose start time still
/// matches (a reused pid is never touched) is SIGKILLed, and so is every bwrap naming this
/// state root (a sandbox the host's death left behind, `link_plugin_sandbox::leftovers`);
/// `up` waits until all are gone. Called with the lock held, so the host that wrote the file
/// is dead.
fn kill_survivors(layout: &StateLayout) -> Result<()> {
    let path = layout.pids_file();
    let recorded = PidsFile::read(layout)
        .with_context(|| format!("reading {}; remove it if it is damaged", path.display()))?;
    let Some(recorded) = recorded else {
        return Ok(());
    };
    let me = std::process::id() as i32;
    let mut survivors: Vec<_> = recorded
        .plugins
        .iter()
        .filter(|p| p.pid > 1 && p.pid != me && start_time(p.pid) == Some(p.start_time))
        .map(|p| (p.name.clone(), p.pid, p.start_time))
        .collect();
    for (name, pid, _) in &survivors {
        link_protocol::errln!(
            "link: killing {name} (pid {pid}), left running by the previous `link up` (pid {}) on this state",
            recorded.host
        );
        if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    for (pid, start) in link_plugin_sandbox::leftovers::kill_bwraps_of(layout.root()) {
        link_protocol::errln!(
            "link: killing bwrap (pid {pid}), a sandbox of the previous `link up` (pid {}) on this state",
            recorded.host
        );
        survivors.push(("bwrap".to_owned(), pid, start));
    }
    let deadline = std::time::Instant::now() + SURVIVOR_WAIT;
    loop {
        let alive: Vec<_> = survivors
            .iter()
            .filter(|(_, pid, start)| start_time(*pid) == Some(*start))
            .map(|(name, pid, _)| format!("{name} (pid {pid})"))
            .collect();
        if alive.is_empty() {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "a previous run's plugins survive SIGKILL for {SURVIVOR_WAIT:?}: {}; not starting a second set on this state",
                alive.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
}

/// Sockets left by a crashed run: nobody holds the lock, so nobody serves them.
fn remove_stale_sockets(layout: &StateLayout) -> Result<()> {
    for socket in layout.all_sockets() {
        if socket.exists() {
            link_protocol::errln!(
                "link: removing stale socket {} from a previous run",
                socket.display()
            );
            std::fs::remove_file(&socket)
                .with_context(|| format!("removing {}", socket.display()))?;
        }
    }
    Ok(())
}

/// The sandbox probe of one start: the kept answer when [`probe_cache`] has one for this
/// machine as it is now (the probe then still runs, and is awaited after `ready`), else the
/// probe's own answer, awaited before `ready`.
struct Probe {
    /// `None` once it finished: a finished future must not be polled again.
    run: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Result<SandboxStatus>> + Send>>>,
    /// Asks the probe process to stop ([`Probe::stop`]).
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    programs: PathBuf,
    key: Option<crate::probe_cache::Key>,
    cached: Option<SandboxStatus>,
}

impl Probe {
    fn start(programs: &Path) -> Probe {
        let key = crate::probe_cache::Key::now(programs);
        let cached = key
            .as_ref()
            .and_then(|k| crate::probe_cache::lookup(programs, k));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        // Behind a kept answer the probe starts once the runtime is ready (first poll), so it
        // takes no CPU from the start itself; else it runs while the plugins start.
        // It then also runs at the lowest priority (nice 19, which bwrap and the helper
        // inherit): it confirms what start-up already went on with, and must not slow the
        // first turns while it does.
        let run: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>> = match cached {
            Some(_) => {
                let programs = programs.to_owned();
                Box::pin(async move {
                    let mut stopped = stopped;
                    if stopped.try_recv().is_ok() {
                        bail!("stopped before the sandbox probe started");
                    }
                    let child = spawn_probe(&programs, Priority::Background);
                    sandbox_probe(child, stopped).await
                })
            }
            None => Box::pin(sandbox_probe(
                spawn_probe(programs, Priority::Normal),
                stopped,
            )),
        };
        Probe {
            run: Some(run),
            stop: Some(stop),
            programs: programs.to_owned(),
            key,
            cached,
        }
    }

    /// The probe's own answer, once; pending forever after that.
    async fn finish(&mut self) -> Result<SandboxStatus> {
        let Some(run) = self.run.as_mut() else {
            return std::future::pending().await;
        };
        let found = run.await;
        self.run = None;
        found
    }

    /// What start-up goes on with: the kept answer, or the probe's (kept for next time).
    async fn answer(&mut self) -> Result<SandboxStatus> {
        if let Some(cached) = &self.cached {
            return Ok(SandboxStatus {
                probe: "cached".into(),
                ..cached.clone()
            });
        }
        let found = self.finish().await?;
        if let Some(key) = &self.key {
            crate::probe_cache::keep(&self.programs, key, &found);
        }
        Ok(found)
    }

    /// Resolves only when the probe that ran behind a kept answer disagrees with it: the
    /// reason to stop. A confirmed answer says so in `link status`.
    async fn confirm(&mut self, shared: &Shared) -> String {
        if self.cached.is_none() {
            return std::future::pending().await;
        }
        match self.finish().await {
            Ok(found) => {
                *shared.sandbox.lock().expect("lock") = Some(SandboxStatus {
                    probe: "cached, confirmed".into(),
                    ..found
                });
                std::future::pending().await
            }
            Err(e) => {
                if let Some(key) = &self.key {
                    crate::probe_cache::forget(&self.programs, key);
                }
                format!("{e:#}; the kept probe answer no longer holds (it was removed)")
            }
        }
    }

    /// Stops a probe still running and waits until its process is gone: it ends and reaps
    /// its own sandbox on SIGTERM, so nothing of it is left to the host (past
    /// [`STOP_GRACE`] it is killed, and what it leaves is the host's to reap).
    async fn stop(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = run.await;
    }
}

/// How the probe competes for the CPU.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// Start-up waits for it.
    Normal,
    /// Nobody waits for it: nice 19.
    Background,
}

/// Starts `link-plugin-sandbox probe`.
fn spawn_probe(programs: &Path, priority: Priority) -> Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(programs.join("link-plugin-sandbox"));
    cmd.arg("probe")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    die_with_host(&mut cmd);
    if priority == Priority::Background {
        // SAFETY: one system call on this child alone; nothing is allocated.
        unsafe {
            cmd.pre_exec(|| Ok(rustix::process::setpriority_process(None, 19)?));
        }
    }
    cmd.spawn().context("running link-plugin-sandbox probe")
}

/// The answer of the probe `child`; an answer other than `enforced` refuses confined mode
/// with the probe's reason. Returns what `link status` shows of it. Once `stop` fires, the
/// probe is stopped instead ([`stop_probe`]).
async fn sandbox_probe(
    child: Result<tokio::process::Child>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<SandboxStatus> {
    let mut child = child?;
    let mut stdout = child.stdout.take().expect("piped");
    let finished = {
        let read = async {
            let mut out = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut out)
                .await
                .map(|_| out)
        };
        let exited = async { tokio::join!(read, child.wait()) };
        tokio::select! {
            done = exited => Some(done),
            _ = &mut stop => None,
        }
    };
    let Some((out, status)) = finished else {
        stop_probe(&mut child).await;
        bail!("the sandbox probe was stopped");
    };
    let (out, status) = (
        out.context("reading the sandbox probe's answer")?,
        status.context("waiting for the sandbox probe")?,
    );
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap_or_default();
    if status.success() {
        return Ok(SandboxStatus {
            identity: report["identity"].clone(),
            seccomp: report["seccomp"].clone(),
            limits: report["limits"].clone(),
            probe: "ran".into(),
        });
    }
    bail!(
        "confined mode is unavailable: the sandbox probe says {} ({}); fix that (`cargo xtask doctor`), or run unconfined, explicitly, with --mode diagnostic",
        report["status"].as_str().unwrap_or("broken"),
        report["reason"].as_str().unwrap_or("no reason given")
    )
}

/// SIGTERM, then [`STOP_GRACE`] for the probe to end and reap its sandbox, then SIGKILL.
async fn stop_probe(child: &mut tokio::process::Child) {
    // Not yet waited for, so the pid is still the probe's.
    if let Some(pid) = child
        .id()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32))
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    if tokio::time::timeout(STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        link_protocol::errln!(
            "link: the sandbox probe did not stop within {STOP_GRACE:?}; killing it"
        );
        let _ = child.kill().await;
    }
}

/// Refuses confined mode where the kernel cannot confine the plugins.
fn check_confinement() -> Result<()> {
    use link_plugin_sandbox::host::{prepare_plugin_ruleset, Network};
    prepare_plugin_ruleset(PathBuf::from("/usr"), &[], &[], Network::Off)
        .map(drop)
        .map_err(|e| {
            anyhow::anyhow!(
                "confined mode is unavailable: {e}; `--mode diagnostic` runs unconfined, explicitly"
            )
        })
}

/// Every process the host starts dies with it: `PR_SET_PDEATHSIG` SIGKILL between fork and
/// exec, then a check that the host (whose pid is taken here, before the fork) is still the
/// parent, for a host killed before the signal was armed. The signal follows the thread that
/// forked: the host spawns from its runtime thread and its spawner threads
/// (`crate::spawner`), all of which live as long as the host.
pub fn die_with_host(cmd: &mut tokio::process::Command) {
    let host = rustix::process::getpid();
    // SAFETY: die_with_parent makes two system calls (prctl, getppid) and allocates nothing.
    unsafe { cmd.pre_exec(move || link_plugin_sandbox::run::die_with_parent(host)) };
}

/// What a confined plugin may touch besides system paths.
pub struct Allowance<'a> {
    pub programs: &'a Path,
    pub readable: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    pub sockets: Vec<PathBuf>,
    /// Whether it reaches the network (`host::Network::of`, the one place that decides).
    pub network: link_plugin_sandbox::host::Network,
}

impl Allowance<'_> {
    /// The Landlock rules of a plugin other than the sandbox plugin: the one place they are
    /// made, for confining it and for checking what it could reach.
    pub fn rules(&self) -> link_plugin_sandbox::Rules {
        use link_plugin_sandbox::host;
        let mut rules = host::plugin_rules(
            self.programs.to_owned(),
            &self.writable,
            &self.sockets,
            self.network,
        );
        rules.read_only.extend(self.readable.iter().cloned());
        rules
    }
}

/// Confines a plugin command: its capabilities shed (as root), Landlock per `allow`,
/// no_new_privs and the seccomp filter (the offline one, Unix sockets only, but for a plugin
/// on the network: `allow.network`), applied between fork and exec so the plugin never runs a
/// single instruction unconfined. The sandbox plugin, whose bwrap needs mounts
/// and namespaces, gets a Landlock domain without filesystem rules instead
/// (`sandbox_plugin_rules`: ptrace, signal and TCP bounds) and a seccomp filter of its own
/// (the baseline without the namespace and mount rules: `seccomp::sandbox_plugin_filter`),
/// and a mount namespace of its own in which only `allow.writable` and its socket directory
/// can be written, with a network namespace without interfaces (`link_plugin_sandbox::view`).
pub fn confine_command(
    cmd: &mut tokio::process::Command,
    plugin: &link_protocol::manifest::Plugin,
    allow: Allowance<'_>,
) -> Result<crate::spawner::Forker> {
    use link_plugin_sandbox::host;
    let shedding = std::sync::Arc::new(host::Shedding::for_plugin(plugin, allow.network)?);
    let forker = match shedding.filter() {
        host::PluginFilter::Inherited => crate::spawner::Forker::Filtered,
        host::PluginFilter::Load(_) => crate::spawner::Forker::Runtime,
    };
    let sandbox = plugin.confinement == link_protocol::manifest::Confinement::Mounting;
    if sandbox {
        // First: it needs the capabilities the next step sheds.
        let mut dirs = allow.writable.clone();
        dirs.extend(allow.sockets.iter().cloned());
        let program = std::path::Path::new(cmd.as_std().get_program());
        let view = link_plugin_sandbox::view::PluginView::prepare(&dirs, program)
            .context("preparing the sandbox plugin's read-only view")?;
        // SAFETY: unshare, mount, mount_setattr and writes of prepared strings; nothing is
        // allocated.
        unsafe { cmd.pre_exec(move || view.enter()) };
    }
    let caps = shedding.clone();
    // SAFETY: prctl and capset calls only; nothing is allocated.
    unsafe { cmd.pre_exec(move || caps.drop_capabilities()) };
    let rules = if sandbox {
        host::sandbox_plugin_rules()
    } else {
        allow.rules()
    };
    let mut ruleset = host::prepare(&rules)?;
    // SAFETY: restrict_child makes two system calls and allocates nothing on success.
    unsafe { cmd.pre_exec(move || ruleset.restrict_child()) };
    // SAFETY: a seccomp(2) call on a program decoded before the fork, or a socket(2) call;
    // nothing is allocated.
    unsafe { cmd.pre_exec(move || shedding.apply_filter()) };
    Ok(forker)
}
