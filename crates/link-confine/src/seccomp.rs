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
//! - `EOPNOTSUPP` for `fallocate`, which allocates space the file size limit does not bound
//!   (`seccomp_rules::PREALLOCATE`): glibc's `posix_fallocate` then writes instead;
//! - `EAFNOSUPPORT` for sockets other than `AF_UNIX`, `AF_INET` and `AF_INET6`.
//!
//! The host applies the same filter, but with Unix sockets only ([`offline_filter`]: no
//! `AF_INET`, `AF_INET6` or other socket, so no TCP, UDP or raw socket), to every plugin off
//! the network (inherited from the thread that forks them, [`crate::host::PluginFilter`]); the
//! commands' own to a plugin on the network (the model when it forwards,
//! [`crate::host::Network`]); and to the sandbox plugin, whose bwrap needs namespaces and
//! mounts, [`sandbox_plugin_filter`], the `EPERM` rules without those (keyrings, ptrace and
//! `process_vm_*`, io_uring, bpf, perf events, userfaultfd, kexec and modules, swap, reboot,
//! the kernel log, handle-based opens, terminal injection), and no packet socket or raw
//! `AF_INET`/`AF_INET6` one (`EAFNOSUPPORT`); its network namespace has no interface
//! ([`crate::view`]). Its commands still get the whole filter from bwrap.
//! [`crate::host::Shedding`].
//!
//! Each program starts with libseccomp's architecture check, which kills a process that
//! switches to another system-call ABI (i386, or x32 on x86_64: every number from
//! `0x4000_0000` up but -1, which the kernel answers with `ENOSYS`); the probe checks that an
//! x32 call is killed. The tests run both programs on every system call against the rules
//! (`seccomp_rules.rs`), so a libseccomp that compiled them otherwise fails them.

use seccompiler::{sock_filter, BpfProgram};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// The filter's name in reports; changed whenever the rules change.
pub const NAME: &str = "link-seccomp-v4";

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

/// The filter of every plugin off the network: the commands' with Unix sockets only, decoded
/// once per process.
pub fn offline_filter() -> &'static Filter {
    static FILTER: OnceLock<Filter> = OnceLock::new();
    FILTER.get_or_init(|| decode(include_bytes!(concat!(env!("OUT_DIR"), "/offline.bpf"))))
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
#[path = "seccomp_rules.rs"]
mod rules;

#[cfg(test)]
mod tests {
    use super::rules::*;
    use super::*;

    const ALLOW: u32 = 0x7fff_0000;
    const KILL_PROCESS: u32 = 0x8000_0000;
    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xc000_00b7;

    fn errno(e: libc::c_int) -> u32 {
        0x0005_0000 | e as u32
    }

