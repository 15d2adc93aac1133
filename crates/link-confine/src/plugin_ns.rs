//! The sandbox plugin's own user namespace, as root (issue 42: a compromised sandbox plugin
//! was root on the machine: it wrote `/proc/sys/kernel/core_pattern` and read every file).
//!
//! The plugin cannot take Landlock filesystem rules (its bwrap mounts), so what bounds it is
//! who it is. As root the host makes it a user namespace ([`userns::user_namespace_mapped`],
//! the same maker as its commands' namespaces) mapping only two things: the namespace's root to
//! the plugin's own unprivileged uid and gid on the host ([`crate::identity::PLUGIN_SLOT`] of the
//! dedicated range), and the agents' range to itself. The plugin joins it between fork and
//! exec and becomes that root ([`PluginNamespace::join`]). Every capability it keeps is then
//! over that namespace only: it still makes its commands' nested namespaces (`CAP_SETUID`,
//! `CAP_SETGID`, `CAP_SETFCAP` there) and hands workspaces to agents' uids (`CAP_CHOWN`,
//! `CAP_FOWNER`, `CAP_DAC_OVERRIDE`), but on the host it is an ordinary uid: a sysctl or a file
//! of root or of another user is refused by the owner bits (`EACCES`), and no capability
//! applies to an inode whose owner the namespace does not map.
//!
//! What it must reach is mounted for it in its view ([`crate::view`]), at the same paths,
//! before it joins: the state root (or its first ancestor the plugin's uid may not search,
//! such as root's 0700 home) is covered with an empty read-only tmpfs in which only the
//! directories it serves are attached again — its home, data area and socket directory and the
//! roots of the agents' workspaces and homes, each an idmapped mount through the plugin's
//! namespace (files on disk of host root show as the plugin's own root, so it and its bwrap
//! reach them by owner bits, and what they create is root's on disk as before) — and the
//! programs directory if it lies beneath. The secret store, the tokens, the control key, the
//! pids file and the other plugins' sockets are not even there. The directories where other
//! programs keep files ([`SHARED`]: `/tmp`, `/var/tmp`, `/dev/shm`, and an ordinary user's
//! `/run/user/<uid>` and home) are covered the same way ([`covers`]), so neither a file left
//! world-readable there nor a user's agent socket is in its view.
//!
//! What still needs the initial namespace is done by the host before the plugin joins: the
//! mount namespace and its read-only, device and shed mounts, the network namespace without
//! interfaces, the idmapped mounts. Nothing of the plugin's work does (no cgroup, quota or
//! device is touched by it: limits are rlimits set by the helper inside each command).
//!
//! As root every Landlock-confined plugin is made the same way
//! ([`PluginNamespace::prepare_plugin`]): its root mapped to its own uid
//! ([`crate::identity::plugin_uid`], one of the reserved top slots of the range), the agents'
//! slots too for a plugin that keeps `DAC_OVERRIDE` or `FOWNER` over their files, and its own
//! directories, the areas it reads or writes and the state root's `run/` attached idmapped
//! (so, unlike the sandbox plugin, it has the pids file and the host's sockets in its view,
//! its own by owner bits there: its Landlock rules and the sockets' peer checks decide).
//!
//! As an ordinary user the plugin is that user, in a namespace mapping only itself
//! ([`crate::view`]): it joins no other, and its trees are not idmapped, but it sees the same
//! covered tree, so it reads none of that user's files outside what it serves (the secret
//! store, the tokens, the control key, the rest of that user's home).

use crate::identity::{FIRST_RESERVED, PLUGIN_SLOT};
use crate::userns::{self, UserNamespaceError};
use rustix::fd::{AsRawFd, OwnedFd};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `AT_RECURSIVE`, as the mount API's flags take it (libc has it as a `c_int`).
const RECURSIVE: libc::c_uint = libc::AT_RECURSIVE as libc::c_uint;

/// Trees attached in the cover at most (the plugin's own three, the two roots it serves,
/// the programs).
const MAX_TREES: usize = 8;

/// The plugin's identity on the host as root: the last slot of its runtime's range (from
/// [`crate::identity::base_for`]).
pub fn plugin_id(base: u32) -> u32 {
    base + PLUGIN_SLOT
}

