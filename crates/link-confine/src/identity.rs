//! Who a confined command is on the host, and what it leaves behind in the workspace.
//!
//! As an ordinary user, a command runs as that user inside a user namespace of its own
//! ([`Identity::Caller`]). As root it must never be root: every agent gets a dedicated uid and
//! gid ([`Identity::Dedicated`], `base + slot`, the slot allocated once per agent in the
//! plugin's data directory). bubblewrap then runs as root *inside a user namespace* the plugin
//! makes for the identity on its first command and keeps ([`shared_user_namespace`]: root
//! and the dedicated identity mapped to themselves, nothing else), so its mounts need no
//! capability on the host and the plugin holds none of `CAP_SYS_ADMIN`'s; the helper inside
//! drops to that identity (groups, gid, uid, the capability bounding set) before Landlock and
//! the command. Root-only files are then unreadable, files the command creates are that uid's,
//! and a setuid file it could make would give nobody more than that uid. DESIGN.md §4 gives
//! the reasons.
//!
//! Because the workspace and home are written by the file tool as root too, [`prepare`]
//! gives every entry to the agent's identity before a command, and [`clear_setid`] removes
//! setuid and setgid bits after one. Both walk with directory descriptors and never follow a
//! symlink, so nothing a command plants can redirect them outside the directory.

use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// First uid (and gid) of the dedicated range: `0x6C6E0000`, far from the ranges distributions
/// allocate and from `/etc/subuid`'s usual `100000`. `LNK_SANDBOX_UID_BASE` overrides it.
pub const DEFAULT_BASE: u32 = 0x6C6E_0000;
/// The environment variable naming another base (the host passes it to this plugin alone).
pub const ENV_BASE: &str = link_protocol::plugin::ENV_SANDBOX_UID_BASE;
/// Slots per base: agents beyond it are refused rather than made to share.
pub const SLOTS: u32 = 65_536;
/// The last slot is no agent's: it is the sandbox plugin's own identity as root
/// ([`crate::plugin_ns`]), so no agent's command ever shares its uid.
pub const PLUGIN_SLOT: u32 = SLOTS - 1;
/// The top slots no agent is given: the plugins' own identities as root, the sandbox
/// plugin's ([`PLUGIN_SLOT`]) and one per Landlock-confined plugin ([`plugin_uid`]), with
/// room for more plugins.
pub const RESERVED_SLOTS: u32 = 32;
/// The first slot no agent is given ([`RESERVED_SLOTS`]).
pub const FIRST_RESERVED: u32 = SLOTS - RESERVED_SLOTS;

/// The host uid (and gid) of the plugin `program` as root (issue 42, "plugins are not
/// root"): the sandbox plugin's [`PLUGIN_SLOT`], every other plugin's `SLOTS - 2 - i`, `i` its
/// place in the manifest, so no two plugins of a runtime and no agent share one. `None` for a
/// program the manifest does not name.
pub fn plugin_uid(base: u32, program: &str) -> Option<u32> {
    let all = link_protocol::manifest::ALL;
    let index = all.iter().position(|p| p.program == program)? as u32;
    if program == link_protocol::manifest::SANDBOX.program {
        return Some(base + PLUGIN_SLOT);
    }
    let slot = SLOTS - 2 - index;
    (slot >= FIRST_RESERVED).then_some(base + slot)
}

/// The identity a confined command has on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Identity {
    /// Link is not root: the command runs as the caller, in a user namespace of its own.
    Caller { uid: u32, gid: u32 },
    /// Link is root: the command runs as this uid and gid, set by the helper.
    Dedicated { uid: u32, gid: u32 },
}

impl Identity {
    /// The identity of slot `slot` (0 for the probe and the `exec` command, agents from 1).
    pub fn for_slot(slot: u32) -> Result<Identity, String> {
        if !rustix::process::geteuid().is_root() {
            return Ok(Identity::Caller {
                uid: rustix::process::getuid().as_raw(),
                gid: rustix::process::getgid().as_raw(),
            });
        }
        let base = base()?;
        let id = base
            .checked_add(slot)
            .filter(|_| slot < SLOTS)
            .ok_or_else(|| format!("sandbox identity slot {slot} is outside {ENV_BASE}'s range"))?;
        Ok(Identity::Dedicated { uid: id, gid: id })
    }

