//! The seccomp filter of every confined command, compiled with libseccomp when the crate is
//! built (`build.rs`, which holds the rules) and handed to bubblewrap as one BPF program
//! (`--add-seccomp-fd FD`).
//!
//! A deny-list after Flatpak's bwrap filter and codex's Linux sandbox: what an ordinary
//! build or script never needs, and what widens the kernel's attack surface or breaks out of
//! the namespaces. One program, each rule with its own errno:
//! - `EPERM`: new namespaces (`unshare`, `setns`, namespace flags of `clone`), mounting,
//!   keyrings, ptrace and `process_vm_*`, io_uring, bpf, perf events, userfaultfd, kexec and
//!   modules, swap, reboot, the kernel log, handle-based opens, terminal injection
//!   (`TIOCSTI`, `TIOCLINUX`) and making a file setuid or setgid with any `chmod`, or creating
//!   one so with `open`, `openat`, `creat` or `mknod`;
//! - `ENOSYS` for `clone3`, whose flags sit in memory a filter cannot read: glibc then falls
//!   back to `clone`, which the `EPERM` rules check;
//! - `EAFNOSUPPORT` for sockets other than `AF_UNIX`, `AF_INET` and `AF_INET6`.
//!
//! The host applies the same filter to every plugin (inherited from the thread that forks
//! them, [`crate::host::PluginFilter`]) but the sandbox plugin, whose bwrap needs
//! namespaces and mounts: it gets [`sandbox_plugin_filter`], the `EPERM` rules without those
//! (keyrings, ptrace and `process_vm_*`, io_uring, bpf, perf events, userfaultfd, kexec and
//! modules, swap, reboot, the kernel log, handle-based opens, terminal injection). Its
//! commands still get the whole filter from bwrap. [`crate::host::Shedding`].
//!
//! Each program starts with libseccomp's architecture check, which kills a process that
//! switches to another system-call ABI (i386, or x32 on x86_64); the probe checks that an x32
//! call is killed.

use seccompiler::{sock_filter, BpfProgram};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// The filter's name in reports; changed whenever the rules change.
pub const NAME: &str = "link-seccomp-v3";

/// One compiled program.
#[derive(Debug)]
pub struct Filter {
    /// As bwrap reads it (`struct sock_filter` bytes).
    pub program: &'static [u8],
    /// As `seccompiler::apply_filter` takes it: the host applies it to plugins.
    pub bpf: BpfProgram,
    /// sha256 of the program's bytes: what a cached probe is keyed on.
    pub sha256: String,
    pub instructions: usize,
}

/// The commands' filter, decoded once per process.
pub fn filter() -> &'static Filter {
    static FILTER: OnceLock<Filter> = OnceLock::new();
    FILTER.get_or_init(|| decode(include_bytes!(concat!(env!("OUT_DIR"), "/commands.bpf"))))
}

/// The sandbox plugin's own filter (see the module's documentation), decoded once per process.
pub fn sandbox_plugin_filter() -> &'static Filter {
    static FILTER: OnceLock<Filter> = OnceLock::new();
    FILTER.get_or_init(|| {
        decode(include_bytes!(concat!(
            env!("OUT_DIR"),
            "/sandbox-plugin.bpf"
        )))
    })
}

/// `struct sock_filter` as the kernel (and bwrap) read it: `u16` code, `u8` jt and jf, `u32` k.
fn decode(program: &'static [u8]) -> Filter {
    assert!(
        !program.is_empty() && program.len().is_multiple_of(8),
        "build.rs exports whole instructions"
    );
    let bpf: BpfProgram = program
        .chunks_exact(8)
        .map(|i| sock_filter {
            code: u16::from_ne_bytes([i[0], i[1]]),
            jt: i[2],
            jf: i[3],
            k: u32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
        })
        .collect();
    Filter {
        program,
        instructions: bpf.len(),
        bpf,
        sha256: format!("{:x}", Sha256::digest(program)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_are_whole_programs_and_the_plugins_one_is_smaller() {
        let f = filter();
        assert_eq!(f.instructions * 8, f.program.len());
        let plugin = sandbox_plugin_filter();
        assert!(plugin.instructions < f.instructions);
        assert_ne!(plugin.sha256, f.sha256);
        // bwrap reads the program whole; keep it far below a pipe's 64 KiB. libseccomp's tree
        // keeps it short: seccompiler's three programs were 522 instructions.
        assert!(f.instructions < 256, "{}", f.instructions);
        // The last instruction of a program returns.
        let last = f.bpf.last().unwrap();
        assert_eq!(last.code & 0x07, 0x06, "BPF_RET");
    }
}
