//! What a confined command may do with its identity and resources: never real root, no
//! setuid file left behind, a seccomp filter, limits. Each refusal is paired with an allowed
//! twin in the same run, checked by its errno inside and its effect on the host; the suite
//! runs as the test's own user (root here) and again as an ordinary user made for it.

use crate::common::*;
use link_harness_conformance::fixture::{OpenParent, TestUser};
use serde_json::{json, Value};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whoever runs the confined commands: this process's user, or an ordinary one.
pub(crate) struct Who {
    user: Option<TestUser>,
    /// Keeps the state root (root) or the open parent (ordinary user) alive.
    _root: Option<Root>,
    parent: Option<OpenParent>,
    bin: PathBuf,
}

/// `exe` (a build output, mode 0755) at `to`: a hard link where the two share a filesystem,
/// so no descriptor open for writing exists that a fork of another test thread could hold
/// when this one executes it (`ETXTBSY`); else a copy, made executable by anyone, which
/// still has that window.
fn link_or_copy(exe: &Path, to: &Path) {
    if std::fs::hard_link(exe, to).is_ok() {
        return;
    }
    std::fs::copy(exe, to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Who {
    pub(crate) fn me() -> Who {
        Who {
            user: None,
            _root: Some(Root::new()),
            parent: None,
            bin: BIN.into(),
        }
    }

    /// An ordinary user with a copy of the binary it can reach; `None` (said why) when no
    /// user can be made here.
    pub(crate) fn ordinary() -> Option<Who> {
        let user = TestUser::or_skip("lnk-sbx")?;
        let parent = OpenParent::create("lnk-sandbox-user").unwrap();
        let bin = parent.0.join("link-plugin-sandbox");
        link_or_copy(Path::new(BIN), &bin);
        Some(Who {
            user: Some(user),
            _root: None,
            parent: Some(parent),
            bin,
        })
    }

    /// A copy of `exe` this identity may run (a checkout under a private home is not
    /// reachable by an ordinary user).
    pub(crate) fn reachable(&self, exe: &Path) -> PathBuf {
        let Some(parent) = &self.parent else {
            return exe.to_path_buf();
        };
        let copy = parent.0.join(exe.file_name().expect("a file"));
        link_or_copy(exe, &copy);
        copy
    }

    /// A fresh workspace this identity may use.
    pub(crate) fn workspace(&self, name: &str) -> PathBuf {
        match (&self.user, &self.parent, &self._root) {
            (Some(u), Some(p), _) => {
                let ws = p.0.join(name);
                std::fs::create_dir_all(&ws).unwrap();
                rustix::fs::chown(&ws, Some(uid(u.uid)), Some(gid(u.gid))).unwrap();
                ws
            }
            (_, _, Some(root)) => root.workspace(name),
            _ => unreachable!(),
        }
    }

    pub(crate) fn command(&self, args: &[&std::ffi::OsStr]) -> Command {
        match &self.user {
            Some(u) => u.command(args),
            None => {
                let mut cmd = Command::new(args[0]);
                cmd.args(&args[1..]);
                cmd
            }
        }
    }

    fn probe(&self) -> Value {
        let out = self
            .command(&[self.bin.as_os_str(), "probe".as_ref()])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).expect("the probe prints JSON")
    }

    /// `exec --workspace WS -- ARGV` as this identity, not yet run.
    pub(crate) fn exec_command(&self, ws: &Path, argv: &[&str]) -> Command {
        self.exec_with(ws, &[], argv)
    }

    /// `exec --workspace WS OPTIONS... -- ARGV` as this identity, not yet run.
    fn exec_with(&self, ws: &Path, options: &[&str], argv: &[&str]) -> Command {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            self.bin.as_os_str(),
            "exec".as_ref(),
            "--workspace".as_ref(),
            ws.as_os_str(),
        ];
        args.extend(options.iter().map(std::ffi::OsStr::new));
        args.push("--".as_ref());
        args.extend(argv.iter().map(std::ffi::OsStr::new));
        self.command(&args)
    }

    fn exec(&self, ws: &Path, argv: &[&str]) -> Output {
        self.exec_command(ws, argv).output().unwrap()
    }

    fn exec_py(&self, ws: &Path, script: &str) -> Value {
        let script = format!("{PY_PRELUDE}\n{script}");
        py_json(&self.exec(ws, &[PYTHON, "-I", "-S", "-c", &script]))
    }

    fn is_root(&self) -> bool {
        self.user.is_none() && rustix::process::geteuid().is_root()
    }
}

