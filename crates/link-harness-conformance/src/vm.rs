//! One test of the calling binary run again inside a virtual machine whose one cgroup
//! hierarchy is v2 (issue 42): this machine's memory and pids controllers, like CI's, are
//! cgroup v1 hierarchies, and a controller is in one version at a time, so Link's v2 bounds
//! can be seen only on another kernel.
//!
//! QEMU boots a Debian kernel (`ci/vm.sh` fetches it, pinned, to `target/vm/vmlinuz`) under
//! software emulation, its root this machine's `/` shared read-write through virtiofs, and a
//! small init of its own: it mounts what a test needs (`/proc`, `/sys`, the v2 hierarchy
//! alone, `/dev`, and tmpfs for `/tmp`, `/dev/shm` and the state roots), runs the one test as
//! root with every `LNK_REQUIRE_*` set (a skip inside is a failure), and powers off. What the
//! test printed, its exit status and its skips come back in files of a directory beside the
//! test binary, removed after.
//!
//! `cgroup.memory=nokmem`: under emulation the guest kernel at times ran the breakpoint of a
//! code patch already finished (an oops in `kmem_cache_alloc` once the first memory cgroup
//! turned kernel-memory counting on: 2 boots in 7; none in the 20 since). Without
//! kernel-memory counting the limit bounds the agent's user memory, which the tests fill.
//!
//! QEMU and its file server die with the test process (`PR_SET_PDEATHSIG`), and the run's
//! directories go with the run, whatever its end.

use crate::reaper;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Set to `1` inside the virtual machine: a test there must find cgroup v2.
pub const ENV_IN_VM: &str = "LNK_IN_VM";
/// `1`: a machine that cannot boot the virtual machine fails the test instead of skipping it.
pub const ENV_REQUIRE_VM: &str = "LNK_REQUIRE_VM";
/// The kernel to boot, if not `target/vm/vmlinuz` of the workspace.
pub const ENV_KERNEL: &str = "LNK_VM_KERNEL";

/// The virtiofsd that QEMU 7.2's Debian package ships.
const VIRTIOFSD: &str = "/usr/lib/qemu/virtiofsd";
/// Booting and one test under software emulation take a minute or two; this bounds a hang.
const LIMIT: Duration = Duration::from_secs(900);
/// Where the guest's state roots go: a tmpfs (idmapped mounts need one; virtiofs has none),
/// beneath a directory others may not search, as a home is.
const GUEST_STATE: &str = "/mnt/lnk-tests";

/// Whether this process runs inside the virtual machine.
pub fn inside() -> bool {
    std::env::var(ENV_IN_VM).is_ok_and(|v| v == "1")
}

/// What boots the virtual machine here.
#[derive(Debug, Clone)]
pub struct Machine {
    kernel: PathBuf,
    qemu: PathBuf,
}

/// The tools and kernel that boot the virtual machine, or why this machine cannot.
pub fn machine() -> Result<Machine, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("the virtual machine's file server (virtiofsd) needs root".into());
    }
    let kernel = std::env::var_os(ENV_KERNEL)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/vm/vmlinuz"));
    if !kernel.is_file() {
        return Err(format!(
            "no kernel at {} (`bash ci/vm.sh` fetches it)",
            kernel.display()
        ));
    }
    let qemu = Path::new("/usr/bin/qemu-system-x86_64");
    for tool in [qemu, Path::new(VIRTIOFSD)] {
        if !tool.is_file() {
            return Err(format!(
                "{} is missing (Debian's qemu-system-x86; `bash ci/vm.sh` installs it)",
                tool.display()
            ));
        }
    }
    Ok(Machine {
        kernel,
        qemu: qemu.to_owned(),
    })
}

/// [`machine`], or `None` with the skip recorded; a failure under `LNK_REQUIRE_VM=1`.
pub fn machine_or_skip(what: &str) -> Option<Machine> {
    match machine() {
        Ok(m) => Some(m),
        Err(why) if std::env::var(ENV_REQUIRE_VM).is_ok_and(|v| v == "1") => {
            panic!("{what}: {why} ({ENV_REQUIRE_VM}=1 requires the virtual machine)")
        }
        Err(why) => {
            crate::probe::skipped(&format!("SKIPPED ({what}): {why}"));
            None
        }
    }
}

