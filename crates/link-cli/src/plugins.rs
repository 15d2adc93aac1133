//! Which plugins a profile runs, and starting one: environment, confinement, readiness.

use crate::spawner::Forker;
use anyhow::{bail, Context, Result};
use link_protocol::layout::StateLayout;
use link_protocol::manifest::{self, Confinement};
use link_protocol::plugin::{self, Mode, Profile, Ready};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStdout, Command};
use tokio::sync::watch;

/// How long a plugin may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Start order (the manifest's); the host stops them in reverse.
pub fn start_order(profile: Profile) -> impl Iterator<Item = &'static manifest::Plugin> {
    manifest::of(profile)
}

/// Directories a confined plugin may write besides its own (`plugin::own_dirs`) and its
/// socket directory ([`manifest::Plugin::writes`]).
fn extra_writable(layout: &StateLayout, plugin: &manifest::Plugin) -> Vec<PathBuf> {
    plugin.writes.iter().map(|&a| layout.area(a)).collect()
}

/// Directories a confined plugin may read besides system paths and the programs
/// ([`manifest::Plugin::reads`]).
fn extra_readable(layout: &StateLayout, plugin: &manifest::Plugin) -> Vec<PathBuf> {
    plugin.reads.iter().map(|&a| layout.area(a)).collect()
}

/// The programs a profile needs that are missing from `dir`.
pub fn missing_programs(dir: &Path, profile: Profile) -> Vec<String> {
    start_order(profile)
        .filter(|p| !dir.join(p.program).is_file())
        .map(|p| p.program.to_string())
        .collect()
}

/// A started plugin.
pub struct Plugin {
    pub name: &'static str,
    /// Its manifest entry.
    pub spec: &'static manifest::Plugin,
    pub pid: i32,
    pub routes: Vec<String>,
    /// `Some(status)` once it has exited and been reaped.
    pub exited: watch::Receiver<Option<ExitStatus>>,
    // Kept open: a plugin never writes after its ready line, but must not get EPIPE if it did.
    _stdout: BufReader<ChildStdout>,
}

/// What every plugin of one runtime shares.
pub struct Launch<'a> {
    pub layout: &'a StateLayout,
    pub programs: &'a Path,
    pub profile: Profile,
    pub mode: Mode,
    pub monitor_interval: f64,
    /// The model of an agent created without one.
    pub default_model: &'a link_protocol::model::Model,
    /// As root where the machine allows: the cgroups handed to the sandbox plugin, in which
    /// it bounds each agent's commands together (`link_confine::cgroup`).
    pub cgroups: Option<&'a link_confine::cgroup::RuntimeCgroups>,
    /// The first uid of this runtime's range of identities (`identity::base_for`).
    pub uid_base: u32,
    /// As root, confined: the plugins' own user namespaces, made ahead.
    pub namespaces: Option<&'a crate::own_namespaces::OwnNamespaces>,
}

impl Plugin {
    /// Waits for its ready line, which names the routes it serves.
    pub async fn ready(&mut self, launch: &Launch<'_>) -> Result<()> {
        let ready = launch
            .wait_ready(self.name, &mut self._stdout, self.exited.clone())
            .await?;
        self.routes = ready.routes;
        Ok(())
    }
}

