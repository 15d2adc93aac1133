//! The host process of a [`RuntimeProcess`](super::RuntimeProcess): spawning `link up` (a plain
//! child, or one owned by the kit's [`reaper`]), reading its stdout lines and capturing its
//! stderr in the background, waiting for its ready line, and stopping it; and what a start
//! that never got ready says ([`UpFailure`], [`NotReady`]).

use super::{lock, RuntimeSpec};
use crate::child::{kill_and_reap, signal, wait_timeout};
use crate::programs::HOST;
use crate::reaper::{self, Owned};
use link_protocol::layout::StateLayout;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Why `link up` did not print its ready line.
#[derive(Debug)]
pub enum NotReady {
    /// It exited first.
    Exited(ExitStatus),
    /// It was still starting when [`ready_within`](RuntimeSpec::ready_within) ran out.
    Timeout(Duration),
    /// The runner caught this signal ([`crate::interrupt`]) while waiting.
    Interrupted(i32),
    /// Its state could not be read.
    Wait(String),
}

/// `link up` exited or printed something else instead of its ready line.
#[derive(Debug)]
pub struct UpFailure {
    /// What it printed on stdout instead (empty if nothing).
    pub line: String,
    pub stderr: String,
    /// Plugins whose logs say they are not implemented yet.
    pub placeholders: Vec<String>,
}

impl UpFailure {
    /// Its stdout line and stderr together.
    pub fn output(&self) -> String {
        format!("{}{}", self.line, self.stderr)
    }

    /// Confined mode is unavailable here: the host names the explicit alternative.
    pub fn unconfinable(&self) -> bool {
        self.stderr.contains("--mode diagnostic")
    }
}

impl std::fmt::Display for UpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "link up did not report ready ({:?}); its stderr:\n{}",
            self.line, self.stderr
        )
    }
}

/// The host's process: a plain child, or one owned by the kit's [`reaper`].
pub(super) enum HostChild {
    Plain(Child),
    Owned(Owned),
}

impl HostChild {
    pub(super) fn child(&mut self) -> &mut Child {
        match self {
            HostChild::Plain(c) => c,
            HostChild::Owned(o) => &mut o.child,
        }
    }

    pub(super) fn pid(&self) -> i32 {
        match self {
            HostChild::Plain(c) => c.id() as i32,
            HostChild::Owned(o) => o.pid(),
        }
    }

    pub(super) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        match self {
            HostChild::Plain(c) => c.try_wait(),
            HostChild::Owned(o) => o.try_wait(),
        }
    }

    pub(super) fn wait_timeout(&mut self, within: Duration) -> Option<ExitStatus> {
        match self {
            HostChild::Plain(c) => wait_timeout(c, within),
            HostChild::Owned(o) => o.wait_timeout(within).ok().flatten(),
        }
    }

    pub(super) fn signal(&mut self, sig: rustix::process::Signal) {
        match self {
            HostChild::Plain(c) => signal(c, sig),
            HostChild::Owned(o) => {
                let _ = o.signal(sig);
            }
        }
    }

    pub(super) fn kill(&mut self) {
        match self {
            HostChild::Plain(c) => kill_and_reap(c),
            HostChild::Owned(o) => o.kill_and_wait(),
        }
    }
}

/// One run of the host process.
pub(super) struct Host {
    pub(super) child: HostChild,
    pub(super) stderr: Arc<Mutex<String>>,
    // In mutexes so a RuntimeProcess can be shared by the threads of one test.
    stderr_done: Mutex<mpsc::Receiver<()>>,
    lines: Mutex<mpsc::Receiver<String>>,
    /// Lines it printed before its ready line.
    before_ready: String,
    /// Its ready line, newline included, once printed.
    pub(super) ready_line: String,
}

/// How long, once the host has exited, its stderr may take to reach [`Host::stderr`]: the
/// reading thread sees the end at once unless another process still holds the pipe.
const STDERR_DRAIN: Duration = Duration::from_secs(2);

impl Host {
    /// Waits up to `within` for the host to exit, and then for the thread reading its stderr
    /// to have read all of it (up to [`STDERR_DRAIN`]): what a test reads after an exit is
    /// everything the host wrote, not what the thread had got to.
    pub(super) fn wait_timeout(&mut self, within: Duration) -> Option<ExitStatus> {
        let status = self.child.wait_timeout(within)?;
        self.stderr_read_to_end(STDERR_DRAIN);
        Some(status)
    }

    /// Waits up to `within` for the thread reading the host's stderr to reach its end.
    fn stderr_read_to_end(&self, within: Duration) {
        let _ = lock(&self.stderr_done).recv_timeout(within);
    }
}

