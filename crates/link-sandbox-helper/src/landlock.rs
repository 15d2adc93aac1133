//! The Landlock ruleset applied inside the sandbox: the (already minimal) visible tree
//! readable and executable but the hidden files, the `--rw` directories writable, the
//! `--shrink` ones writable but for making entries (a full workspace: only removals and
//! writes within what is there), no TCP, signals and abstract sockets scoped to the sandbox.
//!
//! The handled rights are those of [`PINNED_ABI`], never "whatever the kernel offers", and a
//! kernel that cannot enforce all of them is refused: nothing runs half confined.

// An error carries the path it concerns in a fixed buffer (there is no allocator), and ends
// the program: its size costs nothing that matters.
#![allow(clippy::result_large_err)]

use crate::sys::{self, Errno, Fd, AT_FDCWD};
use crate::text::{self, Lossy, Path};
use core::ffi::CStr;
use core::fmt;

/// The Landlock ABI whose rights every ruleset handles (Linux 6.15). ABI 7 adds audit flags
/// only; its rights are those of ABI 6 ([`RIGHTS_ABI`]), so Linux 6.12 enforces them fully.
pub const PINNED_ABI: u32 = 7;
/// The oldest kernel ABI that has every right of [`PINNED_ABI`].
const RIGHTS_ABI: u32 = 6;

/// `LANDLOCK_ACCESS_FS_*`: every right up to ABI 6.
mod fs {
    pub const EXECUTE: u64 = 1 << 0;
    pub const WRITE_FILE: u64 = 1 << 1;
    pub const READ_FILE: u64 = 1 << 2;
    pub const READ_DIR: u64 = 1 << 3;
    pub const TRUNCATE: u64 = 1 << 14;
    pub const IOCTL_DEV: u64 = 1 << 15;
    /// From EXECUTE to IOCTL_DEV (ABI 5), the last right added to the file system.
    pub const ALL: u64 = (1 << 16) - 1;
    /// What a rule on a file (not a directory) may grant.
    pub const FILE: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
    pub const READ: u64 = EXECUTE | READ_FILE | READ_DIR;
    /// `MAKE_CHAR` to `MAKE_SYM`, and `REFER` (a rename or link into another directory).
    pub const MAKE: u64 = ((1 << 14) - 1) & !((1 << 6) - 1);
    /// Everything but making entries: read, write what exists, truncate, remove.
    pub const SHRINK: u64 = ALL & !MAKE;
}
/// `LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP`.
const NET_ALL: u64 = 0b11;
/// `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL`.
const SCOPE_ALL: u64 = 0b11;

/// The rights every inside ruleset handles, as the host's rulesets (the `landlock` crate at the
/// same ABI) must handle them too: a test of `link-confine` (`rules.rs`) pins the two
/// sets together. Filesystem rights, TCP rights, scopes.
pub const HANDLED: (u64, u64, u64) = (fs::ALL, NET_ALL, SCOPE_ALL);

/// Files the command may read and write wherever else it may only read.
const RW_FILES: [&CStr; 3] = [c"/dev/null", c"/dev/zero", c"/dev/full"];

/// At most this many `--hide` files (the policy hides a handful).
pub const MAX_HIDDEN: usize = 32;

