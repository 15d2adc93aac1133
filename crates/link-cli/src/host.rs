//! `link up`: the host's life — lock, start, serve, supervise, stop, reap.

use crate::confine::check_confinement;
use crate::leftovers::clean_after_dead_host;
use crate::plugins::{self, describe, Launch, Plugin};
use crate::shared::{HostState, PluginState, PluginStatus, SandboxStatus, Shared};
use crate::start_probe::Probe;
use crate::UpArgs;
use anyhow::{bail, Context, Result};
use link_os::process::start_time;
use link_protocol::control_key::ControlKey;
use link_protocol::layout::StateLayout;
use link_protocol::pids::{PidsFile, RecordedPlugin};
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes::programs;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

/// Grace between SIGTERM and SIGKILL when stopping a plugin.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The sandbox probe answers in tens of milliseconds; this bounds one that is stuck.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

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

/// A default model other than `link-local` is served only by forwarding: without
/// `LNK_MODEL_REMOTE_URL` every agent created without a model would be refused, so `link up`
/// is refused at once instead. (Whether the remote serves it is checked when an agent is
/// created: the remote may not be up yet.)
fn refuse_unreachable_default_model(model: &link_protocol::model::Model) -> Result<()> {
    if !model.is_local() && !link_protocol::plugin::model_forwards() {
        bail!(
            "--model {model} is not {}, so the model service would have to forward it, but {} \
             is not set; set it to the remote's http://host[:port] or choose --model {}",
            link_protocol::model::LOCAL,
            link_protocol::plugin::ENV_MODEL_REMOTE_URL,
            link_protocol::model::LOCAL
        );
    }
    Ok(())
}

/// Runs the host in the foreground until it is asked to stop or a plugin dies.
pub fn up(args: UpArgs) -> Result<i32> {
    // State is private: everything the host and the plugins it starts (which inherit the
    // umask) create is owner-only, whatever umask `link up` was started with.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let root = link_protocol::layout::absolute(&args.state)?;
    let layout = StateLayout::new(root);
    layout.check()?;
    // Before anything is made or opened there: nobody else may be able to swap it.
    link_protocol::safe_root::check(layout.root())?;
    refuse_key_in_environment()?;
    refuse_unreachable_default_model(&args.model)?;
    say_test_hooks_are_ignored();
    let programs = match &args.programs {
        Some(p) => link_protocol::layout::absolute(p)?,
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
    link_os::reaper::become_subreaper().context("setting the host as child subreaper")?;
    let code = rt.block_on(run(args, layout.clone(), programs, signals, &lock));
    // Plugins remove their own sockets, but one that was killed cannot.
    crate::state_lock::remove_own_files(&lock, &layout);
    code
}

async fn run(
    args: UpArgs,
    layout: StateLayout,
    programs: PathBuf,
    mut signals: link_protocol::plugin::ShutdownSignals,
    lock: &std::fs::File,
) -> Result<i32> {
    let shared = Arc::new(Shared {
        layout: layout.clone(),
        profile: args.profile,
        mode: args.mode,
        plugins: Mutex::new(Vec::new()),
        phase: Mutex::new(HostState::Starting),
        stop: Notify::new(),
        stopping: tokio::sync::watch::channel(None).0,
        router: crate::router::Router::default(),
        sandbox: Mutex::new(None),
    });
    // Full Link's tools need bubblewrap as well as Landlock: prove it while plugins start.
    let confined_link = args.profile == Profile::Link && args.mode == Mode::Confined;
    let uid_base = link_confine::identity::base_for(layout.root()).map_err(anyhow::Error::msg)?;
    let mut support = confined_link.then(link_confine::cgroup::support);
    // In cgroup v2 the host may move out of its own cgroup, which must then hold no process:
    // made before any child. In v1 once the namespaces made ahead are under way.
    let v2 = matches!(support, Some(Ok(link_confine::cgroup::Hierarchy::V2(_))));
    let first = match v2 {
        true => agent_cgroups(&layout, support.take())?,
        false => (None, Ok(())),
    };
    // Made while the host starts, off the thread that prepares the plugins.
    let namespaces = crate::own_namespaces::OwnNamespaces::for_plugins(
        plugins::start_order(args.profile),
        args.mode,
        uid_base,
    );
    let (cgroups, held) = match support {
        Some(support) => agent_cgroups(&layout, Some(support))?,
        None => first,
    };
    let mut pool = None;
    let launch = Launch {
        layout: &layout,
        programs: &programs,
        profile: args.profile,
        mode: args.mode,
        monitor_interval: args.monitor_interval,
        default_model: &args.model,
        cgroups: cgroups.as_ref(),
        uid_base,
        namespaces: namespaces.as_ref(),
    };
    if args.mode == Mode::Confined {
        launch.refuse_reachable(&layout.control_dir())?;
    }
    if args.profile == Profile::Link {
        let ledger = crate::schedule_grant::Ledger::load(layout.schedule_ledger_file())
            .map_err(anyhow::Error::msg)?;
        shared.router.keep_schedules(ledger);
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
        tokio::spawn(crate::routing::serve(shared.clone(), listener));
    }
    let (died_tx, mut died) = mpsc::unbounded_channel();
    let mut started: Vec<Plugin> = Vec::new();
    let mut probe = confined_link.then(|| Probe::start(&programs, held));
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
    // Every view is entered by now: the trees they copied need not pin the host's mounts.
    link_confine::view::release_trimmed();
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
            shared.set_phase(HostState::Ready);
            link_protocol::outln!("ready {}", layout.connection_socket().display());
            pool = cgroups.as_ref().map(|c| make_pool(c, uid_base, &shared));
            supervise(&shared, &mut died, &mut signals, probe.as_mut(), lock).await
        }
    };
    shared.stopping.send_replace(Some(reason));
    shared.set_phase(HostState::Stopping);
    // The pool's idle cgroups go while the plugins stop (once it is whole, so none is made
    // after); those still holding a command go when the runtime's are dropped.
    let idle_gone = match (pool, &cgroups) {
        (Some(pool), Some(cgroups)) => {
            let _ = pool.await;
            Some(tokio::task::spawn_blocking(cgroups.idle_remover()))
        }
        _ => None,
    };
    // Before `reap_strays`, while the probe's process is still this host's unreaped child
    // (after that its pid could name another process).
    if let Some(probe) = probe.as_mut() {
        probe.stop().await;
    }
    stop_all(&shared, &mut started).await;
    if let Some(removing) = idle_gone {
        let _ = removing.await;
    }
    // A probe killed after the grace leaves processes, reaped here, and a scratch directory
    // only the host can now remove.
    reap_strays();
    if confined_link {
        link_confine::probe::sweep_dead_probe_dirs();
    }
    Ok(code)
}

