//! Bounds over all of an agent's processes together (issue 42: one command held 9.2 GiB as
//! three processes, each within its own `RLIMIT_AS`): memory, processes and CPU time, in a
//! cgroup per agent.
//!
//! As root, where the memory, pids and cpuacct controllers are cgroup v1 hierarchies, the host
//! makes one directory for its runtime in each, beneath its own cgroup there (`link-<digest of
//! the state root>`), and in it a pool of [`POOL`] cgroups, `cmd-<i>` ([`RuntimeCgroups`]):
//! root's, but for the files the sandbox plugin writes (`cgroup.procs` and the limits), which
//! are its uid's. It hands the plugin a descriptor of each runtime directory ([`ENV_FDS`]): its
//! view has no `/sys`. For each command the plugin takes a free cgroup of the pool in each
//! hierarchy, sets the command's memory and process limits there ([`Cgroups::take`]) and
//! bwrap joins them between fork and exec ([`AgentCgroup::join`]), so every process of the
//! command is counted together; an agent's commands run one at a time, so that is every
//! process of the agent. The plugin makes no cgroup: a compromised one cannot make the machine
//! run out of them (memory cgroups are bounded machine-wide). Past its memory the kernel's OOM
//! killer ends a process of the command (said as [`LimitHit::Memory`]); a fork past the process
//! limit fails with `EAGAIN`; past its CPU time (all its processes' together, `cpuacct.usage`)
//! the sandbox stops it as it stops one past the workspace quota ([`AgentCgroup::cpu_passed`],
//! [`LimitHit::CpuTime`]). More commands at once than the pool holds wait for one to end.
//!
//! Where memory and pids are cgroup v2 controllers ([`Hierarchy::V2`]), the runtime's directory
//! is one, beneath the host's own cgroup and never above it (the commands stay within the
//! bounds of the unit or container the host runs in), where that is the root, or holds the
//! host alone and it may write it (as root, or as an ordinary user in a unit with
//! `Delegate=yes`): the host then moves into the directory's [`HOST_LEAF`], so its cgroup may
//! enable controllers for children. The plugin gets a detached copy of the directory either
//! way (an ordinary user's made by a child in namespaces of its own:
//! `plugin_ns::detached_by_child`). v2 moves a process only for a writer of the
//! `cgroup.procs` of the source's and destination's common ancestor, so the sandbox plugin
//! runs in the `sandbox` leaf of the runtime's [`AGENTS`] part (the host moves it there before
//! it runs), whose `cgroup.procs` is the plugin's: it moves processes only within it (the
//! runtime directory's, common to it and the host's leaf, is sealed: [`RuntimeCgroups`]). The
//! pool, the limits (`memory.max`, no swap, `pids.max`) and the CPU time (`cpu.stat`) are as
//! in v1.
//!
//! Where it cannot be done, [`support`] says why, and the probe and `link status` list memory
//! and processes per agent as not enforced with that reason: an ordinary user on v1 (its
//! hierarchies are root's), a v2 cgroup not delegated to it or shared with other processes.
//!
//! A killed runtime leaves its directories; the next start on the same state root from the
//! same cgroup removes them ([`RuntimeCgroups::create`]), moving out what is still inside (in
//! v2 killing it: [`remove_tree`]); in a unit of its own (v2), they go with the unit.
//! Each runtime's are named after its host (`link-<digest>-<pid>-<start time>`), so a start
//! removes only those of a host that is gone.

use link_protocol::routes::sandbox::LimitHit;
use rustix::fd::{AsRawFd, OwnedFd, RawFd};
use std::io;
use std::path::{Path, PathBuf};

/// The sandbox plugin's variable naming its runtime's cgroup descriptors:
/// `memory:FD,pids:FD,cpuacct:FD` (v1) or `unified:FD` (v2).
pub const ENV_FDS: &str = "LNK_CGROUP_FDS";

/// In the environment of the probe a host starts: `held` where the host made the agents'
/// cgroups, else why it did not (in v2 the probe, a child of a host moved into its leaf,
/// could make none itself).
pub const ENV_AGENT_CGROUPS: &str = "LNK_AGENT_CGROUPS";

/// For the probe: what the host that started it said ([`ENV_AGENT_CGROUPS`]), else whether
/// this process could make the agents' cgroups ([`support`]).
pub fn held_or_support() -> Result<(), String> {
    match std::env::var(ENV_AGENT_CGROUPS) {
        Ok(said) if said == "held" => Ok(()),
        Ok(why) => Err(why),
        Err(_) => support().map(drop),
    }
}

/// A hierarchy Link bounds an agent in: a cgroup v1 controller's, or the v2 one, which holds
/// them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Pids,
    Cpuacct,
    Unified,
}