/// Why the ruleset was not enforced.
#[derive(Debug)]
pub enum Error {
    NotInKernel,
    NotEnabled,
    OldAbi(u32),
    Call(&'static str, Errno),
    Rule(Path, Errno),
    MissingPath(Path, Errno),
    NoNewPrivs,
    TooManyHidden,
    UncleanHidden(Path),
    /// A hidden file named through a symlink (this part of its name), or one that is itself.
    SymlinkHidden(Path),
    /// A part of a hidden file's name that could not be examined, so neither.
    UncheckedHidden(Path, Errno),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotInKernel => f.write_str(
                "kernel without Landlock (ENOSYS): use a Linux >= 6.12 kernel built with \
                 CONFIG_SECURITY_LANDLOCK=y",
            ),
            Error::NotEnabled => f.write_str(
                "Landlock is built into the kernel but not enabled (EOPNOTSUPP): add \
                 `landlock` to the `lsm=` kernel boot parameter",
            ),
            Error::OldAbi(abi) => write!(
                f,
                "kernel Landlock ABI {abi} cannot fully enforce the rights of the pinned ABI \
                 {PINNED_ABI}: use Linux >= 6.12"
            ),
            Error::Call(call, e) => write!(f, "Landlock: {call}: {e}"),
            Error::Rule(path, e) => write!(f, "Landlock: rule for {}: {e}", Lossy(path.bytes())),
            Error::MissingPath(path, e) => write!(
                f,
                "{} must exist to be granted in a Landlock rule: {e}",
                Lossy(path.bytes())
            ),
            Error::NoNewPrivs => {
                f.write_str("Landlock: no_new_privs could not be set (blocked by seccomp?)")
            }
            Error::TooManyHidden => write!(f, "at most {MAX_HIDDEN} --hide files"),
            Error::UncleanHidden(path) => write!(
                f,
                "--hide {}: a hidden file must be named by an absolute path without `.`, `..`, \
                 `//` or a trailing `/` (its rules compare names as written)",
                Lossy(path.bytes())
            ),
            Error::SymlinkHidden(link) => write!(
                f,
                "--hide: {} is a symlink: a hidden file must be named by its real path (its \
                 rules compare names as written, and would leave the real one readable)",
                Lossy(link.bytes())
            ),
            Error::UncheckedHidden(part, e) => write!(
                f,
                "--hide: cannot tell whether {} is a symlink: {e}",
                Lossy(part.bytes())
            ),
        }
    }
}

/// The files to leave unreadable, and their identities (to leave out other names of them).
pub struct Hidden<'a> {
    paths: [&'a [u8]; MAX_HIDDEN],
    inodes: [Option<Inode>; MAX_HIDDEN],
    len: usize,
}

impl<'a> Hidden<'a> {
    pub fn new(files: impl Iterator<Item = &'a CStr>) -> Result<Hidden<'a>, Error> {
        let mut hidden = Hidden {
            paths: [b""; MAX_HIDDEN],
            inodes: [None; MAX_HIDDEN],
            len: 0,
        };
        for file in files {
            let slot = hidden.len;
            if slot == MAX_HIDDEN {
                return Err(Error::TooManyHidden);
            }
            if !text::is_clean_absolute(file.to_bytes()) {
                let shown = Path::new(file.to_bytes()).unwrap_or_else(|_| Path::new(b"?").unwrap());
                return Err(Error::UncleanHidden(shown));
            }
            no_symlink_on_the_way(file.to_bytes())?;
            hidden.paths[slot] = file.to_bytes();
            hidden.inodes[slot] = sys::statx(AT_FDCWD, file, 0).ok().map(|s| inode_of(&s));
            hidden.len += 1;
        }
        Ok(hidden)
    }

    fn paths(&self) -> &[&'a [u8]] {
        &self.paths[..self.len]
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the entry `name` of `dir` must be left out: a hidden file, another name of
    /// one, a name that begins with one's (the tools that replace `/etc/shadow` write
    /// `shadow+` beside it first, and a rule on that would follow it once renamed), or a
    /// symlink (a rule lands on its target, granted or not where it is).
    fn leaves_out(&self, dir: &[u8], name: &[u8], stat: &sys::Stat) -> bool {
        let named_like = self
            .paths()
            .iter()
            .any(|h| text::parent(h) == Some(dir) && name.starts_with(text::file_name(h)));
        named_like || stat.is_symlink() || self.inodes[..self.len].contains(&Some(inode_of(stat)))
    }
}

/// Refuses a hidden file named through a symlink, or that is one: the walk grants the real
/// directory whole, since no hidden name leads into it. Checked one part of the name at a
/// time, without following any; a part that does not exist ends the check (nothing below it
/// is there to read, and what appears later gets no rule).
fn no_symlink_on_the_way(file: &[u8]) -> Result<(), Error> {
    let ends = (1..file.len()).filter(|&i| file[i] == b'/');
    for end in ends.chain([file.len()]) {
        let Ok(part) = Path::new(&file[..end]) else {
            let shown = Path::new(b"?").expect("fits");
            return Err(Error::UncheckedHidden(shown, Errno::NAMETOOLONG));
        };
        match sys::statx(AT_FDCWD, part.as_cstr(), sys::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) if stat.is_symlink() => return Err(Error::SymlinkHidden(part)),
            Ok(_) => {}
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(Error::UncheckedHidden(part, e)),
        }
    }
    Ok(())
}

/// A file as the kernel tells it from every other: device and inode number.
type Inode = ((u32, u32), u64);

fn inode_of(stat: &sys::Stat) -> Inode {
    (stat.dev, stat.ino)
}

/// How a path to grant was found.
#[derive(Clone, Copy)]
enum Grant {
    /// Named by the rules or the command line (symlinks followed).
    Named { required: bool },
    /// An entry of a directory the hidden-file walk lists, the file it was when listed.
    Walked(Inode),
}

const OPTIONAL: Grant = Grant::Named { required: false };

/// A Landlock ruleset being filled.
struct Ruleset(Fd);

impl Ruleset {
    /// An empty ruleset handling every right of [`RIGHTS_ABI`]: what no rule grants is refused.
    fn new() -> Result<Ruleset, Error> {
        let attr = sys::RulesetAttr {
            handled_access_fs: fs::ALL,
            handled_access_net: NET_ALL,
            scoped: SCOPE_ALL,
        };
        sys::landlock_create_ruleset(&attr)
            .map(Ruleset)
            .map_err(|e| Error::Call("landlock_create_ruleset", e))
    }

