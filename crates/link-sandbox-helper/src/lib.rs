//! `link-sandbox-helper`: the program bubblewrap runs inside each sandbox, before the
//! command. It sets the command's limits, drops to its dedicated identity, enters the
//! workspace, applies Landlock ([`landlock`]), then executes the command in its own place.
//!
//! It runs before every confined command, so it is built to start fast: no C library, no
//! allocator, no unwinding, raw system calls ([`sys`]), a static executable of a few pages
//! (about 0.2 ms from `execve` to the command's, where the `link-plugin-sandbox` program it
//! replaces took 1.2 ms). `link-confine`'s build script compiles `src/start.rs`
//! against this library and embeds the program; each sandbox gets it from a memory file.
//!
//! It reports on `--status-fd` one line per outcome, read by the parent after bwrap exits:
//! `ok <abi>` when the ruleset is fully enforced, then nothing more when the exec succeeds;
//! `err <reason>` ([`EXIT_SETUP`]) when a step fails, so nothing runs; `missing <cmd>`
//! ([`EXIT_MISSING`]) or `noexec <reason>` ([`EXIT_NOEXEC`]) when the command cannot be
//! executed. A mistake in its own arguments (or a bug: a panic) also exits [`EXIT_SETUP`],
//! with a message on standard error and no status line. Control characters in a command's
//! name are shown escaped, so no name can add a line of its own.

// The docs describe how the code works, private parts included (read them with
// `cargo doc --document-private-items`): a link to a private item is meant.
#![allow(rustdoc::private_intra_doc_links)]
#![cfg_attr(not(test), no_std)]

pub mod args;
mod exec;
pub mod landlock;
mod sys;
mod text;

use args::{Args, Limits};
use core::ffi::{c_char, CStr};
use core::fmt::{self, Write as _};
use text::{Line, Lossy};

pub use landlock::PINNED_ABI;

/// Exit status when the sandbox itself could not be set up (nothing was run).
pub const EXIT_SETUP: i32 = 125;
/// Exit status when the command exists but cannot be executed.
pub const EXIT_NOEXEC: i32 = 126;
/// Exit status when the command does not exist.
pub const EXIT_MISSING: i32 = 127;

/// The first word of each status line.
pub mod status {
    pub const ENFORCED: &str = "ok";
    pub const REFUSED: &str = "err";
    pub const MISSING: &str = "missing";
    pub const NOEXEC: &str = "noexec";
}

/// The name messages on standard error begin with: the program people know.
const NAME: &str = "link-plugin-sandbox";

/// Writes one formatted line to `fd`; a closed or full descriptor loses it, nothing else.
fn say(fd: i32, args: fmt::Arguments<'_>) {
    let mut line = Line::new();
    let _ = line.write_fmt(args);
    let _ = line.write_char('\n');
    sys::write_all(fd, line.bytes());
}

/// Where the outcome is reported: standard error for people, the status pipe for the parent.
struct Report {
    status_fd: Option<i32>,
}

impl Report {
    fn status(&self, word: &str, detail: fmt::Arguments<'_>) {
        if let Some(fd) = self.status_fd {
            say(fd, format_args!("{word} {detail}"));
        }
    }

    /// Says why nothing runs, and exits [`EXIT_SETUP`].
    fn refuse(&self, reason: fmt::Arguments<'_>) -> ! {
        say(2, format_args!("{NAME}: refusing to run: {reason}"));
        self.status(status::REFUSED, reason);
        sys::exit(EXIT_SETUP)
    }
}

/// The helper's whole run, from the kernel's argument and environment arrays. Never returns.
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings and a NULL, writable; `envp` is a
/// NULL-terminated array of NUL-terminated strings.
pub unsafe fn main(argc: usize, argv: *mut *const c_char, envp: *const *const c_char) -> ! {
    standard_descriptors_open();
    // `all` and `args` borrow the argument array, which `execvp` may rewrite (a script's
    // `/bin/sh` slots): they end before it, and what is used after is copied out of them.
    let (at, name, report) = {
        // SAFETY: as the caller promised.
        let all = unsafe { core::slice::from_raw_parts(argv, argc) };
        // SAFETY: as the caller promised.
        let args = match unsafe { Args::parse(all) } {
            Ok(a) => a,
            Err(e) => {
                say(2, format_args!("{NAME} helper: {e}"));
                sys::exit(EXIT_SETUP)
            }
        };
        let report = Report {
            status_fd: args.status_fd,
        };
        // The command gets only stdin, stdout and stderr, whatever its caller leaked into
        // bwrap (the status pipe closes at the exec, which tells the parent it succeeded).
        if let Err(e) = sys::cloexec_from(3) {
            report.refuse(format_args!(
                "cannot mark inherited descriptors close-on-exec: {e}"
            ));
        }
        if args.command.is_empty() {
            say(
                2,
                format_args!("{NAME}: the helper needs a command after --"),
            );
            report.status(status::REFUSED, format_args!("no command"));
            sys::exit(EXIT_SETUP);
        }
        prepare(&args, &report);
        (args.command_at, args.command[0], report)
    };
    // SAFETY: `argv[at]` is the command's first word, after `--` (so at >= 1).
    let error = unsafe { exec::execvp(argv, at, envp) };
    // SAFETY: `name` points to the command's first word, a string execvp does not change.
    let name = Lossy(unsafe { CStr::from_ptr(name) }.to_bytes());
    if error == sys::Errno::NOENT {
        say(2, format_args!("{NAME}: command not found: {name}"));
        report.status(status::MISSING, format_args!("{name}"));
        sys::exit(EXIT_MISSING);
    }
    say(2, format_args!("{NAME}: cannot execute {name}: {error}"));
    report.status(status::NOEXEC, format_args!("{name}: {error}"));
    sys::exit(EXIT_NOEXEC)
}

