//! What this binary does inside the sandbox: apply Landlock, then execute the command
//! (`landlock-exec`), and the probe's inside checks (`probe-inside`).
//!
//! `landlock-exec` reports on `--status-fd` (a pipe bubblewrap passes through) one line per
//! step, read by the parent after bwrap exits: `ok <abi>` when the ruleset is fully enforced,
//! then nothing more when the exec succeeds; `err <reason>` (exit 125) when Landlock cannot be
//! enforced, so nothing runs; `missing <cmd>` (exit 127) or `noexec <reason>` (exit 126) when
//! the command cannot be executed.

use crate::limits::Limits;
use crate::rules::Rules;
use rustix::fs::Mode;
use rustix::process::{Gid, Uid};
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// Exit status when the sandbox itself could not be set up (nothing was run).
pub const EXIT_SETUP: i32 = 125;
/// Exit status when the command exists but cannot be executed.
pub const EXIT_NOEXEC: i32 = 126;
/// Exit status when the command does not exist.
pub const EXIT_MISSING: i32 = 127;

/// One status line of `landlock-exec`.
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
        let mut abi = None;
        let mut last = None;
        for line in text.lines() {
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            let status = match word {
                "ok" => {
                    abi = rest.trim().parse().ok();
                    Status::Enforced(abi.unwrap_or(0))
                }
                "err" => Status::Refused(rest.into()),
                "missing" => Status::Missing(rest.into()),
                "noexec" => Status::NoExec(rest.into()),
                _ => continue,
            };
            last = Some(status);
        }
        (abi, last)
    }
}

/// The arguments of `landlock-exec [--status-fd N] [--drop-to UID:GID] [--limits L]
/// [--chdir DIR] [--rw DIR]... [--hide FILE]... -- COMMAND...`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    pub status_fd: Option<RawFd>,
    /// The dedicated identity to become (when bwrap runs as root).
    pub drop_to: Option<(u32, u32)>,
    pub limits: Option<Limits>,
    /// The working directory, entered once the identity is the command's.
    pub chdir: Option<PathBuf>,
    pub rw: Vec<PathBuf>,
    /// Files the command must not read ([`Rules::inside`]).
    pub hide: Vec<PathBuf>,
    pub command: Vec<OsString>,
}

/// Parses the arguments after `landlock-exec`.
pub fn parse_args(mut args: impl Iterator<Item = OsString>) -> Result<Args, String> {
    let mut parsed = Args::default();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--status-fd") => {
                let fd = args.next().and_then(|v| v.to_str()?.parse().ok());
                parsed.status_fd = Some(fd.ok_or("--status-fd needs a descriptor number")?);
            }
            Some("--drop-to") => {
                let v = args.next().and_then(|v| v.into_string().ok());
                let ids = v.as_deref().and_then(|v| {
                    let (u, g) = v.split_once(':')?;
                    Some((u.parse().ok()?, g.parse().ok()?))
                });
                parsed.drop_to = Some(ids.ok_or("--drop-to needs UID:GID")?);
            }
            Some("--limits") => {
                let v = args.next().and_then(|v| v.into_string().ok());
                let limits = v.as_deref().and_then(Limits::parse_helper_arg);
                parsed.limits = Some(limits.ok_or("--limits needs four numbers")?);
            }
            Some("--chdir") => {
                parsed.chdir = Some(args.next().ok_or("--chdir needs a directory")?.into())
            }
            Some("--rw") => parsed
                .rw
                .push(args.next().ok_or("--rw needs a directory")?.into()),
            Some("--hide") => parsed
                .hide
                .push(args.next().ok_or("--hide needs a file")?.into()),
            Some("--") => {
                parsed.command = args.collect();
                return Ok(parsed);
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    Err("missing `-- COMMAND...`".into())
}

