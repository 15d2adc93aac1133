//! Spawning a plugin binary the way the host does, with this test as its parent.

#![allow(dead_code)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Generous: a loaded 2-core machine may be slow to start a debug binary.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A fresh state root under `$HOME/.cache/lnk-t`, removed on drop.
pub struct Root(pub PathBuf);

impl Root {
    pub fn new(tag: &str) -> Root {
        let home = std::env::var_os("HOME").expect("HOME is set");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = PathBuf::from(home)
            .join(".cache/lnk-t")
            .join(format!("{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        link_protocol::layout::StateLayout::new(&dir)
            .check()
            .expect("usable state root");
        Root(dir)
    }
    pub fn layout(&self) -> link_protocol::layout::StateLayout {
        link_protocol::layout::StateLayout::new(&self.0)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running plugin; killed on drop if still alive.
pub struct Plugin {
    pub child: Child,
    pub socket: PathBuf,
    pub stderr: PathBuf,
    /// The payload of the ready line.
    pub ready: link_protocol::plugin::Ready,
}

/// The command the host would run for `name`, environment included.
pub fn command(exe: &str, name: &str, root: &Root) -> Command {
    let layout = root.layout();
    let home = layout.home(name);
    let data = layout.data(name);
    for dir in [&home, &data, &layout.run_dir(), &layout.log_dir()] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LNK_PLUGIN", name)
        .env("LNK_STATE", &root.0)
        .env("LNK_SOCKET", layout.plugin_socket(name))
        .env("LNK_DATA", &data)
        .env("LNK_MODE", "diagnostic")
        .env("LNK_PROFILE", "link")
        .env("LNK_KEYCHAIN", "off")
        .env("RUST_LOG", "debug")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    cmd
}

/// Starts `cmd` and waits for its ready line.
pub fn start(mut cmd: Command, name: &str, root: &Root) -> Plugin {
    let layout = root.layout();
    let stderr = layout.log_file(name);
    cmd.stderr(std::fs::File::create(&stderr).unwrap());
    let mut child = cmd.spawn().expect("spawn plugin");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("{name} printed no ready line; stderr: {}", read(&stderr))
    });
    let ready = link_protocol::plugin::parse_ready(&line).unwrap_or_else(|| {
        let _ = child.kill();
        panic!(
            "{name} printed {line:?}, not a ready line; stderr: {}",
            read(&stderr)
        )
    });
    Plugin {
        child,
        socket: layout.plugin_socket(name),
        stderr,
        ready,
    }
}

impl Plugin {
    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        wait(&mut self.child, START_TIMEOUT).expect("plugin exits after SIGTERM")
    }

    pub fn stderr_text(&self) -> String {
        read(&self.stderr)
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls for the child's exit.
pub fn wait(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