impl Launch<'_> {
    /// The plugin `spec` from its `spawned` child (of [`Launch::command`]), not waited for
    /// (its routes are known once it is [`ready`](Plugin::ready)); `died` hears of its exit.
    pub fn adopt(
        &self,
        spec: &'static manifest::Plugin,
        spawned: std::io::Result<tokio::process::Child>,
        died: tokio::sync::mpsc::UnboundedSender<(&'static str, ExitStatus)>,
    ) -> Result<Plugin> {
        let name = spec.program;
        let mut child =
            spawned.with_context(|| format!("starting {}", self.programs.join(name).display()))?;
        let pid = child.id().context("plugin exited at once")? as i32;
        let stdout = BufReader::new(child.stdout.take().context("plugin stdout")?);
        let (tx, exited) = watch::channel(None);
        tokio::spawn(async move {
            if let Ok(status) = child.wait().await {
                tx.send_replace(Some(status));
                let _ = died.send((name, status));
            }
        });
        Ok(Plugin {
            name,
            spec,
            pid,
            routes: Vec::new(),
            exited,
            _stdout: stdout,
        })
    }

    async fn wait_ready(
        &self,
        name: &str,
        stdout: &mut BufReader<ChildStdout>,
        mut exited: watch::Receiver<Option<ExitStatus>>,
    ) -> Result<Ready> {
        let log = self.layout.log_file(name);
        let mut line = String::new();
        let read = tokio::select! {
            r = tokio::time::timeout(READY_TIMEOUT, stdout.read_line(&mut line)) => Some(r),
            _ = exited.wait_for(Option::is_some) => None,
        };
        match read {
            None | Some(Ok(Ok(0))) => {
                let status = exited.wait_for(Option::is_some).await.ok().and_then(|s| *s);
                bail!(
                    "{name} exited before it was ready ({}); see {}",
                    describe(status.as_ref()),
                    log.display()
                );
            }
            Some(Err(_)) => bail!(
                "{name} did not report ready within {READY_TIMEOUT:?}; see {}",
                log.display()
            ),
            Some(Ok(Err(e))) => bail!("reading {name}'s ready line: {e}"),
            Some(Ok(Ok(_))) => {}
        }
        plugin::parse_ready(&line).with_context(|| {
            format!(
                "{name} printed {line:?} instead of its ready line; see {}",
                log.display()
            )
        })
    }

    /// The command that starts `plugin`: its directories made, its log opened, its
    /// environment and (confined) its Landlock ruleset, capabilities and seccomp filter
    /// prepared; and the thread to fork it on.
    pub fn command(&self, plugin: &manifest::Plugin) -> Result<(Command, Forker)> {
        let (layout, name) = (self.layout, plugin.program);
        let contract = plugin::Contract {
            plugin,
            layout,
            programs: self.programs,
            profile: self.profile,
            mode: self.mode,
            monitor_interval: self.monitor_interval,
            default_model: self.default_model,
            test_hooks: crate::test_hooks_on(),
        };
        contract.create_dirs()?;
        // Opened at each start: never through a link planted in its place (`safe_root`).
        let log = link_protocol::safe_root::RootDir::open(layout.root())
            .and_then(|root| root.append(&layout.log_file(name), 0o600))
            .with_context(|| format!("opening {}", layout.log_file(name).display()))?;
        let mut cmd = std::process::Command::new(self.programs.join(name));
        contract.apply(&mut cmd);
        cmd.stderr(Stdio::from(log));
        let mut cmd = Command::from(cmd);
        cmd.kill_on_drop(true);
        // Confined or diagnostic, a plugin never outlives the host.
        crate::confine::die_with_host(&mut cmd);
        let forker = match self.mode {
            Mode::Confined => self.confine(&mut cmd, plugin)?,
            Mode::Diagnostic => Forker::Runtime,
        };
        Ok((cmd, forker))
    }

    fn confine(&self, cmd: &mut Command, plugin: &manifest::Plugin) -> Result<Forker> {
        // Areas of other plugins (the file store's agents): made without following a link
        // that plugin may have put in their place (`safe_root`).
        let root = link_protocol::safe_root::RootDir::open(self.layout.root())?;
        for dir in extra_writable(self.layout, plugin) {
            root.dir_all(&dir)
                .with_context(|| format!("creating {}", dir.display()))?;
        }
        if plugin.confinement == Confinement::Mounting {
            // Its agents' identities are this runtime's own range.
            cmd.env(plugin::ENV_SANDBOX_UID_BASE, self.uid_base.to_string());
            if let Some(cgroups) = self.cgroups {
                hand_cgroups(cmd, cgroups);
            }
        }
        crate::confine::confine_command(cmd, plugin, self.allowance(plugin), self.namespaces)
            .with_context(|| format!("confining {}", plugin.program))
    }

    /// What `plugin` may touch when confined, besides system paths.
    fn allowance(&self, plugin: &manifest::Plugin) -> crate::confine::Allowance<'_> {
        let layout = self.layout;
        let mut writable = plugin::own_dirs(layout, plugin);
        writable.extend(extra_writable(layout, plugin));
        crate::confine::Allowance {
            programs: self.programs,
            readable: extra_readable(layout, plugin),
            seen: plugin.sees.iter().map(|&a| layout.area(a)).collect(),
            writable,
            sockets: vec![layout.plugin_run_dir(plugin.program)],
            system: plugin.system,
            network: link_confine::host::Network::of(plugin, plugin::model_forwards()),
            uid_base: self.uid_base,
        }
    }

    /// Refuses a confined start in which a plugin's Landlock rules would reach `dir`, the
    /// host's control directory (a state root under a system path plugins read, or under the
    /// programs directory), so no plugin can read the control key. The sandbox plugin handles
    /// no filesystem right: its view covers the state root and shows only what it serves, and
    /// the host refuses its descendants the key's use besides (`crate::caller`).
    pub fn refuse_reachable(&self, dir: &Path) -> Result<()> {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
        let confined = start_order(self.profile).filter(|p| p.confinement == Confinement::Landlock);
        for plugin in confined {
            if let Some(rule) = self.allowance(plugin).rules().reaching(&dir) {
                bail!(
                    "{} may read beneath {}, where the host's control directory {} lies: \
                     it could read the control key; choose a state root outside {} and outside \
                     the programs directory; nothing was started",
                    plugin.program,
                    rule.display(),
                    dir.display(),
                    rule.display()
                );
            }
        }
        Ok(())
    }
}