fn uid(n: u32) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(n)
}
fn gid(n: u32) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(n)
}

/// Runs `check` as this process's user and as an ordinary one.
pub(crate) fn for_both(check: fn(&Who)) {
    if !sandbox_or_skip() {
        return;
    }
    check(&Who::me());
    if let Some(who) = Who::ordinary() {
        check(&who);
    }
}

/// The workspace quota of entries holds while a command runs, as root and as an ordinary
/// user: a loop making empty files is stopped for it (and says so), the next command finds the
/// workspace full and makes nothing, a removal takes, and then a file is made again.
#[test]
fn the_quota_of_entries_holds_while_a_command_runs() {
    for_both(|who| {
        let ws = who.workspace("q1");
        let run = |script: &str| {
            let quota = ["--workspace-entries", "100"];
            let out = who
                .exec_with(&ws, &quota, &["/bin/sh", "-c", script])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            (out.status.code(), stderr)
        };
        // Bounded, so that without the check it ends by itself and the test fails; long
        // enough (seconds, even on an idle machine) that no check can come only after it.
        let (code, stderr) = run("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); : > e$i; done");
        assert_eq!(code, Some(137), "{stderr}");
        assert!(
            stderr.contains("killed: workspace quota 100 entries"),
            "{stderr}"
        );
        let made = std::fs::read_dir(&ws).unwrap().count();
        assert!((101..20000).contains(&made), "{made} entries");
        let (code, stderr) = run("echo x > more");
        assert_ne!(code, Some(0), "{stderr}");
        assert!(
            stderr.contains("Permission denied")
                && stderr.contains("workspace full: ")
                && stderr.contains(" entries of its quota of 100 ("),
            "{stderr}"
        );
        assert!(!ws.join("more").exists());
        let (code, stderr) = run("rm -f e*");
        assert_eq!(code, Some(0), "{stderr}");
        let (code, stderr) = run("echo x > more");
        assert_eq!((code, stderr.as_str()), (Some(0), ""), "the twin");
        assert!(ws.join("more").exists());
    });
}

