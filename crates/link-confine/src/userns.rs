//! Making the user namespaces a confined command's bwrap, and the sandbox plugin itself, join.
//!
//! Apart from who the command is ([`crate::identity`]): a namespace is made by a short-lived
//! child of this multi-threaded process, with its own locking and descriptor hygiene, which is
//! a concern of its own whoever the ids mapped in it belong to.

// `identity::ENV_BASE`, taken where it is defined: making a namespace needs nothing of `identity`.
use link_protocol::plugin::ENV_SANDBOX_UID_BASE as ENV_BASE;
use rustix::fd::{AsRawFd, OwnedFd};
use rustix::fs::{Mode, OFlags};

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
    let reaped = reap(pid);
    let ns = opened?;
    reaped.map_err(io)?;
    Ok(ns)
}

/// Waits for this process's child `pid` to end, through interruptions.
pub(crate) fn reap(pid: rustix::process::Pid) -> rustix::io::Result<()> {
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map(drop),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::DEFAULT_BASE;

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
}
