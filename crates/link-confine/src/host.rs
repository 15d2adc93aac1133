//! Confinement the host applies to the plugins it starts.
//!
//! The ruleset is prepared in the parent ([`prepare_plugin_ruleset`]), where allocating and
//! failing with a clear error are fine; the child only makes two system calls between fork and
//! exec ([`PluginRuleset::restrict_child`]).
//!
//! The sandbox plugin cannot take filesystem rules: Landlock forbids `mount(2)` (and
//! `pivot_root(2)`) to a domain that handles any filesystem right, and bubblewrap needs them to
//! build each sandbox. It runs in a domain without them ([`sandbox_plugin_rules`]: ptrace,
//! signal and TCP bounds only); the commands it runs are confined by bubblewrap plus the full
//! Landlock rules applied inside.
//!
//! Every plugin but the model when it forwards is off the network ([`Network`]).
//!
//! Note for plugins under this ruleset: Landlock also denies ptrace-class access (for example
//! some `/proc/<pid>` files) to processes outside the plugin's own domain.

use crate::rules::Rules;
use crate::SandboxError;
use landlock::{CompatLevel, RulesetCreated, RulesetStatus};
use link_protocol::manifest::{Capability, Confinement, NetworkRule, Plugin, System};
use rustix::thread::CapabilitySet;
use std::io;
use std::path::{Path, PathBuf};

/// The system's programs and libraries, read and executed by a plugin that runs system
/// programs ([`System::Programs`]) and by no other. Not `/etc`: only [`SYSTEM_FILES`] of it.
const SYSTEM_PROGRAMS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];
/// The files of `/etc` every plugin may read, never the directory, so no plugin reads
/// `/etc/shadow`, `/etc/gshadow`, a key under `/etc/ssl/private` or any other file there,
/// whatever its uid: the dynamic loader's two, the only ones a full Link run reads under
/// strace. A rule on a file holds its inode: a file replaced by a rename (as `useradd` replaces
/// `/etc/passwd`) would be refused until the next start, one more reason to name few.
pub const SYSTEM_FILES: &[&str] = &["/etc/ld.so.cache", "/etc/ld.so.preload"];
/// What a name lookup reads besides (`getaddrinfo` under strace): granted only to a plugin on
/// the network.
pub const NAME_LOOKUP_FILES: &[&str] = &[
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/gai.conf",
];
/// Read-only, no execute: every process of the machine, for a plugin that samples or checks
/// them ([`System::Processes`]). No plugin reads `/sys` or the random devices (`getrandom(2)`).
const PROCESSES: &str = "/proc";

/// Whether a plugin reaches the network. [`Network::of`] is the one place that decides, from
/// the plugin's manifest entry ([`Plugin::network`]); the host's Landlock rules
/// ([`plugin_rules`]) and seccomp filter ([`Shedding::for_plugin`]) both follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Network {
    /// No TCP bind or connect (Landlock) and no socket but a Unix one (seccomp,
    /// [`crate::seccomp::offline_filter`]): no TCP, UDP, raw or packet socket at all.
    Off,
    /// TCP, UDP (name lookups) and the files a name lookup reads ([`NAME_LOOKUP_FILES`]),
    /// under the commands' filter.
    On,
}

impl Network {
    /// Every plugin is off the network but one of [`NetworkRule::WhenForwarding`] (the
    /// model) when the model forwards (`forwarding`: `LNK_MODEL_REMOTE_URL` is set for it,
    /// [`link_protocol::plugin::model_forwards`]). The sandbox plugin, off too, is also kept
    /// in a network namespace without interfaces ([`crate::view`]).
    pub fn of(plugin: &Plugin, forwarding: bool) -> Network {
        match plugin.network {
            NetworkRule::WhenForwarding if forwarding => Network::On,
            NetworkRule::WhenForwarding | NetworkRule::Off => Network::Off,
        }
    }
}