impl Controller {
    /// The v1 controllers Link needs, each a hierarchy of its own.
    pub const V1: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpuacct];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpuacct => "cpuacct",
            Controller::Unified => "unified",
        }
    }

    fn from_name(name: &str) -> Option<Controller> {
        let all = [Controller::Unified].into_iter().chain(Controller::V1);
        all.into_iter().find(|c| c.name() == name)
    }

    /// Whether this hierarchy counts memory (then also its OOM kills).
    fn memory(self) -> bool {
        matches!(self, Controller::Memory | Controller::Unified)
    }

    /// Whether this hierarchy counts CPU time.
    fn cpu(self) -> bool {
        matches!(self, Controller::Cpuacct | Controller::Unified)
    }

    /// Sets the kernel's limits of `limits` in the cgroup `dir` (CPU time is the sandbox's to
    /// hold: the kernel only counts it).
    fn set_limit(self, dir: &OwnedFd, limits: &crate::limits::Limits) -> io::Result<()> {
        let pids = || {
            write_at(dir, "pids.max", &limits.processes.to_string())
                .map_err(|e| io::Error::other(format!("writing pids.max: {e}")))
        };
        match self {
            Controller::Memory => set_memory(dir, limits.memory_bytes),
            Controller::Pids => pids(),
            Controller::Cpuacct => Ok(()),
            Controller::Unified => set_memory_v2(dir, limits.memory_bytes).and_then(|()| pids()),
        }
    }
}

/// Where the runtime's cgroups go: beneath this process's own cgroup in each v1 controller's
/// hierarchy, or beneath one cgroup of the v2 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    V1(Vec<(Controller, PathBuf)>),
    V2(PathBuf),
}

impl Hierarchy {
    /// Each hierarchy with the directory the runtime's goes beneath.
    pub fn parents(&self) -> Vec<(Controller, &Path)> {
        match self {
            Hierarchy::V1(dirs) => dirs.iter().map(|(c, d)| (*c, d.as_path())).collect(),
            Hierarchy::V2(dir) => vec![(Controller::Unified, dir.as_path())],
        }
    }
}

/// Where this machine lets Link bound an agent's processes together (a v1 hierarchy for each
/// controller, else the v2 one); or why not.
pub fn support() -> Result<Hierarchy, String> {
    let me = procfs::process::Process::myself().map_err(|e| format!("/proc/self: {e}"))?;
    let mounts = me
        .mountinfo()
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let own = me
        .cgroups()
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let v1 = |name: &str| {
        mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && m.super_options.contains_key(name))
    };
    if Controller::V1.iter().any(|c| v1(c.name()).is_some()) {
        return support_v1(v1, &own);
    }
    let Some(mount) = mounts.iter().find(|m| m.fs_type == "cgroup2") else {
        return Err("no cgroup hierarchy with the memory controller is mounted".into());
    };
    let path = own
        .0
        .iter()
        .find(|g| g.hierarchy == 0)
        .map(|g| g.pathname.clone())
        .ok_or_else(|| "/proc/self/cgroup names no cgroup v2 cgroup".to_string())?;
    support_v2(&in_mount(mount, &path, "v2")?)
}

/// This process's cgroup `path` as a directory beneath `mount` (which may show a subtree: a
/// container's).
fn in_mount(mount: &procfs::process::MountInfo, path: &str, name: &str) -> Result<PathBuf, String> {
    if mount.mount_options.contains_key("ro") {
        return Err(format!(
            "the {name} cgroup hierarchy {} is mounted read-only",
            mount.mount_point.display()
        ));
    }
    let relative = Path::new(path)
        .strip_prefix(&mount.root)
        .map_err(|_| format!("this process's {name} cgroup {path} is outside its mount"))?;
    Ok(mount.mount_point.join(relative))
}

fn support_v1<'m>(
    v1: impl Fn(&str) -> Option<&'m procfs::process::MountInfo>,
    own: &procfs::ProcessCGroups,
) -> Result<Hierarchy, String> {
    if !rustix::process::geteuid().is_root() {
        return Err(
            "Link bounds an agent's processes together only as root where the cgroup \
             hierarchies are v1 (they are root's); each process is bounded on its own"
                .into(),
        );
    }
    let mut dirs = Vec::new();
    for controller in Controller::V1 {
        let name = controller.name();
        let mount = v1(name).ok_or_else(|| {
            format!("the {name} controller is not a cgroup v1 hierarchy here, though others are")
        })?;
        let path = own
            .0
            .iter()
            .find(|g| g.controllers.iter().any(|c| c == name))
            .map(|g| g.pathname.clone())
            .ok_or_else(|| format!("/proc/self/cgroup names no {name} cgroup"))?;
        dirs.push((controller, in_mount(mount, &path, name)?));
    }
    Ok(Hierarchy::V1(dirs))
}

/// The controllers a v2 runtime directory enables for its cgroups (CPU time is counted in
/// every cgroup's `cpu.stat` without one).
const V2_CONTROLLERS: [&str; 2] = ["memory", "pids"];

