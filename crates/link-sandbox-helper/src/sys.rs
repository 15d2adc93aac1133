//! The system calls the helper makes, raw: it links no C library, so each one is a `syscall`
//! instruction (`svc` on aarch64) and the kernel's `-errno` return becomes an [`Errno`].

use core::ffi::{c_char, CStr};
use core::fmt;

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const WRITE: usize = 1;
    pub const CLOSE: usize = 3;
    pub const CHDIR: usize = 80;
    pub const UMASK: usize = 95;
    pub const GETUID: usize = 102;
    pub const GETEUID: usize = 107;
    pub const SETGROUPS: usize = 116;
    pub const SETRESUID: usize = 117;
    pub const SETRESGID: usize = 119;
    pub const CAPGET: usize = 125;
    pub const CAPSET: usize = 126;
    pub const PRCTL: usize = 157;
    pub const GETDENTS64: usize = 217;
    pub const EXIT_GROUP: usize = 231;
    pub const OPENAT: usize = 257;
    pub const PRLIMIT64: usize = 302;
    pub const STATX: usize = 332;
    pub const EXECVE: usize = 59;
    pub const FCNTL: usize = 72;
    pub const RT_SIGACTION: usize = 13;
    pub const RT_SIGPROCMASK: usize = 14;
}

#[cfg(target_arch = "aarch64")]
mod nr {
    pub const WRITE: usize = 64;
    pub const CLOSE: usize = 57;
    pub const CHDIR: usize = 49;
    pub const UMASK: usize = 166;
    pub const GETUID: usize = 174;
    pub const GETEUID: usize = 175;
    pub const SETGROUPS: usize = 159;
    pub const SETRESUID: usize = 147;
    pub const SETRESGID: usize = 149;
    pub const CAPGET: usize = 90;
    pub const CAPSET: usize = 91;
    pub const PRCTL: usize = 167;
    pub const GETDENTS64: usize = 61;
    pub const EXIT_GROUP: usize = 94;
    pub const OPENAT: usize = 56;
    pub const PRLIMIT64: usize = 261;
    pub const STATX: usize = 291;
    pub const EXECVE: usize = 221;
    pub const FCNTL: usize = 25;
    pub const RT_SIGACTION: usize = 134;
    pub const RT_SIGPROCMASK: usize = 135;
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the sandbox helper knows the system calls of x86_64 and aarch64 only");

/// Numbered alike on every architecture (the unified table since Linux 5.1).
const CLOSE_RANGE: usize = 436;
const LANDLOCK_CREATE_RULESET: usize = 444;
const LANDLOCK_ADD_RULE: usize = 445;
const LANDLOCK_RESTRICT_SELF: usize = 446;

#[cfg(target_arch = "x86_64")]
unsafe fn raw(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the caller passes arguments valid for system call `n`.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        )
    };
    ret
}

#[cfg(target_arch = "aarch64")]
unsafe fn raw(n: usize, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the caller passes arguments valid for system call `n`.
    unsafe {
        core::arch::asm!(
            "svc 0",
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            in("x8") n,
            options(nostack),
        )
    };
    ret
}

/// System call `n` with up to six arguments (the rest zero), its result or its errno.
///
/// # Safety
/// The arguments must be what system call `n` expects: pointers valid for what it reads and
/// writes.
unsafe fn call(n: usize, args: &[usize]) -> Result<usize, Errno> {
    let mut a = [0; 6];
    a[..args.len()].copy_from_slice(args);
    // SAFETY: as the caller promised.
    let r = unsafe { raw(n, a) };
    if (-4095..0).contains(&r) {
        Err(Errno(-r as i32))
    } else {
        Ok(r as usize)
    }
}