    pub fn uid(&self) -> u32 {
        match *self {
            Identity::Caller { uid, .. } | Identity::Dedicated { uid, .. } => uid,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Identity::Caller { uid, .. } => format!("uid {uid} (the caller, in a user namespace)"),
            Identity::Dedicated { uid, gid } => format!("dedicated uid {uid} gid {gid}"),
        }
    }
}

/// How many runtimes' ranges lie between [`DEFAULT_BASE`] and 2^31 (ids past it are left
/// alone: some programs take a uid for a signed number).
const RANGES: u32 = ((1u64 << 31) - DEFAULT_BASE as u64) as u32 / SLOTS;

/// The first uid of the range of the runtime on `state_root`: `LNK_SANDBOX_UID_BASE` where
/// set (every runtime shares it then), else one of [`RANGES`] ranges from [`DEFAULT_BASE`] on,
/// picked by the digest of the state root. Two runtimes' sandbox plugins and agents are then
/// not the same kernel identities, so a compromised sandbox plugin, which may act as any uid
/// of its range, reaches no process of another runtime by uid (a cgroup v1 move, say); two
/// state roots whose digests pick the same range (one chance in [`RANGES`]) share it.
pub fn base_for(state_root: &Path) -> Result<u32, String> {
    if std::env::var_os(ENV_BASE).is_some() {
        return base();
    }
    let digest = crate::leftovers::digest(state_root);
    let pick = u64::from_str_radix(&digest, 16).map_err(|e| format!("{digest}: {e}"))?;
    Ok(DEFAULT_BASE + (pick % u64::from(RANGES)) as u32 * SLOTS)
}

/// The first uid of the dedicated range: [`DEFAULT_BASE`] or `LNK_SANDBOX_UID_BASE` (which
/// the host sets for its sandbox plugin to [`base_for`] its state root).
pub fn base() -> Result<u32, String> {
    let Some(v) = std::env::var_os(ENV_BASE) else {
        return Ok(DEFAULT_BASE);
    };
    let base: u32 = v
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{ENV_BASE} must be a number, got {v:?}"))?;
    if base < 1000 || base.checked_add(SLOTS).is_none() {
        return Err(format!(
            "{ENV_BASE}={base} must leave the system range (>= 1000) and fit {SLOTS} slots"
        ));
    }
    Ok(base)
}

/// The agents' slots, kept in one JSON file (`{"agent": slot}`); slot 0 is never given out.
#[derive(Debug)]
pub struct Slots {
    path: PathBuf,
    slots: BTreeMap<String, u32>,
}

impl Slots {
    /// Loads `path` (absent: no agent has a slot yet).
    pub fn load(path: PathBuf) -> Result<Slots, String> {
        let slots = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                format!("{} is damaged ({e}): restore or remove it", path.display())
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Ok(Slots { path, slots })
    }

    /// The agent's slot, allocating and saving the next free one on its first command.
    pub fn slot(&mut self, agent: &str) -> Result<u32, String> {
        if let Some(&s) = self.slots.get(agent) {
            return Ok(s);
        }
        let next = self.slots.values().max().map_or(1, |m| m + 1);
        if next >= FIRST_RESERVED {
            return Err(format!(
                "every one of the {SLOTS} sandbox identities is taken"
            ));
        }
        self.slots.insert(agent.to_owned(), next);
        if let Err(e) = self.save() {
            self.slots.remove(agent);
            return Err(e);
        }
        Ok(next)
    }

    /// Written beside and renamed over, so a crash leaves the old table or the new one.
    fn save(&self) -> Result<(), String> {
        let tmp = self.path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let bytes = serde_json::to_vec_pretty(&self.slots)?;
            let mut f = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut f, &bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot save {}: {e}", self.path.display())
        })
    }
}