/// This process's own cgroup `own`, where the runtime's goes, if this process may write it and
/// its children can have memory and pids: the root of the hierarchy (which may hold processes
/// and enable controllers), or a cgroup that holds this process alone, which then moves into
/// a leaf of its runtime's ([`HOST_LEAF`]) so that `own` holds none (v2's rule for enabling
/// controllers), as in a unit of its own with `Delegate=yes`. Never a cgroup above its own:
/// the agents' commands stay within the bounds of the unit or container the host runs in.
fn support_v2(own: &Path) -> Result<Hierarchy, String> {
    let has_all = |file: &Path| {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        missing_controllers(&text).is_empty()
    };
    let unit = "run `link up` in a unit of its own with Delegate=yes (e.g. `systemd-run --scope \
                -p Delegate=yes link up ...`, with --user as an ordinary user); each process is \
                bounded on its own";
    if !may_write(own) {
        return Err(format!(
            "this user may not write its cgroup {}: Link bounds an agent's processes together \
             in cgroup v2 only in a cgroup delegated to it: {unit}",
            own.display()
        ));
    }
    if !has_all(&own.join("cgroup.controllers")) {
        return Err(format!(
            "the cgroup v2 hierarchy gives the cgroup {} no memory and pids controllers (its \
             cgroup.controllers); each process is bounded on its own",
            own.display()
        ));
    }
    // The real root has no `cgroup.type` (a cgroup namespace's root does).
    if !own.join("cgroup.type").exists() {
        return Ok(Hierarchy::V2(own.to_owned()));
    }
    let me = std::process::id().to_string();
    let procs = std::fs::read_to_string(own.join("cgroup.procs")).unwrap_or_default();
    match procs.split_whitespace().all(|pid| pid == me) {
        true => Ok(Hierarchy::V2(own.to_owned())),
        false => Err(format!(
            "this process's cgroup {} holds other processes too, so it can enable no \
             controller for the agents' cgroups: {unit}",
            own.display()
        )),
    }
}

/// Which of [`V2_CONTROLLERS`] a list of controllers (`cgroup.controllers`,
/// `cgroup.subtree_control`) lacks.
fn missing_controllers(listed: &str) -> Vec<&'static str> {
    let has = |c: &str| listed.split_whitespace().any(|w| w == c);
    V2_CONTROLLERS.into_iter().filter(|c| !has(c)).collect()
}

/// Whether this process may make cgroups in `dir` and move processes there.
fn may_write(dir: &Path) -> bool {
    use rustix::fs::{access, Access};
    let files = ["cgroup.procs", "cgroup.subtree_control"];
    access(dir, Access::WRITE_OK | Access::EXEC_OK).is_ok()
        && files
            .iter()
            .all(|f| access(dir.join(f), Access::WRITE_OK).is_ok())
}

/// Why a runtime's cgroups could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot make the agents' cgroup {}: {error}", dir.display())]
pub struct CgroupError {
    pub dir: PathBuf,
    pub error: io::Error,
}

impl CgroupError {
    /// Whether this machine refuses what the cgroups need (nothing was made or moved): the
    /// agents are then bounded per process, said so, rather than the start refused.
    pub fn unavailable(&self) -> bool {
        self.error.kind() == io::ErrorKind::Unsupported
    }
}

/// Cgroups of a runtime's pool in each hierarchy: how many commands run at once at most.
pub const POOL: usize = 64;

/// The files of a pool cgroup the sandbox plugin writes: its commands' limits and moves.
/// `cgroup.procs` is given last: once it is the plugin's, the cgroup is ready for it.
const PLUGIN_WRITES: &[&str] = &[
    "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes",
    "memory.max",
    "memory.swap.max",
    "pids.max",
    "cgroup.procs",
];

/// How long the plugin waits for a cgroup of the pool the host is still making (it makes the
/// pool once the runtime is ready, off the start's path).
const POOL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The name of pool cgroup `i`.
fn pool_name(i: usize) -> String {
    format!("cmd-{i}")
}

/// One runtime's cgroups, made by the host: a directory in each hierarchy with its pool, and
/// for each a descriptor of a detached mount whose root it is, the one the plugin gets: from
/// it `..` leads to no other cgroup of the machine (their names, members and figures).
///
/// In v2 the runtime's directory holds the host's leaf ([`HOST_LEAF`], where the host's own
/// cgroup is not the root) and [`AGENTS`], the part handed to the plugin (its leaf and the
/// pool): the common ancestor of the host and anything the plugin may move is then the
/// runtime's directory, whose `cgroup.procs` the plugin may not write (root's, or made
/// read-only once the plugin is in its leaf), so the plugin cannot move the host or the other
/// plugins into a cgroup it bounds, nor reach the host's leaf.
#[derive(Debug)]
pub struct RuntimeCgroups {
    dirs: Vec<(Controller, PathBuf)>,
    handed: Vec<OwnedFd>,
    /// v2: the runtime's directory, removed whole (but for the host's leaf).
    top: Option<PathBuf>,
    /// v2: the `cgroup.procs` of the plugin's leaf, and the runtime directory's.
    plugin_join: Option<(OwnedFd, OwnedFd)>,
    /// v2: the host moved into the runtime's [`HOST_LEAF`] (its own cgroup is not the root).
    host_leaf: bool,
}

/// The v2 leaf of [`AGENTS`] the sandbox plugin runs in.
pub const PLUGIN_LEAF: &str = "sandbox";

/// The v2 leaf of a runtime directory its host runs in where its own cgroup is not the root
/// ([`support`]); it stays, empty once the host has exited, until the next start in that
/// cgroup or the unit's end removes it.
pub const HOST_LEAF: &str = "host";

/// The part of a v2 runtime directory handed to the sandbox plugin: its leaf and the pool.
pub const AGENTS: &str = "agents";

