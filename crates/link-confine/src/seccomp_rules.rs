//! The seccomp rules as data, in one place: `build.rs` compiles them with libseccomp, and
//! [`crate::seccomp`]'s tests run the compiled programs against them. What each refusal is
//! for is in [`crate::seccomp`]'s documentation. `libc` numbers only: build.rs includes this
//! file too.

/// Denied to commands whatever their arguments; bubblewrap, in the sandbox plugin, needs them.
pub const NAMESPACES_AND_MOUNTS: &[libc::c_long] = &[
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
];

/// Denied to every plugin and command whatever their arguments.
pub const ALWAYS: &[libc::c_long] = &[
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_lookup_dcookie,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
];

/// Refused to commands (and the plugins under their filter) with `EOPNOTSUPP`, as a
/// filesystem that cannot do it answers, so glibc's `posix_fallocate` falls back to writing:
/// `fallocate` allocates disk space that `RLIMIT_FSIZE` does not bound (past the end with
/// `FALLOC_FL_KEEP_SIZE`, or inside a sparse file), so the workspace quota would not hold
/// within one command. No plugin preallocates.
pub const PREALLOCATE: libc::c_long = libc::SYS_fallocate;

/// `clone` flags that create a namespace.
pub const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// `fchmodat2` (Linux 6.6) has the same number on every architecture; libseccomp 2.5 has no
/// name for it.
pub const FCHMODAT2: libc::c_long = 452;

/// The low 32 bits, where the kernel reads an `int` or `unsigned int` argument: a filter that
/// compared all 64 would let `ioctl(fd, TIOCSTI | 1 << 32)` through (CVE-2019-10063).
pub const LOW_32: u64 = 0xffff_ffff;

/// Terminal injection, refused as `ioctl` requests (argument 1, its low 32 bits; `Ioctl` is
/// 64 bits wide where the filters are built).
pub const INJECTION: [libc::Ioctl; 2] = [libc::TIOCSTI, libc::TIOCLINUX];

/// The bits that make a file setuid or setgid.
pub const SETID: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];

/// The mode argument's position in each chmod call.
pub fn chmods() -> Vec<(libc::c_long, u32)> {
    let mut chmods = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (FCHMODAT2, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    chmods.push((libc::SYS_chmod, 1));
    chmods
}

/// Each call that creates a file, with its mode argument's position and, where the file is
/// created only with `O_CREAT`, its flags argument's.
pub fn creates() -> Vec<(libc::c_long, u32, Option<u32>)> {
    let mut creates = vec![(libc::SYS_mknodat, 2, None), (libc::SYS_openat, 3, Some(2))];
    #[cfg(target_arch = "x86_64")]
    creates.extend([
        (libc::SYS_open, 2, Some(1)),
        (libc::SYS_creat, 1, None),
        (libc::SYS_mknod, 1, None),
    ]);
    creates
}

/// The socket domains commands (and a plugin on the network) may open: every other is refused
/// with `EAFNOSUPPORT`.
pub const ALLOWED_DOMAINS: &[libc::c_int] = &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];

/// The domains whose raw sockets the sandbox plugin's filter refuses (`EAFNOSUPPORT`), with
/// every `AF_PACKET` socket: it needs none, and as an ordinary user it holds `CAP_NET_RAW` over
/// the network namespace of its view, empty as it is. Its commands inherit the refusal, where
/// they could not make such a socket anyway (no capability; `AF_PACKET` is refused them).
pub const RAW_REFUSED_DOMAINS: [libc::c_int; 2] = [libc::AF_INET, libc::AF_INET6];

/// The bits of `socket`'s type argument that name the type (the kernel's `SOCK_TYPE_MASK`);
/// the others are flags (`SOCK_CLOEXEC`, `SOCK_NONBLOCK`).
pub const SOCK_TYPE_MASK: u64 = 0xf;

/// The socket domains a plugin off the network may open: Unix sockets only, so no TCP, UDP,
/// raw or packet socket (`EAFNOSUPPORT`), whatever Landlock bounds.
pub const OFFLINE_DOMAINS: &[libc::c_int] = &[libc::AF_UNIX];
