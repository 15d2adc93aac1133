//! Compiles the seccomp filters (see `src/seccomp.rs`) with libseccomp when the crate is built,
//! into `$OUT_DIR/commands.bpf`, `$OUT_DIR/offline.bpf` and `$OUT_DIR/sandbox-plugin.bpf`,
//! which the crate embeds. The
//! programs never link libseccomp, and nothing compiles a filter at run time.
//!
//! Why libseccomp: one program can give each rule its own errno, and its binary-tree layout
//! (`CTL_OPTIMIZE` 2) looks a system call up in a few comparisons. seccompiler's three linear
//! programs (496 + 10 + 16 instructions) cost bwrap 0.68 ms to load for every command, the
//! kernel walking every chain once per system-call number to build its action cache; this one
//! program costs it about 0.23 ms (issue 14).
//!
//! It also compiles the sandbox helper (`crates/link-sandbox-helper`) into a static program of
//! its own, `$OUT_DIR/link-sandbox-helper`, also embedded: `panic = "abort"` and no C library
//! are flags Cargo gives a whole profile, not one program, so rustc is run here.
//!
//! The rules (`src/seccomp_rules.rs`) use this build machine's `libc` numbers, so the crate is
//! built for the machine it runs on: a cross build stops here.

use libseccomp::{
    ScmpAction, ScmpArgCompare as Cmp, ScmpCompareOp as Op, ScmpFilterContext, ScmpSyscall,
};
use std::path::Path;

#[path = "src/seccomp_rules.rs"]
mod rules;
#[path = "src/static_elf.rs"]
mod static_elf;
use rules::*;

fn main() {
    let target = std::env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets the target arch");
    assert_eq!(
        target,
        std::env::consts::ARCH,
        "the seccomp filters are compiled with this build machine's system-call numbers; build \
         link-confine on a {target} machine"
    );
    assert_eq!(
        std::env::var("CARGO_CFG_TARGET_POINTER_WIDTH").as_deref(),
        Ok("64"),
        "the seccomp filters are built for the 64-bit system-call ABI"
    );
    // 2.5 for the binary-tree layout; older ones also compared 64-bit arguments wrongly
    // (CVE-2019-9893). The seccomp tests check the programs against the rules whatever the
    // version.
    let version = libseccomp::ScmpVersion::current().expect("libseccomp's version");
    assert!(
        libseccomp::check_version((2, 5, 0).into()).unwrap_or(false),
        "libseccomp {}.{}.{} is older than 2.5.0: install a newer libseccomp development \
         package",
        version.major,
        version.minor,
        version.micro
    );
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let out = Path::new(&out);
    export(commands(ALLOWED_DOMAINS), &out.join("commands.bpf"));
    export(commands(OFFLINE_DOMAINS), &out.join("offline.bpf"));
    export(sandbox_plugin(), &out.join("sandbox-plugin.bpf"));
    helper(out);
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/seccomp_rules.rs");
}

/// Compiles the helper's library, then its entry (`src/start.rs`) against it, into a static
/// executable that links nothing but them and `core`.
fn helper(out: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../link-sandbox-helper/src");
    let rustc = std::env::var_os("RUSTC").expect("cargo sets RUSTC");
    let common = [
        "--edition=2021",
        "-Cpanic=abort",
        "-Copt-level=s",
        "-Ccodegen-units=1",
        "-Cdebuginfo=0",
        "-Dwarnings",
    ];
    let run = |args: &[&std::ffi::OsStr]| {
        let status = std::process::Command::new(&rustc)
            .args(common)
            .args(args)
            .status()
            .expect("rustc runs");
        assert!(
            status.success(),
            "rustc could not build the sandbox helper: {args:?}"
        );
    };
    let lib = out.join("liblink_sandbox_helper.rlib");
    run(&[
        "--crate-type=rlib".as_ref(),
        "--crate-name=link_sandbox_helper".as_ref(),
        "-o".as_ref(),
        lib.as_os_str(),
        source.join("lib.rs").as_os_str(),
    ]);
    let extern_lib = format!("link_sandbox_helper={}", lib.display());
    let program = out.join("link-sandbox-helper");
    run(&[
        "--crate-type=bin".as_ref(),
        "--crate-name=link_sandbox_helper_start".as_ref(),
        "-Clto=fat".as_ref(),
        "-Crelocation-model=static".as_ref(),
        "-Cstrip=symbols".as_ref(),
        "-Clink-arg=-nostartfiles".as_ref(),
        "-Clink-arg=-nostdlib".as_ref(),
        "-Clink-arg=-static".as_ref(),
        "--extern".as_ref(),
        extern_lib.as_ref(),
        "-o".as_ref(),
        program.as_os_str(),
        source.join("start.rs").as_os_str(),
    ]);
    let image = std::fs::read(&program).expect("the helper was written");
    if let Some(why) = static_elf::not_static(&image, static_elf::MACHINE) {
        panic!("the sandbox helper must be a static executable, but {why}");
    }
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed=src/static_elf.rs");
}