/// An error number from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const PERM: Errno = Errno(1);
    pub const NOENT: Errno = Errno(2);
    pub const NOEXEC: Errno = Errno(8);
    pub const ACCES: Errno = Errno(13);
    pub const NODEV: Errno = Errno(19);
    pub const NOTDIR: Errno = Errno(20);
    pub const INVAL: Errno = Errno(22);
    pub const NAMETOOLONG: Errno = Errno(36);
    pub const NOSYS: Errno = Errno(38);
    pub const OPNOTSUPP: Errno = Errno(95);
    pub const TIMEDOUT: Errno = Errno(110);
    pub const STALE: Errno = Errno(116);

    fn describe(self) -> &'static str {
        match self.0 {
            1 => "Operation not permitted",
            2 => "No such file or directory",
            5 => "Input/output error",
            6 => "No such device or address",
            7 => "Argument list too long",
            8 => "Exec format error",
            9 => "Bad file descriptor",
            11 => "Resource temporarily unavailable",
            12 => "Cannot allocate memory",
            13 => "Permission denied",
            14 => "Bad address",
            16 => "Device or resource busy",
            17 => "File exists",
            19 => "No such device",
            20 => "Not a directory",
            21 => "Is a directory",
            22 => "Invalid argument",
            23 => "Too many open files in system",
            24 => "Too many open files",
            26 => "Text file busy",
            27 => "File too large",
            28 => "No space left on device",
            30 => "Read-only file system",
            32 => "Broken pipe",
            36 => "File name too long",
            38 => "Function not implemented",
            40 => "Too many levels of symbolic links",
            95 => "Operation not supported",
            110 => "Connection timed out",
            116 => "Stale file handle",
            _ => "Unknown error",
        }
    }
}

/// As Rust's `std::io::Error` shows one, so messages read the same as other Link programs'.
impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (os error {})", self.describe(), self.0)
    }
}

pub type Result<T, E = Errno> = core::result::Result<T, E>;

pub const AT_FDCWD: i32 = -100;
pub const O_RDONLY: usize = 0;
#[cfg(target_arch = "x86_64")]
pub const O_DIRECTORY: usize = 0o200000;
#[cfg(target_arch = "aarch64")]
pub const O_DIRECTORY: usize = 0o40000;
#[cfg(target_arch = "x86_64")]
pub const O_NOFOLLOW: usize = 0o400000;
#[cfg(target_arch = "aarch64")]
pub const O_NOFOLLOW: usize = 0o100000;
pub const O_RDWR: usize = 2;
pub const O_CLOEXEC: usize = 0o2000000;
pub const O_PATH: usize = 0o10000000;

pub fn write(fd: i32, bytes: &[u8]) -> Result<usize> {
    // SAFETY: the kernel reads `bytes.len()` bytes of `bytes`.
    unsafe {
        call(
            nr::WRITE,
            &[fd as usize, bytes.as_ptr() as usize, bytes.len()],
        )
    }
}

/// Writes all of `bytes`, or as much as the descriptor takes before an error.
pub fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match write(fd, bytes) {
            Ok(0) | Err(_) => return,
            Ok(n) => bytes = &bytes[n..],
        }
    }
}

pub fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group takes a status and does not return.
        let _ = unsafe { call(nr::EXIT_GROUP, &[code as usize]) };
    }
}

pub fn close(fd: i32) {
    // SAFETY: the caller owns `fd`; an error leaves nothing to do.
    let _ = unsafe { call(nr::CLOSE, &[fd as usize]) };
}

/// Marks every descriptor from `first` on close-on-exec (`close_range`, Linux 5.11).
pub fn cloexec_from(first: u32) -> Result<()> {
    const CLOSE_RANGE_CLOEXEC: usize = 1 << 2;
    // SAFETY: no pointer; only descriptor flags change.
    unsafe {
        call(
            CLOSE_RANGE,
            &[first as usize, u32::MAX as usize, CLOSE_RANGE_CLOEXEC],
        )
    }?;
    Ok(())
}

/// Whether `fd` is open.
pub fn is_open(fd: i32) -> bool {
    const F_GETFD: usize = 1;
    // SAFETY: no pointer; F_GETFD only reads the descriptor's flags.
    unsafe { call(nr::FCNTL, &[fd as usize, F_GETFD]) }.is_ok()
}

/// Unblocks every signal and gives SIGPIPE its default action (an ignored signal stays
/// ignored across `execve`), the state Rust's `Command` gives the programs it runs.
pub fn reset_signals() -> Result<()> {
    const SIG_SETMASK: usize = 2;
    const SIGPIPE: usize = 13;
    let empty: u64 = 0;
    // SAFETY: the kernel reads one 8-byte signal set; the old one is not asked for.
    unsafe {
        call(
            nr::RT_SIGPROCMASK,
            &[SIG_SETMASK, &empty as *const u64 as usize, 0, 8],
        )
    }?;
    // `struct sigaction` as the kernel reads it: handler (SIG_DFL = 0), flags, restorer, mask.
    let default = [0usize; 4];
    // SAFETY: the kernel reads one such struct; the old action is not asked for.
    unsafe {
        call(
            nr::RT_SIGACTION,
            &[SIGPIPE, default.as_ptr() as usize, 0, 8],
        )
    }?;
    Ok(())
}

