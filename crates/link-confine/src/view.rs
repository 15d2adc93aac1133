//! The sandbox plugin's view of the filesystem: a mount namespace of its own in which every
//! mount is read-only but the directories it must write, and `/dev` gives no device but the
//! few a command uses.
//!
//! As root every other plugin gets such a view too ([`PluginView::prepare_plugin`]), for who
//! it is rather than for what it may write (Landlock decides that): a uid of its own, root only
//! in its user namespace, which reaches the state root beneath root's 0700 home only through
//! the view's cover ([`crate::plugin_ns`]), so owner bits keep it from every root-only file
//! outside what is attached for it. What is attached is idmapped, so root's files there (all
//! of `run/`, with the host's sockets and the pids file) are its own by owner bits: there its
//! Landlock rules, the read-only flag and the sockets' peer checks decide. Without a network
//! namespace: its seccomp filter (Unix sockets only) and Landlock's TCP bound keep it off.
//!
//! The plugin cannot take Landlock filesystem rules (its bwrap mounts: [`crate::host`]), so
//! without this it could write wherever its uid can — as root, with the `DAC_OVERRIDE` it
//! keeps, any file on the machine and any disk — and replace `run/pids.json` or the host's
//! sockets, on which every peer check rests. Read-only mounts refuse a write whatever the
//! capabilities (`EROFS`); the plugin keeps no `CAP_SYS_ADMIN` to remount them; and every
//! mount namespace it or its bwrap makes is owned by a user namespace below the one that made
//! these mounts, where the kernel locks them and their read-only flag.
//!
//! `/proc` stays writable: the plugin writes the id maps of its commands' user namespaces
//! there, and a mount over part of it (`/proc/sys`) would keep bwrap from mounting the
//! commands' own `/proc` (the kernel mounts a new procfs in a user namespace only where an
//! existing one is fully visible). What keeps a sysctl from it is who it is: as root, the
//! view ends by joining the plugin's own user namespace ([`crate::plugin_ns`]), whose root is
//! an unprivileged uid on the host; before that, it covers the state root (or its first
//! ancestor others may not search) so that only what the plugin serves is there, as root and
//! as an ordinary user.
//!
//! An ordinary user needs a user namespace of its own to make the mount namespace. It does
//! not undo the plugin's non-dumpable: `exec` gives the plugin's memory the nearest user
//! namespace that maps its program's owner (`would_dump`), the host's for programs the user
//! does not own, so the user's other processes still cannot read it (ordinary_user tests it).
//! Where the user owns the programs, they could replace them anyway.
//!
//! The same `unshare` gives it a network namespace of its own, without interfaces: with
//! Landlock's TCP bound, it is off the network like every plugin but the model
//! ([`crate::host::Network`]); each command's bwrap makes another one inside it. (As an
//! ordinary user it holds capabilities over that empty namespace, as over its mounts.)
//!
//! Prepared in the parent ([`PluginView::prepare`]: every path as a C string, the id maps
//! as text), entered between fork and exec ([`PluginView::enter`]: system calls only).

use crate::plugin_ns::OwnNamespace;
use rustix::fd::{AsRawFd, OwnedFd};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `AT_RECURSIVE`, as the mount API's flags take it (libc has it as a `c_int`).
const RECURSIVE: libc::c_uint = libc::AT_RECURSIVE as libc::c_uint;

/// The device nodes a command may use (bwrap's `--dev` binds these from the plugin's `/dev`).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Mounts neither the plugin nor its commands use: bwrap gives each command its own `/dev/pts`
/// and `/dev/shm`, and no `/sys`, and the plugin's commands write to pipes, not a terminal.
/// Every mount the plugin's bwrap sees is a line of `/proc/self/mountinfo`, which bwrap reads
/// again after each of its binds: on the 2-core machine of issue 14, the 13 mounts of `/sys`
/// cost every command 0.7 ms. A mount below which a path the plugin needs lies is kept.
pub const UNUSED: &[&str] = &[
    "/sys",
    "/dev/pts",
    "/dev/shm",
    "/dev/mqueue",
    "/dev/hugepages",
];

/// What the `exec` command sheds: `/sys` alone. Its command may write to a terminal (bwrap
/// names it `/dev/console` through `/dev/pts`), and `/dev/shm` holds few mounts.
pub const UNUSED_BY_EXEC: &[&str] = &["/sys"];

/// At most this many mounts are detached at one path (they may be stacked).
const MAX_STACKED: usize = 32;