/// A user namespace for the commands of a dedicated identity, as a descriptor for bwrap's
/// `--userns`: root and `uid`/`gid` mapped to themselves, no other id. bwrap, run as root,
/// joins it before it clones and so sets up its mounts and namespaces with capabilities in
/// that namespace alone: the plugin needs only `CAP_SETUID`, `CAP_SETGID` and (for a map that
/// holds root) `CAP_SETFCAP` on the host to write the maps. `CAP_SYS_ADMIN`, which it no
/// longer holds, let a process read root processes' environments outside its Landlock domain
/// on the kernels we measured. Root stays mapped because bwrap creates its mount points as
/// root (an unmapped owner is `EOVERFLOW`) and reaches the state root, root's 0700
/// directories, by their owner bits. Inside, root's files look as on the host and other
/// users' as `nobody` (65534); a workspace below another user's 0700 directory cannot be
/// bound.
///
/// The namespace belongs to root (whoever makes it owns it, and bwrap as root must own it to
/// join it), so a root process outside has every capability in it: between a root process
/// and an agent's commands stand Landlock's domains (the plugins'), not the ptrace capability
/// check.
///
/// The namespace is made by a short-lived child (a process can only make a user namespace
/// it then lives in, and this one is multi-threaded); the child waits on a pipe while the
/// maps are written and its namespace opened, then exits.
pub fn user_namespace(uid: u32, gid: u32) -> Result<OwnedFd, UserNamespaceError> {
    let uid_map = format!("0 0 1\n{uid} {uid} 1\n");
    let gid_map = format!("0 0 1\n{gid} {gid} 1\n");
    user_namespace_mapped(&uid_map, &gid_map, None)
}

/// A user namespace with these id maps (`/proc/PID/uid_map` lines), as a descriptor: the one
/// way this crate makes one for another process to join ([`user_namespace`] for a command's
/// bwrap, [`crate::plugin_ns`] for the sandbox plugin itself). Its owner is this process's
/// euid; the maps are written from here, so they may name any id this process's namespace
/// maps and it has `CAP_SETUID`/`CAP_SETGID` over. With an `owner`, the namespace is made by
/// a child that first becomes that uid and gid, so it is the namespace's owner: a process of
/// this one's euid but without capabilities then holds none in it (the owner of a namespace
/// holds every capability in it, and a root-owned namespace's processes could be traced by
/// any uid-0 process, non-dumpable or not).
pub fn user_namespace_mapped(
    uid_map: &str,
    gid_map: &str,
    owner: Option<u32>,
) -> Result<OwnedFd, UserNamespaceError> {
    // One at a time: a child holds a copy of every descriptor of this process until it exits,
    // and two children each holding the other's release pipe would wait for each other.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC);
    let io = |e: rustix::io::Errno| UserNamespaceError::Io(e.into());
    let (ready_r, ready_w) = pipe().map_err(io)?;
    let (release_r, release_w) = pipe().map_err(io)?;
    // SAFETY: clone without CLONE_VM is fork; the child only makes raw system calls on
    // descriptors it owns and exits, never returning into Rust code of this process.
    let new_user = if owner.is_some() {
        0
    } else {
        libc::CLONE_NEWUSER
    };
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (new_user | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid == 0 {
        // SAFETY: raw system calls on descriptors this child holds copies of.
        unsafe {
            if let Some(id) = owner {
                let own = libc::syscall(libc::SYS_setresgid, id, id, id) == 0
                    && libc::syscall(libc::SYS_setresuid, id, id, id) == 0
                    && libc::unshare(libc::CLONE_NEWUSER) == 0;
                if !own {
                    libc::_exit(1);
                }
            }
            namespace_child(
                ready_r.as_raw_fd(),
                ready_w.as_raw_fd(),
                release_r.as_raw_fd(),
                release_w.as_raw_fd(),
            )
        }
    }
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM | libc::ENOSPC | libc::EUSERS | libc::EINVAL) => {
                UserNamespaceError::Refused(e)
            }
            _ => UserNamespaceError::Io(e),
        });
    }
    drop((ready_w, release_r));
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("clone returned a pid");
    let opened = map_and_open(pid, &ready_r, uid_map, gid_map);
    drop(release_w);
    let reaped = loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other,
        }
    };
    let ns = opened?;
    reaped.map_err(io)?;
    Ok(ns)
}

/// How many identities' namespaces [`shared_user_namespace`] keeps (the oldest goes first).
const KEPT_NAMESPACES: usize = 64;