/// A test's twin in the virtual machine: runs `test` (its full name) of this test binary
/// again inside, and fails unless it passed there, skipping nothing. Inside the machine it
/// does nothing (the test runs there itself); where the machine cannot boot it says so as a
/// skip ([`machine_or_skip`]).
pub fn rerun_in_cgroup_v2(test: &str) {
    if inside() {
        return;
    }
    let Some(machine) = machine_or_skip("cgroup v2") else {
        return;
    };
    let ran = machine.run_test(test);
    eprintln!("{}", ran.output);
    assert!(
        ran.passed(),
        "{test} in the cgroup v2 virtual machine: {ran:#?}"
    );
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// How the test ran inside.
#[derive(Debug)]
pub struct Ran {
    /// The test binary's exit status, `None` where the guest never wrote one.
    pub status: Option<i32>,
    /// What the test binary printed, then the console's last lines.
    pub output: String,
    /// The skips it recorded (`LNK_SKIP_LOG`).
    pub skips: String,
}

impl Ran {
    /// Whether the one test ran and passed, skipping nothing.
    pub fn passed(&self) -> bool {
        self.status == Some(0)
            && self.output.contains("test result: ok. 1 passed")
            && self.skips.trim().is_empty()
    }
}

impl Machine {
    /// Runs `test` (its full name, e.g. `plugin::a_test`) of this test binary inside, as root.
    pub fn run_test(&self, test: &str) -> Ran {
        let exe = std::env::current_exe().expect("the test binary's path");
        let dir = exe.parent().expect("a directory").join(format!(
            "vm-{}-{}",
            std::process::id(),
            test.replace("::", "-")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the run's directory");
        let _gone = Removed(dir.clone());
        let init = dir.join("init");
        std::fs::write(&init, init_script(&exe, test, &dir)).expect("the guest's init");
        let mode = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
        std::fs::set_permissions(&init, mode).expect("init executable");
        let console = self.boot(&init);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        Ran {
            status: read("status").trim().parse().ok(),
            output: format!("{}\n--- console ---\n{}", read("out"), tail(&console, 40)),
            skips: read("skips"),
        }
    }

    /// Boots the guest with `init`, sharing `/` through a virtiofsd of its own: the console.
    fn boot(&self, init: &Path) -> String {
        // A socket's path has room for 107 bytes: one of its own beneath the temporary folder.
        let sockets = Removed(tempfile_dir());
        let socket = sockets.0.join("fs.sock");
        let mut server = Command::new(VIRTIOFSD);
        server
            .arg(format!("--socket-path={}", socket.display()))
            .args([
                "-f",
                "-o",
                "source=/",
                "-o",
                "cache=auto",
                "-o",
                "sandbox=chroot",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        die_with_test(&mut server);
        let mut server = reaper::global()
            .spawn(&mut server)
            .expect("start virtiofsd");
        let up = reaper::wait_until(Duration::from_secs(20), || socket.exists());
        assert!(up, "virtiofsd made no socket at {}", socket.display());
        let append = format!(
            "rootfstype=virtiofs root=rootfs rw console=ttyS0 panic=-1 quiet cgroup.memory=nokmem init={}",
            init.display()
        );
        let mut qemu = Command::new(&self.qemu);
        qemu.args([
            "-accel",
            "tcg,thread=multi",
            "-cpu",
            "max",
            "-smp",
            "2",
            "-m",
            "2G",
        ])
        .args(["-object", "memory-backend-memfd,id=mem,size=2G,share=on"])
        .args(["-numa", "node,memdev=mem", "-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(&self.kernel)
        .args(["-append", &append])
        .arg("-chardev")
        .arg(format!("socket,id=fs,path={}", socket.display()))
        .args(["-device", "vhost-user-fs-pci,chardev=fs,tag=rootfs"]);
        die_with_test(&mut qemu);
        let out = reaper::global().output(&mut qemu, LIMIT);
        server.kill_and_wait();
        match out {
            Ok(out) => {
                String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr)
            }
            Err(e) => format!("qemu: {e}"),
        }
    }
}

/// A directory of the run's, removed when dropped, however the run ends.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `cmd` is killed when the thread that starts it, this test's, ends.
fn die_with_test(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = rustix::process::getpid();
    // SAFETY: prctl and getppid, system calls only.
    unsafe { cmd.pre_exec(move || link_os::reaper::die_with_parent(parent)) };
}

/// A new directory of this process's beneath the temporary folder.
fn tempfile_dir() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("lnk-vm-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the file server's socket");
    dir
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The guest's process 1: the mounts, the test, its results in `dir`, power off. The guest's
/// `/tmp` is a tmpfs of its own; a directory the test needs that lies beneath this machine's
/// `/tmp` (a clone there, and so its build and the run's directory) is bound back over it.
fn init_script(exe: &Path, test: &str, dir: &Path) -> String {
    let cwd = std::env::current_dir().expect("the working directory");
    let needed = [cwd.as_path(), dir];
    let mut keep: Vec<&Path> = needed
        .iter()
        .filter_map(|p| p.strip_prefix("/tmp").ok())
        .filter_map(|p| p.components().next())
        .map(|first| Path::new(first.as_os_str()))
        .collect();
    keep.sort();
    keep.dedup();
    let rebind: String = keep
        .iter()
        .map(|name| {
            let name = name.display();
            format!("mkdir -p '/tmp/{name}' && mount --bind '/run/host-tmp/{name}' '/tmp/{name}'\n")
        })
        .collect();
    let (exe, dir, cwd) = (exe.display(), dir.display(), cwd.display());
    format!(
        r#"#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs run /run
mkdir /run/host-tmp
mount --bind /tmp /run/host-tmp
mount -t tmpfs tmp /tmp
{rebind}mount -t tmpfs -o mode=0700 state /mnt
mkdir -p {GUEST_STATE}
ip link set lo up 2>/dev/null
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
export {ENV_IN_VM}=1 {ENV_REQUIRE_VM}=1 LNK_REQUIRE_SANDBOX=1 LNK_REQUIRE_NATIVE=1
export LNK_REQUIRE_RUNTIME=1 LNK_REQUIRE_TOOLS=1 RUST_BACKTRACE=1
export LNK_TEST_STATE_DIR={GUEST_STATE} LNK_SKIP_LOG={dir}/skips
: > {dir}/skips
cd {cwd}
{exe} --exact '{test}' --include-ignored --test-threads=1 --nocapture > {dir}/out 2>&1
echo $? > {dir}/status
sync
echo o > /proc/sysrq-trigger
sleep 60
"#
    )
}