/// The rules of one plugin: read and execute `programs` and the objects the host is linked
/// with ([`linked_objects`]), read the [`SYSTEM_FILES`] of `/etc` (and, on the network, the
/// [`NAME_LOOKUP_FILES`]) and the parts of the system its manifest entry names (`system`),
/// read-write the given directories, bind sockets in `sockets`; TCP only on the network.
pub fn plugin_rules(
    programs: PathBuf,
    read_write: &[PathBuf],
    sockets: &[PathBuf],
    system: &[System],
    network: Network,
) -> Rules {
    let mut read_exec = vec![programs];
    read_exec.extend(linked_objects().iter().cloned());
    let mut read_only: Vec<PathBuf> = SYSTEM_FILES.iter().map(PathBuf::from).collect();
    for part in system {
        match part {
            System::Processes => read_only.push(PathBuf::from(PROCESSES)),
            System::Programs => read_exec.extend(SYSTEM_PROGRAMS.iter().map(PathBuf::from)),
        }
    }
    if network == Network::On {
        for file in NAME_LOOKUP_FILES.iter().map(PathBuf::from) {
            read_only.extend(replaced_beside(&file));
            read_only.push(file);
        }
    }
    Rules {
        read_exec,
        read_only,
        list_only: vec![],
        read_write: read_write.to_vec(),
        rw_files: ["/dev/null", "/dev/zero", "/dev/full"]
            .map(PathBuf::from)
            .to_vec(),
        make_sock: sockets.to_vec(),
        deny_tcp: network == Network::Off,
        scoped: true,
        leave_filesystem: false,
    }
}

/// The files the host's loader mapped executable: itself and the libraries the host is linked
/// with (on glibc: `ld-linux`, `libc`, `libgcc_s`), from `/proc/self/maps`, read once. Every
/// plugin is built as the host is (one workspace, one toolchain), so these are the only
/// system files its loader opens besides [`SYSTEM_FILES`]; a plugin linked with another
/// library fails to start, its loader naming it. Empty for a static host, whose plugins need
/// none.
pub fn linked_objects() -> &'static [PathBuf] {
    use procfs::process::{MMPermissions, MMapPath, Process};
    static OBJECTS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    OBJECTS.get_or_init(|| {
        let exe = std::env::current_exe().ok();
        let maps = Process::myself().and_then(|p| p.maps());
        let mut objects: Vec<PathBuf> = maps
            .into_iter()
            .flatten()
            .filter(|m| m.perms.contains(MMPermissions::EXECUTE))
            .filter_map(|m| match m.pathname {
                MMapPath::Path(path) if Some(&path) != exe.as_ref() => Some(path),
                _ => None,
            })
            .collect();
        objects.sort();
        objects.dedup();
        objects
    })
}

/// The sandbox plugin's rules: a Landlock domain that handles no filesystem right, so its
/// bwrap may still mount, but that bounds it like every other plugin where it can. It cannot
/// ptrace (read `/proc/PID/environ` or memory of) or signal any process outside its domain,
/// the host and its siblings included, nor make a TCP connection (every sandbox has a network
/// namespace of its own anyway). What it and its commands start inherits the domain.
pub fn sandbox_plugin_rules() -> Rules {
    Rules {
        deny_tcp: true,
        scoped: true,
        leave_filesystem: true,
        ..Rules::default()
    }
}

/// The directory under `/run` of the file a symlink in `/etc` names (`/etc/resolv.conf` to
/// systemd-resolved's `/run/systemd/resolve/stub-resolv.conf`, resolvconf's or
/// NetworkManager's): a rule on a file holds its inode, and such a file is replaced by a
/// rename, so its directory is granted for it to stay readable. `None` for a file that is no
/// symlink, or names one anywhere else (a home, say), whose directory is not granted.
fn replaced_beside(file: &Path) -> Option<PathBuf> {
    let link = std::fs::symlink_metadata(file).ok()?;
    if !link.file_type().is_symlink() {
        return None;
    }
    let target = std::fs::canonicalize(file).ok()?;
    let dir = target.parent()?;
    (dir.starts_with("/run") && dir != Path::new("/run")).then(|| dir.to_path_buf())
}

/// A prepared ruleset, applied in the child by [`PluginRuleset::restrict_child`].
#[derive(Debug)]
pub struct PluginRuleset {
    ruleset: Option<RulesetCreated>,
}

/// Prepares the ruleset of [`plugin_rules`] in the parent. Fails when the kernel cannot
/// enforce every right of the pinned ABI (run `link-plugin-sandbox probe` for the cause), or a
/// read-write or socket directory does not exist.
pub fn prepare_plugin_ruleset(
    programs: PathBuf,
    read_write: &[PathBuf],
    sockets: &[PathBuf],
    system: &[System],
    network: Network,
) -> Result<PluginRuleset, SandboxError> {
    prepare(&plugin_rules(
        programs, read_write, sockets, system, network,
    ))
}