/// Removes the files on drop, so a failed assertion leaves nothing in `/etc`.
struct Planted(Vec<PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn root_only_files_are_unreadable_inside() {
    for_both(|who| {
        let name = unique("lnk-secret");
        let secret = PathBuf::from(format!("/etc/{name}.key"));
        let public = PathBuf::from(format!("/etc/{name}.pub"));
        let _planted = Planted(vec![secret.clone(), public.clone()]);
        for (path, mode) in [(&secret, 0o600), (&public, 0o644)] {
            std::fs::write(path, "private words").unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let ws = who.workspace("a1");
        let got = who.exec_py(
            &ws,
            &format!(
                "print(json.dumps({{'secret': r({:?}), 'public': r({:?}), 'uid': os.getuid()}}))",
                secret, public
            ),
        );
        assert_eq!(got["secret"], "EACCES", "{got}");
        assert_eq!(got["public"], "ok", "{got}");
        assert_ne!(got["uid"], 0, "{got}");
        // The password hashes are refused by their own modes, not hidden behind an empty file.
        let got = who.exec_py(
            &ws,
            "print(json.dumps({'shadow': r('/etc/shadow'), 'passwd': r('/etc/passwd')}))",
        );
        assert_eq!(got["shadow"], "EACCES", "{got}");
        assert_eq!(got["passwd"], "ok", "{got}");
    });
}

/// A user whose groups let it read the password hashes on the host (the `shadow` group) is
/// refused them inside, where the same user without that group is refused them by their
/// modes. It stays so when the host puts a new `/etc/shadow` in place during the command (as
/// `useradd` does): a file bound over the old one, as the sandbox once did, was no longer in
/// the way once the file was renamed over, and the new one could be read. (Run as an
/// ordinary user only: as root the command's dedicated identity holds no group.)
#[test]
fn secrets_the_caller_can_read_stay_hidden_inside() {
    if !sandbox_or_skip() {
        return;
    }
    let Some(who) = Who::ordinary() else {
        return;
    };
    let user = who.user.as_ref().expect("an ordinary user");
    let Ok(gid) = std::fs::metadata("/etc/shadow").map(|m| m.gid()) else {
        link_harness_conformance::probe::skipped("SKIPPED: no /etc/shadow on this machine");
        return;
    };
    // runuser takes a group by its name.
    let entry = Command::new("getent")
        .args(["group", &gid.to_string()])
        .output()
        .unwrap();
    let entry = String::from_utf8_lossy(&entry.stdout).into_owned();
    let group = entry.split(':').next().filter(|g| !g.is_empty());
    let group = group.unwrap_or_else(|| panic!("no name for /etc/shadow's group {gid}"));
    let ws = who.workspace("a1");
    // The allowed twin: a file beside them that no concurrent `useradd` replaces.
    let twin = PathBuf::from(format!("/etc/{}", unique("lnk-twin")));
    let _planted = Planted(vec![twin.clone()]);
    std::fs::write(&twin, "public words").unwrap();
    std::fs::set_permissions(&twin, std::fs::Permissions::from_mode(0o644)).unwrap();
    let check = format!(
        "import time\nfirst = r('/etc/shadow')\ntwin = r({twin:?})\n\
         open('ready', 'w').close()\n\
         t = time.time()\nwhile not os.path.exists('go') and time.time() - t < 60:\n\
         \x20   time.sleep(0.01)\n\
         print(json.dumps({{'before': first, 'twin': twin, 'after': r('/etc/shadow')}}))"
    );
    let check = check.as_str();
    let script = format!("{PY_PRELUDE}\n{check}");
    let python = [PYTHON, "-I", "-S", "-c", script.as_str()];
    let as_member = |inside: bool| {
        let mut args: Vec<&std::ffi::OsStr> = Vec::new();
        if inside {
            args.extend([who.bin.as_os_str(), "exec".as_ref(), "--workspace".as_ref()]);
            args.extend([ws.as_os_str(), "--".as_ref()]);
        }
        args.extend(python.iter().map(std::ffi::OsStr::new));
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", &user.name, "-G", group, "--"])
            .args(&args)
            .current_dir(&ws)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    let go = || std::fs::write(ws.join("go"), "").unwrap();
    go();
    let outside = py_json(&as_member(false).output().unwrap());
    assert_eq!(
        outside["before"], "ok",
        "the group reads it on the host: {outside}"
    );
    std::fs::remove_file(ws.join("go")).unwrap();

    let running = as_member(true).spawn().unwrap();
    let ready = ws.join("ready");
    let since = std::time::Instant::now();
    while !ready.exists() && since.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let old = std::fs::metadata("/etc/shadow").unwrap().ino();
    let other = TestUser::create("lnk-sbx-new").unwrap();
    assert_ne!(
        std::fs::metadata("/etc/shadow").unwrap().ino(),
        old,
        "useradd renames"
    );
    go();
    let inside = py_json(&running.wait_with_output().unwrap());
    drop(other);
    assert_eq!(inside["before"], "EACCES", "{inside}");
    assert_eq!(inside["twin"], "ok", "{inside}");
    assert_eq!(inside["after"], "EACCES", "once replaced: {inside}");

    let without = who.exec_py(&ws, check);
    assert_eq!(without["before"], "EACCES", "{without}");
}

#[test]
fn no_setuid_or_root_file_survives_a_command() {
    for_both(|who| {
        let ws = who.workspace("a1");
        let script = format!(
            r#"
import ctypes, shutil, struct
libc = ctypes.CDLL(None, use_errno=True)
shutil.copy("/usr/bin/id", "suid")
def openat2(name, mode):
    how = struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, mode, 0)
    fd = libc.syscall({openat2}, -100, name.encode(), how, len(how))
    if fd < 0:
        return errno.errorcode.get(ctypes.get_errno(), "?")
    os.close(fd)
    return "ok"
print(json.dumps({{
    "chmod_setuid": _e(lambda: os.chmod("suid", 0o4755)),
    "chmod_setgid": _e(lambda: os.chmod("suid", 0o2755)),
    "chmod_plain": _e(lambda: os.chmod("suid", 0o755)),
    "open_setuid": _e(lambda: os.close(os.open("opened", os.O_CREAT | os.O_WRONLY, 0o4755))),
    "open_plain": _e(lambda: os.close(os.open("opened", os.O_CREAT | os.O_WRONLY, 0o755))),
    "openat2_setuid": openat2("planted", 0o4755),
    "planted_mode": os.stat("planted").st_mode & 0o7777,
}}))"#,
            openat2 = libc::SYS_openat2
        );
        let got = who.exec_py(&ws, &script);
        assert_eq!(got["chmod_setuid"], "EPERM", "{got}");
        assert_eq!(got["chmod_setgid"], "EPERM", "{got}");
        assert_eq!(got["chmod_plain"], "ok", "{got}");
        assert_eq!(got["open_setuid"], "EPERM", "{got}");
        assert_eq!(got["open_plain"], "ok", "{got}");
        // Made setuid by openat2(2), whose mode no filter can read: the walk after the
        // command clears it.
        assert_eq!(got["openat2_setuid"], "ok", "{got}");
        assert_ne!(got["planted_mode"].as_u64().unwrap() & 0o4000, 0, "{got}");
        let mut seen = 0;
        for entry in walk(&ws) {
            let meta = std::fs::symlink_metadata(&entry).unwrap();
            assert_eq!(
                meta.mode() & 0o6000,
                0,
                "{} is setuid/setgid",
                entry.display()
            );
            if who.is_root() {
                assert_ne!(meta.uid(), 0, "{} belongs to root", entry.display());
            }
            seen += 1;
        }
        assert!(seen >= 3, "only {seen} files in the workspace");
        assert_eq!(
            std::fs::metadata(ws.join("suid")).unwrap().mode() & 0o7777,
            0o755,
            "the allowed chmod landed"
        );
    });
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn seccomp_refuses_namespaces_keyrings_io_uring_and_bpf() {
    for_both(|who| {
        let ws = who.workspace("a1");
        let script = format!(
            r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def sys(*a):
    if libc.syscall(*a) >= 0:
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), "?")
def sock(af):
    return _e(lambda: socket.socket(af, socket.SOCK_RAW if af == socket.AF_NETLINK else socket.SOCK_STREAM).close())
# The kernel reads an int argument's low 32 bits only: bits above must not slip past the filter.
HIGH = 1 << 32
def killed_by(nr):
    pid = os.fork()
    if pid == 0:
        libc.prctl(4, 0)  # PR_SET_DUMPABLE: no core dump when the filter kills it
        libc.syscall(nr)
        os._exit(0)
    status = os.waitpid(pid, 0)[1]
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit %d" % os.WEXITSTATUS(status)
print(json.dumps({{
    "clone3": sys({clone3}, None, 0),
    "socket_inet_high": sys({socket}, ctypes.c_long(HIGH | 2), 1, 0),
    "tiocsti": sys({ioctl}, 0, ctypes.c_long({tiocsti}), None),
    "tiocsti_high": sys({ioctl}, 0, ctypes.c_long(HIGH | {tiocsti}), None),
    "tiocgwinsz_high": sys({ioctl}, 0, ctypes.c_long(HIGH | {tiocgwinsz}), None),
    "x32_getpid": killed_by(0x40000000 | {getpid}),
    "getpid_child": killed_by({getpid}),
    "unshare_user": sys({unshare}, {newuser}),
    "keyctl": sys({keyctl}, 0, -3, 0),
    "io_uring_setup": sys({io_uring}, 1, None),
    "bpf": sys({bpf}, 9999, None, 0),
    "getpid": sys({getpid}),
    "netlink": sock(socket.AF_NETLINK),
    "unix": sock(socket.AF_UNIX),
    "inet": sock(socket.AF_INET),
}}))"#,
            unshare = libc::SYS_unshare,
            newuser = libc::CLONE_NEWUSER,
            keyctl = libc::SYS_keyctl,
            io_uring = libc::SYS_io_uring_setup,
            bpf = libc::SYS_bpf,
            getpid = libc::SYS_getpid,
            clone3 = libc::SYS_clone3,
            socket = libc::SYS_socket,
            ioctl = libc::SYS_ioctl,
            tiocsti = libc::TIOCSTI,
            tiocgwinsz = libc::TIOCGWINSZ,
        );
        let got = who.exec_py(&ws, &script);
        assert_eq!(got["clone3"], "ENOSYS", "{got}");
        // Refused by the filter (EPERM), where the kernel would answer /dev/null with ENOTTY.
        assert_eq!(got["tiocsti"], "EPERM", "{got}");
        assert_eq!(got["tiocsti_high"], "EPERM", "{got}");
        assert_eq!(got["tiocgwinsz_high"], "ENOTTY", "{got}");
        // AF_INET with a high bit set: refused, where plain AF_INET ("inet") is allowed.
        assert_eq!(got["socket_inet_high"], "EAFNOSUPPORT", "{got}");
        assert_eq!(got["x32_getpid"], libc::SIGSYS, "{got}");
        assert_eq!(got["getpid_child"], "exit 0", "{got}");
        for refused in ["unshare_user", "keyctl", "io_uring_setup", "bpf"] {
            assert_eq!(got[refused], "EPERM", "{refused}: {got}");
        }
        assert_eq!(got["netlink"], "EAFNOSUPPORT", "{got}");
        for allowed in ["getpid", "unix", "inet"] {
            assert_eq!(got[allowed], "ok", "{allowed}: {got}");
        }
        // The program a person would try, beside its twin.
        let unshare = who.exec(&ws, &["unshare", "-U", "true"]);
        let err = String::from_utf8_lossy(&unshare.stderr);
        assert!(
            !matches!(unshare.status.code(), Some(0 | 126 | 127)),
            "unshare -U: {:?} {err}",
            unshare.status
        );
        assert!(err.contains("Operation not permitted"), "{err}");
        assert_eq!(who.exec(&ws, &["true"]).status.code(), Some(0));
    });
}

/// As an ordinary user every sandbox has a user namespace of its own, which the process count
/// is kept per. (As root, agents differ by uid instead: `plugin.rs` holds that case, since
/// the identity per agent is the plugin's.)
#[test]
fn an_ordinary_users_fork_bomb_is_held_and_another_command_still_runs() {
    if !sandbox_or_skip() {
        return;
    }
    let Some(who) = Who::ordinary() else { return };
    {
        let ws = who.workspace("a1");
        let other = who.workspace("a2");
        let token = unique("bomb");
        let bomb = fork_bomb(&token);
        let running = who
            .exec_command(&ws, &[PYTHON, "-I", "-S", "-c", &bomb])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            wait_for(30, || ws.join("held").exists()),
            "the bomb never reached its limit"
        );
        // While the bomb holds every process it may have, another command runs normally.
        let out = who.exec(
            &other,
            &["/bin/sh", "-c", "echo fine; /bin/true && echo twice"],
        );
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).as_ref()
            ),
            (Some(0), "fine\ntwice\n"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let done = running.wait_with_output().unwrap();
        let got: Value = serde_json::from_slice(&done.stdout).unwrap();
        assert_eq!(got["error"], "EAGAIN", "{got}");
        let started = got["started"].as_u64().unwrap();
        assert!((100..256).contains(&started), "{got}");
        assert!(
            wait_for(10, || processes_with(&token).is_empty()),
            "the bomb's processes outlived it"
        );
    }
}