/// A prepared view, entered by the child between fork and exec.
#[derive(Debug)]
pub struct PluginView {
    writable: Vec<CString>,
    devices: Vec<CString>,
    /// The [`UNUSED`] mounts to detach (none where `trimmed` is without them already).
    shed: Vec<CString>,
    /// As root: the host's tree without the `shed` mounts, to copy ([`trimmed`]).
    trimmed: Option<OwnedFd>,
    /// An ordinary user needs a user namespace to own a mount namespace: its own uid and gid
    /// mapped to themselves, so the plugin is who it was.
    maps: Option<IdMaps>,
    /// The tree the plugin sees and, as root, its own user namespace, joined last
    /// ([`crate::plugin_ns`]).
    own: crate::plugin_ns::PluginNamespace,
    /// A network namespace without interfaces: the sandbox plugin's, which has no seccomp
    /// filter of Unix sockets only. The other plugins' filter and Landlock's TCP bound keep
    /// them off the network without one (whose making and teardown would cost each start).
    no_network: bool,
}

#[derive(Debug)]
struct IdMaps {
    uid_map: CString,
    gid_map: CString,
}

impl PluginView {
    /// A view in which only `writable` (each must exist) can be written, for the plugin at
    /// `program`; as root its own namespace `own` ([`OwnNamespace::sandbox`]: `ahead` if made
    /// ahead, or made here).
    pub fn prepare(
        writable: &[PathBuf],
        program: &Path,
        own: &OwnNamespace,
        ahead: Option<OwnedFd>,
    ) -> io::Result<PluginView> {
        let own = crate::plugin_ns::PluginNamespace::prepare(writable, program, own, ahead)
            .map_err(|e| io::Error::other(e.to_string()))?;
        Self::with(writable, program, own, true)
    }

    /// As root, the view of a Landlock-confined plugin (issue 42, "plugins are not root"):
    /// only `writable` can be written, `writable` and `readable` are attached idmapped
    /// through its own namespace `own` (`ahead` if made ahead, or made here), which it joins
    /// last. No network namespace (see `no_network`).
    pub fn prepare_plugin(
        writable: &[PathBuf],
        readable: &[PathBuf],
        program: &Path,
        own: &OwnNamespace,
        ahead: Option<OwnedFd>,
    ) -> io::Result<PluginView> {
        let own = crate::plugin_ns::PluginNamespace::prepare_plugin(
            writable, readable, program, own, ahead,
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
        Self::with(writable, program, own, false)
    }

    fn with(
        writable: &[PathBuf],
        program: &Path,
        mut own: crate::plugin_ns::PluginNamespace,
        no_network: bool,
    ) -> io::Result<PluginView> {
        let needed: Vec<&Path> = writable
            .iter()
            .map(PathBuf::as_path)
            .chain([program])
            .collect();
        let mut shed = sheddable(UNUSED, &needed)?;
        let root = rustix::process::geteuid().is_root();
        let trimmed = if root { trimmed(&shed) } else { None };
        if let Some((_, gone)) = &trimmed {
            // Not detached again, and not covered where the tree is without them; a mount the
            // kernel locked (root in a container's user namespace) or a plain directory, left
            // there as it was, stays covered.
            own.uncover(gone);
            shed.clear();
        }
        let trimmed = trimmed.map(|(tree, _)| tree);
        let writable = writable
            .iter()
            .map(|dir| {
                if !dir.is_dir() {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{} must exist to stay writable", dir.display()),
                    ));
                }
                c_path(dir)
            })
            .collect::<io::Result<_>>()?;
        let devices = DEVICES
            .iter()
            .map(Path::new)
            .filter(|d| d.exists())
            .map(c_path)
            .collect::<io::Result<_>>()?;
        let maps = (!root).then(|| {
            let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
            IdMaps {
                uid_map: c_text(format!("{0} {0} 1\n", uid.as_raw())),
                gid_map: c_text(format!("{0} {0} 1\n", gid.as_raw())),
            }
        });
        Ok(PluginView {
            writable,
            devices,
            shed,
            trimmed,
            maps,
            own,
            no_network,
        })
    }

    /// Enters the view: a new mount namespace and (the sandbox plugin's) a network namespace
    /// without interfaces (its loopback down), so it is off the network (and, for an ordinary
    /// user, a user namespace mapping only itself), the mounts with no propagation to or from
    /// the host's; the `UNUSED` mounts no needed path lies below gone where the kernel lets
    /// them go (not in an ordinary user's view, whose inherited mounts it locks; as root,
    /// copied without them from [`trimmed`]); the covers; device binds kept, then every mount
    /// read-only and `/dev` without devices, then `/proc` and the writable directories
    /// writable again. Meant for `CommandExt::pre_exec`, before the capabilities are shed: it
    /// allocates nothing, and any failure fails the spawn.
    pub fn enter(&self) -> io::Result<()> {
        let net = if self.no_network {
            libc::CLONE_NEWNET
        } else {
            0
        };
        match &self.maps {
            None => {
                if let Some(tree) = &self.trimmed {
                    // SAFETY: setns on a descriptor this value owns; single-threaded child.
                    check(unsafe { libc::setns(tree.as_raw_fd(), libc::CLONE_NEWNS) })?;
                }
                unshare(libc::CLONE_NEWNS | net)?
            }
            Some(maps) => {
                unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | net)?;
                write_file(c"/proc/self/setgroups", c"deny")?;
                write_file(c"/proc/self/uid_map", &maps.uid_map)?;
                write_file(c"/proc/self/gid_map", &maps.gid_map)?;
            }
        }
        make_private()?;
        // Before the covers: past a cover it would detach the cover, and in an ordinary
        // user's view, whose inherited mounts are locked, stop there, showing the shared
        // directory (`/dev/shm`) the cover hid.
        self.shed.iter().try_for_each(|path| detach_all(path))?;
        self.own.build_tree()?;
        for device in &self.devices {
            bind(device)?;
        }
        set_attr(c"/", RECURSIVE, libc::MOUNT_ATTR_RDONLY, 0)?;
        set_attr(c"/dev", RECURSIVE, libc::MOUNT_ATTR_NODEV, 0)?;
        for device in &self.devices {
            set_attr(device, 0, 0, libc::MOUNT_ATTR_NODEV)?;
        }
        set_attr(c"/proc", 0, 0, libc::MOUNT_ATTR_RDONLY)?;
        for dir in &self.writable {
            if !self.own.attached(dir) {
                bind(dir)?;
            }
            set_attr(dir, RECURSIVE, 0, libc::MOUNT_ATTR_RDONLY)?;
        }
        self.own.join()
    }
}