/// [`user_namespace`] for `uid`/`gid`, made on the first command of that identity and kept
/// (the `KEPT_NAMESPACES` most recently made): each call gets a new descriptor of the same
/// namespace. Making one costs a fork of the calling process, which every command of an agent
/// used to pay: about 1.5 ms of the plugin path on the 2-core machine (an interleaved A/B of
/// `cargo xtask bench-sandbox`).
///
/// Sharing it gives commands nothing over one another: its maps are written once and can
/// never change, and no command holds a capability in it (the helper drops every one and
/// sets `no_new_privs` before the command runs). What separates two commands of one identity
/// (their own mount, PID, network, IPC and UTS namespaces, and Landlock domains that refuse
/// ptrace and signals across) is made anew for each by bwrap. What the kernel counts per uid
/// and user namespace (the processes `RLIMIT_NPROC` bounds, pending signals, inotify
/// watches) is now shared by an identity's commands; the plugin runs one agent's commands one
/// at a time and each ends with every process it started, so the limits stay per command.
pub fn shared_user_namespace(uid: u32, gid: u32) -> Result<OwnedFd, UserNamespaceError> {
    static KEPT: std::sync::Mutex<Vec<((u32, u32), OwnedFd)>> = std::sync::Mutex::new(Vec::new());
    let io = |e: rustix::io::Errno| UserNamespaceError::Io(e.into());
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, ns)) = kept.iter().find(|(ids, _)| *ids == (uid, gid)) {
        return rustix::io::fcntl_dupfd_cloexec(ns, 0).map_err(io);
    }
    let ns = user_namespace(uid, gid)?;
    let copy = rustix::io::fcntl_dupfd_cloexec(&ns, 0).map_err(io)?;
    if kept.len() == KEPT_NAMESPACES {
        kept.remove(0);
    }
    kept.push(((uid, gid), ns));
    Ok(copy)
}

/// The namespace's child: closes every descriptor but the two pipe ends it uses (so the
/// release pipe ends when the parent closes it or dies), makes itself dumpable (so the parent
/// may open its namespace: a child inherits a non-dumpable parent's setting), says it is
/// ready and waits for the release. Never returns.
unsafe fn namespace_child(ready_r: i32, ready_w: i32, release_r: i32, release_w: i32) -> ! {
    // SAFETY: raw system calls on descriptors this child holds copies of; errno is this
    // thread's own.
    unsafe {
        libc::close(ready_r);
        libc::close(release_w);
        // Nor any other descriptor of the parent's: a copy of one another thread is writing
        // would keep it open (a program being written could not be executed: ETXTBSY).
        let (low, high) = (ready_w.min(release_r) as u32, ready_w.max(release_r) as u32);
        for (first, last) in [
            (3, low.wrapping_sub(1)),
            (low + 1, high - 1),
            (high + 1, u32::MAX),
        ] {
            if first <= last {
                libc::syscall(libc::SYS_close_range, first, last, 0);
            }
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
        let eintr = || *libc::__errno_location() == libc::EINTR;
        while libc::write(ready_w, b"x".as_ptr().cast(), 1) < 0 && eintr() {}
        let mut b = 0u8;
        while libc::read(release_r, (&mut b as *mut u8).cast(), 1) < 0 && eintr() {}
        libc::_exit(0)
    }
}

/// Writes the child's id maps once it is ready and opens its user namespace.
fn map_and_open(
    pid: rustix::process::Pid,
    ready: &OwnedFd,
    uid_map: &str,
    gid_map: &str,
) -> Result<OwnedFd, UserNamespaceError> {
    let mut b = [0u8; 1];
    let n = loop {
        match rustix::io::read(ready, &mut b) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other.map_err(|e| UserNamespaceError::Io(e.into()))?,
        }
    };
    if n != 1 {
        let gone = std::io::Error::other("the namespace's child exited before it was ready");
        return Err(UserNamespaceError::Io(gone));
    }
    let proc = format!("/proc/{}", pid.as_raw_nonzero());
    let write = |file: &str, map: &str| {
        std::fs::write(format!("{proc}/{file}"), map).map_err(|e| match e.raw_os_error() {
            // The ids are not ours to map: a user namespace of the host's own (a remapped
            // container) that does not hold them.
            Some(libc::EPERM | libc::EINVAL) => UserNamespaceError::Unmapped(e),
            _ => UserNamespaceError::Io(e),
        })
    };
    write("uid_map", uid_map)?;
    write("gid_map", gid_map)?;
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    rustix::fs::open(format!("{proc}/ns/user"), flags, Mode::empty())
        .map_err(|e| UserNamespaceError::Io(e.into()))
}

/// Why [`user_namespace`] made none.
#[derive(Debug, thiserror::Error)]
pub enum UserNamespaceError {
    /// The kernel refused the namespace itself (`user.max_user_namespaces=0`, a container's
    /// seccomp profile, no user namespaces in the kernel).
    #[error(
        "the kernel refuses a user namespace ({0}): raise user.max_user_namespaces or allow \
         clone/unshare of user namespaces (a container's seccomp profile)"
    )]
    Refused(std::io::Error),
    /// Root and the dedicated identity cannot be mapped: Link runs in a user namespace that
    /// does not hold them.
    #[error(
        "root and the dedicated identity cannot be mapped into a user namespace ({0}): where \
         Link runs in a remapped user namespace, set {ENV_BASE} to a range it maps"
    )]
    Unmapped(std::io::Error),
    #[error("cannot make a user namespace: {0}")]
    Io(std::io::Error),
}

