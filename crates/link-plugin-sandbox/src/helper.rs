//! What this binary does inside the sandbox: apply Landlock, then execute the command
//! (`landlock-exec`), and the probe's inside checks (`probe-inside`).
//!
//! `landlock-exec` reports on `--status-fd` (a pipe bubblewrap passes through) one line per
//! step, read by the parent after bwrap exits: `ok <abi>` when the ruleset is fully enforced,
//! then nothing more when the exec succeeds; `err <reason>` (exit 125) when Landlock cannot be
//! enforced, so nothing runs; `missing <cmd>` (exit 127) or `noexec <reason>` (exit 126) when
//! the command cannot be executed.

use crate::rules::Rules;
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

/// The arguments of `landlock-exec [--status-fd N] [--rw DIR]... -- COMMAND...`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    pub status_fd: Option<RawFd>,
    pub rw: Vec<PathBuf>,
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
            Some("--rw") => parsed
                .rw
                .push(args.next().ok_or("--rw needs a directory")?.into()),
            Some("--") => {
                parsed.command = args.collect();
                return Ok(parsed);
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    Err("missing `-- COMMAND...`".into())
}

/// Applies Landlock with `rw` writable, then executes `argv`. Never returns.
pub fn landlock_exec(status_fd: Option<RawFd>, rw: Vec<PathBuf>, argv: Vec<OsString>) -> ! {
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
    match Rules::inside(&rw).restrict_self() {
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
            if matches!(k, "CapEff" | "CapPrm" | "CapBnd" | "NoNewPrivs") {
                map.insert(k.into(), v.trim().into());
            }
        }
    }
    map.into()
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
        let a = parse_args(args("--status-fd 7 --rw /w --rw /h -- sh -c --rw")).unwrap();
        assert_eq!(a.status_fd, Some(7));
        assert_eq!(a.rw, [PathBuf::from("/w"), PathBuf::from("/h")]);
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
