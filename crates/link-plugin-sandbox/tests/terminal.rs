//! No confined command can push input into a terminal (`TIOCSTI`), wherever the sandbox runs
//! from: `exec` started with a real pseudo-terminal as its controlling terminal and stdout,
//! and the plugin (a session of its own, `--new-session` skipped) started from a process that
//! holds one. Every refusal has an allowed twin in the same run: the same script run
//! unconfined from the same terminal injects, reads its session and opens `/dev/tty`; inside,
//! `TCGETS` on the terminal and writing to it work. What counts is the terminal itself: after
//! each confined run nothing waits in its input queue and no injected byte echoed on the
//! master. Three layers each refuse it: the seccomp filter refuses `TIOCSTI` (`EPERM`) before
//! the kernel's own check; Landlock lets no device but `/dev/null`, `/dev/zero` and
//! `/dev/full` be opened (`/dev/tty`: `EACCES`); and the session has no controlling terminal
//! (`TIOCGSID` on the terminal: `ENOTTY`), so the kernel would refuse it without the filter.

use crate::common::*;
use crate::hardening::for_both;
use link_harness_conformance::plugin_process::PluginSpec;
use serde_json::{json, Value};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The script every run executes, with the report file's name and the token as arguments.
/// The token is given split in two, so no command line or message holds it whole: only an
/// injection could put it on the terminal.
const PROBE: &str = r#"
import fcntl, sys, termios
name, token = sys.argv[1], (sys.argv[2] + sys.argv[3]).encode()
def _x(f):
    # termios reports its errno in its own exception, not an OSError.
    try:
        return _e(f)
    except termios.error as e:
        return errno.errorcode.get(e.args[0], str(e.args[0]))
def sti(fd):
    for b in token:
        fcntl.ioctl(fd, termios.TIOCSTI, bytes([b]))
def on_dev_tty(f):
    fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    try:
        f(fd)
    finally:
        os.close(fd)
report = {
    "dev_tty_open": _x(lambda: on_dev_tty(lambda fd: None)),
    "dev_tty_sti": _x(lambda: on_dev_tty(sti)),
    "stdout_isatty": os.isatty(1),
    "stdout_tcgets": _x(lambda: termios.tcgetattr(1)),
    "stdout_sid": _x(lambda: fcntl.ioctl(1, TIOCGSID, bytes(4))),
    "stdout_sti": _x(lambda: sti(1)),
    "dev_null_open": _x(lambda: os.close(os.open("/dev/null", os.O_RDWR))),
    "sid": os.getsid(0),
    "pid": os.getpid(),
}
if report["stdout_isatty"]:
    os.write(1, b"written-" + name.encode() + b"\n")
open(name, "w").write(json.dumps(report))
"#;

/// A pseudo-terminal: the test reads the master and the slave's input queue.
struct Pty {
    master: OwnedFd,
    slave: OwnedFd,
}

impl Pty {
    /// A new terminal, non-canonical (every queued byte counts) with echo on (an injected
    /// byte also shows on the master).
    fn open() -> Pty {
        // SAFETY: plain libc calls on descriptors this function owns; results checked.
        unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
            let master = OwnedFd::from_raw_fd(m);
            assert_eq!(libc::grantpt(m), 0);
            assert_eq!(libc::unlockpt(m), 0);
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
            let s = libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            assert!(s >= 0, "open slave: {}", std::io::Error::last_os_error());
            let slave = OwnedFd::from_raw_fd(s);
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(s, &mut t), 0);
            t.c_lflag &= !libc::ICANON;
            t.c_lflag |= libc::ECHO;
            assert_eq!(libc::tcsetattr(s, libc::TCSANOW, &t), 0);
            let flags = libc::fcntl(m, libc::F_GETFL);
            assert_eq!(libc::fcntl(m, libc::F_SETFL, flags | libc::O_NONBLOCK), 0);
            Pty { master, slave }
        }
    }

    /// Makes this terminal the controlling terminal and stdout of `cmd`'s process: a session
    /// of its own, then `TIOCSCTTY`, as a login shell's terminal is.
    fn control(&self, cmd: &mut Command) {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(self.slave.try_clone().unwrap()));
        // SAFETY: setsid and ioctl only, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                if libc::ioctl(1, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    }

    /// Bytes waiting in the terminal's input queue (what a shell reading it would get).
    fn queued(&self) -> usize {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        let rc = unsafe { libc::ioctl(self.slave.as_raw_fd(), libc::FIONREAD, &mut n) };
        assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
        usize::try_from(n).unwrap()
    }

    /// Everything written to the terminal so far (output and echo).
    fn drain(&self) -> String {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&self.master, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// The token a run tries to inject, in the two halves the script is given.
fn token() -> (String, String) {
    let t = unique("inj");
    let (a, b) = t.split_at(4);
    (a.to_owned(), b.to_owned())
}

fn probe_args<'a>(name: &'a str, token: &'a (String, String)) -> [&'a str; 8] {
    [
        PYTHON,
        "-I",
        "-S",
        "-c",
        PROBE_WITH_PRELUDE.get_or_init(script),
        name,
        &token.0,
        &token.1,
    ]
}