/// The namespace's maps: its root to the plugin's id, the agents' slots (1 up to the
/// reserved ones, [`FIRST_RESERVED`]) to themselves. Slot 0 (the probe and `exec`, run by the
/// host) is not mapped.
fn map(base: u32) -> String {
    plugin_map(base, base + PLUGIN_SLOT, true)
}

/// A plugin's namespace maps: its root to `id`, and with `agents` the agents' slots (1 up to
/// the reserved ones, [`FIRST_RESERVED`]) to themselves.
fn plugin_map(base: u32, id: u32, agents: bool) -> String {
    let first = base + 1;
    match agents {
        true => format!("0 {id} 1\n{first} {first} {}\n", FIRST_RESERVED - 1),
        false => format!("0 {id} 1\n"),
    }
}

/// A plugin's own user namespace as root, by what it maps and who owns it: known from the
/// runtime's range alone, so the host can make every plugin's ahead, on a thread of its own,
/// rather than one fork at a time on the thread that prepares the plugins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnNamespace {
    map: String,
    owner: u32,
}

impl OwnNamespace {
    /// The sandbox plugin's: its root to [`plugin_id`], the agents' slots to themselves.
    pub fn sandbox(base: u32) -> OwnNamespace {
        OwnNamespace {
            map: map(base),
            owner: plugin_id(base),
        }
    }

    /// A Landlock-confined plugin's: its root to `id` (its own uid on the host,
    /// [`crate::identity::plugin_uid`]) and, with `agents` (a plugin that keeps
    /// `DAC_OVERRIDE` or `FOWNER` over the agents' files), the agents' slots of the range from
    /// `base` to themselves.
    pub fn plugin(base: u32, id: u32, agents: bool) -> OwnNamespace {
        OwnNamespace {
            map: plugin_map(base, id, agents),
            owner: id,
        }
    }

    /// Makes it, owned by its uid (not root: see [`userns::user_namespace_mapped`]), by a
    /// fork of this process.
    pub fn make(&self) -> Result<OwnedFd, UserNamespaceError> {
        userns::user_namespace_mapped(&self.map, &self.map, Some(self.owner))
    }

    /// `ahead` (the caller made it from this value), or made now.
    fn made(&self, ahead: Option<OwnedFd>) -> Result<OwnedFd, UserNamespaceError> {
        ahead.map_or_else(|| self.make(), Ok)
    }
}

/// Where other programs of the machine (and an ordinary user's other programs) keep files the
/// plugin serves nothing from: covered too ([`covers`]), so a file left readable there (a
/// 0644 file in `/tmp`, another runtime's scratch, a user's agent socket in `/run/user`) is not
/// in its view. An ordinary user's `/run/user/<uid>` and home are added to these.
const SHARED: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// A directory covered with an empty tmpfs, and the way down to each tree beneath it.
#[derive(Debug)]
struct Cover {
    path: CString,
    /// Made in the cover, parents first.
    skeleton: Vec<CString>,
}

/// A directory attached again in a cover, at its own path.
#[derive(Debug)]
struct Tree {
    path: CString,
    /// Through the plugin's namespace: what it serves; the programs are not.
    idmapped: bool,
}

/// The plugin's namespace and the tree it sees, prepared in the parent; built and joined in
/// the child between fork and exec, with system calls only.
#[derive(Debug)]
pub struct PluginNamespace {
    /// As root: the namespace to join. An ordinary user's view makes its own.
    ns: Option<OwnedFd>,
    /// The state root's cover first, then the [`SHARED`] directories outside it.
    covers: Vec<Cover>,
    trees: Vec<Tree>,
    /// The process preparing it, the plugin's parent: a change of credentials disarms the
    /// parent-death signal, which [`PluginNamespace::join`] arms again.
    parent: rustix::process::Pid,
}

/// Why the plugin's namespace could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PluginNamespaceError {
    #[error("the plugin's user namespace: {0}")]
    Namespace(#[from] UserNamespaceError),
    #[error(
        "{0} is not searchable by others (mode {1:o}), so a plugin's uid cannot reach its \
         program: put the programs where every directory on the way is searchable"
    )]
    Unreachable(PathBuf, u32),
    #[error(
        "{0} must be named by its real path ({1}): a plugin sees only the real directories \
         beneath {2}"
    )]
    NotReal(PathBuf, PathBuf, PathBuf),
    #[error(
        "{0} cannot be mounted idmapped ({1}): as root, every plugin reaches its directories \
         through idmapped mounts; put the state root on a filesystem that supports them (ext4, \
         xfs, btrfs; tmpfs from Linux 6.3) on Linux 5.12 or later"
    )]
    NoIdmap(PathBuf, io::Error),
    #[error("the plugin's view: {0}")]
    Io(#[from] io::Error),
}