    /// Runs `program` on one system call as the kernel would: its `SECCOMP_RET_*` answer.
    /// Reads the instructions libseccomp emits, and fails on any other.
    fn answer(program: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        // struct seccomp_data: nr, arch, instruction_pointer, args (little-endian halves).
        let word = |offset: u32| match offset {
            0 => nr,
            4 => arch,
            8 | 12 => 0,
            16..=63 => {
                let arg = args[(offset as usize - 16) / 8];
                if offset.is_multiple_of(8) {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                }
            }
            _ => panic!("load beyond seccomp_data at {offset}"),
        };
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = &program[pc];
            pc += 1;
            let taken = match i.code {
                0x20 => {
                    a = word(i.k);
                    continue;
                }
                0x54 => {
                    a &= i.k;
                    continue;
                }
                0x05 => {
                    pc += i.k as usize;
                    continue;
                }
                0x06 => return i.k,
                0x15 => a == i.k,
                0x25 => a > i.k,
                0x35 => a >= i.k,
                0x45 => a & i.k != 0,
                code => panic!(
                    "instruction {code:#x} at {} is not one this test reads",
                    pc - 1
                ),
            };
            pc += if taken { i.jt } else { i.jf } as usize;
        }
    }

    /// What the rules say of one system call on this architecture, for a program with the
    /// commands' rules and sockets of `domains` (`None`: the sandbox plugin's).
    fn ruled(domains: Option<&[libc::c_int]>, nr: libc::c_long, args: [u64; 6]) -> u32 {
        let commands = domains.is_some();
        let has = |arg: u32, bits: u64| args[arg as usize] & bits == bits;
        let low = |arg: usize| args[arg] & LOW_32;
        if ALWAYS.contains(&nr) || (commands && NAMESPACES_AND_MOUNTS.contains(&nr)) {
            return errno(libc::EPERM);
        }
        if nr == libc::SYS_ioctl && INJECTION.contains(&low(1)) {
            return errno(libc::EPERM);
        }
        if !commands {
            let domain = low(0) as libc::c_int;
            let raw = args[1] & SOCK_TYPE_MASK == libc::SOCK_RAW as u64;
            let refused =
                domain == libc::AF_PACKET || (raw && RAW_REFUSED_DOMAINS.contains(&domain));
            if nr == libc::SYS_socket && refused {
                return errno(libc::EAFNOSUPPORT);
            }
            return ALLOW;
        }
        let namespace = NAMESPACE_FLAGS.iter().any(|&f| has(0, f as u64));
        let setid = SETID.iter().any(|&bit| {
            chmods().iter().any(|&(n, mode)| n == nr && has(mode, bit))
                || creates().iter().any(|&(n, mode, flags)| {
                    n == nr && has(mode, bit) && flags.is_none_or(|f| has(f, libc::O_CREAT as u64))
                })
        });
        if (nr == libc::SYS_clone && namespace) || setid {
            return errno(libc::EPERM);
        }
        if nr == libc::SYS_clone3 {
            return errno(libc::ENOSYS);
        }
        if nr == PREALLOCATE {
            return errno(libc::EOPNOTSUPP);
        }
        // A domain with any of the upper 32 bits set is refused, whatever the lower ones say.
        let domain = i32::try_from(args[0]).ok();
        let allowed = domains.unwrap_or_default();
        if nr == libc::SYS_socket && !domain.is_some_and(|d| allowed.contains(&d)) {
            return errno(libc::EAFNOSUPPORT);
        }
        ALLOW
    }

    /// Argument sets that reach every rule: each value a rule looks at, with the upper 32 bits
    /// clear, one set, or all set, in one argument or in all six at once.
    fn argument_sets() -> Vec<[u64; 6]> {
        let mut values: Vec<u64> = vec![0, libc::TIOCGWINSZ];
        values.extend(INJECTION);
        values.extend(SETID);
        values.extend(SETID.map(|b| b | libc::O_CREAT as u64));
        values.push(libc::O_CREAT as u64);
        values.extend(NAMESPACE_FLAGS.iter().map(|&f| f as u64));
        values.extend(0..=16);
        let mut sets = Vec::new();
        // Each socket domain and type a rule names, with flags and upper bits.
        for domain in [
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_PACKET,
        ] {
            for kind in [libc::SOCK_STREAM, libc::SOCK_DGRAM, libc::SOCK_RAW] {
                for flags in [0, libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK] {
                    for high in [0, 1u64 << 32, LOW_32 << 32] {
                        let kind = (kind | flags) as u64;
                        sets.push([domain as u64 | high, kind, 0, 0, 0, 0]);
                        sets.push([domain as u64, kind | high, 0, 0, 0, 0]);
                    }
                }
            }
        }
        for v in values {
            for high in [0, 1u64 << 32, LOW_32 << 32] {
                let v = v | high;
                sets.push([v; 6]);
                for arg in 0..6 {
                    let mut one = [0; 6];
                    one[arg] = v;
                    sets.push(one);
                }
            }
        }
        sets
    }

    #[test]
    fn each_program_answers_every_call_as_the_rules_say() {
        let sets = argument_sets();
        for (domains, filter) in [
            (Some(ALLOWED_DOMAINS), filter()),
            (Some(OFFLINE_DOMAINS), offline_filter()),
            (None, sandbox_plugin_filter()),
        ] {
            for nr in 0..=600 {
                for args in &sets {
                    let got = answer(&filter.bpf, nr, AUDIT_ARCH, *args);
                    let want = ruled(domains, nr.into(), *args);
                    assert_eq!(got, want, "domains={domains:?} nr={nr} args={args:x?}");
                }
            }
            // Another ABI is killed: a foreign architecture, or x32's numbers on x86_64.
            assert_eq!(answer(&filter.bpf, 39, 0x4000_0003, [0; 6]), KILL_PROCESS);
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                answer(&filter.bpf, 0x4000_0027, AUDIT_ARCH, [0; 6]),
                KILL_PROCESS
            );
            // syscall(-1) reaches the kernel, which answers ENOSYS.
            assert_eq!(answer(&filter.bpf, u32::MAX, AUDIT_ARCH, [0; 6]), ALLOW);
        }
    }

    #[test]
    fn the_filters_are_whole_programs_and_the_plugins_one_is_smaller() {
        let f = filter();
        assert_eq!(f.instructions * 8, f.program.len());
        let plugin = sandbox_plugin_filter();
        assert!(plugin.instructions < f.instructions);
        assert_ne!(plugin.sha256, f.sha256);
        let offline = offline_filter();
        assert_eq!(offline.instructions * 8, offline.program.len());
        assert_ne!(offline.sha256, f.sha256);
        // bwrap reads the program whole; keep it far below a pipe's 64 KiB. libseccomp's tree
        // keeps it short: seccompiler's three programs were 522 instructions.
        assert!(f.instructions < 256, "{}", f.instructions);
        // The last instruction of a program returns.
        let last = f.bpf.last().unwrap();
        assert_eq!(last.code & 0x07, 0x06, "BPF_RET");
    }
}