#[test]
fn the_probe_names_identity_filter_and_limits() {
    for_both(|who| {
        let report = who.probe();
        assert_eq!(report["status"], "enforced", "{report:#}");
        let identity = &report["identity"];
        match &who.user {
            Some(u) => {
                assert_eq!(identity["kind"], "caller", "{identity}");
                assert_eq!(identity["uid"], u.uid);
            }
            None if who.is_root() => {
                assert_eq!(identity["kind"], "dedicated", "{identity}");
                assert_ne!(identity["uid"], 0);
            }
            None => assert_eq!(identity["kind"], "caller"),
        }
        assert_eq!(report["seccomp"]["name"], "link-seccomp-v4");
        assert_eq!(report["seccomp"]["programs"], 1);
        assert_eq!(report["seccomp"]["sha256"].as_str().map(str::len), Some(64));
        assert_eq!(report["limits"]["processes"], 256);
        // Which bounds hold over what: the rlimits per process, seen in force; the quota per
        // agent; memory per agent said to be unbounded, with why.
        let bound = |what: &str, over: &str| {
            let bounds = report["bounds"].as_array().cloned().unwrap_or_default();
            bounds
                .into_iter()
                .find(|b| b["what"] == what && b["over"] == over)
                .unwrap_or_else(|| panic!("no {what} bound over {over}: {report}"))
        };
        let memory = bound("memory_bytes", "process");
        assert_eq!(
            (&memory["value"], &memory["checked"]),
            (&json!(4u64 << 30), &json!(true))
        );
        assert_eq!(bound("processes", "command")["checked"], true);
        assert_eq!(bound("workspace_entries", "agent")["value"], 250_000);
        // Memory and processes per agent, CPU time over a whole command, where this machine
        // gives Link cgroups (as root on cgroup v1), else said unbounded with why.
        let together = [
            ("memory_bytes", "agent"),
            ("processes", "agent"),
            ("cpu_seconds", "command"),
        ];
        for (what, over) in together {
            let per_agent = bound(what, over);
            let support = match &who.user {
                Some(_) => Err("Link bounds an agent's processes together only as root".into()),
                None => link_confine::cgroup::support().map(drop),
            };
            match support {
                Ok(()) => {
                    assert_eq!(per_agent["value"], report["limits"][what], "{per_agent}");
                    assert_eq!(per_agent["checked"], false, "{per_agent}");
                }
                Err(why) => {
                    assert_eq!(per_agent["value"], Value::Null, "{per_agent}");
                    let said = per_agent["reason"].as_str().unwrap_or_default();
                    assert!(said.starts_with(&why), "{per_agent}");
                }
            }
        }
        for check in [
            "syscall_unshare_user",
            "syscall_keyctl",
            "syscall_getpid",
            "limit_processes",
            "init_cmdline_hides_host_paths",
            "seccomp_filters",
        ] {
            let v = report["checks"][check].as_str().unwrap_or("missing");
            assert!(v.starts_with("ok"), "{check}: {v}");
        }
    });
}