impl PluginNamespace {
    /// The tree in which `served` (the plugin's own directories and the roots it serves; each
    /// must exist) and the directory of `program` are reachable, and as root the sandbox
    /// plugin's namespace `own` ([`OwnNamespace::sandbox`]: `ahead` if made ahead, or made
    /// here).
    pub fn prepare(
        served: &[PathBuf],
        program: &Path,
        own: &OwnNamespace,
        ahead: Option<OwnedFd>,
    ) -> Result<PluginNamespace, PluginNamespaceError> {
        let ns = match rustix::process::geteuid().is_root() {
            true => Some(own.made(ahead)?),
            false => None,
        };
        Self::prepare_in(served, &[], program, ns)
    }

    /// As root, for a Landlock-confined plugin (issue 42, "plugins are not root"): its own
    /// namespace `own` ([`OwnNamespace::plugin`]; `ahead` if made ahead, or made here) and
    /// the covered tree in which `served` (writable) and `readable` are attached idmapped
    /// through it, with the directory of `program`.
    pub fn prepare_plugin(
        served: &[PathBuf],
        readable: &[PathBuf],
        program: &Path,
        own: &OwnNamespace,
        ahead: Option<OwnedFd>,
    ) -> Result<PluginNamespace, PluginNamespaceError> {
        Self::prepare_in(served, readable, program, Some(own.made(ahead)?))
    }