impl RuntimeCgroups {
    /// Makes the runtime's directories for `owner` (its state root) beneath `parents` (of
    /// [`support`]), once what a dead runtime of the same state root left there is removed;
    /// [`RuntimeCgroups::pool_maker`] then makes the pool. Each is this process's own
    /// ([`instance_name`]): a runtime on a state root removed and made again beside a first
    /// still running has its own, and neither removes the other's. An error of kind
    /// `Unsupported` says this machine refuses what the plugin's copy needs (an ordinary user
    /// without user namespaces): nothing was made or moved.
    pub fn create(parents: &Hierarchy, owner: &Path) -> Result<RuntimeCgroups, CgroupError> {
        let prefix = instance_prefix(owner);
        let me = std::process::id() as i32;
        let name = instance_name(&prefix, me).ok_or_else(|| CgroupError {
            dir: PathBuf::from(&prefix),
            error: io::Error::other("this process has no start time in /proc"),
        })?;
        // Built up one hierarchy at a time: a failure drops what was made so far.
        let mut made = RuntimeCgroups {
            dirs: Vec::new(),
            handed: Vec::new(),
            top: None,
            plugin_join: None,
            host_leaf: false,
        };
        for (controller, parent) in parents.parents() {
            let top = parent.join(&name);
            let fail = |error| CgroupError {
                dir: top.clone(),
                error,
            };
            remove_dead(parent, &prefix).map_err(fail)?;
            let fd = make_dir(&top).map_err(fail)?;
            if controller == Controller::Unified {
                made.top = Some(top.clone());
                made.create_v2(parent, &top, fd).map_err(fail)?;
                continue;
            }
            made.dirs.push((controller, top.clone()));
            made.handed.push(handed(fd, &top).map_err(fail)?);
        }
        Ok(made)
    }

    /// v2: beneath `top` (made, `fd`), the part the plugin gets and its copy first (where
    /// none can be made the host has moved nowhere), then the host out of `parent` into its
    /// leaf, the controllers enabled down to the pool's parent, and the plugin's leaf.
    fn create_v2(&mut self, parent: &Path, top: &Path, fd: OwnedFd) -> io::Result<()> {
        let agents = top.join(AGENTS);
        let agents_fd = make_dir(&agents)?;
        let copy = handed(rustix::io::dup(&agents_fd)?, &agents)?;
        self.host_leaf = parent.join("cgroup.type").exists();
        if self.host_leaf {
            host_leaf(&fd)?;
        }
        enable_v2(&open_dir(parent)?)?;
        enable_v2(&fd)?;
        let plugin = plugin_leaf(&agents_fd)?;
        let sealed = open_file(&fd, "cgroup.procs", rustix::fs::OFlags::RDONLY)?;
        self.plugin_join = Some((plugin, sealed));
        self.dirs.push((Controller::Unified, agents));
        self.handed.push(copy);
        Ok(())
    }

    /// The value of [`ENV_FDS`] and the descriptors the plugin must inherit.
    pub fn handed(&self) -> (String, Vec<RawFd>) {
        let fds: Vec<RawFd> = self.handed.iter().map(|fd| fd.as_raw_fd()).collect();
        let value = self
            .dirs
            .iter()
            .zip(&fds)
            .map(|((c, _), fd)| format!("{}:{fd}", c.name()))
            .collect::<Vec<_>>()
            .join(",");
        (value, fds)
    }

    /// v2: what the host does for the sandbox plugin between its fork and exec: moves it
    /// into its leaf (a write of `0` to the first), then makes the runtime directory's
    /// `cgroup.procs` read-only (a `fchmod` of the second), the common ancestor of anything
    /// the plugin could move and the host's leaf: an ordinary user's plugin, of the host's
    /// uid, would otherwise be allowed to move the host.
    pub fn plugin_join(&self) -> Option<(RawFd, RawFd)> {
        let (join, seal) = self.plugin_join.as_ref()?;
        Some((join.as_raw_fd(), seal.as_raw_fd()))
    }

    /// The directories, for a report or a test.
    pub fn dirs(&self) -> impl Iterator<Item = (Controller, &Path)> {
        self.dirs.iter().map(|(c, p)| (*c, p.as_path()))
    }

    /// The directories, owned, for a thread.
    fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, d)| d.clone()).collect()
    }

    /// What makes the pool in each runtime directory, the files the plugin writes given to
    /// `owner` (the sandbox plugin's uid, where it is not this process's): a few milliseconds
    /// of work, for a thread once the runtime is ready.
    pub fn pool_maker(
        &self,
        owner: Option<u32>,
    ) -> impl FnOnce() -> Result<(), CgroupError> + Send {
        let dirs = self.paths();
        move || {
            dirs.iter().try_for_each(|dir| {
                make_pool(dir, owner).map_err(|error| CgroupError {
                    dir: dir.clone(),
                    error,
                })
            })
        }
    }

    /// What removes the pool's cgroups that hold no process (a runtime that stops: the rest
    /// go when it is dropped, once its commands are gone). A cgroup being removed cannot be
    /// taken: a command the stopping plugin starts meanwhile is refused, nothing unbounded.
    pub fn idle_remover(&self) -> impl FnOnce() + Send {
        let dirs = self.paths();
        move || {
            for dir in &dirs {
                let Ok(parent) = open_dir(dir) else { continue };
                for i in 0..POOL {
                    // EBUSY (a command runs there) and ENOENT are left to the drop.
                    let _ =
                        rustix::fs::unlinkat(&parent, pool_name(i), rustix::fs::AtFlags::REMOVEDIR);
                }
            }
        }
    }
}

