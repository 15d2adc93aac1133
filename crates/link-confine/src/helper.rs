//! The sandbox helper as this plugin carries it, and its status lines as the parent reads
//! them. The probe's inside checks are [`crate::probe::inside`]'s.
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