    fn prepare_in(
        served: &[PathBuf],
        readable: &[PathBuf],
        program: &Path,
        ns: Option<OwnedFd>,
    ) -> Result<PluginNamespace, PluginNamespaceError> {
        let root = rustix::process::geteuid().is_root();
        let all: Vec<PathBuf> = served.iter().chain(readable).cloned().collect();
        // An ordinary user's plugin is that user: its first own directory on the way (its
        // home, say) is covered too, so no other file of that user there is in its view.
        let mine = (!root).then(|| rustix::process::geteuid().as_raw());
        let covers = covers(cover(&all, mine)?, &shared_dirs(mine));
        let mut trees: Vec<(PathBuf, bool)> = Vec::new();
        for dir in &all {
            let real = dir.canonicalize()?;
            if &real != dir {
                return Err(PluginNamespaceError::NotReal(
                    dir.clone(),
                    real,
                    covers[0].clone(),
                ));
            }
            trees.push((real, root));
        }
        // A tree beneath another is attached with it (a plugin's socket directory in `run/`).
        let outer: Vec<PathBuf> = trees.iter().map(|(p, _)| p.clone()).collect();
        trees.sort();
        trees.dedup();
        trees.retain(|(p, _)| !outer.iter().any(|o| o != p && p.starts_with(o)));
        let programs = program.parent().unwrap_or(Path::new("/")).canonicalize()?;
        if trees.iter().any(|(t, _)| programs.starts_with(t)) {
            // Reached through a tree already attached.
        } else if covers.iter().any(|c| programs.starts_with(c)) {
            trees.push((programs, false));
        } else if let Some((dir, mode)) = unsearchable(&programs)?.filter(|_| root) {
            return Err(PluginNamespaceError::Unreachable(dir, mode));
        }
        if trees.len() > MAX_TREES {
            return Err(io::Error::other("too many directories for a plugin's view").into());
        }
        // Each idmapped copy made once here, where a refusal can be named (a filesystem
        // without idmapped mounts: NFS, say), rather than as a bare errno from the child.
        // Once per filesystem and process: closing a detached copy costs the kernel an RCU
        // grace period (milliseconds), and as root every plugin has such trees (issue 42).
        static CHECKED: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());
        if let Some(ns) = &ns {
            for (dir, _) in trees.iter().filter(|(_, idmapped)| *idmapped) {
                use std::os::unix::fs::MetadataExt;
                let dev = std::fs::metadata(dir)?.dev();
                let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
                if checked.contains(&dev) {
                    continue;
                }
                let mut fd = -1;
                let made = clone_tree(&c_path(dir)?, Some(ns.as_raw_fd()), &mut fd);
                if fd >= 0 {
                    // SAFETY: the descriptor clone_tree opened; its detached copy goes with it.
                    unsafe { libc::close(fd) };
                }
                made.map_err(|e| PluginNamespaceError::NoIdmap(dir.clone(), e))?;
                checked.push(dev);
            }
        }
        let paths: Vec<&Path> = trees.iter().map(|(p, _)| p.as_path()).collect();
        Ok(PluginNamespace {
            parent: rustix::process::getpid(),
            ns,
            covers: covers
                .iter()
                .map(|c| {
                    Ok(Cover {
                        path: c_path(c)?,
                        skeleton: skeleton(c, &paths)
                            .iter()
                            .map(|p| c_path(p))
                            .collect::<io::Result<_>>()?,
                    })
                })
                .collect::<io::Result<_>>()?,
            trees: trees
                .iter()
                .map(|(p, idmapped)| {
                    Ok(Tree {
                        path: c_path(p)?,
                        idmapped: *idmapped,
                    })
                })
                .collect::<io::Result<_>>()?,
        })
    }

    /// In the view's new mount namespace, still as the host's root: clones each tree (idmapped
    /// through the plugin's namespace where it serves it), covers each cover with an empty
    /// tmpfs, makes the way down to each tree and attaches it there. The view's read-only
    /// step, after, applies to all of it.
    pub fn build_tree(&self) -> io::Result<()> {
        let mut fds = [-1; MAX_TREES];
        let result = self.build_with(&mut fds);
        for fd in fds.into_iter().filter(|fd| *fd >= 0) {
            // SAFETY: descriptors this function opened.
            unsafe { libc::close(fd) };
        }
        result
    }

    fn build_with(&self, fds: &mut [libc::c_int; MAX_TREES]) -> io::Result<()> {
        for (tree, fd) in self.trees.iter().zip(fds.iter_mut()) {
            let idmap = self.ns.as_ref().filter(|_| tree.idmapped);
            clone_tree(&tree.path, idmap.map(|ns| ns.as_raw_fd()), fd)?;
        }
        for cover in &self.covers {
            cover.mount()?;
        }
        for (tree, fd) in self.trees.iter().zip(fds.iter()) {
            // SAFETY: a descriptor, an empty path and a NUL-terminated target.
            check(unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    *fd,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    tree.path.as_ptr(),
                    libc::MOVE_MOUNT_F_EMPTY_PATH,
                )
            })?;
        }
        Ok(())
    }

    /// Covers none of `gone` (mounts the view's tree is without, the directory beneath
    /// them the parent filesystem's, as when each view detached them itself).
    pub(crate) fn uncover(&mut self, gone: &[CString]) {
        self.covers.retain(|c| !gone.contains(&c.path));
    }

    /// Whether `dir` is one of the trees the view attached (a mount of its own already).
    pub fn attached(&self, dir: &std::ffi::CStr) -> bool {
        self.trees.iter().any(|t| t.path.as_c_str() == dir)
    }

    /// Joins the namespace and becomes its root: no supplementary group (root's would still
    /// count on the host), gid and uid 0 there, the plugin's own on the host. The last step of
    /// the view; the capabilities are shed after it, in the namespace.
    pub fn join(&self) -> io::Result<()> {
        let Some(ns) = &self.ns else { return Ok(()) };
        // SAFETY: setns on a descriptor this value owns, then raw id calls (not libc's
        // wrappers, which signal every thread: the child has one).
        unsafe {
            check(libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUSER) as libc::c_long)?;
            check(libc::syscall(
                libc::SYS_setgroups,
                0,
                std::ptr::null::<libc::gid_t>(),
            ))?;
            check(libc::syscall(libc::SYS_setresgid, 0, 0, 0))?;
            check(libc::syscall(libc::SYS_setresuid, 0, 0, 0))?;
        }
        // The kernel clears the parent-death signal when the credentials change, and the host
        // armed it before (`plugin dies with its host`): armed again, the parent checked again.
        link_os::reaper::die_with_parent(self.parent)
    }
}