/// Where the machine allows it (`support`, of `link_confine::cgroup::support`; none outside
/// confined full Link): the runtime's cgroups, in which the sandbox plugin bounds each agent's
/// commands together (`link_confine::cgroup`), and whether they are held or why not (the
/// probe and `link status` say it). Removed when dropped, after the plugins. Cgroups the
/// machine allows that cannot be made stop the start.
fn agent_cgroups(
    layout: &StateLayout,
    support: Option<Result<link_confine::cgroup::Hierarchy, String>>,
) -> Result<(
    Option<link_confine::cgroup::RuntimeCgroups>,
    Result<(), String>,
)> {
    use link_confine::cgroup::RuntimeCgroups;
    let parents = match support {
        Some(Ok(parents)) => parents,
        Some(Err(why)) => return Ok((None, Err(why))),
        None => return Ok((None, Ok(()))),
    };
    match RuntimeCgroups::create(&parents, layout.root()) {
        Ok(made) => Ok((Some(made), Ok(()))),
        Err(e) if e.unavailable() => Ok((None, Err(e.to_string()))),
        Err(e) => Err(e).context(
            "the sandbox plugin bounds each agent's commands together in cgroups; nothing was \
             started",
        ),
    }
}

/// The pool of the runtime's cgroups, made once it is ready, off the start's path (the
/// sandbox plugin waits for a cgroup of it a command needs). A failure stops the runtime.
fn make_pool(
    cgroups: &link_confine::cgroup::RuntimeCgroups,
    uid_base: u32,
    shared: &Arc<Shared>,
) -> CgroupPool {
    // As root the sandbox plugin is an identity of its own; else it is the host's.
    let plugin = rustix::process::geteuid()
        .is_root()
        .then(|| link_confine::plugin_ns::plugin_id(uid_base));
    let make = cgroups.pool_maker(plugin);
    let shared = shared.clone();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = make() {
            link_protocol::errln!("link: {e}; stopping");
            shared.stop.notify_one();
        }
    })
}

type CgroupPool = tokio::task::JoinHandle<()>;

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
        state: PluginState::Ready,
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

/// Waits for a stop request, a plugin's death or the loss of the state root (`lock` is the
/// root directory the host holds locked); returns the exit code and the reason.
async fn supervise(
    shared: &Shared,
    died: &mut mpsc::UnboundedReceiver<(&'static str, ExitStatus)>,
    signals: &mut link_protocol::plugin::ShutdownSignals,
    probe: Option<&mut Probe>,
    lock: &std::fs::File,
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
        // Stopped in order like any other stop; what the host removes then goes through
        // `lock`, the removed directory, so a runtime started at the path since keeps its
        // files (`state_lock::remove_own_files`).
        reason = crate::state_lock::root_lost(lock, shared.layout.root()) => {
            link_protocol::errln!("link: {reason}; stopping the runtime");
            (1, reason)
        }
        Some((name, status)) = died.recv() => {
            shared.set_plugin_state(name, PluginState::Exited);
            let reason = format!("plugin {name} exited unexpectedly ({})", describe(Some(&status)));
            link_protocol::errln!("link: {reason}; stopping the runtime");
            (1, reason)
        }
    }
}

/// Stops plugins in reverse start order: SIGTERM, grace, SIGKILL; each is reaped.
async fn stop_all(shared: &Shared, started: &mut Vec<Plugin>) {
    while let Some(mut plugin) = started.pop() {
        shared.set_plugin_state(plugin.name, PluginState::Stopping);
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
        shared.set_plugin_state(plugin.name, PluginState::Exited);
    }
}

/// Kills and reaps any descendant left behind (a killed plugin's helpers, adopted by us).
fn reap_strays() {
    // Every descendant is under a child: with no child at all (one waitid) nothing is left,
    // and the scan of /proc, milliseconds long, is not needed.
    if !link_os::reaper::has_children() {
        return;
    }
    let me = std::process::id() as i32;
    for pid in link_os::sample::descendants(me) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let name = link_os::sample::sample_process(pid.as_raw_nonzero().get())
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