impl UserNamespaceError {
    /// Whether this machine cannot do it (rather than something failing here).
    pub fn machine_cannot(&self) -> bool {
        self.cause().is_some()
    }

    /// What the machine lacks, when it is the machine and not this process.
    pub fn cause(&self) -> Option<link_report::probe::Cause> {
        use link_report::probe::Cause;
        match self {
            UserNamespaceError::Refused(_) => Some(Cause::UserNamespacesBlocked),
            UserNamespaceError::Unmapped(_) => Some(Cause::UserNamespacesUnmapped),
            UserNamespaceError::Io(_) => None,
        }
    }
}

/// What the files under a directory take: allocated bytes (so a sparse file counts what it
/// uses) and entries (each name, the directory itself not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub entries: u64,
}

impl Usage {
    fn count(&mut self, stat: &rustix::fs::Stat) {
        self.bytes = self
            .bytes
            .saturating_add((stat.st_blocks as u64).saturating_mul(512));
        self.entries += 1;
    }

    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            bytes: self.bytes.saturating_add(other.bytes),
            entries: self.entries.saturating_add(other.entries),
        }
    }
}

/// Measures what is under `dir` and, given an identity, gives every entry not already its own
/// to it.
pub fn prepare(dir: &Path, owner: Option<(u32, u32)>) -> std::io::Result<Usage> {
    let root = open_dir(rustix::fs::CWD, dir)?;
    if let Some((uid, gid)) = owner {
        rustix::fs::fchown(
            &root,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )?;
    }
    let mut usage = Usage::default();
    walk(root, &mut |parent, name, stat| {
        usage.count(stat);
        let Some((uid, gid)) = owner else {
            return Ok(());
        };
        if stat.st_uid != uid || stat.st_gid != gid {
            let (u, g) = (
                rustix::fs::Uid::from_raw(uid),
                rustix::fs::Gid::from_raw(gid),
            );
            rustix::fs::chownat(parent, name, Some(u), Some(g), AtFlags::SYMLINK_NOFOLLOW)?;
        }
        Ok(())
    })?;
    Ok(usage)
}

/// What the walk of `dir` saw while a command may be changing it, counted up to an error
/// too. (A walk racing the command's renames may count a moved entry twice: at that
/// command's own cost.)
pub fn usage_seen(dir: &Path) -> Usage {
    let mut usage = Usage::default();
    if let Ok(root) = open_dir(rustix::fs::CWD, dir) {
        let _ = walk(root, &mut |_, _, stat| {
            usage.count(stat);
            Ok(())
        });
    }
    usage
}

/// Clears setuid and setgid on every file and directory under `dir`; returns how many had
/// either bit.
pub fn clear_setid(dir: &Path) -> std::io::Result<usize> {
    let root = open_dir(rustix::fs::CWD, dir)?;
    let mut cleared = 0;
    walk(root, &mut |parent, name, stat| {
        let kind = stat.st_mode & libc::S_IFMT;
        if stat.st_mode & (libc::S_ISUID | libc::S_ISGID) == 0
            || (kind != libc::S_IFREG && kind != libc::S_IFDIR)
        {
            return Ok(());
        }
        // Opened without following, then changed through the descriptor: the entry cannot be
        // swapped for a symlink between the look and the change.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let keep = Mode::from_raw_mode(stat.st_mode & 0o1777);
        match rustix::fs::openat(parent, name, flags | OFlags::NOCTTY, Mode::empty()) {
            Ok(fd) => {
                let now = rustix::fs::fstat(&fd)?;
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(now.st_mode & 0o1777))?;
            }
            // A file its owner may not read (mode 4000, say) cannot be opened by an ordinary
            // user: changed by name, which `statat` just saw is not a symlink.
            Err(rustix::io::Errno::ACCESS) => {
                rustix::fs::chmodat(parent, name, keep, AtFlags::empty())?
            }
            Err(e) => return Err(e.into()),
        }
        cleared += 1;
        Ok(())
    })?;
    Ok(cleared)
}