/// A descriptor the helper opened, closed when dropped.
pub struct Fd(pub i32);

impl Fd {
    /// Leaves the descriptor open for good (standard input, output or error).
    pub fn keep(self) -> i32 {
        core::mem::ManuallyDrop::new(self).0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        close(self.0);
    }
}

pub fn openat(dir: i32, path: &CStr, flags: usize) -> Result<Fd> {
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { call(nr::OPENAT, &[dir as usize, path.as_ptr() as usize, flags]) }?;
    Ok(Fd(fd as i32))
}

/// Reads directory entries into `buf` (`struct linux_dirent64` records); 0 at the end.
pub fn getdents64(fd: i32, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    unsafe {
        call(
            nr::GETDENTS64,
            &[fd as usize, buf.as_mut_ptr() as usize, buf.len()],
        )
    }
}

/// What `statx` says of a file: its type and identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub mode: u16,
    pub dev: (u32, u32),
    pub ino: u64,
}

impl Stat {
    const S_IFMT: u16 = 0o170000;
    pub fn is_dir(&self) -> bool {
        self.mode & Self::S_IFMT == 0o040000
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & Self::S_IFMT == 0o120000
    }
}

pub const AT_SYMLINK_NOFOLLOW: usize = 0x100;
pub const AT_EMPTY_PATH: usize = 0x1000;

/// `statx(2)`, whose record is laid out alike on every architecture.
pub fn statx(dir: i32, path: &CStr, flags: usize) -> Result<Stat> {
    const STATX_TYPE: usize = 1;
    const STATX_INO: usize = 0x100;
    let mut buf = [0u8; 256];
    // SAFETY: the kernel writes one 256-byte `struct statx` into `buf`.
    unsafe {
        call(
            nr::STATX,
            &[
                dir as usize,
                path.as_ptr() as usize,
                flags,
                STATX_TYPE | STATX_INO,
                buf.as_mut_ptr() as usize,
            ],
        )
    }?;
    let at = |offset: usize, len: usize| {
        let mut word = [0u8; 8];
        word[..len].copy_from_slice(&buf[offset..offset + len]);
        u64::from_le_bytes(word)
    };
    // Offsets in `struct statx`: stx_mode (u16) at 28, stx_ino at 32, stx_dev_major and
    // stx_dev_minor (u32) at 136 and 140. Both architectures are little-endian.
    Ok(Stat {
        mode: at(28, 2) as u16,
        ino: at(32, 8),
        dev: (at(136, 4) as u32, at(140, 4) as u32),
    })
}

pub fn chdir(path: &CStr) -> Result<()> {
    // SAFETY: `path` is NUL-terminated.
    unsafe { call(nr::CHDIR, &[path.as_ptr() as usize]) }?;
    Ok(())
}

pub fn umask(mode: u32) {
    // SAFETY: no pointer; umask cannot fail.
    let _ = unsafe { call(nr::UMASK, &[mode as usize]) };
}

/// Sets the soft and hard limit of `resource` for this process.
pub fn set_rlimit(resource: u32, soft: u64, hard: u64) -> Result<()> {
    let limit = [soft, hard];
    // SAFETY: the kernel reads one `struct rlimit64` and writes nothing (old limit NULL).
    unsafe {
        call(
            nr::PRLIMIT64,
            &[0, resource as usize, limit.as_ptr() as usize, 0],
        )
    }?;
    Ok(())
}

pub fn prctl(option: usize, arg: usize) -> Result<usize> {
    // SAFETY: the options the helper uses take numbers, no pointer.
    unsafe { call(nr::PRCTL, &[option, arg, 0, 0, 0]) }
}

pub fn setgroups_none() -> Result<()> {
    // SAFETY: an empty list: the kernel reads nothing.
    unsafe { call(nr::SETGROUPS, &[0, 0]) }?;
    Ok(())
}

pub fn setresgid(gid: u32) -> Result<()> {
    // SAFETY: no pointer.
    unsafe { call(nr::SETRESGID, &[gid as usize, gid as usize, gid as usize]) }?;
    Ok(())
}