impl Cover {
    /// An empty tmpfs over the cover, and the way down to its trees in it.
    fn mount(&self) -> io::Result<()> {
        // SAFETY: NUL-terminated strings.
        check(unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                self.path.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"mode=0755,size=64k".as_ptr().cast(),
            ) as libc::c_long
        })?;
        for dir in &self.skeleton {
            // SAFETY: a NUL-terminated path. Searchable by the plugin's uid whatever the umask.
            unsafe {
                check(libc::mkdir(dir.as_ptr(), 0o755) as libc::c_long)?;
                check(libc::chmod(dir.as_ptr(), 0o755) as libc::c_long)?;
            }
        }
        Ok(())
    }
}

/// A detached copy of the mounts at `path` and below, in `fd`, idmapped through `userns` if
/// given. System calls only (the view's child calls it between fork and exec).
fn clone_tree(
    path: &std::ffi::CStr,
    userns: Option<libc::c_int>,
    fd: &mut libc::c_int,
) -> io::Result<()> {
    // Not through a symlink put in place of the tree (`rules::open_dir_not_link`).
    let dir = crate::rules::open_dir_not_link(path)?;
    *fd = detached(dir.as_raw_fd(), RECURSIVE)?;
    let Some(userns) = userns else { return Ok(()) };
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns as u64,
    };
    // SAFETY: a descriptor, an empty path and a mount_attr of the size passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            *fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | RECURSIVE,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    })
}

/// A detached copy of the mount at `dir` (with those below it: `recursive` is
/// `AT_RECURSIVE`), whose root is `dir`: from it `..` leads nowhere above. System calls only.
pub(crate) fn detached(dir: libc::c_int, recursive: libc::c_uint) -> io::Result<libc::c_int> {
    let flags = libc::OPEN_TREE_CLONE
        | recursive
        | libc::AT_EMPTY_PATH as libc::c_uint
        | libc::O_CLOEXEC as libc::c_uint;
    // SAFETY: a descriptor, an empty NUL-terminated path and flags.
    let opened = unsafe { libc::syscall(libc::SYS_open_tree, dir, c"".as_ptr(), flags) };
    check(opened)?;
    Ok(opened as libc::c_int)
}

/// [`detached`] of the directory `path` for a process that may make no mount (an ordinary
/// user): a short-lived child makes a user and a mount namespace of its own, where it may,
/// and the detached copy there; this process takes the descriptor from it (`pidfd_getfd`:
/// the child's namespace is this process's euid's, so it may) before the child exits. The
/// copy outlives the child's namespace: a detached mount lives while a descriptor holds it.
pub(crate) fn detached_by_child(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC);
    let (ready_r, ready_w) = pipe()?;
    let (release_r, release_w) = pipe()?;
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::SIGCHLD;
    // SAFETY: clone without CLONE_VM is fork; the child makes raw system calls on values
    // prepared before it and exits, never returning into Rust code of this process.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags as libc::c_ulong, 0usize, 0usize) };
    if pid == 0 {
        // SAFETY: raw system calls on descriptors and a path this child holds copies of.
        unsafe {
            let how = libc::OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
            let fd = libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), how);
            let said: i32 = match fd {
                fd if fd >= 0 => fd as i32,
                _ => -*libc::__errno_location(),
            };
            libc::write(ready_w.as_raw_fd(), (&said as *const i32).cast(), 4);
            let mut byte = 0u8;
            libc::read(release_r.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    check(pid)?;
    drop((ready_w, release_r));
    let taken = take_from(pid as libc::pid_t, &ready_r);
    // A byte, not the pipe's end: a child another thread forks meanwhile holds a copy of it.
    let _ = rustix::io::write(&release_w, b"x");
    drop(release_w);
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = userns::reap(pid);
    }
    taken
}

/// The descriptor the child `pid` made, whose number (or `-errno`) it writes to `said`.
fn take_from(pid: libc::pid_t, said: &OwnedFd) -> io::Result<OwnedFd> {
    let mut number = [0u8; 4];
    if rustix::io::read(said, &mut number)? != number.len() {
        return Err(io::Error::other(
            "the child ended before it said what it made",
        ));
    }
    let number = i32::from_ne_bytes(number);
    if number < 0 {
        return Err(io::Error::from_raw_os_error(-number));
    }
    // SAFETY: system calls on numbers; each result is checked.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        check(pidfd)?;
        let pidfd = <OwnedFd as rustix::fd::FromRawFd>::from_raw_fd(pidfd as i32);
        let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), number, 0);
        check(fd)?;
        Ok(<OwnedFd as rustix::fd::FromRawFd>::from_raw_fd(fd as i32))
    }
}