/// As root, the host's mount tree without the mounts `shed` names, as a mount namespace each
/// view copies (`setns`, then `unshare`) rather than detaching them again in each plugin's
/// child: every detach waits for an RCU grace period, about six per view (`/sys`, the two
/// `/dev/pts` and `/dev/shm`, and the cover over `/dev/shm`), which as root every plugin paid
/// (issue 42); with the paths of `shed` it did detach (mount roots before, not after).
/// Made once per set on a thread of its own (unsharing the mount namespace only unshares
/// that thread's), kept until [`release_trimmed`]; `None` where it cannot be made, and then
/// each view detaches them itself as before.
fn trimmed(shed: &[CString]) -> Option<(OwnedFd, Vec<CString>)> {
    let mut made = TRIMMED.lock().unwrap_or_else(|e| e.into_inner());
    if !made.iter().any(|t| t.shed.as_slice() == shed) {
        let tree = std::thread::scope(|s| s.spawn(|| trim(shed)).join())
            .ok()?
            .ok()?;
        made.push(tree);
    }
    let tree = made.iter().find(|t| t.shed.as_slice() == shed)?;
    let fd = rustix::io::fcntl_dupfd_cloexec(&tree.ns, 0).ok()?;
    Some((fd, tree.gone.clone()))
}

/// A tree [`trimmed`] made: without the mounts `shed` names, of which `gone` were detached.
struct Trimmed {
    shed: Vec<CString>,
    gone: Vec<CString>,
    ns: OwnedFd,
}

/// The trees [`trimmed`] made.
static TRIMMED: std::sync::Mutex<Vec<Trimmed>> = std::sync::Mutex::new(Vec::new());

/// Lets go of the trees [`trimmed`] made, once the plugins have started: each is a snapshot of
/// the host's mounts, and held for the host's life it would keep a filesystem unmounted since
/// busy and miss a mount made since. A view prepared later makes its tree again.
pub fn release_trimmed() {
    TRIMMED.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// On a thread of its own: a mount namespace of the thread's, private, without `shed`.
fn trim(shed: &[CString]) -> io::Result<Trimmed> {
    unshare(libc::CLONE_NEWNS)?;
    make_private()?;
    let mut gone = Vec::new();
    for path in shed {
        let was = is_mount_root(path);
        detach_all(path)?;
        if was && !is_mount_root(path) {
            gone.push(path.clone());
        }
    }
    let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
    let ns = rustix::fs::open("/proc/thread-self/ns/mnt", flags, rustix::fs::Mode::empty())?;
    Ok(Trimmed {
        shed: shed.to_vec(),
        gone,
        ns,
    })
}

/// Whether `path` is the root of a mount (`STATX_ATTR_MOUNT_ROOT`); `false` where it is not
/// there or the kernel cannot say, so it stays covered.
fn is_mount_root(path: &std::ffi::CStr) -> bool {
    use rustix::fs::{AtFlags, StatxAttributes, StatxFlags};
    let flags = AtFlags::NO_AUTOMOUNT | AtFlags::SYMLINK_NOFOLLOW;
    match rustix::fs::statx(rustix::fs::CWD, path, flags, StatxFlags::empty()) {
        Ok(st) => {
            st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT)
                && st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)
        }
        Err(_) => false,
    }
}