/// What the plugin gets of the runtime directory `dir` (at `path`): a detached mount whose
/// root it is, so that `..` leads to no other cgroup of the machine; an ordinary user, who may
/// make no mount here, has a child make it in namespaces of its own.
fn handed(dir: OwnedFd, path: &Path) -> io::Result<OwnedFd> {
    match crate::plugin_ns::detached(dir.as_raw_fd(), 0) {
        // SAFETY: open_tree's new descriptor, owned from here.
        Ok(copy) => Ok(unsafe { <OwnedFd as rustix::fd::FromRawFd>::from_raw_fd(copy) }),
        Err(e)
            if e.raw_os_error() == Some(libc::EPERM) && !rustix::process::geteuid().is_root() =>
        {
            crate::plugin_ns::detached_by_child(path).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("a detached copy for the plugin, made in a user namespace: {e}"),
                )
            })
        }
        Err(e) => Err(e),
    }
}

/// Enables memory and pids for the children of the v2 cgroup `dir` where they are not yet
/// ([`support_v2`] chose one that holds no process, or the root).
fn enable_v2(dir: &OwnedFd) -> io::Result<()> {
    let enabled = read_at(dir, "cgroup.subtree_control")?;
    let missing = missing_controllers(&enabled);
    if missing.is_empty() {
        return Ok(());
    }
    let add: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
    write_at(dir, "cgroup.subtree_control", &add.join(" "))
        .map_err(|e| io::Error::other(format!("enabling {missing:?} for its children: {e}")))
}

/// Makes the cgroup `dir`, which the plugin's uid may enter (the host's umask made it 0700).
fn make_dir(dir: &Path) -> io::Result<OwnedFd> {
    std::fs::create_dir(dir)?;
    let fd = open_dir(dir)?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o755))?;
    Ok(fd)
}

/// Makes the leaf `name` of the v2 cgroup `dir`: its `cgroup.procs`, opened to write.
fn make_leaf(dir: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    rustix::fs::mkdirat(dir, name, rustix::fs::Mode::from_raw_mode(0o755))?;
    let leaf = open_file(dir, name, rustix::fs::OFlags::DIRECTORY)?;
    open_file(&leaf, "cgroup.procs", rustix::fs::OFlags::WRONLY)
}

/// v2: moves this process into the runtime directory `dir`'s leaf [`HOST_LEAF`].
fn host_leaf(dir: &OwnedFd) -> io::Result<()> {
    let procs = make_leaf(dir, HOST_LEAF)?;
    rustix::io::write(&procs, std::process::id().to_string().as_bytes())
        .map(drop)
        .map_err(|e| io::Error::other(format!("moving the host into {HOST_LEAF}: {e}")))
}

/// v2: memory and pids enabled for the children of `dir` (the runtime's [`AGENTS`]), and its
/// leaf [`PLUGIN_LEAF`] made: its `cgroup.procs`, opened for the host's write.
fn plugin_leaf(dir: &OwnedFd) -> io::Result<OwnedFd> {
    enable_v2(dir)?;
    make_leaf(dir, PLUGIN_LEAF)
}

/// [`POOL`] cgroups in `dir`, the files the plugin writes given to `owner` where one is
/// named (as root); in v2 `dir`'s own `cgroup.procs` first (the common ancestor of the
/// plugin's leaf and the pool).
fn make_pool(dir: &Path, owner: Option<u32>) -> io::Result<()> {
    use rustix::fs::{AtFlags, Gid, Mode, Uid};
    let parent = open_dir(dir)?;
    let give = |dir: &OwnedFd, file: &str| match owner {
        Some(uid) => {
            let (uid, gid) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(uid)));
            match rustix::fs::chownat(dir, file, uid, gid, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
                Err(e) => Err(e),
            }
        }
        None => Ok(()),
    };
    if rustix::fs::statat(&parent, PLUGIN_LEAF, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        give(&parent, "cgroup.procs")?;
    }
    for i in 0..POOL {
        let name = pool_name(i);
        rustix::fs::mkdirat(&parent, &name, Mode::from_raw_mode(0o755))?;
        let cgroup = open_file(&parent, &name, rustix::fs::OFlags::DIRECTORY)?;
        // The host's umask made it 0700; the plugin's uid enters it.
        rustix::fs::fchmod(&cgroup, Mode::from_raw_mode(0o755))?;
        for file in PLUGIN_WRITES {
            give(&cgroup, file)?;
        }
    }
    Ok(())
}