/// Sets the limits, drops to the dedicated identity, applies Landlock with `rw` writable,
/// then executes the command. Never returns.
pub fn landlock_exec(args: Args) -> ! {
    let Args {
        status_fd,
        drop_to,
        limits,
        chdir,
        rw,
        hide,
        command: argv,
    } = args;
    // SAFETY: the fd number was passed by our parent for us alone.
    let mut status = status_fd.map(|fd| unsafe { File::from_raw_fd(fd) });
    close_inherited_on_exec();
    let mut report = |line: String| {
        if let Some(f) = status.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    };
    if argv.is_empty() {
        link_protocol::errln!("link-plugin-sandbox: landlock-exec needs a command after --");
        report("err no command".into());
        std::process::exit(EXIT_SETUP);
    }
    if let Some(limits) = limits {
        if let Err(e) = limits.apply() {
            refuse(&mut report, format!("cannot set the limits: {e}"));
        }
    }
    if let Some((uid, gid)) = drop_to {
        if let Err(e) = drop_identity(uid, gid) {
            refuse(
                &mut report,
                format!("cannot drop to uid {uid} gid {gid}: {e}"),
            );
        }
    }
    if let Some(dir) = chdir {
        if let Err(e) = std::env::set_current_dir(&dir) {
            refuse(&mut report, format!("cannot enter {}: {e}", dir.display()));
        }
    }
    // What the command creates is its own alone, as the state root's files are.
    rustix::process::umask(Mode::from_raw_mode(0o077));
    match Rules::inside(&rw, &hide).restrict_self() {
        Ok(abi) => report(format!("ok {abi}")),
        Err(e) => {
            link_protocol::errln!("link-plugin-sandbox: refusing to run unconfined: {e}");
            report(format!("err {e}"));
            std::process::exit(EXIT_SETUP);
        }
    }
    let err = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    let name = argv[0].to_string_lossy();
    if err.kind() == std::io::ErrorKind::NotFound {
        link_protocol::errln!("link-plugin-sandbox: command not found: {name}");
        report(format!("missing {name}"));
        std::process::exit(EXIT_MISSING);
    }
    link_protocol::errln!("link-plugin-sandbox: cannot execute {name}: {err}");
    report(format!("noexec {name}: {err}"));
    std::process::exit(EXIT_NOEXEC);
}

/// Says why nothing runs, and exits [`EXIT_SETUP`].
fn refuse(report: &mut impl FnMut(String), reason: String) -> ! {
    link_protocol::errln!("link-plugin-sandbox: refusing to run: {reason}");
    report(format!("err {reason}"));
    std::process::exit(EXIT_SETUP);
}

/// Becomes `uid`/`gid` with no supplementary group and no capability left in any set,
/// including the bounding set, and checks that it is so. The helper is single-threaded, so
/// the per-thread calls change the whole process.
fn drop_identity(uid: u32, gid: u32) -> std::io::Result<()> {
    crate::host::keep_only_in_bounding_set(rustix::thread::CapabilitySet::empty())?;
    let (u, g) = (Uid::from_raw(uid), Gid::from_raw(gid));
    rustix::thread::set_thread_groups(&[])?;
    rustix::thread::set_thread_res_gid(g, g, g)?;
    rustix::thread::set_thread_res_uid(u, u, u)?;
    let none = rustix::thread::CapabilitySet::empty();
    rustix::thread::set_capabilities(
        None,
        rustix::thread::CapabilitySets {
            effective: none,
            permitted: none,
            inheritable: none,
        },
    )?;
    let caps = rustix::thread::capabilities(None)?;
    let ids = (rustix::process::getuid(), rustix::process::geteuid());
    if ids != (u, u) || !caps.permitted.is_empty() || !caps.effective.is_empty() {
        return Err(std::io::Error::other("the identity did not change"));
    }
    Ok(())
}

/// Marks every inherited descriptor above stderr close-on-exec, so the command gets only
/// stdin, stdout and stderr whatever its caller leaked into bwrap.
fn close_inherited_on_exec() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in dir.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<RawFd>().ok())
        else {
            continue;
        };
        if fd > 2 {
            // SAFETY: only flags change; the descriptor stays owned by whoever owns it.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            let _ = rustix::io::fcntl_setfd(fd.as_fd(), rustix::io::FdFlags::CLOEXEC);
        }
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

    #[test]
    fn helper_arguments() {
        let args = |s: &str| {
            s.split(' ')
                .map(OsString::from)
                .collect::<Vec<_>>()
                .into_iter()
        };
        let a = parse_args(args(
            "--status-fd 7 --rw /w --hide /s --rw /h -- sh -c --rw",
        ))
        .unwrap();
        assert_eq!(a.status_fd, Some(7));
        assert_eq!(a.rw, [PathBuf::from("/w"), PathBuf::from("/h")]);
        assert_eq!(a.hide, [PathBuf::from("/s")]);
        assert_eq!(a.command, ["sh", "-c", "--rw"]);
        assert!(parse_args(args("--rw /w")).is_err());
        assert!(parse_args(args("--bogus -- x")).is_err());
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
