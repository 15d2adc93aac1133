//! The seccomp filter of every confined command, built with `seccompiler` and handed to
//! bubblewrap as compiled BPF, one `--add-seccomp-fd FD` per program (bwrap's `--seccomp FD`
//! takes one program and cannot be combined with it).
//!
//! A deny-list after Flatpak's bwrap filter and codex's Linux sandbox: what an ordinary
//! build or script never needs, and what widens the kernel's attack surface or breaks out of
//! the namespaces. Three programs, because seccompiler gives one action per program:
//! - `EPERM`: new namespaces (`unshare`, `setns`, namespace flags of `clone`), mounting,
//!   keyrings, ptrace and `process_vm_*`, io_uring, bpf, perf events, userfaultfd, kexec and
//!   modules, swap, reboot, the kernel log, handle-based opens, terminal injection
//!   (`TIOCSTI`, `TIOCLINUX`) and making a file setuid or setgid with any `chmod`, or creating
//!   one so with `open`, `openat`, `creat` or `mknod`;
//! - `ENOSYS` for `clone3`, whose flags sit in memory a filter cannot read: glibc then falls
//!   back to `clone`, which the first program checks;
//! - `EAFNOSUPPORT` for sockets other than `AF_UNIX`, `AF_INET` and `AF_INET6`.
//!
//! The host applies the same filter to every plugin (inherited from the thread that forks
//! them, [`crate::host::PluginFilter`]) but the sandbox plugin, whose bwrap needs
//! namespaces and mounts: it gets [`sandbox_plugin_filter`], the first program without those
//! (one `EPERM` program: keyrings, ptrace and `process_vm_*`, io_uring, bpf, perf events,
//! userfaultfd, kexec and modules, swap, reboot, the kernel log, handle-based opens, terminal
//! injection). Its commands still get the whole filter from bwrap. [`crate::host::Shedding`].
//!
//! Each program starts with seccompiler's architecture check, which kills a process that
//! switches to another system-call ABI (i386 on x86_64). The x32 ABI shares x86_64's
//! architecture value; the probe checks that the kernel refuses it.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The filter's name in reports; changed whenever the rules change.
pub const NAME: &str = "link-seccomp-v2";

/// The compiled filter: its programs as bwrap reads them, and their hash.
#[derive(Debug)]
pub struct Filter {
    /// As bwrap reads them (`struct sock_filter` bytes).
    pub programs: Vec<Vec<u8>>,
    /// As `seccompiler::apply_filter` takes them: the host applies them to plugins.
    pub bpf: Vec<BpfProgram>,
    /// sha256 of every program's bytes, in order: what a cached probe is keyed on.
    pub sha256: String,
    pub instructions: usize,
}

/// The filter for this machine's architecture, built once per process.
pub fn filter() -> Result<&'static Filter, String> {
    static FILTER: OnceLock<Result<Filter, String>> = OnceLock::new();
    FILTER.get_or_init(build).as_ref().map_err(Clone::clone)
}

/// The sandbox plugin's own filter (see the module's documentation), built once per process.
pub fn sandbox_plugin_filter() -> Result<&'static Filter, String> {
    static FILTER: OnceLock<Result<Filter, String>> = OnceLock::new();
    FILTER
        .get_or_init(|| compile(vec![(sandbox_plugin_denied(), libc::EPERM)]))
        .as_ref()
        .map_err(Clone::clone)
}

fn build() -> Result<Filter, String> {
    compile(vec![
        (denied(), libc::EPERM),
        (no_clone3(), libc::ENOSYS),
        (other_sockets(), libc::EAFNOSUPPORT),
    ])
}

/// One BPF program per (rules, errno), in order.
fn compile(programs: Vec<(Rules, libc::c_int)>) -> Result<Filter, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| format!("no seccomp filter for {}", std::env::consts::ARCH))?;
    let mut out = Vec::new();
    let mut bpf = Vec::new();
    let mut instructions = 0;
    let mut hash = Sha256::new();
    for (rules, errno) in programs {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .map_err(|e| format!("seccomp filter: {e}"))?;
        let program = BpfProgram::try_from(filter).map_err(|e| format!("seccomp filter: {e}"))?;
        instructions += program.len();
        let bytes = to_bytes(&program);
        hash.update(&bytes);
        out.push(bytes);
        bpf.push(program);
    }
    Ok(Filter {
        programs: out,
        bpf,
        sha256: format!("{:x}", hash.finalize()),
        instructions,
    })
}