/// A filter that allows what no rule matches and kills a process that switches to another
/// system-call ABI (i386 or x32 on x86_64).
fn new_filter() -> ScmpFilterContext {
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).expect("libseccomp filter");
    f.set_act_badarch(ScmpAction::KillProcess)
        .and_then(|f| f.set_ctl_optimize(2))
        .expect("libseccomp filter attributes");
    f
}

fn deny(f: &mut ScmpFilterContext, errno: libc::c_int, nr: libc::c_long, cmp: &[Cmp]) {
    let nr = i32::try_from(nr).expect("a system-call number fits an i32");
    f.add_rule_conditional(ScmpAction::Errno(errno), ScmpSyscall::from(nr), cmp)
        .unwrap_or_else(|e| panic!("seccomp rule for system call {nr}: {e}"));
}

/// Every bit of `bits` set in argument `arg`.
fn has_bits(arg: u32, bits: u64) -> Cmp {
    Cmp::new(arg, Op::MaskedEqual(bits), bits)
}

/// The sandbox plugin's own filter: [`ALWAYS`] and terminal injection (`TIOCSTI`,
/// `TIOCLINUX`), all `EPERM`; packet sockets and raw sockets of [`RAW_REFUSED_DOMAINS`],
/// `EAFNOSUPPORT` (the domain's low 32 bits, which the kernel reads).
fn sandbox_plugin() -> ScmpFilterContext {
    let mut f = new_filter();
    always(&mut f);
    let domain = |d: libc::c_int| Cmp::new(0, Op::MaskedEqual(LOW_32), d as u64);
    let nr = libc::SYS_socket;
    deny(&mut f, libc::EAFNOSUPPORT, nr, &[domain(libc::AF_PACKET)]);
    for d in RAW_REFUSED_DOMAINS {
        let raw = Cmp::new(1, Op::MaskedEqual(SOCK_TYPE_MASK), libc::SOCK_RAW as u64);
        deny(&mut f, libc::EAFNOSUPPORT, nr, &[domain(d), raw]);
    }
    f
}

fn always(f: &mut ScmpFilterContext) {
    for &nr in ALWAYS {
        deny(f, libc::EPERM, nr, &[]);
    }
    for request in INJECTION {
        let cmp = Cmp::new(1, Op::MaskedEqual(LOW_32), request);
        deny(f, libc::EPERM, libc::SYS_ioctl, &[cmp]);
    }
}

/// The commands' filter with sockets of the `allowed` domains only: the commands' own
/// ([`ALLOWED_DOMAINS`]), which a plugin on the network also gets, and the offline plugins'
/// ([`OFFLINE_DOMAINS`]), which the host puts every other plugin but the sandbox plugin under.
fn commands(allowed: &[libc::c_int]) -> ScmpFilterContext {
    let mut f = new_filter();
    always(&mut f);
    for &nr in NAMESPACES_AND_MOUNTS {
        deny(&mut f, libc::EPERM, nr, &[]);
    }
    for &flag in NAMESPACE_FLAGS {
        deny(
            &mut f,
            libc::EPERM,
            libc::SYS_clone,
            &[has_bits(0, flag as u64)],
        );
    }
    setid_files(&mut f);
    deny(&mut f, libc::EOPNOTSUPP, PREALLOCATE, &[]);
    // Its flags sit in memory a filter cannot read: glibc then falls back to `clone`.
    deny(&mut f, libc::ENOSYS, libc::SYS_clone3, &[]);
    other_sockets(&mut f, allowed);
    f
}

/// Making a file setuid or setgid with any `chmod`, or creating one so with `open`, `openat`
/// (with `O_CREAT`), `creat` or `mknod`. (`openat2` passes its mode in memory: the walk after
/// the command clears what it makes.)
fn setid_files(f: &mut ScmpFilterContext) {
    for bit in SETID {
        for (nr, mode) in chmods() {
            deny(f, libc::EPERM, nr, &[has_bits(mode, bit)]);
        }
        for (nr, mode, flags) in creates() {
            let mut cmp = vec![has_bits(mode, bit)];
            cmp.extend(flags.map(|flags| has_bits(flags, libc::O_CREAT as u64)));
            deny(f, libc::EPERM, nr, &cmp);
        }
    }
}

/// `EAFNOSUPPORT` for sockets of a domain other than the `allowed` ones. libseccomp compares an
/// argument once per rule, so the refused domains are listed: each one below the highest
/// allowed but those allowed, and every one above. A value with any of the upper 32 bits set
/// is above, so refused, whatever the kernel would read in the lower ones.
fn other_sockets(f: &mut ScmpFilterContext, allowed: &[libc::c_int]) {
    let highest = *allowed.iter().max().expect("some domain is allowed");
    for domain in (0..highest).filter(|d| !allowed.contains(d)) {
        let cmp = Cmp::new(0, Op::Equal, domain as u64);
        deny(f, libc::EAFNOSUPPORT, libc::SYS_socket, &[cmp]);
    }
    let above = Cmp::new(0, Op::Greater, highest as u64);
    deny(f, libc::EAFNOSUPPORT, libc::SYS_socket, &[above]);
}

fn export(filter: ScmpFilterContext, path: &Path) {
    let file = std::fs::File::create(path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    filter
        .export_bpf(&file)
        .unwrap_or_else(|e| panic!("cannot export the seccomp filter: {e}"));
}
