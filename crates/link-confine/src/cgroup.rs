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
//! Where it cannot be done, [`support`] says why, and the probe and `link status` list memory
//! and processes per agent as not enforced with that reason: an ordinary user (v1 hierarchies
//! are root's), and cgroup v2, whose controllers Link would need in a delegated subtree of its
//! own (a unit with `Delegate=yes`): not done yet.
//!
//! A killed runtime leaves its directories; the next start on the same state root from the
//! same cgroup removes them ([`RuntimeCgroups::create`]), moving out what is still inside.
//! Each runtime's are named after its host (`link-<digest>-<pid>-<start time>`), so a start
//! removes only those of a host that is gone.

use link_protocol::routes::sandbox::LimitHit;
use rustix::fd::{AsRawFd, OwnedFd, RawFd};
use std::io;
use std::path::{Path, PathBuf};

/// The sandbox plugin's variable naming its runtime's cgroup descriptors:
/// `memory:FD,pids:FD,cpuacct:FD`.
pub const ENV_FDS: &str = "LNK_CGROUP_FDS";

/// A cgroup v1 controller Link bounds an agent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Pids,
    Cpuacct,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpuacct];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpuacct => "cpuacct",
        }
    }

    fn from_name(name: &str) -> Option<Controller> {
        Controller::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Sets the kernel's limit of `limits` in the cgroup `dir` (CPU time is the sandbox's to
    /// hold: the kernel only counts it).
    fn set_limit(self, dir: &OwnedFd, limits: &crate::limits::Limits) -> io::Result<()> {
        match self {
            Controller::Memory => set_memory(dir, limits.memory_bytes),
            Controller::Pids => write_at(dir, "pids.max", &limits.processes.to_string())
                .map_err(|e| io::Error::other(format!("writing pids.max: {e}"))),
            Controller::Cpuacct => Ok(()),
        }
    }
}

/// Where this machine lets Link bound an agent's processes together: this process's own
/// cgroup directory in each controller's v1 hierarchy; or why not.
pub fn support() -> Result<Vec<(Controller, PathBuf)>, String> {
    if !rustix::process::geteuid().is_root() {
        return Err(
            "Link bounds an agent's processes together only as root (the cgroup \
                    hierarchies are root's); each process is bounded on its own"
                .into(),
        );
    }
    let me = procfs::process::Process::myself().map_err(|e| format!("/proc/self: {e}"))?;
    let mounts = me
        .mountinfo()
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let own = me
        .cgroups()
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let mut dirs = Vec::new();
    for controller in Controller::ALL {
        let name = controller.name();
        let Some(mount) = mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && m.super_options.contains_key(name))
        else {
            let v2 = mounts.iter().any(|m| m.fs_type == "cgroup2");
            return Err(match v2 {
                true => format!(
                    "the {name} controller is not a cgroup v1 hierarchy here, and Link does not \
                     yet make a delegated cgroup v2 subtree for its agents"
                ),
                false => format!("no cgroup hierarchy with the {name} controller is mounted"),
            });
        };
        if mount.mount_options.contains_key("ro") {
            return Err(format!(
                "the {name} cgroup hierarchy {} is mounted read-only",
                mount.mount_point.display()
            ));
        }
        let path = own
            .0
            .iter()
            .find(|g| g.controllers.iter().any(|c| c == name))
            .map(|g| g.pathname.clone())
            .ok_or_else(|| format!("/proc/self/cgroup names no {name} cgroup"))?;
        // The mount may show a subtree (a container's): the path is relative to its root.
        let relative = Path::new(&path)
            .strip_prefix(&mount.root)
            .map_err(|_| format!("this process's {name} cgroup {path} is outside its mount"))?;
        dirs.push((controller, mount.mount_point.join(relative)));
    }
    Ok(dirs)
}

/// Why a runtime's cgroups could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot make the agents' cgroup {}: {error}", dir.display())]
pub struct CgroupError {
    pub dir: PathBuf,
    pub error: io::Error,
}

/// Cgroups of a runtime's pool in each hierarchy: how many commands run at once at most.
pub const POOL: usize = 64;