/// Opens `/dev/null` in place of a closed standard descriptor, as Rust's runtime does at
/// start: a descriptor the helper or the command opens must never become fd 0, 1 or 2.
fn standard_descriptors_open() {
    for fd in 0..=2 {
        if sys::is_open(fd) {
            continue;
        }
        match sys::openat(sys::AT_FDCWD, c"/dev/null", sys::O_RDWR) {
            Ok(null) if null.0 == fd => {
                null.keep();
            }
            _ => sys::exit(EXIT_SETUP),
        }
    }
}

/// Everything before the exec: limits, identity, working directory, umask, Landlock.
#[allow(clippy::result_large_err)] // Landlock's error, as in `landlock`.
fn prepare(args: &Args<'_>, report: &Report) {
    if let Some(limits) = args.limits {
        if let Err(e) = set_limits(&limits) {
            report.refuse(format_args!("cannot set the limits: {e}"));
        }
    }
    if let Some((uid, gid)) = args.drop_to {
        if let Err(e) = drop_identity(uid, gid) {
            report.refuse(format_args!("cannot drop to uid {uid} gid {gid}: {e}"));
        }
    }
    if let Some(dir) = args.chdir {
        if let Err(e) = sys::chdir(dir) {
            let dir = Lossy(dir.to_bytes());
            report.refuse(format_args!("cannot enter {dir}: {e}"));
        }
    }
    // What the command creates is its own alone, as the state root's files are.
    sys::umask(0o077);
    if let Err(e) = sys::reset_signals() {
        report.refuse(format_args!(
            "cannot reset the signal mask and SIGPIPE: {e}"
        ));
    }
    let confined = landlock::Hidden::new(args.values(b"--hide")).and_then(|hidden| {
        let (rw, shrink) = (args.values(b"--rw"), args.values(b"--shrink"));
        landlock::confine(rw, shrink, &hidden)
    });
    match confined {
        Ok(abi) => report.status(status::ENFORCED, format_args!("{abi}")),
        Err(e) => {
            say(2, format_args!("{NAME}: refusing to run unconfined: {e}"));
            report.status(status::REFUSED, format_args!("{e}"));
            sys::exit(EXIT_SETUP);
        }
    }
}

/// Sets every rlimit, soft and hard alike, so the command cannot raise them.
fn set_limits(limits: &Limits) -> sys::Result<()> {
    const RLIMIT_CPU: u32 = 0;
    const RLIMIT_FSIZE: u32 = 1;
    const RLIMIT_NPROC: u32 = 6;
    const RLIMIT_AS: u32 = 9;
    for (resource, value) in [
        (RLIMIT_NPROC, limits.processes),
        (RLIMIT_AS, limits.memory_bytes),
        (RLIMIT_CPU, limits.cpu_seconds),
        (RLIMIT_FSIZE, limits.file_size_bytes),
    ] {
        // CPU: at the soft limit the kernel sends SIGXCPU, which names the limit; the hard
        // one, a second later, is SIGKILL for a process that ignores it.
        let hard = if resource == RLIMIT_CPU {
            value.saturating_add(1)
        } else {
            value
        };
        sys::set_rlimit(resource, value, hard)?;
    }
    Ok(())
}

/// Why the identity did not change.
enum DropError {
    Call(sys::Errno),
    Unchanged,
}

impl fmt::Display for DropError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropError::Call(e) => e.fmt(f),
            DropError::Unchanged => f.write_str("the identity did not change"),
        }
    }
}

/// Becomes `uid`/`gid` with no supplementary group and no capability left in any set,
/// including the bounding set, and checks that it is so. The helper is single-threaded, so
/// the raw (per-thread) calls change the whole process.
fn drop_identity(uid: u32, gid: u32) -> Result<(), DropError> {
    const PR_CAPBSET_DROP: usize = 24;
    for cap in 0..64 {
        // Past the last capability the kernel answers EINVAL, which ends the loop.
        match sys::prctl(PR_CAPBSET_DROP, cap) {
            Ok(_) => {}
            Err(sys::Errno::INVAL) if cap > 0 => break,
            Err(e) => return Err(DropError::Call(e)),
        }
    }
    sys::setgroups_none().map_err(DropError::Call)?;
    sys::setresgid(gid).map_err(DropError::Call)?;
    sys::setresuid(uid).map_err(DropError::Call)?;
    sys::capset_none().map_err(DropError::Call)?;
    let holds = sys::holds_capabilities().map_err(DropError::Call)?;
    if (sys::getuid(), sys::geteuid()) != (uid, uid) || holds {
        return Err(DropError::Unchanged);
    }
    Ok(())
}

/// What the program does on a panic (a bug): says so and exits as a refusal; nothing runs.
pub fn abort() -> ! {
    say(
        2,
        format_args!("{NAME}: the sandbox helper failed (a bug); nothing ran"),
    );
    sys::exit(EXIT_SETUP)
}
