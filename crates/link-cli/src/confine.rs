//! How the host confines what it starts: every process dies with the host, and in confined
//! mode each plugin's capabilities, Landlock domain, seccomp filter and (the sandbox plugin's)
//! view are set between fork and exec, from its manifest entry.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Refuses confined mode where the kernel cannot confine the plugins.
pub fn check_confinement() -> Result<()> {
    use link_confine::host::{prepare_plugin_ruleset, Network};
    prepare_plugin_ruleset(PathBuf::from("/usr"), &[], &[], &[], Network::Off)
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
    unsafe { cmd.pre_exec(move || link_os::reaper::die_with_parent(host)) };
}

/// What a confined plugin may touch besides system paths.
pub struct Allowance<'a> {
    pub programs: &'a Path,
    pub readable: Vec<PathBuf>,
    /// In its view as root, but not readable (`manifest::Plugin::sees`).
    pub seen: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    pub sockets: Vec<PathBuf>,
    /// The parts of the system it reads (`manifest::Plugin::system`).
    pub system: &'static [link_protocol::manifest::System],
    /// Whether it reaches the network (`host::Network::of`, the one place that decides).
    pub network: link_confine::host::Network,
    /// The first uid of the runtime's range (`link_confine::identity::base_for`), which the
    /// sandbox plugin's namespace maps as root.
    pub uid_base: u32,
}

impl Allowance<'_> {
    /// The Landlock rules of a plugin other than the sandbox plugin: the one place they are
    /// made, for confining it and for checking what it could reach.
    pub fn rules(&self) -> link_confine::Rules {
        use link_confine::host;
        let mut rules = host::plugin_rules(
            self.programs.to_owned(),
            &self.writable,
            &self.sockets,
            self.system,
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
/// can be written, with a network namespace without interfaces (`link_confine::view`). As
/// root every other plugin first enters a view of its own too, as a uid of its own ([`view`]),
/// and so loads its filter itself rather than inherit it.
/// As root its own namespace ([`own_namespace`](crate::own_namespaces::own_namespace)) is
/// taken from `namespaces` where it was made ahead, or its view makes it.
pub fn confine_command(
    cmd: &mut tokio::process::Command,
    plugin: &link_protocol::manifest::Plugin,
    allow: Allowance<'_>,
    namespaces: Option<&crate::own_namespaces::OwnNamespaces>,
) -> Result<crate::spawner::Forker> {
    use link_confine::host;
    let sandbox = plugin.confinement == link_protocol::manifest::Confinement::Mounting;
    // As root every Landlock-confined plugin runs as an identity of its own (issue 42,
    // "plugins are not root"), in a view of its own whose namespace calls the offline filter
    // refuses: it loads that filter itself, after them.
    let own_identity = !sandbox && rustix::process::geteuid().is_root();
    let mut shedding = host::Shedding::for_plugin(plugin, allow.network)?;
    if own_identity {
        shedding = shedding.loading_its_filter();
    }
    let shedding = std::sync::Arc::new(shedding);
    let forker = match shedding.filter() {
        host::PluginFilter::Inherited => crate::spawner::Forker::Filtered,
        host::PluginFilter::Load(_) if own_identity => crate::spawner::Forker::Unfiltered,
        host::PluginFilter::Load(_) => crate::spawner::Forker::Runtime,
    };
    // First: entering a view needs the capabilities the next step sheds.
    if let Some(view) = view(cmd, plugin, &allow, own_identity, namespaces)? {
        // SAFETY: unshare, mount, mount_setattr, setns, id calls and writes of prepared
        // strings; nothing is allocated.
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

/// The view `plugin` enters, if any: the sandbox plugin's, in which only its writable
/// directories and socket directory can be written, or (`own_identity`, as root) a
/// Landlock-confined plugin's, in which it is a uid of its own and reaches, idmapped, its
/// directories, what it reads or only sees, and `run/` (the router's and the model's sockets
/// and the pids file: Landlock still decides what it may do there).
fn view(
    cmd: &tokio::process::Command,
    plugin: &link_protocol::manifest::Plugin,
    allow: &Allowance<'_>,
    own_identity: bool,
    namespaces: Option<&crate::own_namespaces::OwnNamespaces>,
) -> Result<Option<link_confine::view::PluginView>> {
    use link_confine::view::PluginView;
    use link_protocol::manifest::Confinement;
    let sandbox = plugin.confinement == Confinement::Mounting;
    if !sandbox && !own_identity {
        return Ok(None);
    }
    let own = crate::own_namespaces::own_namespace(plugin, allow.uid_base)?;
    let ahead = namespaces.and_then(|made| made.take(&own));
    let mut writable = allow.writable.clone();
    writable.extend(allow.sockets.iter().cloned());
    let program = Path::new(cmd.as_std().get_program());
    if sandbox {
        let view = PluginView::prepare(&writable, program, &own, ahead)
            .context("preparing the sandbox plugin's read-only view")?;
        return Ok(Some(view));
    }
    let mut readable = allow.readable.clone();
    readable.extend(
        allow
            .sockets
            .iter()
            .filter_map(|s| s.parent())
            .map(Path::to_owned),
    );
    readable.extend(allow.seen.iter().cloned());
    let view = PluginView::prepare_plugin(&writable, &readable, program, &own, ahead)
        .with_context(|| format!("preparing {}'s view", plugin.program))?;
    Ok(Some(view))
}