/// The files of a pool cgroup the sandbox plugin writes: its commands' limits and moves.
/// `cgroup.procs` is given last: once it is the plugin's, the cgroup is ready for it.
const PLUGIN_WRITES: &[&str] = &[
    "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes",
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
#[derive(Debug)]
pub struct RuntimeCgroups {
    dirs: Vec<(Controller, PathBuf)>,
    handed: Vec<OwnedFd>,
}

impl RuntimeCgroups {
    /// Makes the runtime's directories for `owner` (its state root) beneath `parents` (of
    /// [`support`]), once what a dead runtime of the same state root left there is removed;
    /// [`RuntimeCgroups::pool_maker`] then makes the pool. Each is this process's own
    /// ([`instance_name`]): a runtime on a state root removed and made again beside a first
    /// still running has its own, and neither removes the other's.
    pub fn create(
        parents: &[(Controller, PathBuf)],
        owner: &Path,
    ) -> Result<RuntimeCgroups, CgroupError> {
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
        };
        for (controller, parent) in parents {
            let dir = parent.join(&name);
            let fail = |error| CgroupError {
                dir: dir.clone(),
                error,
            };
            remove_dead(parent, &prefix).map_err(fail)?;
            std::fs::create_dir(&dir).map_err(fail)?;
            made.dirs.push((*controller, dir.clone()));
            let fd = open_dir(&dir).map_err(fail)?;
            // Made under the host's umask; the plugin's uid must reach the pool beneath.
            rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o755))
                .map_err(|e| fail(e.into()))?;
            let copy = crate::plugin_ns::detached(fd.as_raw_fd(), 0).map_err(fail)?;
            // SAFETY: open_tree's new descriptor, owned from here.
            made.handed
                .push(unsafe { <OwnedFd as rustix::fd::FromRawFd>::from_raw_fd(copy) });
        }
        Ok(made)
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

    /// The directories, for a report or a test.
    pub fn dirs(&self) -> impl Iterator<Item = (Controller, &Path)> {
        self.dirs.iter().map(|(c, p)| (*c, p.as_path()))
    }

    /// The directories, owned, for a thread.
    fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, d)| d.clone()).collect()
    }

    /// What makes the pool in each runtime directory, the files the plugin writes given to
    /// `uid`: a few milliseconds of work, for a thread once the runtime is ready.
    pub fn pool_maker(&self, uid: u32) -> impl FnOnce() -> Result<(), CgroupError> + Send {
        let dirs = self.paths();
        move || {
            dirs.iter().try_for_each(|dir| {
                make_pool(dir, uid).map_err(|error| CgroupError {
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

/// [`POOL`] cgroups in `dir`, root's but for the files the plugin writes.
fn make_pool(dir: &Path, uid: u32) -> io::Result<()> {
    use rustix::fs::{AtFlags, Gid, Mode, Uid};
    let parent = open_dir(dir)?;
    let owner = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(uid)));
    for i in 0..POOL {
        let name = pool_name(i);
        rustix::fs::mkdirat(&parent, &name, Mode::from_raw_mode(0o755))?;
        let cgroup = open_file(&parent, &name, rustix::fs::OFlags::DIRECTORY)?;
        // The host's umask made it 0700; the plugin's uid enters it.
        rustix::fs::fchmod(&cgroup, Mode::from_raw_mode(0o755))?;
        for file in PLUGIN_WRITES {
            let flags = AtFlags::SYMLINK_NOFOLLOW;
            match rustix::fs::chownat(&cgroup, *file, owner.0, owner.1, flags) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

impl Drop for RuntimeCgroups {
    /// Removes them, with the pool, once the runtime is done (a process still inside is moved
    /// out); a start on the same state root removes what a dead runtime left.
    fn drop(&mut self) {
        drop(std::mem::take(&mut self.handed));
        for (_, dir) in &self.dirs {
            if let Err(e) = remove_tree(dir) {
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
/// descriptors (a tree deeper than a path may be long is removed too). A process still in
/// one is moved to `dir`'s parent, never killed: the sandbox plugin can move a process of its
/// own uid into its cgroups, so what is found there need not be this runtime's.
fn remove_tree(dir: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(io::Error::other(format!("{} has no parent", dir.display())));
    };
    let parent = open_dir(parent)?;
    let procs = open_file(&parent, "cgroup.procs", rustix::fs::OFlags::WRONLY)?;
    remove_beneath(&parent, name, &procs)
}

fn remove_beneath(parent: &OwnedFd, name: &std::ffi::OsStr, to: &OwnedFd) -> io::Result<()> {
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
            Err(rustix::io::Errno::BUSY) => move_members(&dir, to),
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
    /// The descriptors the host handed this process; `None` where it handed none (an
    /// ordinary user, cgroup v2, diagnostic mode, a test).
    pub fn from_env() -> Result<Option<Cgroups>, String> {
        let Some(value) = std::env::var_os(ENV_FDS) else {
            return Ok(None);
        };
        let bad = || format!("{ENV_FDS}={value:?} is not `memory:FD,pids:FD,cpuacct:FD`");
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
        if dirs.len() != Controller::ALL.len() {
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
            match controller {
                Controller::Memory => memory = Some(dir),
                Controller::Cpuacct => cpu = Some(dir),
                Controller::Pids => {}
            }
        }
        let memory = memory.ok_or_else(|| io::Error::other("no memory cgroup"))?;
        let cpu = cpu.ok_or_else(|| io::Error::other("no cpuacct cgroup"))?;
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

fn write_at(dir: &OwnedFd, file: &str, value: &str) -> io::Result<()> {
    let fd = open_file(dir, file, rustix::fs::OFlags::WRONLY)?;
    rustix::io::write(&fd, value.as_bytes())?;
    Ok(())
}

/// The CPU time every process in a cpuacct cgroup used so far, in nanoseconds.
fn cpu_ns(dir: &OwnedFd) -> io::Result<u64> {
    read_at(dir, "cpuacct.usage")?
        .trim()
        .parse()
        .map_err(|e| io::Error::other(format!("cpuacct.usage: {e}")))
}

fn read_at(dir: &OwnedFd, file: &str) -> io::Result<String> {
    let fd = open_file(dir, file, rustix::fs::OFlags::RDONLY)?;
    let mut text = String::new();
    io::Read::read_to_string(&mut std::fs::File::from(fd), &mut text)?;
    Ok(text)
}

/// The count of processes the OOM killer ended in a memory cgroup (`oom_kill` of
/// `memory.oom_control`, Linux 4.13).
fn oom_kills(dir: &OwnedFd) -> io::Result<u64> {
    Ok(read_at(dir, "memory.oom_control")?
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
    memory: OwnedFd,
    memory_bytes: u64,
    ooms_before: u64,
    cpu: OwnedFd,
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