impl Drop for RuntimeCgroups {
    /// Removes them, with the pool, once the runtime is done (a process still inside is moved
    /// out, or in v2 killed); a start on the same state root removes what a dead runtime left.
    fn drop(&mut self) {
        drop(std::mem::take(&mut self.handed));
        drop(self.plugin_join.take());
        let tops = match &self.top {
            Some(top) => vec![top.clone()],
            None => self.paths(),
        };
        for dir in &tops {
            let removed = match self.host_leaf {
                true => remove_all_but(dir, HOST_LEAF),
                false => remove_tree(dir),
            };
            if let Err(e) = removed {
                tracing::warn!(dir = %dir.display(), "cannot remove the agents' cgroup: {e}");
            }
        }
    }
}

/// What every runtime directory of `owner` is named from: `link-<digest of the state root>-`.
pub fn instance_prefix(owner: &Path) -> String {
    format!("link-{}-", crate::leftovers::digest(owner))
}

/// The runtime directory of the host `pid`: the prefix, its pid and its start time.
pub fn instance_name(prefix: &str, pid: i32) -> Option<String> {
    let start = link_os::process::start_time(pid)?;
    Some(format!("{prefix}{pid}-{start}"))
}

/// Removes the runtime directories of `prefix` in `parent` whose host is gone (no process of
/// that pid and start time).
fn remove_dead(parent: &Path, prefix: &str) -> io::Result<()> {
    for entry in std::fs::read_dir(parent)? {
        let name = entry?.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let alive = rest
            .split_once('-')
            .and_then(|(pid, start)| Some((pid.parse().ok()?, start.parse().ok()?)))
            .is_some_and(|(pid, start): (i32, u64)| {
                link_os::process::start_time(pid) == Some(start)
            });
        if !alive {
            remove_tree(&parent.join(&name))?;
        }
    }
    Ok(())
}

fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?)
}

/// Removes `dir`, a cgroup, and the cgroups beneath it, deepest first, through directory
/// descriptors (a tree deeper than a path may be long is removed too). In v1 a process still
/// in one is moved to `dir`'s parent, never killed: the sandbox plugin can move a process of
/// its own uid into its cgroups, so what is found there need not be this runtime's. In v2 it
/// is killed (`cgroup.kill`): the parent, with controllers enabled for its children, may hold
/// none, and only a process the runtime started, or one of the same user moved in by its
/// plugin, can be there.
fn remove_tree(dir: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(io::Error::other(format!("{} has no parent", dir.display())));
    };
    let parent = open_dir(parent)?;
    let procs = open_file(&parent, "cgroup.procs", rustix::fs::OFlags::WRONLY)?;
    remove_beneath(&parent, name, Some(&procs))
}

/// Removes the v2 cgroups beneath `dir` but its leaf `kept` (the host's, which it is in).
/// What is still inside is killed: `dir` holds no process (and its `cgroup.procs` is sealed).
fn remove_all_but(dir: &Path, kept: &str) -> io::Result<()> {
    let parent = open_dir(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() && entry.file_name() != kept {
            remove_beneath(&parent, &entry.file_name(), None)?;
        }
    }
    Ok(())
}

/// Removes the cgroup `name` beneath `parent` and its own; what is still inside is killed
/// (v2) or moved to `to` (v1: a `cgroup.procs`).
fn remove_beneath(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    to: Option<&OwnedFd>,
) -> io::Result<()> {
    use rustix::fs::AtFlags;
    let dir = match open_file(parent, name, rustix::fs::OFlags::DIRECTORY) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let children: Vec<std::ffi::OsString> = {
        let entries = rustix::fs::Dir::read_from(&dir)?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if entry.file_type() == rustix::fs::FileType::Directory && name != b"." && name != b".."
            {
                names.push(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name).to_owned(),
                );
            }
        }
        names
    };
    for child in &children {
        remove_beneath(&dir, child, to)?;
    }
    for _ in 0..100 {
        match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(rustix::io::Errno::BUSY) => {
                let killed = write_at(&dir, "cgroup.kill", "1").is_ok();
                if let (false, Some(to)) = (killed, to) {
                    move_members(&dir, to)
                }
            }
            Err(e) => return Err(e.into()),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(io::Error::other(format!(
        "{name:?}: processes stay in it though moved out"
    )))
}

/// Moves each process in the cgroup `dir` to the one `to` is the `cgroup.procs` of.
fn move_members(dir: &OwnedFd, to: &OwnedFd) {
    let members = read_at(dir, "cgroup.procs").unwrap_or_default();
    for pid in members.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let _ = rustix::io::write(to, pid.as_bytes());
    }
}

/// `file` beneath `dir`, never through a symlink (`how`: the access and `DIRECTORY`).
fn open_file(
    dir: &OwnedFd,
    file: impl rustix::path::Arg,
    how: rustix::fs::OFlags,
) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::openat(
        dir,
        file,
        how | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?)
}