/// For the `exec` command as root, which runs bwrap itself: a mount namespace of its own
/// without the `UNUSED_BY_EXEC` mounts below which none of `needed` lies; the
/// caller's stays as it was. Changes nothing where this process may not make one (`EPERM`:
/// root without `CAP_SYS_ADMIN`, in a container): bwrap confines the command the same either
/// way. The process must be single-threaded.
pub fn without_unused_mounts(needed: &[&Path]) -> io::Result<()> {
    let shed = sheddable(UNUSED_BY_EXEC, needed)?;
    if shed.is_empty() {
        return Ok(());
    }
    match unshare(libc::CLONE_NEWNS) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Ok(()),
        other => other?,
    }
    // Private before anything is detached: a detach would otherwise reach the caller's
    // namespace through the shared peer group.
    make_private()?;
    shed.iter().try_for_each(|path| detach_all(path))
}

/// The mounts of `unused` below which none of `needed` lies, resolved as the kernel resolves
/// it: a symlink into `/dev/shm` keeps `/dev/shm`.
fn sheddable(unused: &[&str], needed: &[&Path]) -> io::Result<Vec<CString>> {
    let needed: Vec<PathBuf> = needed
        .iter()
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.to_path_buf()))
        .collect();
    unused
        .iter()
        .map(Path::new)
        .filter(|mount| !needed.iter().any(|path| path.starts_with(mount)))
        .map(c_path)
        .collect()
}

/// No propagation to or from the namespace this one was copied from.
fn make_private() -> io::Result<()> {
    // SAFETY: NUL-terminated strings and null type and data.
    check(unsafe {
        libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
}

fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags only; the child is single-threaded between fork and exec.
    check(unsafe { libc::unshare(flags) })
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

fn c_text(text: String) -> CString {
    CString::new(text).expect("digits and spaces")
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Detaches every mount stacked at `path` (not through a symlink), with those below them;
/// stops where none is left, or where the kernel locks it (`EINVAL` both), or there is no
/// `path` (`ENOENT`).
fn detach_all(path: &std::ffi::CStr) -> io::Result<()> {
    for _ in 0..MAX_STACKED {
        let flags = libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW;
        // SAFETY: a NUL-terminated path and flags.
        match check(unsafe { libc::umount2(path.as_ptr(), flags) }) {
            Ok(()) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => {
                return Ok(())
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A recursive bind of `path` onto itself: a mount of its own whose flags can be changed.
fn bind(path: &std::ffi::CStr) -> io::Result<()> {
    let flags = libc::MS_BIND | libc::MS_REC;
    // SAFETY: two NUL-terminated paths and null type and data.
    check(unsafe {
        libc::mount(
            path.as_ptr(),
            path.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    })
}

/// `mount_setattr(AT_FDCWD, path, flags, {set, clr})`.
fn set_attr(path: &std::ffi::CStr, flags: libc::c_uint, set: u64, clr: u64) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a mount_attr of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    check(ret as libc::c_int)
}

/// Writes `text` to `path` in one write, as `/proc`'s id-map files require.
fn write_file(path: &std::ffi::CStr, text: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: open, write and close on a descriptor this function owns.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let bytes = text.to_bytes();
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if written != bytes.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_a_needed_path_lies_below_is_kept() {
        let shm = Path::new("/dev/shm/agents");
        let shed = sheddable(UNUSED, &[Path::new("/srv/state"), shm]).unwrap();
        let shed: Vec<&str> = shed.iter().map(|c| c.to_str().unwrap()).collect();
        assert_eq!(shed, ["/sys", "/dev/pts", "/dev/mqueue", "/dev/hugepages"]);
        // Whole components only: /dev/shmem is not below /dev/shm.
        let shed = sheddable(UNUSED_BY_EXEC, &[Path::new("/system/ws")]).unwrap();
        assert_eq!(shed.len(), 1);
        assert!(sheddable(UNUSED_BY_EXEC, &[Path::new("/sys/fs/ws")])
            .unwrap()
            .is_empty());
    }
}