/// Spawns `link up` (its stdout lines and stderr read in the background).
pub(super) fn spawn(spec: &RuntimeSpec, layout: &StateLayout) -> std::io::Result<Host> {
    let mut cmd = spec.up_command(layout.root())?;
    let mut child = if spec.reaper_owned() {
        HostChild::Owned(reaper::global().spawn(&mut cmd)?)
    } else {
        HostChild::Plain(cmd.spawn()?)
    };
    let (stderr, stderr_done) = capture(child.child().stderr.take().expect("piped stderr"));
    let lines = lines(child.child().stdout.take().expect("piped stdout"));
    Ok(Host {
        child,
        stderr,
        stderr_done: Mutex::new(stderr_done),
        lines: Mutex::new(lines),
        before_ready: String::new(),
        ready_line: String::new(),
    })
}

/// Starts `link up` and waits for its ready line; stops it again if that does not come.
pub(super) fn spawn_ready(spec: &RuntimeSpec, layout: &StateLayout) -> Result<Host, UpFailure> {
    let mut host = spawn(spec, layout)
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", spec.programs.join(HOST).display()));
    if wait_ready(&mut host, spec.ready_within).is_ok() {
        return Ok(host);
    }
    stop(&mut host.child, spec.exit_within);
    host.stderr_read_to_end(Duration::from_secs(10));
    let stderr = lock(&host.stderr).clone();
    Err(UpFailure {
        line: std::mem::take(&mut host.before_ready),
        stderr,
        placeholders: placeholders(layout),
    })
}

/// Polls for the ready line every 50 ms, checking for an exit, the deadline and interrupts.
pub(super) fn wait_ready(host: &mut Host, within: Duration) -> Result<PathBuf, NotReady> {
    let deadline = Instant::now() + within;
    let mut open = true;
    loop {
        if let Some(sig) = crate::interrupt::interrupted() {
            return Err(NotReady::Interrupted(sig));
        }
        match host.child.try_wait() {
            Ok(Some(status)) => return Err(NotReady::Exited(status)),
            Ok(None) => {}
            Err(e) => return Err(NotReady::Wait(e.to_string())),
        }
        if Instant::now() >= deadline {
            return Err(NotReady::Timeout(within));
        }
        if !open {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        match lock(&host.lines).recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                if let Some(socket) = line.trim().strip_prefix("ready ") {
                    host.ready_line = format!("{line}\n");
                    return Ok(PathBuf::from(socket.trim()));
                }
                host.before_ready.push_str(&line);
                host.before_ready.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => open = false,
        }
    }
}

/// Every line `out` gives, read to its end so the writer never meets a closed pipe.
fn lines(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    rx
}

/// Collects everything `err` gives; the receiver hears when it ends.
fn capture(mut err: impl Read + Send + 'static) -> (Arc<Mutex<String>>, mpsc::Receiver<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&text);
    let (done, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            lock(&sink).push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let _ = done.send(());
    });
    (text, ended)
}

/// SIGTERM (the host then stops its plugins in order), SIGKILL if it is still there after
/// `within`; reaped either way.
pub(super) fn stop(child: &mut HostChild, within: Duration) {
    child.signal(rustix::process::Signal::TERM);
    if child.wait_timeout(within).is_none() {
        child.kill();
    }
}

/// Plugins whose logs say they are placeholders.
fn placeholders(layout: &StateLayout) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(layout.log_dir()) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let text = std::fs::read_to_string(e.path()).ok()?;
        text.contains("not implemented yet").then(|| {
            format!(
                "({} is not implemented yet)",
                e.file_name().to_string_lossy()
            )
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A pipe whose reader is slow to be scheduled, as the capture thread can be on a busy
    /// machine.
    struct Late<R>(R);

    impl<R: Read> Read for Late<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_millis(300));
            self.0.read(buf)
        }
    }

    #[test]
    fn once_the_host_is_waited_for_its_stderr_holds_all_it_wrote() {
        let mut child = Command::new("/bin/sh")
            .args(["-c", "echo last words >&2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stderr, stderr_done) = capture(Late(child.stderr.take().unwrap()));
        let lines = lines(child.stdout.take().unwrap());
        let mut host = Host {
            child: HostChild::Plain(child),
            stderr,
            stderr_done: Mutex::new(stderr_done),
            lines: Mutex::new(lines),
            before_ready: String::new(),
            ready_line: String::new(),
        };
        let status = host.wait_timeout(Duration::from_secs(10));
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
        assert_eq!(*lock(&host.stderr), "last words\n");
    }
}
