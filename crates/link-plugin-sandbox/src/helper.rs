//! The sandbox helper as this plugin carries it, its status lines as the parent reads them,
//! and the probe's inside checks (`probe-inside`, run by this binary inside the sandbox).
//!
//! The helper itself is its own small program (`crates/link-sandbox-helper`), built by this
//! crate's build script and embedded: each sandbox gets it from a memory file
//! ([`image`]), so no host path of it is bound, and it is always the one built with this
//! plugin.

use std::os::fd::OwnedFd;

pub use link_sandbox_helper::{EXIT_MISSING, EXIT_NOEXEC, EXIT_SETUP};

/// The helper program's bytes.
pub const IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/link-sandbox-helper"));

/// A memory file holding the helper, at offset 0 and close-on-exec: what bwrap's
/// `--ro-bind-data` reads, and what the probe executes through `/proc/self/fd`.
pub fn image() -> std::io::Result<OwnedFd> {
    use rustix::fs::MemfdFlags;
    // Executable memory files need MFD_EXEC where `vm.memfd_noexec` makes them noexec by
    // default (Linux 6.3); older kernels refuse the flag, and make them executable anyway.
    let fd = rustix::fs::memfd_create(
        "link-sandbox-helper",
        MemfdFlags::CLOEXEC | MemfdFlags::EXEC,
    )
    .or_else(|_| rustix::fs::memfd_create("link-sandbox-helper", MemfdFlags::CLOEXEC))?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, IMAGE)?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))?;
    Ok(file.into())
}

/// One status line of the helper ([`link_sandbox_helper`]'s documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Landlock fully enforced at this kernel ABI; the command was then executed.
    Enforced(u32),
    /// Landlock could not be enforced; nothing ran.
    Refused(String),
    Missing(String),
    NoExec(String),
}

impl Status {
    /// The last meaningful line of the status pipe, with the ABI of an earlier `ok` line.
    pub fn parse(text: &str) -> (Option<u32>, Option<Status>) {
        use link_sandbox_helper::status;
        let mut abi = None;
        let mut last = None;
        for line in text.lines() {
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            let status = match word {
                status::ENFORCED => {
                    abi = rest.trim().parse().ok();
                    Status::Enforced(abi.unwrap_or(0))
                }
                status::REFUSED => Status::Refused(rest.into()),
                status::MISSING => Status::Missing(rest.into()),
                status::NOEXEC => Status::NoExec(rest.into()),
                _ => continue,
            };
            last = Some(status);
        }
        (abi, last)
    }
}

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
    for ns in crate::probe::NAMESPACES {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The helper is a static executable: no program interpreter (`ld.so`), nothing to link
    /// at run time, so its exec maps a few pages of its own and nothing else.
    #[test]
    fn the_helper_links_nothing_at_run_time() {
        use crate::static_elf::{not_static, MACHINE};
        assert_eq!(not_static(IMAGE, MACHINE), None);
        assert!(IMAGE.len() < 64 * 1024, "{} bytes", IMAGE.len());
        // The check itself: this test program, which links libc, is refused.
        let linked = std::fs::read(std::env::current_exe().unwrap());
        let refused = linked.map(|p| not_static(&p, MACHINE));
        assert!(matches!(refused, Ok(Some(_))), "{refused:?}");
    }

    /// Whatever state bwrap hands the helper in, the command starts as a program started by
    /// Rust's `Command` does: stdin, stdout and stderr open, no signal blocked, SIGPIPE at
    /// its default (an ignored signal stays ignored across `execve`).
    #[test]
    fn the_command_starts_with_standard_descriptors_and_default_signals() {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let image = image().unwrap();
        let mut command =
            std::process::Command::new(format!("/proc/self/fd/{}", image.as_raw_fd()));
        command
            .args(["--", "/bin/sh", "-c"])
            .arg("grep -E '^Sig(Blk|Ign)' /proc/self/status; readlink /proc/self/fd/0");
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                let mut blocked: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut blocked);
                libc::sigaddset(&mut blocked, libc::SIGUSR1);
                libc::sigprocmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                libc::close(0);
                Ok(())
            })
        };
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(EXIT_SETUP)
            && stderr.contains("Landlock")
            && std::env::var_os("LNK_REQUIRE_SANDBOX").is_none()
        {
            eprintln!("skipped: the helper cannot enforce Landlock here: {stderr}");
            return;
        }
        assert!(out.status.success(), "{:?}: {stderr}", out.status);
        let shown = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            let line = shown.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
        };
        assert_eq!(field("SigBlk:"), 0, "{shown}");
        let sigpipe = 1 << (libc::SIGPIPE - 1);
        assert_eq!(field("SigIgn:") & sigpipe, 0, "{shown}");
        assert_eq!(shown.lines().last(), Some("/dev/null"), "{shown}");
    }

    #[test]
    fn status_lines() {
        assert_eq!(
            Status::parse("ok 7\n"),
            (Some(7), Some(Status::Enforced(7)))
        );
        assert_eq!(
            Status::parse("ok 7\nmissing foo\n"),
            (Some(7), Some(Status::Missing("foo".into())))
        );
        assert_eq!(
            Status::parse("err no landlock\n").1,
            Some(Status::Refused("no landlock".into()))
        );
        assert_eq!(Status::parse(""), (None, None));
    }
}