pub fn setresuid(uid: u32) -> Result<()> {
    // SAFETY: no pointer.
    unsafe { call(nr::SETRESUID, &[uid as usize, uid as usize, uid as usize]) }?;
    Ok(())
}

pub fn getuid() -> u32 {
    // SAFETY: no argument; cannot fail.
    unsafe { call(nr::GETUID, &[]) }.unwrap_or(usize::MAX) as u32
}

pub fn geteuid() -> u32 {
    // SAFETY: no argument; cannot fail.
    unsafe { call(nr::GETEUID, &[]) }.unwrap_or(usize::MAX) as u32
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Empties the effective, permitted and inheritable sets (which empties the ambient one).
pub fn capset_none() -> Result<()> {
    let header = [CAPABILITY_VERSION_3, 0];
    let data = [0u32; 6];
    // SAFETY: the kernel reads the header and two `__user_cap_data_struct`s.
    unsafe {
        call(
            nr::CAPSET,
            &[header.as_ptr() as usize, data.as_ptr() as usize],
        )
    }?;
    Ok(())
}

/// Whether any capability is left in the effective or permitted set.
pub fn holds_capabilities() -> Result<bool> {
    let header = [CAPABILITY_VERSION_3, 0];
    let mut data = [0u32; 6];
    // SAFETY: the kernel writes two `__user_cap_data_struct`s (3 words each) into `data`.
    unsafe {
        call(
            nr::CAPGET,
            &[header.as_ptr() as usize, data.as_mut_ptr() as usize],
        )
    }?;
    // Each struct: effective, permitted, inheritable.
    Ok(data[0] | data[1] | data[3] | data[4] != 0)
}

/// Executes `path`; returns only on failure.
///
/// # Safety
/// `argv` and `envp` must be NULL-terminated arrays of NUL-terminated strings.
pub unsafe fn execve(path: &CStr, argv: *const *const c_char, envp: *const *const c_char) -> Errno {
    // SAFETY: as the caller promised.
    let r = unsafe {
        call(
            nr::EXECVE,
            &[path.as_ptr() as usize, argv as usize, envp as usize],
        )
    };
    r.err().unwrap_or(Errno::INVAL)
}

/// `struct landlock_ruleset_attr`.
#[repr(C)]
pub struct RulesetAttr {
    pub handled_access_fs: u64,
    pub handled_access_net: u64,
    pub scoped: u64,
}

/// The kernel's Landlock ABI version.
pub fn landlock_abi() -> Result<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: usize = 1;
    // SAFETY: with the version flag the kernel reads no attribute.
    let abi = unsafe {
        call(
            LANDLOCK_CREATE_RULESET,
            &[0, 0, LANDLOCK_CREATE_RULESET_VERSION],
        )
    }?;
    Ok(abi as u32)
}

pub fn landlock_create_ruleset(attr: &RulesetAttr) -> Result<Fd> {
    let size = core::mem::size_of::<RulesetAttr>();
    // SAFETY: the kernel reads `size` bytes of `attr`.
    let fd = unsafe {
        call(
            LANDLOCK_CREATE_RULESET,
            &[attr as *const _ as usize, size, 0],
        )
    }?;
    Ok(Fd(fd as i32))
}

/// Grants `access` beneath the file `parent` refers to.
pub fn landlock_add_path_rule(ruleset: &Fd, access: u64, parent: &Fd) -> Result<()> {
    const LANDLOCK_RULE_PATH_BENEATH: usize = 1;
    // `struct landlock_path_beneath_attr` is packed: a u64 then an s32, 12 bytes.
    let mut attr = [0u8; 12];
    attr[..8].copy_from_slice(&access.to_ne_bytes());
    attr[8..].copy_from_slice(&parent.0.to_ne_bytes());
    // SAFETY: the kernel reads the 12-byte attribute.
    unsafe {
        call(
            LANDLOCK_ADD_RULE,
            &[
                ruleset.0 as usize,
                LANDLOCK_RULE_PATH_BENEATH,
                attr.as_ptr() as usize,
                0,
            ],
        )
    }?;
    Ok(())
}

pub fn landlock_restrict_self(ruleset: &Fd) -> Result<()> {
    // SAFETY: no pointer.
    unsafe { call(LANDLOCK_RESTRICT_SELF, &[ruleset.0 as usize, 0]) }?;
    Ok(())
}