/// What is covered: the first directory, from `/` down to the one holding every served
/// directory, that others may not search (root's 0700 home, or the 0700 state root) or that
/// `mine` owns (an ordinary user's home), or that directory itself.
fn cover(served: &[PathBuf], mine: Option<u32>) -> io::Result<PathBuf> {
    let mut common: Option<PathBuf> = None;
    for dir in served {
        let dir = dir.canonicalize()?;
        common = Some(match common {
            None => dir,
            Some(c) => c
                .ancestors()
                .find(|a| dir.starts_with(a))
                .unwrap_or(Path::new("/"))
                .to_path_buf(),
        });
    }
    let common = common.ok_or_else(|| io::Error::other("the plugin is given no directory"))?;
    if common == Path::new("/") {
        return Err(io::Error::other(
            "the plugin's directories share no directory but /",
        ));
    }
    if let Some(uid) = mine {
        use std::os::unix::fs::MetadataExt;
        for a in common
            .ancestors()
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .skip(1)
        {
            let meta = std::fs::metadata(a)?;
            if meta.uid() == uid || meta.mode() & 0o001 == 0 {
                return Ok(a.to_path_buf());
            }
        }
    }
    Ok(unsearchable(&common)?.map_or(common, |(dir, _)| dir))
}

/// The state root's cover, or the [`SHARED`] directory holding it (whose tmpfs then hides the
/// rest of it), then every other shared directory not already beneath a cover.
fn covers(state: PathBuf, shared: &[PathBuf]) -> Vec<PathBuf> {
    let mut shared = shared.to_vec();
    shared.sort_by_key(|s| s.components().count());
    let first = shared
        .iter()
        .find(|s| state.starts_with(s))
        .cloned()
        .unwrap_or(state);
    let mut covers = vec![first];
    for dir in shared {
        if !covers.iter().any(|c| dir.starts_with(c)) {
            covers.push(dir);
        }
    }
    covers
}

/// The [`SHARED`] directories there are (by their real paths), and an ordinary user's
/// runtime directory and home.
fn shared_dirs(mine: Option<u32>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = SHARED.iter().map(PathBuf::from).collect();
    if let Some(uid) = mine {
        dirs.push(PathBuf::from(format!("/run/user/{uid}")));
        dirs.extend(home_of(uid));
    }
    dirs.into_iter()
        .filter_map(|d| d.canonicalize().ok())
        .filter(|d| d.is_dir() && d != Path::new("/"))
        .collect()
}

/// `uid`'s home as the user database gives it (not `HOME`, which the caller sets).
fn home_of(uid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid out-parameter (null pointers).
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: the buffer and out-parameters live across the call; on success `pw_dir` points
    // into `buf` as a NUL-terminated string.
    let ret = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if ret != 0 || found.is_null() || pwd.pw_dir.is_null() {
        return None;
    }
    // SAFETY: see above.
    let dir = unsafe { std::ffi::CStr::from_ptr(pwd.pw_dir) };
    Some(PathBuf::from(std::ffi::OsString::from_vec(
        dir.to_bytes().to_vec(),
    )))
}

/// The directories to make in `cover`, parents first, so each of `trees` beneath it can be
/// attached at its own path.
fn skeleton(cover: &Path, trees: &[&Path]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = trees
        .iter()
        .flat_map(|t| t.ancestors())
        .filter(|a| a.starts_with(cover) && *a != cover)
        .map(Path::to_path_buf)
        .collect();
    // By depth, then by path, so that each appears once.
    dirs.sort_by(|a, b| (a.components().count(), a).cmp(&(b.components().count(), b)));
    dirs.dedup();
    dirs
}