type Visit<'a> = dyn FnMut(BorrowedFd<'_>, &CStr, &rustix::fs::Stat) -> std::io::Result<()> + 'a;

/// A directory of the walk: which one it is (so coming back up through `..` can be checked)
/// and its subdirectories not visited yet.
struct Frame {
    id: (u64, u64),
    pending: Vec<CString>,
}

/// Depth-first over `root`, calling `visit` for every entry. Iterative and holding two
/// descriptors at most, whatever the depth: it goes down by name and comes back up through
/// `..`, checked to be the directory it came from. An entry that fails is recorded and the
/// walk goes on, so one bad entry never leaves the rest unvisited; the first error is
/// returned at the end.
fn walk(root: OwnedFd, visit: &mut Visit<'_>) -> std::io::Result<()> {
    let mut first_error = None;
    let mut cur = root;
    let mut frame = scan(&cur, visit, &mut first_error)?;
    let mut stack: Vec<Frame> = Vec::new();
    loop {
        if let Some(name) = frame.pending.pop() {
            match open_dir(&cur, name.as_c_str()) {
                Ok(child) => {
                    let child_frame = scan(&child, visit, &mut first_error)?;
                    stack.push(std::mem::replace(&mut frame, child_frame));
                    cur = child;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            continue;
        }
        let Some(parent) = stack.pop() else { break };
        let up = open_dir(&cur, c"..")?;
        if id_of(&rustix::fs::fstat(&up)?) != parent.id {
            return Err(std::io::Error::other("a directory moved during the walk"));
        }
        cur = up;
        frame = parent;
    }
    first_error.map_or(Ok(()), Err)
}

/// Visits every entry of `dir`; returns its frame with the subdirectories to descend into.
fn scan(
    dir: &OwnedFd,
    visit: &mut Visit<'_>,
    first_error: &mut Option<std::io::Error>,
) -> std::io::Result<Frame> {
    let id = id_of(&rustix::fs::fstat(dir)?);
    let mut pending = Vec::new();
    let mut entries = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(s) => s,
            // Removed meanwhile: nothing to do for it.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => {
                first_error.get_or_insert(e.into());
                continue;
            }
        };
        if let Err(e) = visit(dir.as_fd(), name, &stat) {
            first_error.get_or_insert(e);
        }
        if stat.st_mode & libc::S_IFMT == libc::S_IFDIR {
            pending.push(name.to_owned());
        }
    }
    Ok(Frame { id, pending })
}

fn id_of(stat: &rustix::fs::Stat) -> (u64, u64) {
    (stat.st_dev, stat.st_ino)
}