/// As root the dedicated identities start at `LNK_SANDBOX_UID_BASE`; a value that is not a
/// usable base is refused, naming the variable, and nothing runs.
#[test]
fn the_identity_base_is_configurable_and_checked() {
    if !sandbox_or_skip() || !rustix::process::geteuid().is_root() {
        return;
    }
    let root = Root::new();
    let ws = root.workspace("a1");
    let run = |base: &str| {
        Command::new(BIN)
            .env(link_protocol::plugin::ENV_SANDBOX_UID_BASE, base)
            .args(["exec", "--workspace"])
            .arg(&ws)
            .args([
                "--",
                "/bin/sh",
                "-c",
                "id -u; touch ran; cat /proc/self/uid_map",
            ])
            .output()
            .unwrap()
    };
    let out = run("1900000000");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("1900000000"), "{text}");
    // Its user namespace maps root and its own uid, each to itself, and nothing else.
    let maps: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        maps,
        [["0", "0", "1"], ["1900000000", "1900000000", "1"]],
        "{text}"
    );
    assert_eq!(
        std::fs::metadata(ws.join("ran")).unwrap().uid(),
        1_900_000_000
    );
    std::fs::remove_file(ws.join("ran")).unwrap();
    for bad in ["0", "root", "4294967000"] {
        let out = run(bad);
        assert_eq!(out.status.code(), Some(125), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("LNK_SANDBOX_UID_BASE"), "{bad}: {err}");
        assert!(!ws.join("ran").exists(), "{bad}: the command ran");
    }
}