    /// Confines this thread, and what it executes, to the rules: `no_new_privs` first, as
    /// Landlock requires of a process without `CAP_SYS_ADMIN`, and checked after.
    fn enforce(self) -> Result<(), Error> {
        const PR_SET_NO_NEW_PRIVS: usize = 38;
        const PR_GET_NO_NEW_PRIVS: usize = 39;
        sys::prctl(PR_SET_NO_NEW_PRIVS, 1).map_err(|_| Error::NoNewPrivs)?;
        sys::landlock_restrict_self(&self.0)
            .map_err(|e| Error::Call("landlock_restrict_self", e))?;
        if sys::prctl(PR_GET_NO_NEW_PRIVS, 0) != Ok(1) {
            return Err(Error::NoNewPrivs);
        }
        Ok(())
    }

    /// Grants `access` beneath `name` (relative to `at`): the whole of it to a directory, its
    /// file rights to a file. A missing path is an error only when `required`. A `Walked`
    /// entry that is no longer the file listed (replaced, renamed over, or a symlink now) is
    /// not followed and grants nothing.
    fn grant(&self, at: i32, name: &CStr, access: u64, how: Grant) -> Result<(), Error> {
        let shown = || Path::new(name.to_bytes()).unwrap_or_else(|_| Path::new(b"?").unwrap());
        let flags = match how {
            Grant::Walked(_) => sys::O_PATH | sys::O_CLOEXEC | sys::O_NOFOLLOW,
            Grant::Named { .. } => sys::O_PATH | sys::O_CLOEXEC,
        };
        let target = match (sys::openat(at, name, flags), how) {
            (Ok(fd), _) => fd,
            (Err(e), Grant::Named { required: true }) => {
                return Err(Error::MissingPath(shown(), e))
            }
            (Err(_), _) => return Ok(()),
        };
        let stat =
            sys::statx(target.0, c"", sys::AT_EMPTY_PATH).map_err(|e| Error::Rule(shown(), e))?;
        if matches!(how, Grant::Walked(listed) if listed != inode_of(&stat)) {
            return Ok(());
        }
        let is_dir = stat.is_dir();
        let access = if is_dir { access } else { access & fs::FILE };
        if access == 0 {
            return Ok(());
        }
        sys::landlock_add_path_rule(&self.0, access, &target).map_err(|e| Error::Rule(shown(), e))
    }