/// `struct sock_filter` as the kernel (and bwrap) read it.
fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for insn in program {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    bytes
}

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// Denied to commands whatever their arguments; bubblewrap, in the sandbox plugin, needs them.
const NAMESPACES_AND_MOUNTS: &[libc::c_long] = &[
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
const ALWAYS: &[libc::c_long] = &[
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

/// `clone` flags that create a namespace.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// What [`ALWAYS`] lists, and terminal injection (`TIOCSTI`, `TIOCLINUX`).
fn sandbox_plugin_denied() -> Rules {
    let mut rules: Rules = ALWAYS.iter().map(|&nr| (nr, Vec::new())).collect();
    let injection: [u64; 2] = [libc::TIOCSTI, libc::TIOCLINUX];
    let ioctl = injection
        .iter()
        .map(|&req| rule(vec![cond(1, Len::Dword, Op::Eq, req)]))
        .collect();
    rules.insert(libc::SYS_ioctl, ioctl);
    rules
}

fn denied() -> Rules {
    let mut rules = sandbox_plugin_denied();
    rules.extend(NAMESPACES_AND_MOUNTS.iter().map(|&nr| (nr, Vec::new())));
    rules.insert(
        libc::SYS_clone,
        NAMESPACE_FLAGS
            .iter()
            .map(|&f| masked(0, f as u64))
            .collect(),
    );
    // The mode argument's position in each chmod call.
    let mut chmods = vec![(libc::SYS_fchmod, 1), (libc::SYS_fchmodat, 2)];
    #[cfg(target_arch = "x86_64")]
    chmods.push((libc::SYS_chmod, 1));
    chmods.push((FCHMODAT2, 2));
    let setid = [libc::S_ISUID as u64, libc::S_ISGID as u64];
    for (nr, arg) in chmods {
        rules.insert(nr, setid.iter().map(|&b| masked(arg, b)).collect());
    }
    // Creating a file already setuid or setgid: the mode of `creat` and `mknodat`, and of
    // `open`/`openat` with O_CREAT. (`openat2` passes its mode in memory: the walk after the
    // command clears what it makes.)
    let mut creates = vec![(libc::SYS_mknodat, 2, None)];
    creates.push((libc::SYS_openat, 3, Some(2)));
    #[cfg(target_arch = "x86_64")]
    creates.extend([
        (libc::SYS_open, 2, Some(1)),
        (libc::SYS_creat, 1, None),
        (libc::SYS_mknod, 1, None),
    ]);
    for (nr, mode_arg, flags_arg) in creates {
        let rules_for = setid
            .iter()
            .map(|&b| {
                let mut conditions = vec![cond(mode_arg, Len::Qword, Op::MaskedEq(b), b)];
                if let Some(flags) = flags_arg {
                    let creat = libc::O_CREAT as u64;
                    conditions.push(cond(flags, Len::Qword, Op::MaskedEq(creat), creat));
                }
                rule(conditions)
            })
            .collect();
        rules.insert(nr, rules_for);
    }
    rules
}

/// `fchmodat2` (Linux 6.6) has the same number on every architecture.
const FCHMODAT2: i64 = 452;

fn no_clone3() -> Rules {
    [(libc::SYS_clone3, Vec::new())].into_iter().collect()
}

fn other_sockets() -> Rules {
    let allowed = [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];
    let conditions = allowed
        .iter()
        .map(|&af| cond(0, Len::Dword, Op::Ne, af as u64))
        .collect();
    [(libc::SYS_socket, vec![rule(conditions)])]
        .into_iter()
        .collect()
}

/// Matches when every bit of `bits` is set in argument `arg`.
fn masked(arg: u8, bits: u64) -> SeccompRule {
    rule(vec![cond(arg, Len::Qword, Op::MaskedEq(bits), bits)])
}

fn cond(arg: u8, len: Len, op: Op, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, len, op, value).expect("argument index below 6")
}

fn rule(conditions: Vec<SeccompCondition>) -> SeccompRule {
    SeccompRule::new(conditions).expect("a rule with conditions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_and_is_stable() {
        let f = filter().unwrap();
        assert_eq!(f.programs.len(), 3);
        assert!(f.programs.iter().all(|p| p.len() % 8 == 0 && !p.is_empty()));
        assert_eq!(f.sha256, build().unwrap().sha256);
        let plugin = sandbox_plugin_filter().unwrap();
        assert_eq!(plugin.programs.len(), 1);
        assert!(plugin.instructions < f.instructions);
        // bwrap reads each program whole; keep them far below a pipe's 64 KiB.
        assert!(f.instructions * 8 < 16 * 1024, "{}", f.instructions);
    }
}