/// As a CI runner may start them: in a pid namespace whose session leader is outside it, so
/// `getsid` answers 0 (rustix's `getsid` cannot hold that: in the checked build it panicked,
/// and every confined test of a CI run failed with it). The probe answers `enforced` and a
/// command runs there; the twin in the same namespace, the probe leading a session of its own
/// (`setsid`, so `getsid` names it), answers `enforced` too.
#[test]
fn the_probe_and_a_command_run_where_the_session_leader_is_outside_the_pid_namespace() {
    for_both(|who| {
        let ws = who.workspace(&unique("lnk-pidns"));
        let script = format!(
            "python3 -c 'import os; print(os.getsid(0))'; {bin} probe >/dev/null; echo probe $?; \
             {bin} exec --workspace {ws} -- /bin/echo ran; \
             setsid -w {bin} probe >/dev/null; echo leader $?",
            bin = who.bin.display(),
            ws = ws.display(),
        );
        // Root makes the pid namespace; an ordinary user needs a user namespace for it, with
        // its own uid mapped to itself so it stays itself.
        let mut args = vec!["unshare"];
        if !who.is_root() {
            args.extend(["--user", "--map-current-user"]);
        }
        args.extend(["--pid", "--fork", "--mount-proc", "/bin/sh", "-c", &script]);
        let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        let out = who.command(&args).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            said.lines().collect::<Vec<_>>(),
            ["0", "probe 0", "ran", "leader 0"],
            "{said}\n{err}"
        );
    });
}