/// The sandbox plugin's handles on its runtime's cgroups, from [`ENV_FDS`], and which of the
/// pool are free.
#[derive(Debug)]
pub struct Cgroups {
    dirs: Vec<(Controller, OwnedFd)>,
    free: std::sync::Mutex<Vec<usize>>,
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Cgroups {
    /// The descriptors the host handed this process; `None` where it handed none (no
    /// cgroups here, diagnostic mode, a test).
    pub fn from_env() -> Result<Option<Cgroups>, String> {
        let Some(value) = std::env::var_os(ENV_FDS) else {
            return Ok(None);
        };
        let bad =
            || format!("{ENV_FDS}={value:?} is not `memory:FD,pids:FD,cpuacct:FD` or `unified:FD`");
        let value = value.to_str().ok_or_else(bad)?;
        let mut dirs = Vec::new();
        for item in value.split(',') {
            let (name, fd) = item.split_once(':').ok_or_else(bad)?;
            let controller = Controller::from_name(name).ok_or_else(bad)?;
            let fd: RawFd = fd.parse().map_err(|_| bad())?;
            // SAFETY: `fcntl` on a number: refused (EBADF) when nothing is open there.
            let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
            if !open || fd <= 2 {
                return Err(format!("{}: descriptor {fd} is not open", bad()));
            }
            // SAFETY: open (checked above), handed to this process alone, owned from here.
            let owned = unsafe { <OwnedFd as rustix::fd::FromRawFd>::from_raw_fd(fd) };
            rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)
                .map_err(|e| format!("{}: {e}", bad()))?;
            dirs.push((controller, owned));
        }
        let named: Vec<Controller> = dirs.iter().map(|(c, _)| *c).collect();
        let v1 =
            named.len() == Controller::V1.len() && Controller::V1.iter().all(|c| named.contains(c));
        if !v1 && named != [Controller::Unified] {
            return Err(bad());
        }
        Ok(Some(Cgroups {
            dirs,
            // Taken from the end: a lone agent's commands reuse `cmd-0`.
            free: std::sync::Mutex::new((0..POOL).rev().collect()),
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(POOL)),
        }))
    }

    /// A free cgroup of the pool in each hierarchy (waiting while every one holds a command),
    /// with `limits`' memory and processes set for the command to run there.
    pub async fn take(
        self: &std::sync::Arc<Self>,
        limits: &crate::limits::Limits,
    ) -> io::Result<AgentCgroup> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(io::Error::other)?;
        let index = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or_else(|| io::Error::other("no free cgroup though one was granted"))?;
        let taken = Taken {
            pool: self.clone(),
            index,
            _permit: permit,
        };
        self.made(&pool_name(index)).await?;
        self.open(taken, limits)
    }

    /// Waits until the host has made pool cgroup `name` in each hierarchy: its `cgroup.procs`,
    /// given last, is this process's.
    async fn made(&self, name: &str) -> io::Result<()> {
        let procs = format!("{name}/cgroup.procs");
        let me = rustix::process::geteuid().as_raw();
        let deadline = std::time::Instant::now() + POOL_WAIT;
        for (_, parent) in &self.dirs {
            loop {
                let stat =
                    rustix::fs::statat(parent, &procs, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
                match stat {
                    Ok(s) if s.st_uid == me => break,
                    Ok(_) | Err(rustix::io::Errno::NOENT) => {}
                    Err(e) => return Err(e.into()),
                }
                if std::time::Instant::now() > deadline {
                    return Err(io::Error::other(format!(
                        "the host has not made the runtime's cgroup {name} within {POOL_WAIT:?}"
                    )));
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        }
        Ok(())
    }

    fn open(&self, taken: Taken, limits: &crate::limits::Limits) -> io::Result<AgentCgroup> {
        use rustix::fs::OFlags;
        let name = pool_name(taken.index);
        let mut procs = Vec::new();
        let (mut memory, mut cpu) = (None, None);
        for (controller, parent) in &self.dirs {
            let dir = open_file(parent, &name, OFlags::DIRECTORY)?;
            controller.set_limit(&dir, limits)?;
            procs.push(open_file(&dir, "cgroup.procs", OFlags::WRONLY)?);
            // v2's one directory counts both: a second handle on it.
            match (controller.memory(), controller.cpu()) {
                (true, true) => {
                    cpu = Some((*controller, rustix::io::dup(&dir)?));
                    memory = Some((*controller, dir));
                }
                (true, false) => memory = Some((*controller, dir)),
                (false, true) => cpu = Some((*controller, dir)),
                (false, false) => {}
            }
        }
        let memory = memory.ok_or_else(|| io::Error::other("no memory cgroup"))?;
        let cpu = cpu.ok_or_else(|| io::Error::other("no cgroup counting CPU time"))?;
        let ooms_before = oom_kills(&memory)?;
        let cpu_before = cpu_ns(&cpu)?;
        Ok(AgentCgroup {
            procs,
            memory,
            memory_bytes: limits.memory_bytes,
            ooms_before,
            cpu,
            cpu_seconds: limits.cpu_seconds,
            cpu_before,
            _taken: taken,
        })
    }
}

/// A cgroup of the pool, given back when dropped (after its command's processes are gone:
/// a run returns only then).
#[derive(Debug)]
struct Taken {
    pool: std::sync::Arc<Cgroups>,
    index: usize,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Taken {
    fn drop(&mut self) {
        let mut free = self.pool.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push(self.index);
    }
}

/// Sets a memory cgroup's limit to `bytes`, of memory and swap together where the kernel
/// counts swap (`memory.memsw.limit_in_bytes`; it may never be below the memory limit, so
/// the two are written in the order that keeps it so). Memory the agent's processes left
/// charged that cannot be given back (files in a tmpfs) may refuse a lower limit: said so.
fn set_memory(dir: &OwnedFd, bytes: u64) -> io::Result<()> {
    let value = bytes.to_string();
    let memory = |v: &str| write_at(dir, "memory.limit_in_bytes", v);
    let swap = |v: &str| match write_at(dir, "memory.memsw.limit_in_bytes", v) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    let lower = read_at(dir, "memory.limit_in_bytes")?
        .trim()
        .parse::<u64>()
        .is_ok_and(|now| bytes < now);
    let set = match lower {
        true => memory(&value).and_then(|()| swap(&value)),
        false => swap(&value).and_then(|()| memory(&value)),
    };
    set.map_err(|e| match e.raw_os_error() {
        Some(libc::EBUSY) => io::Error::other(format!(
            "the agent's processes left more than {bytes} bytes charged that cannot be given \
             back (files in a tmpfs?), so its memory limit cannot be set that low: {e}"
        )),
        _ => io::Error::other(format!("setting the memory limit to {bytes}: {e}")),
    })
}

/// Sets a v2 memory cgroup's limit to `bytes` and its swap to none, so memory and swap
/// together never pass it (`memory.swap.max` is absent where the kernel counts no swap).
fn set_memory_v2(dir: &OwnedFd, bytes: u64) -> io::Result<()> {
    let set = |file: &str, value: &str| {
        write_at(dir, file, value).map_err(|e| io::Error::other(format!("writing {file}: {e}")))
    };
    set("memory.max", &bytes.to_string())?;
    match write_at(dir, "memory.swap.max", "0") {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io::Error::other(format!("writing memory.swap.max: {e}"))),
        Ok(()) => Ok(()),
    }
}

fn write_at(dir: &OwnedFd, file: &str, value: &str) -> io::Result<()> {
    let fd = open_file(dir, file, rustix::fs::OFlags::WRONLY)?;
    rustix::io::write(&fd, value.as_bytes())?;
    Ok(())
}

/// The CPU time every process in a cgroup (`cpuacct.usage` in v1, `cpu.stat` in v2) used so
/// far, in nanoseconds.
fn cpu_ns((controller, dir): &(Controller, OwnedFd)) -> io::Result<u64> {
    let bad = |what: &str| io::Error::other(format!("{what} holds no CPU time"));
    match controller {
        Controller::Unified => read_at(dir, "cpu.stat")?
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .map(|us| us.saturating_mul(1000))
            .ok_or_else(|| bad("cpu.stat")),
        _ => read_at(dir, "cpuacct.usage")?
            .trim()
            .parse()
            .map_err(|_| bad("cpuacct.usage")),
    }
}

fn read_at(dir: &OwnedFd, file: &str) -> io::Result<String> {
    let fd = open_file(dir, file, rustix::fs::OFlags::RDONLY)?;
    let mut text = String::new();
    io::Read::read_to_string(&mut std::fs::File::from(fd), &mut text)?;
    Ok(text)
}

/// The count of processes the OOM killer ended in a memory cgroup (`oom_kill` of
/// `memory.oom_control` in v1, Linux 4.13; of `memory.events` in v2).
fn oom_kills((controller, dir): &(Controller, OwnedFd)) -> io::Result<u64> {
    let file = match controller {
        Controller::Unified => "memory.events",
        _ => "memory.oom_control",
    };
    Ok(read_at(dir, file)?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

/// A cgroup of the pool in each hierarchy, set for one command: its `cgroup.procs` (written
/// between fork and exec) and what the command used there.
#[derive(Debug)]
pub struct AgentCgroup {
    procs: Vec<OwnedFd>,
    memory: (Controller, OwnedFd),
    memory_bytes: u64,
    ooms_before: u64,
    cpu: (Controller, OwnedFd),
    cpu_seconds: u64,
    cpu_before: u64,
    _taken: Taken,
}

impl AgentCgroup {
    /// Between fork and exec: moves the calling process into each of these cgroups (`0` is
    /// the writer itself). Every process it starts is then counted there.
    pub fn join(&self) -> io::Result<()> {
        for fd in &self.procs {
            // SAFETY: a write(2) of one byte to a descriptor this value keeps open.
            if unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Whether the command's processes together used more CPU time than its limit since
    /// these handles were made: the sandbox then stops it. A counter that cannot be read
    /// counts as passed: the command is not left without its bound.
    pub fn cpu_passed(&self) -> Option<LimitHit> {
        let hit = LimitHit::CpuTime {
            seconds: self.cpu_seconds,
        };
        let Ok(now) = cpu_ns(&self.cpu) else {
            return Some(hit);
        };
        let used = now.saturating_sub(self.cpu_before);
        (used > self.cpu_seconds.saturating_mul(1_000_000_000)).then_some(hit)
    }

    /// Whether the kernel killed a process of the agent for its memory since these handles
    /// were made (the command that just ran: an agent runs one at a time).
    pub fn memory_hit(&self) -> Option<LimitHit> {
        let now = oom_kills(&self.memory).ok()?;
        (now > self.ooms_before).then_some(LimitHit::Memory {
            bytes: self.memory_bytes,
        })
    }
}