/// The sandbox plugin inherits the runtime's cgroup directories, named in its environment
/// (its view has no `/sys`); in cgroup v2 it is moved into the runtime's leaf for it first,
/// with the host's rights, before it enters its view, and the runtime directory sealed
/// (`RuntimeCgroups::plugin_join`).
fn hand_cgroups(cmd: &mut Command, cgroups: &link_confine::cgroup::RuntimeCgroups) {
    let (value, fds) = cgroups.handed();
    cmd.env(link_confine::cgroup::ENV_FDS, value);
    // SAFETY: fcntl on descriptors the host keeps open for the runtime; nothing is allocated.
    unsafe { cmd.pre_exec(move || fds.iter().try_for_each(|fd| link_os::reaper::inherit(*fd))) };
    if let Some((join, seal)) = cgroups.plugin_join() {
        // SAFETY: a write(2) and a fchmod(2) on descriptors the host keeps open for the
        // runtime; nothing is allocated.
        let join = move || unsafe {
            if libc::write(join, b"0".as_ptr().cast(), 1) != 1 || libc::fchmod(seal, 0o444) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        };
        unsafe { cmd.pre_exec(join) };
    }
}

/// "exit status 3", "killed by signal 9", or "still running".
pub fn describe(status: Option<&ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => "still running".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (_, Some(sig)) => format!("killed by signal {sig}"),
            _ => format!("{s}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static LOCAL: std::sync::LazyLock<link_protocol::model::Model> =
        std::sync::LazyLock::new(link_protocol::model::Model::local);

    fn launch<'a>(layout: &'a StateLayout, programs: &'a Path, profile: Profile) -> Launch<'a> {
        Launch {
            layout,
            programs,
            profile,
            mode: Mode::Confined,
            monitor_interval: 1.0,
            default_model: &LOCAL,
            cgroups: None,
            uid_base: link_confine::identity::DEFAULT_BASE,
            namespaces: None,
        }
    }

    /// No confined plugin of either profile reaches the control directory of a state root
    /// apart from the programs and system paths; one under `/usr` where the secret plugin
    /// runs (full Link: it reads the system's programs), or under the programs, is refused,
    /// naming the rule. Mini's plugins read no `/usr`.
    #[test]
    fn no_plugin_rule_reaches_the_control_directory() {
        let programs = Path::new("/opt/lnk-programs");
        for profile in [Profile::Mini, Profile::Link] {
            let layout = StateLayout::new("/srv/lnk-state");
            let check = launch(&layout, programs, profile).refuse_reachable(&layout.control_dir());
            check.unwrap_or_else(|e| panic!("{profile:?}: {e:#}"));
        }
        let under_usr = StateLayout::new("/usr/lnk-state");
        let refused = launch(&under_usr, programs, Profile::Link)
            .refuse_reachable(&under_usr.control_dir())
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("link-plugin-secret may read beneath /usr"),
            "{refused}"
        );
        launch(&under_usr, programs, Profile::Mini)
            .refuse_reachable(&under_usr.control_dir())
            .unwrap_or_else(|e| panic!("Mini reads no /usr: {e:#}"));
        let under_programs = StateLayout::new("/opt/lnk-programs/state");
        let refused = launch(&under_programs, programs, Profile::Link)
            .refuse_reachable(&under_programs.control_dir())
            .unwrap_err()
            .to_string();
        assert!(refused.contains("beneath /opt/lnk-programs"), "{refused}");
    }
}