/// What the machine lacks is typed in the probe's answer, which `doctor` reads for its fix:
/// without bubblewrap on PATH the probe is `unavailable` (exit 2) with the cause
/// `no_bubblewrap`; its twin, in the same run, with bubblewrap found, is `enforced` with none.
#[test]
fn a_missing_capability_is_named_by_a_typed_cause() {
    if !sandbox_or_skip() {
        return;
    }
    let bare = std::env::temp_dir().join(unique("lnk-no-bwrap"));
    std::fs::create_dir_all(&bare).unwrap();
    let without = Command::new(BIN)
        .arg("probe")
        .env("PATH", &bare)
        .output()
        .unwrap();
    std::fs::remove_dir(&bare).unwrap();
    let read = |out: &Output| {
        link_report::probe::SandboxProbe::parse(&String::from_utf8_lossy(&out.stdout))
            .expect("the probe's JSON")
    };
    let lacking = read(&without);
    assert_eq!(without.status.code(), Some(2));
    assert_eq!(
        lacking.cause,
        Some(link_report::probe::Cause::NoBubblewrap),
        "{lacking:?}"
    );
    let with = Command::new(BIN).arg("probe").output().unwrap();
    let enforced = read(&with);
    assert_eq!(with.status.code(), Some(0), "{enforced:?}");
    assert_eq!(enforced.cause, None);
}