/// Prepares any [`Rules`] for [`PluginRuleset::restrict_child`].
pub fn prepare(rules: &Rules) -> Result<PluginRuleset, SandboxError> {
    let ruleset = rules
        .create(CompatLevel::HardRequirement)
        .map_err(|e| match e {
            SandboxError::Landlock(m) => SandboxError::Unavailable(format!(
                "Landlock cannot enforce the pinned ABI {} rights: {m}; run \
                 `link-plugin-sandbox probe` for the cause",
                crate::rules::PINNED_ABI_NUMBER
            )),
            other => other,
        })?;
    Ok(PluginRuleset {
        ruleset: Some(ruleset),
    })
}

impl PluginRuleset {
    /// Sets `no_new_privs` and restricts the calling process. Meant for
    /// `CommandExt::pre_exec`: it allocates nothing on success and reports failure as a
    /// plain errno (`EPERM` when the ruleset is not fully enforced, `EINVAL` when called
    /// twice), which makes the spawn fail instead of running the plugin unconfined.
    ///
    /// ```no_run
    /// # use std::os::unix::process::CommandExt;
    /// # fn f(programs: std::path::PathBuf, data: std::path::PathBuf) -> anyhow::Result<()> {
    /// use link_confine::host::{prepare_plugin_ruleset, Network};
    /// let mut ruleset = prepare_plugin_ruleset(programs, &[data], &[], &[], Network::Off)?;
    /// let mut cmd = std::process::Command::new("/path/to/plugin");
    /// unsafe { cmd.pre_exec(move || ruleset.restrict_child()) };
    /// # Ok(()) }
    /// ```
    pub fn restrict_child(&mut self) -> io::Result<()> {
        let ruleset = self
            .ruleset
            .take()
            .ok_or_else(|| io::Error::from_raw_os_error(rustix::io::Errno::INVAL.raw_os_error()))?;
        rustix::thread::set_no_new_privs(true)?;
        let eperm = || io::Error::from_raw_os_error(rustix::io::Errno::PERM.raw_os_error());
        let status = ruleset.restrict_self().map_err(|_| eperm())?;
        if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
            return Err(eperm());
        }
        Ok(())
    }
}

/// The capabilities a plugin keeps when Link runs as root ([`Plugin::capabilities`], where
/// each says why); every other one is dropped from all its sets, the bounding set included,
/// before it starts. The sandbox plugin's are over its own user namespace only, whose root is
/// an unprivileged uid on the host ([`crate::plugin_ns`]): none applies to a file or process of
/// the machine.
pub fn kept_capabilities(plugin: &Plugin) -> CapabilitySet {
    plugin
        .capabilities
        .iter()
        .fold(CapabilitySet::empty(), |set, cap| {
            set | match cap {
                Capability::Chown => CapabilitySet::CHOWN,
                Capability::DacOverride => CapabilitySet::DAC_OVERRIDE,
                Capability::Fowner => CapabilitySet::FOWNER,
                Capability::Setgid => CapabilitySet::SETGID,
                Capability::Setuid => CapabilitySet::SETUID,
                Capability::Setfcap => CapabilitySet::SETFCAP,
            }
        })
}

/// Drops every capability but `keep` from the bounding set (which needs `SETPCAP`): what
/// the host does for a plugin and the sandbox's helper (keeping nothing) for a command.
pub fn keep_only_in_bounding_set(keep: CapabilitySet) -> io::Result<()> {
    for cap in 0..64u32 {
        if keep.bits() & (1 << cap) != 0 {
            continue;
        }
        // SAFETY: PR_CAPBSET_DROP takes a capability number; past the last one the kernel
        // answers EINVAL, which ends the loop.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) && cap > 0 {
                break;
            }
            return Err(e);
        }
    }
    Ok(())
}

/// What a plugin sheds between fork and exec, prepared before the fork so nothing is
/// allocated after it: capabilities (as root), and the seccomp filter ([`PluginFilter`]).
#[derive(Debug)]
pub struct Shedding {
    keep: CapabilitySet,
    root: bool,
    filter: PluginFilter,
}

/// Where a plugin's seccomp filter comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginFilter {
    /// Loaded between fork and exec: the sandbox plugin's own
    /// ([`crate::seccomp::sandbox_plugin_filter`]), or the commands' for a plugin on the
    /// network ([`crate::seccomp::filter`], which allows `AF_INET` and `AF_INET6` sockets).
    Load(&'static seccompiler::BpfProgram),
    /// The offline plugins' filter ([`crate::seccomp::offline_filter`]), inherited from the
    /// thread that forks the plugin, which runs under it ([`filter_this_thread`]): a filter is
    /// shared by the processes that inherit it, where each load costs the kernel a copy, a
    /// check and a JIT of every program. Checked between fork and exec.
    Inherited,
}

