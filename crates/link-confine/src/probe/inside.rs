//! The probe's inside checks (`probe-inside`, run by this binary as the confined command):
//! what the command can write, reach and see, printed as one JSON object the probe reads
//! back. Below both the probe (which compares the namespaces with the host's) and the helper.

/// The namespaces the sandbox must not share with the host: the probe compares each inside
/// and outside.
pub const NAMESPACES: &[&str] = &["user", "pid", "net", "ipc", "uts", "mnt"];

/// The probe's checks, run as the confined command; prints one JSON object on stdout.
pub fn probe_inside(port: u16, outside_name: &str) -> ! {
    let etc = format!("/etc/{outside_name}");
    let report = serde_json::json!({
        "workspace_write": write_result(&format!("{}/{outside_name}", crate::policy::WORKSPACE)),
        "etc_write": write_result(&etc),
        "dev_write": write_result(&format!("/dev/{outside_name}")),
        "tcp_connect": tcp_result(port),
        "status": proc_status(),
        "namespaces": namespace_ids(),
        "syscalls": syscall_results(),
        "identity": {
            "uid": rustix::process::getuid().as_raw(),
            "gid": rustix::process::getgid().as_raw(),
            "groups": rustix::process::getgroups().map_or(usize::MAX, |g| g.len()),
        },
        "limits": rlimits(),
        "init_cmdline": String::from_utf8_lossy(&std::fs::read("/proc/1/cmdline").unwrap_or_default()),
    });
    link_protocol::outln!("{report}");
    std::process::exit(0);
}

/// `"ok"` or the errno name of creating and writing `path`.
pub fn write_result(path: &str) -> String {
    match std::fs::write(path, b"probe") {
        Ok(()) => "ok".into(),
        Err(e) => errno_name(e.raw_os_error()),
    }
}

fn tcp_result(port: u16) -> String {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(3)) {
        Ok(_) => "ok".into(),
        Err(e) => errno_name(e.raw_os_error()),
    }
}

fn proc_status() -> serde_json::Value {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut map = serde_json::Map::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(':') {
            if matches!(
                k,
                "CapEff"
                    | "CapPrm"
                    | "CapBnd"
                    | "CapInh"
                    | "NoNewPrivs"
                    | "Seccomp"
                    | "Seccomp_filters"
            ) {
                map.insert(k.into(), v.trim().into());
            }
        }
    }
    map.into()
}

/// What the seccomp filter answers, each call beside a twin it must let through. Every refused
/// call is one that would succeed, or fail otherwise, without the filter.
fn syscall_results() -> serde_json::Value {
    let errno = |r: libc::c_long| {
        if r >= 0 {
            "ok".to_owned()
        } else {
            errno_name(std::io::Error::last_os_error().raw_os_error())
        }
    };
    // SAFETY: each call passes no pointer the kernel writes through (NULL or none), and the
    // descriptors returned are closed at exit.
    let results = unsafe {
        [
            (
                "unshare_user",
                errno(libc::unshare(libc::CLONE_NEWUSER) as libc::c_long),
            ),
            (
                "unshare_mount",
                errno(libc::unshare(libc::CLONE_NEWNS) as libc::c_long),
            ),
            ("keyctl", errno(libc::syscall(libc::SYS_keyctl, 0, -3, 0))),
            (
                "io_uring_setup",
                errno(libc::syscall(libc::SYS_io_uring_setup, 1, 0)),
            ),
            ("bpf", errno(libc::syscall(libc::SYS_bpf, 9999, 0, 0))),
            ("clone3", errno(libc::syscall(libc::SYS_clone3, 0, 0))),
            (
                "socket_netlink",
                errno(libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0) as libc::c_long),
            ),
            (
                "socket_packet",
                errno(libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) as libc::c_long),
            ),
            ("getpid", errno(libc::getpid() as libc::c_long)),
            (
                "socket_unix",
                errno(libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) as libc::c_long),
            ),
            (
                "socket_inet",
                errno(libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) as libc::c_long),
            ),
        ]
    };
    let mut results: serde_json::Map<_, _> = results
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into()))
        .collect();
    #[cfg(target_arch = "x86_64")]
    results.insert("x32_getpid".into(), x32_getpid().into());
    results.into()
}

/// An x32 `getpid`, in a child: the filter kills the process that makes it ("SIGSYS"), where
/// the kernel alone would answer it ("ok") or refuse it ("ENOSYS").
#[cfg(target_arch = "x86_64")]
fn x32_getpid() -> String {
    // SAFETY: the child makes three system calls and exits, touching no lock or allocation.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // Killed by the filter, it would dump core: a crash report or a core file per probe.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
        let r = unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) };
        let code = if r >= 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(1)
        };
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        return errno_name(std::io::Error::last_os_error().raw_os_error());
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return errno_name(std::io::Error::last_os_error().raw_os_error());
    }
    match (libc::WIFSIGNALED(status), libc::WTERMSIG(status)) {
        (true, libc::SIGSYS) => "SIGSYS".into(),
        (true, signal) => format!("signal {signal}"),
        (false, _) => match libc::WEXITSTATUS(status) {
            0 => "ok".into(),
            code => errno_name(Some(code)),
        },
    }
}

/// The rlimits the command runs under.
fn rlimits() -> serde_json::Value {
    use rustix::process::{getrlimit, Resource};
    let get = |r| getrlimit(r).current;
    serde_json::json!({
        "processes": get(Resource::Nproc),
        "memory_bytes": get(Resource::As),
        "cpu_seconds": get(Resource::Cpu),
        "file_size_bytes": get(Resource::Fsize),
    })
}

/// The namespace identities of the calling process (`/proc/self/ns/*` link targets).
pub fn namespace_ids() -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for ns in NAMESPACES {
        let id = std::fs::read_link(format!("/proc/self/ns/{ns}"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        map.insert((*ns).into(), id.into());
    }
    map.into()
}

/// The symbolic name of an errno, for reports and tests.
pub fn errno_name(raw: Option<i32>) -> String {
    use rustix::io::Errno;
    let Some(raw) = raw else {
        return "error".into();
    };
    let known = [
        (Errno::ACCESS, "EACCES"),
        (Errno::ROFS, "EROFS"),
        (Errno::NOENT, "ENOENT"),
        (Errno::PERM, "EPERM"),
        (Errno::CONNREFUSED, "ECONNREFUSED"),
        (Errno::NETUNREACH, "ENETUNREACH"),
        (Errno::HOSTUNREACH, "EHOSTUNREACH"),
        (Errno::TIMEDOUT, "ETIMEDOUT"),
        (Errno::EXIST, "EEXIST"),
        (Errno::NOTDIR, "ENOTDIR"),
        (Errno::ISDIR, "EISDIR"),
        (Errno::NOSYS, "ENOSYS"),
        (Errno::AFNOSUPPORT, "EAFNOSUPPORT"),
        (Errno::INVAL, "EINVAL"),
        (Errno::FAULT, "EFAULT"),
        (Errno::NOSPC, "ENOSPC"),
        (Errno::AGAIN, "EAGAIN"),
        (Errno::FBIG, "EFBIG"),
        (Errno::NOMEM, "ENOMEM"),
    ];
    known
        .iter()
        .find(|(e, _)| e.raw_os_error() == raw)
        .map_or_else(|| format!("errno {raw}"), |(_, n)| (*n).into())
}