/// The first directory from `/` down to `dir` (included) that others may not search.
fn unsearchable(dir: &Path) -> io::Result<Option<(PathBuf, u32)>> {
    use std::os::unix::fs::PermissionsExt;
    let ancestors: Vec<&Path> = dir.ancestors().collect();
    for a in ancestors.into_iter().rev().skip(1) {
        let mode = std::fs::metadata(a)?.permissions().mode();
        if mode & 0o001 == 0 {
            return Ok(Some((a.to_path_buf(), mode & 0o7777)));
        }
    }
    Ok(None)
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

fn check(ret: libc::c_long) -> io::Result<()> {
    if ret >= 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_maps_itself_as_root_and_the_agents_to_themselves() {
        let base = crate::identity::DEFAULT_BASE;
        assert_eq!(
            map(base),
            format!("0 {} 1\n{} {} 65503\n", base + 65535, base + 1, base + 1)
        );
        // The two ranges do not meet on the host: the plugins' ids lie past the agents'.
        assert_eq!(base + 1 + (FIRST_RESERVED - 1), base + FIRST_RESERVED);
    }

    #[test]
    fn the_shared_directories_are_covered_and_one_holding_the_state_root_is_its_cover() {
        let p = PathBuf::from;
        let shared = [p("/home/u"), p("/tmp"), p("/var/tmp"), p("/dev/shm")];
        // The state root's cover elsewhere: every shared directory covered beside it.
        assert_eq!(
            covers(p("/root"), &shared),
            [
                p("/root"),
                p("/tmp"),
                p("/home/u"),
                p("/var/tmp"),
                p("/dev/shm")
            ]
        );
        // A state root in `/tmp`: `/tmp` is its cover, hiding the rest of it.
        assert_eq!(
            covers(p("/tmp/lnk-x"), &shared),
            [p("/tmp"), p("/home/u"), p("/var/tmp"), p("/dev/shm")]
        );
        // An ordinary user's home as the state root's cover is not covered twice.
        assert_eq!(
            covers(p("/home/u"), &shared),
            [p("/home/u"), p("/tmp"), p("/var/tmp"), p("/dev/shm")]
        );
        // A shared directory beneath another is hidden with it.
        assert_eq!(
            covers(p("/srv/x"), &[p("/tmp/u"), p("/tmp")]),
            [p("/srv/x"), p("/tmp")]
        );
    }

    #[test]
    fn the_way_down_to_each_tree_is_made_parents_first_once() {
        let p = PathBuf::from;
        let trees = [
            p("/c/s/data/x"),
            p("/c/s/run/y"),
            p("/c/s/data/w"),
            p("/elsewhere/z"),
        ];
        let trees: Vec<&Path> = trees.iter().map(PathBuf::as_path).collect();
        // Each tree's own mount point too.
        assert_eq!(
            skeleton(Path::new("/c"), &trees),
            [
                p("/c/s"),
                p("/c/s/data"),
                p("/c/s/run"),
                p("/c/s/data/w"),
                p("/c/s/data/x"),
                p("/c/s/run/y")
            ]
        );
    }

    #[test]
    fn an_ordinary_users_home_comes_from_the_user_database() {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        let roots = passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() > 5 && f[2] == "0")
            .map(|f| PathBuf::from(f[5]));
        assert_eq!(home_of(0), roots);
        assert!(home_of(u32::MAX - 7).is_none(), "no such user");
    }

    #[test]
    fn the_cover_is_the_first_directory_others_may_not_search() {
        use std::os::unix::fs::PermissionsExt;
        let top = std::env::temp_dir().join(format!("lnk-cover-{}", std::process::id()));
        let (a, b) = (top.join("open/state/data/x"), top.join("open/state/run/y"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        mode(&top, 0o755).unwrap();
        mode(&top.join("open"), 0o755).unwrap();
        mode(&top.join("open/state"), 0o755).unwrap();
        let top = top.canonicalize().unwrap();
        assert_eq!(
            cover(&[a.clone(), b.clone()], None).unwrap(),
            top.join("open/state")
        );
        if rustix::process::geteuid().is_root() {
            // An ordinary user's: its own directory on the way (no other owns 4242's).
            let stranger = Some(rustix::fs::Uid::from_raw(4242));
            rustix::fs::chown(top.join("open"), stranger, None).unwrap();
            let mine = cover(&[a.clone(), b.clone()], Some(4242)).unwrap();
            assert_eq!(mine, top.join("open"));
        }
        mode(&top.join("open"), 0o700).unwrap();
        assert_eq!(cover(&[a, b], None).unwrap(), top.join("open"));
        std::fs::remove_dir_all(&top).unwrap();
    }
}