    /// Grants `access` to every entry of `dir` but the hidden files, descending into the
    /// directories that lead to one. Landlock's rules hold on to the files they name, so a
    /// file put in a hidden one's place later has no rule and stays unreadable; so does any
    /// file that appears in those directories while the command runs. `dir` is the path of
    /// `name` (relative to `at`), opened without following a symlink; a directory that cannot
    /// be read, or is no longer the one listed (`was`), grants nothing.
    fn grant_all_but(
        &self,
        (at, name, was): (i32, &CStr, Option<Inode>),
        dir: &mut Path,
        hidden: &Hidden<'_>,
        access: u64,
    ) -> Result<(), Error> {
        let flags = sys::O_RDONLY | sys::O_DIRECTORY | sys::O_NOFOLLOW | sys::O_CLOEXEC;
        let Ok(listed) = sys::openat(at, name, flags) else {
            return Ok(());
        };
        if let Some(was) = was {
            match sys::statx(listed.0, c"", sys::AT_EMPTY_PATH) {
                Ok(now) if inode_of(&now) == was => {}
                _ => return Ok(()),
            }
        }
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = sys::getdents64(listed.0, &mut buf) {
            let mut at = 0;
            while at < n {
                // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
                let len = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                let record = &buf[at..at + len];
                at += len;
                let Ok(name) = CStr::from_bytes_until_nul(&record[19..]) else {
                    continue;
                };
                if matches!(name.to_bytes(), b"." | b"..") {
                    continue;
                }
                let Ok(stat) = sys::statx(listed.0, name, sys::AT_SYMLINK_NOFOLLOW) else {
                    continue;
                };
                if hidden.leaves_out(dir.bytes(), name.to_bytes(), &stat) {
                    continue;
                }
                let Ok(back) = dir.push(name.to_bytes()) else {
                    continue;
                };
                let leads_to_hidden = hidden
                    .paths()
                    .iter()
                    .any(|h| text::is_within(h, dir.bytes()));
                let entry = (listed.0, name, Some(inode_of(&stat)));
                let granted = if leads_to_hidden {
                    self.grant_all_but(entry, dir, hidden, access)
                } else {
                    self.grant(listed.0, name, access, Grant::Walked(inode_of(&stat)))
                        .map_err(|e| with_path(e, dir))
                };
                dir.truncate(back);
                granted?;
            }
        }
        Ok(())
    }
}

/// The error with the full path in place of the entry's name.
fn with_path(e: Error, path: &Path) -> Error {
    let full = || Path::new(path.bytes()).unwrap_or_else(|_| Path::new(b"?").unwrap());
    match e {
        Error::Rule(_, errno) => Error::Rule(full(), errno),
        other => other,
    }
}

/// Restricts this process (and what it executes) to the inside rules, with `read_write`
/// writable, `shrink` writable but for making entries, and `hidden` unreadable; returns the
/// kernel's Landlock ABI.
pub fn confine<'a>(
    read_write: impl Iterator<Item = &'a CStr>,
    shrink: impl Iterator<Item = &'a CStr>,
    hidden: &Hidden<'_>,
) -> Result<u32, Error> {
    let abi = match sys::landlock_abi() {
        Ok(abi) if abi >= RIGHTS_ABI => abi,
        Ok(abi) => return Err(Error::OldAbi(abi)),
        Err(Errno::NOSYS) => return Err(Error::NotInKernel),
        Err(Errno::OPNOTSUPP) => return Err(Error::NotEnabled),
        Err(e) => return Err(Error::Call("landlock_create_ruleset", e)),
    };
    let ruleset = Ruleset::new()?;
    if hidden.is_empty() {
        ruleset.grant(AT_FDCWD, c"/", fs::READ, OPTIONAL)?;
    } else {
        let mut root = Path::new(b"/").expect("fits");
        ruleset.grant_all_but((AT_FDCWD, c"/", None), &mut root, hidden, fs::READ)?;
        ruleset.grant(AT_FDCWD, c"/", fs::READ_DIR, OPTIONAL)?;
    }
    let dirs = read_write
        .map(|d| (d, fs::ALL))
        .chain(shrink.map(|d| (d, fs::SHRINK)));
    for (dir, access) in dirs {
        ruleset.grant(AT_FDCWD, dir, access, Grant::Named { required: true })?;
    }
    for file in RW_FILES {
        ruleset.grant(AT_FDCWD, file, fs::READ_FILE | fs::WRITE_FILE, OPTIONAL)?;
    }
    ruleset.enforce()?;
    Ok(abi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::vec::Vec;

    /// Whether this kernel cannot enforce the rights of [`RIGHTS_ABI`] and the test may skip
    /// (said on stderr); under `LNK_REQUIRE_SANDBOX` it may not, and runs to fail.
    fn skipped_without_landlock() -> bool {
        let skip = sys::landlock_abi().map_or(true, |abi| abi < RIGHTS_ABI)
            && std::env::var_os("LNK_REQUIRE_SANDBOX").is_none();
        if skip {
            std::eprintln!("skipped: this kernel cannot enforce Landlock ABI {RIGHTS_ABI}");
        }
        skip
    }

    /// What a child confined with `secret` hidden gets opening `name`: 0 opened, 1 refused
    /// (EACCES), 2 another error, 3 the ruleset was not enforced.
    fn opened_by_confined_child(secret: &CStr, name: &CStr) -> i32 {
        opened_by_child_confined_by(name, || {
            let hidden = Hidden::new([secret].into_iter())?;
            confine(core::iter::empty(), core::iter::empty(), &hidden).map(drop)
        })
    }

    /// What a child confined by `confine` gets opening `name`, as above.
    fn opened_by_child_confined_by(
        name: &CStr,
        confine: impl FnOnce() -> Result<(), Error>,
    ) -> i32 {
        // SAFETY: the child makes system calls only (no allocation, no lock) and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            if confine().is_err() {
                sys::exit(3);
            }
            sys::exit(
                match sys::openat(AT_FDCWD, name, sys::O_RDONLY | sys::O_CLOEXEC) {
                    Ok(_) => 0,
                    Err(Errno::ACCES) => 1,
                    Err(_) => 2,
                },
            );
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "the child was killed: {status}");
        libc::WEXITSTATUS(status)
    }

    /// A `--shrink` directory takes removals and writes to what exists but no new entry (the
    /// specific error, EACCES); its twin, the same directory `--rw`, takes a new file too.
    #[test]
    fn a_shrink_directory_refuses_new_entries_and_takes_removals() {
        if skipped_without_landlock() {
            return;
        }
        let dir =
            std::env::temp_dir().join(std::format!("lnk-helper-shrink-{}", std::process::id()));
        let path = |name: &str| CString::new(dir.join(name).as_os_str().as_bytes()).unwrap();
        // Each child's exit status: bit 0 a new file refused (EACCES), bit 1 a new directory
        // refused, bit 2 the existing file written, bit 3 the other removed.
        let tried = |shrink: bool| {
            std::fs::create_dir_all(&dir).unwrap();
            for f in ["kept", "gone"] {
                std::fs::write(dir.join(f), "x").unwrap();
            }
            let (d, new, sub, kept, gone) = (
                path(""),
                path("new"),
                path("sub"),
                path("kept"),
                path("gone"),
            );
            // SAFETY: the child makes system calls only and exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let hidden = Hidden::new(core::iter::empty()).unwrap();
                let none = core::iter::empty();
                let confined = if shrink {
                    confine(none, [d.as_c_str()].into_iter(), &hidden)
                } else {
                    confine([d.as_c_str()].into_iter(), none, &hidden)
                };
                if confined.is_err() {
                    sys::exit(64);
                }
                let errno = || std::io::Error::last_os_error().raw_os_error();
                // SAFETY: plain system calls on C strings that live to the end of the child.
                let code = unsafe {
                    let create = libc::open(new.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o600);
                    let create_refused = create == -1 && errno() == Some(libc::EACCES);
                    let made_dir = libc::mkdir(sub.as_ptr(), 0o700);
                    let mkdir_refused = made_dir == -1 && errno() == Some(libc::EACCES);
                    let write = libc::open(kept.as_ptr(), libc::O_WRONLY | libc::O_TRUNC);
                    let removed = libc::unlink(gone.as_ptr()) == 0;
                    create_refused as i32
                        | (mkdir_refused as i32) << 1
                        | ((write >= 0) as i32) << 2
                        | (removed as i32) << 3
                };
                sys::exit(code);
            }
            let mut status = 0;
            // SAFETY: waits for the child forked above.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            let on_disk = (dir.join("new").exists(), dir.join("gone").exists());
            std::fs::remove_dir_all(&dir).unwrap();
            (libc::WEXITSTATUS(status), on_disk)
        };
        assert_eq!(tried(true), (0b1111, (false, false)), "shrink");
        assert_eq!(tried(false), (0b1100, (true, false)), "read-write");
    }

    /// The walk's grant lands only on the file it listed: an entry replaced in between (a
    /// rename over it, a symlink put in its place) grants nothing, and its twin, still the file
    /// listed, is granted.
    #[test]
    fn a_walked_entry_replaced_since_it_was_listed_grants_nothing() {
        if skipped_without_landlock() {
            return;
        }
        let dir = std::env::temp_dir().join(std::format!("lnk-helper-swap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["kept", "listed", "other"] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        let path = |name: &str| CString::new(dir.join(name).as_os_str().as_bytes()).unwrap();
        let inode = |name: &str| inode_of(&sys::statx(AT_FDCWD, &path(name), 0).unwrap());
        let (kept, listed) = (inode("kept"), inode("listed"));
        // `other` is renamed over `listed` after it was listed.
        std::fs::rename(dir.join("other"), dir.join("listed")).unwrap();
        let grants = || {
            let ruleset = Ruleset::new()?;
            ruleset.grant(AT_FDCWD, &path("kept"), fs::READ, Grant::Walked(kept))?;
            ruleset.grant(AT_FDCWD, &path("listed"), fs::READ, Grant::Walked(listed))?;
            ruleset.enforce()
        };
        let opened: Vec<i32> = ["kept", "listed"]
            .iter()
            .map(|n| opened_by_child_confined_by(&path(n), grants))
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(opened, [0, 1]);
    }

    #[test]
    fn a_hidden_file_must_be_named_one_way_only() {
        for unclean in [
            c"/etc//shadow",
            c"/etc/./shadow",
            c"etc/shadow",
            c"/etc/shadow/",
        ] {
            let refused = Hidden::new([unclean].into_iter()).err();
            assert!(
                matches!(refused, Some(Error::UncleanHidden(_))),
                "{unclean:?}"
            );
        }
        assert!(Hidden::new([c"/etc/shadow"].into_iter()).is_ok());
        let many = core::iter::repeat_n(c"/etc/shadow", MAX_HIDDEN + 1);
        assert!(matches!(
            Hidden::new(many).err(),
            Some(Error::TooManyHidden)
        ));
    }

    /// The walk leaves out only the names it is given, so a hidden file named through a
    /// symlink would leave its real name readable: refused, as is a hidden symlink, while its
    /// real name and a name that does not exist are taken.
    #[test]
    fn a_hidden_file_named_through_a_symlink_is_refused() {
        let dir = std::env::temp_dir().join(std::format!("lnk-helper-link-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("real")).unwrap();
        std::fs::write(dir.join("real/secret"), "x").unwrap();
        std::os::unix::fs::symlink("real", dir.join("alias")).unwrap();
        std::os::unix::fs::symlink("real/secret", dir.join("leaf")).unwrap();
        let path = |name: &str| CString::new(dir.join(name).as_os_str().as_bytes()).unwrap();
        let hide = |name: &str| Hidden::new([path(name).as_c_str()].into_iter()).err();
        for (name, link) in [("alias/secret", "alias"), ("leaf", "leaf")] {
            match hide(name) {
                Some(Error::SymlinkHidden(part)) => {
                    assert_eq!(part.bytes(), dir.join(link).as_os_str().as_bytes())
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(hide("real/secret").is_none(), "the real name is taken");
        assert!(hide("none/secret").is_none(), "nothing there to hide");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hidden_file_leaves_every_other_entry_on_its_way_granted() {
        if skipped_without_landlock() {
            return;
        }
        let dir = std::env::temp_dir().join(std::format!("lnk-helper-walk-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("b/c")).unwrap();
        for f in ["a", "b/secret", "b/d", "b/c/e"] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        // The next version written beside it, another name for it, a symlink to it.
        std::fs::write(dir.join("b/secret+"), "x").unwrap();
        std::fs::hard_link(dir.join("b/secret"), dir.join("b/other-name")).unwrap();
        std::os::unix::fs::symlink("secret", dir.join("b/pointer")).unwrap();
        let path = |name: &str| CString::new(dir.join(name).as_os_str().as_bytes()).unwrap();
        let names = [
            "a",
            "b/d",
            "b/c/e",
            "b/secret",
            "b/secret+",
            "b/other-name",
            "b/pointer",
        ];
        let secret = path("b/secret");
        let opened: Vec<i32> = names
            .iter()
            .map(|n| opened_by_confined_child(&secret, &path(n)))
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        // The twins: every other entry on the way, and one in a directory below, opens.
        assert_eq!(opened, [0, 0, 0, 1, 1, 1, 1], "{names:?}");
    }
}