/// Puts the calling thread (only it: no `TSYNC`) under the offline plugins' seccomp filter,
/// with `no_new_privs`, so every process it forks starts under both: the host's spawner
/// thread, which forks the plugins of [`PluginFilter::Inherited`].
pub fn filter_this_thread() -> Result<(), SandboxError> {
    let filter = crate::seccomp::offline_filter();
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| SandboxError::Unavailable(format!("no_new_privs: {e}")))?;
    load(&filter.bpf).map_err(|e| SandboxError::Unavailable(format!("seccomp: {e}")))
}

/// Whether this thread runs under the offline plugins' filter, by calls only that filter
/// refuses in this way (a netlink and a UDP socket, `EAFNOSUPPORT`): some filter alone proves
/// nothing where the host itself runs under one (a container's, systemd's
/// `SystemCallFilter=`). No allocation.
fn under_the_offline_filter() -> bool {
    use rustix::net::{socket_with, AddressFamily, SocketFlags, SocketType};
    let refused = |family, kind| {
        let socket = socket_with(family, kind, SocketFlags::CLOEXEC, None);
        matches!(socket, Err(rustix::io::Errno::AFNOSUPPORT))
    };
    refused(AddressFamily::NETLINK, SocketType::RAW)
        && refused(AddressFamily::INET, SocketType::DGRAM)
}

fn load(program: &seccompiler::BpfProgram) -> io::Result<()> {
    seccompiler::apply_filter(program).map_err(|e| match e {
        seccompiler::Error::Seccomp(io) => io,
        other => io::Error::other(other.to_string()),
    })
}

impl Shedding {
    /// What `plugin` sheds, on the `network` or off it ([`Network::of`]).
    pub fn for_plugin(plugin: &Plugin, network: Network) -> Result<Shedding, SandboxError> {
        let filter = if plugin.confinement == Confinement::Mounting {
            PluginFilter::Load(&crate::seccomp::sandbox_plugin_filter().bpf)
        } else if network == Network::On {
            PluginFilter::Load(&crate::seccomp::filter().bpf)
        } else {
            PluginFilter::Inherited
        };
        Ok(Shedding {
            keep: kept_capabilities(plugin),
            root: rustix::process::geteuid().is_root(),
            filter,
        })
    }

    /// The offline plugins' filter loaded between fork and exec rather than inherited: for a
    /// plugin whose view (`crate::view`) needs the namespace and mount calls that filter
    /// refuses, so it cannot be forked under it.
    pub fn loading_its_filter(mut self) -> Shedding {
        if self.filter == PluginFilter::Inherited {
            self.filter = PluginFilter::Load(&crate::seccomp::offline_filter().bpf);
        }
        self
    }

    /// Where this plugin's filter comes from: the host forks a plugin of
    /// [`PluginFilter::Inherited`] on a thread under [`filter_this_thread`].
    pub fn filter(&self) -> PluginFilter {
        self.filter
    }

    /// Keeps only [`kept_capabilities`]: the bounding set first (which needs `SETPCAP`), then
    /// the permitted, effective and inheritable sets. An ordinary user has none to shed.
    pub fn drop_capabilities(&self) -> io::Result<()> {
        if !self.root {
            return Ok(());
        }
        keep_only_in_bounding_set(self.keep)?;
        rustix::thread::set_capabilities(
            None,
            rustix::thread::CapabilitySets {
                effective: self.keep,
                permitted: self.keep,
                inheritable: CapabilitySet::empty(),
            },
        )?;
        Ok(())
    }

    /// Loads the seccomp filter (after `no_new_privs`, which the kernel requires), or checks
    /// that the process already runs under the offline plugins' filter (inherited): `EPERM`
    /// fails the spawn of a plugin forked where that filter is not.
    pub fn apply_filter(&self) -> io::Result<()> {
        match self.filter {
            PluginFilter::Load(program) => load(program),
            PluginFilter::Inherited if under_the_offline_filter() => Ok(()),
            PluginFilter::Inherited => Err(io::Error::from_raw_os_error(libc::EPERM)),
        }
    }
}