static PROBE_WITH_PRELUDE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn script() -> String {
    // Python's termios lacks TIOCGSID.
    format!("{PY_PRELUDE}\nTIOCGSID = {}\n{PROBE}", libc::TIOCGSID)
}

/// Runs `cmd` from `pty` and returns its report; panics unless it exited 0.
fn run_from(pty: &Pty, mut cmd: Command, ws: &Path, name: &str) -> Value {
    pty.control(&mut cmd);
    let out = cmd.stderr(Stdio::piped()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(127), "python3 is missing: {err}");
    assert_eq!(out.status.code(), Some(0), "{name}: {err}");
    let text = std::fs::read_to_string(ws.join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The unconfined twin: the same script from the same terminal can use it fully.
fn assert_unconfined_injects(pty: &Pty, got: &Value, token: &(String, String)) {
    assert_eq!(got["dev_tty_open"], "ok", "{got}");
    assert_eq!(got["stdout_sid"], "ok", "{got}");
    assert_eq!(got["stdout_tcgets"], "ok", "{got}");
    let whole = format!("{}{}", token.0, token.1);
    // The kernel's own switch (dev.tty.legacy_tiocsti) may refuse everyone but root.
    if got["stdout_sti"] == "ok" {
        assert_eq!(got["dev_tty_sti"], "ok", "{got}");
        assert_eq!(pty.queued(), 2 * whole.len(), "{got}");
        assert!(pty.drain().contains(&whole), "no echo of the injection");
        let mut sink = vec![0u8; 2 * whole.len()];
        rustix::io::read(&pty.slave, &mut sink).unwrap();
    } else {
        assert_eq!(got["stdout_sti"], "EIO", "{got}");
        println!("NOTE: this kernel refuses TIOCSTI to unprivileged callers");
        pty.drain();
    }
    assert_eq!(pty.queued(), 0);
}

/// A confined run's report: the terminal out of reach of `TIOCSTI`, its twins allowed.
/// `written` names the report when the command's stdout is the terminal.
fn assert_confined_refused(
    pty: &Pty,
    got: &Value,
    token: &(String, String),
    written: Option<&str>,
) {
    let tty_fd = written.is_some();
    // Landlock grants no device but /dev/null, /dev/zero and /dev/full.
    assert_eq!(got["dev_tty_open"], "EACCES", "{got}");
    assert_eq!(got["dev_tty_sti"], "EACCES", "{got}");
    assert_eq!(got["dev_null_open"], "ok", "{got}");
    assert_eq!(got["stdout_isatty"], tty_fd, "{got}");
    if tty_fd {
        assert_eq!(
            got["stdout_tcgets"], "ok",
            "the terminal is reachable: {got}"
        );
        assert_eq!(
            got["stdout_sid"], "ENOTTY",
            "not its controlling terminal: {got}"
        );
        assert_eq!(got["stdout_sti"], "EPERM", "{got}");
    }
    assert_eq!(pty.queued(), 0, "input was injected: {got}");
    let shown = pty.drain();
    assert!(
        !shown.contains(&format!("{}{}", token.0, token.1)),
        "{shown}"
    );
    if let Some(name) = written {
        let line = format!("written-{name}");
        assert!(
            shown.contains(&line),
            "the allowed write is missing: {shown:?}"
        );
    }
}

#[test]
fn exec_from_a_terminal_cannot_inject_into_it() {
    for_both(|who| {
        let pty = Pty::open();
        let ws = who.workspace("tty");
        let token = token();
        let mut twin = who.command(&probe_args("bare.json", &token).map(std::ffi::OsStr::new));
        twin.current_dir(&ws);
        let got = run_from(&pty, twin, &ws, "bare.json");
        assert_unconfined_injects(&pty, &got, &token);

        let confined = who.exec_command(&ws, &probe_args("confined.json", &token));
        let got = run_from(&pty, confined, &ws, "confined.json");
        assert_confined_refused(&pty, &got, &token, Some("confined.json"));
        // `exec` is not a session leader here: bwrap starts a session inside the namespace.
        assert_ne!(got["sid"], 0, "{got}");
    });
}

/// The environment variable that tells [`plugin_from_a_terminal`] it runs from a terminal,
/// holding the token's two halves.
const FROM_PTY: &str = "LNK_TEST_FROM_PTY";

/// Re-runs this binary's [`plugin_from_a_terminal`] with a pseudo-terminal as its controlling
/// terminal and stdout, and checks that terminal after it.
#[test]
fn the_plugin_started_from_a_terminal_cannot_inject_into_it() {
    if !sandbox_or_skip() {
        return;
    }
    let pty = Pty::open();
    let token = token();
    let mut inner = Command::new(std::env::current_exe().unwrap());
    inner
        .args(["terminal::plugin_from_a_terminal", "--exact", "--ignored"])
        .args(["--nocapture", "--test-threads=1"])
        .env(FROM_PTY, format!("{} {}", token.0, token.1));
    pty.control(&mut inner);
    let out = inner.stderr(Stdio::piped()).output().unwrap();
    let shown = pty.drain();
    assert!(
        out.status.success(),
        "{shown}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shown.contains("1 passed"), "{shown}");
    assert!(
        !shown.contains(&format!("{}{}", token.0, token.1)),
        "{shown}"
    );
    assert_eq!(pty.queued(), 0, "input was injected");
}

#[test]
#[ignore = "run from a pseudo-terminal by the_plugin_started_from_a_terminal_cannot_inject_into_it"]
fn plugin_from_a_terminal() {
    let halves = std::env::var(FROM_PTY).expect("run by its twin, from a terminal");
    let (a, b) = halves.split_once(' ').unwrap();
    let token = (a.to_owned(), b.to_owned());
    assert!(sandbox_or_skip());
    let (sid, tty) = session_and_tty(std::process::id());
    assert_eq!(
        sid,
        std::process::id(),
        "the test leads the terminal's session"
    );
    assert_ne!(tty, 0, "the test has a controlling terminal");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let root = Root::new();
    let ws = root.workspace("a1");
    let mut plugin = PluginSpec::new(BIN, "link-plugin-sandbox")
        .mode(link_protocol::plugin::Mode::Confined)
        .ready_within(Duration::from_secs(30))
        .start_in(root.state());
    // The contract: the sandbox plugin leads a session of its own, with no terminal.
    let pid = plugin.pid();
    assert_eq!(session_and_tty(pid), (pid, 0));
    let argv = probe_args("plugin.json", &token);
    let reply = rt
        .block_on(plugin.call(
            "sandbox.exec",
            Some("a1"),
            json!({"argv": argv, "workspace": ws, "timeout_ms": 30000}),
        ))
        .unwrap();
    assert_eq!(reply["exit_code"], 0, "{reply}");
    let got: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("plugin.json")).unwrap()).unwrap();
    // stdout is the plugin's pipe: only /dev/tty and a terminal of its own are in reach.
    let none = Pty::open();
    assert_confined_refused(&none, &got, &token, None);
    // No session spent on the command: it is in the plugin's, whose leader is outside its
    // pid namespace.
    assert_eq!(got["sid"], 0, "{got}");
    assert!(plugin.terminate_within(Duration::from_secs(10)).success());
}

/// (session id, controlling terminal's device number) of `pid`, from `/proc/PID/stat`.
fn session_and_tty(pid: u32) -> (u32, u64) {
    let stat = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.stat())
        .unwrap();
    (stat.session as u32, stat.tty_nr as u64)
}