fn open_dir<P: rustix::path::Arg>(at: impl AsFd, path: P) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(at, path, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_root_picks_a_range_below_2_31() {
        if std::env::var_os(ENV_BASE).is_some() {
            return;
        }
        let a = base_for(Path::new("/srv/link-a")).unwrap();
        let b = base_for(Path::new("/srv/link-b")).unwrap();
        assert_ne!(a, b);
        for base in [a, b] {
            assert!(
                base >= DEFAULT_BASE && (base - DEFAULT_BASE).is_multiple_of(SLOTS),
                "{base}"
            );
            assert!(u64::from(base) + u64::from(SLOTS) <= 1 << 31, "{base}");
        }
        // The same directory under another spelling picks the same range.
        assert_eq!(base_for(Path::new("/srv/link-a/")).unwrap(), a);
    }
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn setid_bits_are_cleared_and_symlinks_not_followed() {
        let dir = std::env::temp_dir().join(format!("lnk-setid-{}", std::process::id()));
        let outside = dir.with_extension("outside");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(&outside, b"x").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let file = dir.join("sub/tool");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o6755)).unwrap();
        symlink(&outside, dir.join("link")).unwrap();
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();

        assert_eq!(clear_setid(&dir).unwrap(), 1);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&file), 0o755);
        assert_eq!(mode(&plain), 0o755);
        assert_eq!(
            mode(&outside),
            0o4755,
            "the symlink's target is not the walk's"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }

    #[test]
    fn a_tree_deeper_than_the_descriptor_limit_is_walked_whole() {
        let dir = std::env::temp_dir().join(format!("lnk-deep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Built by descriptor: the path itself would pass PATH_MAX long before the bottom.
        let mut fd = open_dir(rustix::fs::CWD, &dir).unwrap();
        for _ in 0..500 {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = open_dir(&fd, "d").unwrap();
        }
        let bottom = rustix::fs::openat(
            &fd,
            "tool",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o755),
        )
        .unwrap();
        rustix::fs::fchmod(&bottom, Mode::from_raw_mode(0o4755)).unwrap();
        // 500 levels under a limit of 64 descriptors: only a walk that does not hold one per
        // level gets to the bottom.
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let before = getrlimit(Resource::Nofile);
        let low = Rlimit {
            current: Some(64),
            maximum: before.maximum,
        };
        setrlimit(Resource::Nofile, low).unwrap();
        let cleared = clear_setid(&dir);
        setrlimit(Resource::Nofile, before).unwrap();
        assert_eq!(cleared.unwrap(), 1);
        let mode = rustix::fs::fstat(&bottom).unwrap().st_mode & 0o7777;
        assert_eq!(mode, 0o755);
        drop((fd, bottom));
        // remove_dir_all goes by path, too deep for it; GNU rm walks by descriptor.
        let rm = std::process::Command::new("rm")
            .arg("-rf")
            .arg(&dir)
            .status();
        assert!(rm.unwrap().success());
    }

    /// Many at once, from many threads (as the plugin runs commands): each call gives a user
    /// namespace of its own and none hangs (two children made at once, each holding the
    /// other's release pipe, would wait for each other).
    #[test]
    fn user_namespaces_are_made_concurrently() {
        if !rustix::process::geteuid().is_root() {
            return; // As an ordinary user commands get no dedicated identity.
        }
        let own = std::fs::read_link("/proc/self/ns/user").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        for t in 0..8u32 {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..20 {
                    let id = DEFAULT_BASE + 1 + t * 100 + i;
                    let ns = user_namespace(id, id).map(|fd| {
                        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
                    });
                    tx.send(ns.map_err(|e| e.to_string())).unwrap();
                }
            });
        }
        drop(tx);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..160 {
            // Generous: a hang fails here rather than blocking the run.
            let ns = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("a hang");
            let ns = ns.unwrap();
            assert!(ns.to_string_lossy().starts_with("user:["), "{ns:?}");
            assert_ne!(ns, own);
            seen.insert(ns);
        }
        assert!(seen.len() > 1, "{seen:?}");
    }

    /// One namespace per identity, each call a descriptor of its own of it, closed on exec.
    #[test]
    fn an_identitys_namespace_is_made_once_and_handed_out_again() {
        if !rustix::process::geteuid().is_root() {
            return; // As an ordinary user commands get no dedicated identity.
        }
        let ns = |id: u32| {
            let fd = shared_user_namespace(id, id).unwrap();
            let flags = rustix::io::fcntl_getfd(&fd).unwrap();
            assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
            std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
        };
        let (id, other) = (DEFAULT_BASE + 2001, DEFAULT_BASE + 2002);
        let first = ns(id);
        assert_eq!(ns(id), first);
        assert_ne!(ns(other), first);
    }

    #[test]
    fn each_plugin_has_a_reserved_uid_of_its_own() {
        let base = DEFAULT_BASE;
        let mut seen = std::collections::BTreeSet::new();
        for plugin in link_protocol::manifest::ALL {
            let uid = plugin_uid(base, plugin.program).expect("every plugin has one");
            assert!(uid >= base + FIRST_RESERVED && uid < base + SLOTS, "{uid}");
            assert!(seen.insert(uid), "{} shares {uid}", plugin.program);
        }
        assert_eq!(
            plugin_uid(base, link_protocol::manifest::SANDBOX.program),
            Some(base + PLUGIN_SLOT)
        );
        assert_eq!(plugin_uid(base, "link"), None);
    }

    #[test]
    fn slots_are_allocated_once_and_kept() {
        let path = std::env::temp_dir().join(format!("lnk-slots-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut s = Slots::load(path.clone()).unwrap();
        assert_eq!((s.slot("a").unwrap(), s.slot("b").unwrap()), (1, 2));
        assert_eq!(s.slot("a").unwrap(), 1);
        let mut again = Slots::load(path.clone()).unwrap();
        assert_eq!(again.slot("b").unwrap(), 2);
        assert_eq!(again.slot("c").unwrap(), 3);
        std::fs::write(&path, b"{").unwrap();
        assert!(Slots::load(path.clone()).unwrap_err().contains("damaged"));
        std::fs::remove_file(&path).unwrap();
    }
}
