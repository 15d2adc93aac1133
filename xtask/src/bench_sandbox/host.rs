//! The benchmark's own confined full Link runtime, its scratch directories, and the sweep of
//! what an earlier, killed benchmark left.

use super::schedule::Turn;
use super::timed;
use crate::outputs::Workspace;
use anyhow::{anyhow, bail, Context, Result};
use link_protocol::layout::StateLayout;
use link_protocol::routes::programs::HOST;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// The agent the turns go to.
pub(super) const AGENT: &str = "bench";

/// The fixture-dir children of one benchmark: `bs<pid>` the state root, `bw<pid>` the
/// `exec` workspace.
pub(super) const STATE_PREFIX: &str = "bs";
pub(super) const WORKSPACE_PREFIX: &str = "bw";
/// How long `link up` may take to print its ready line, and the host to exit after `down`.
const READY_WITHIN: Duration = Duration::from_secs(60);
const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// A directory of the benchmark's own, removed when dropped.
pub(super) struct Scratch(PathBuf);

impl Scratch {
    pub(super) fn create(dir: &Path) -> Result<Scratch> {
        private_dir(dir)?;
        Ok(Scratch(dir.to_path_buf()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_dir(&self.0);
    }
}

pub(super) fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

pub(super) fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => link_protocol::errln!("xtask: cannot remove {}: {e}", dir.display()),
    }
}

/// Leftovers of an earlier benchmark that was killed (Ctrl-C, SIGKILL): a `bs<pid>` or
/// `bw<pid>` whose process is gone. A runtime still up on such a state root is stopped with
/// `link down` first.
pub(super) fn sweep(ws: &Workspace, fixture: &Path) {
    let Ok(entries) = std::fs::read_dir(fixture) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = leftover_pid(&name.to_string_lossy()) else {
            continue;
        };
        if pid == std::process::id() || alive(pid) {
            continue;
        }
        let dir = entry.path();
        if StateLayout::new(&dir).host_socket().exists() {
            let _ = link_command(ws, &dir, &["down"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        link_protocol::errln!(
            "xtask: bench-sandbox: removing {}, left by an earlier benchmark (pid {pid})",
            dir.display()
        );
        remove_dir(&dir);
    }
}

/// A process `pid` exists and is not a zombie waiting to be reaped: it has a start time, read
/// by the one `/proc/PID/stat` reader the host's pid records use.
pub(super) fn alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| link_os::process::start_time(pid).is_some())
}

/// The pid in `bs<pid>` / `bw<pid>`.
pub fn leftover_pid(name: &str) -> Option<u32> {
    let digits = name
        .strip_prefix(STATE_PREFIX)
        .or_else(|| name.strip_prefix(WORKSPACE_PREFIX))?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `link ARGS --state ROOT` with HOME and XDG_* inside the state root and the file keychain,
/// as the testing kit runs it (both from `link_protocol`'s one list).
pub(super) fn link_command(ws: &Workspace, root: &Path, args: &[&str]) -> Command {
    use link_protocol::manifest::{ENV_KEYCHAIN, KEYCHAIN_OFF};
    let mut c = Command::new(ws.release().join(HOST));
    c.args(args)
        .arg("--state")
        .arg(root)
        .env(ENV_KEYCHAIN, KEYCHAIN_OFF)
        .envs(StateLayout::new(root).host_home_env());
    c
}

/// A confined full Link runtime of the benchmark's own. Dropping it stops it (`link down`,
/// then SIGTERM, then SIGKILL) and removes its state root, on every path out of the
/// benchmark; on Ctrl-C the host gets the terminal's SIGINT itself and stops, and the next
/// benchmark removes the state root ([`sweep`]).
pub(super) struct Runtime {
    ws: Workspace,
    root: PathBuf,
    child: Option<Child>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

/// Lines of the host's stderr kept for an error message.
const STDERR_TAIL: usize = 20;

impl Runtime {
    pub(super) fn start(ws: &Workspace, root: &Path) -> Result<Runtime> {
        private_dir(root)?;
        let mut rt = Runtime {
            ws: ws.clone(),
            root: root.to_path_buf(),
            child: None,
            stderr: Arc::default(),
        };
        for (_, dir) in StateLayout::new(root).host_home_env() {
            private_dir(&dir)?;
        }
        let mut up = link_command(ws, root, &["up", "--profile", "link", "--mode", "confined"]);
        let shown = format!("link up --profile link --state {}", root.display());
        link_protocol::errln!("xtask: bench-sandbox: $ {shown}");
        let mut child = up
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start `{shown}`"))?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        rt.child = Some(child);
        let (ready_tx, ready_rx) = mpsc::channel();
        if let Some(stdout) = stdout {
            // Sends the ready line, then drains stdout so the host never blocks on it.
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.starts_with("ready ") {
                        let _ = ready_tx.send(line);
                    }
                }
            });
        }
        if let Some(stderr) = stderr {
            let tail = Arc::clone(&rt.stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                    if t.len() == STDERR_TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            });
        }
        match ready_rx.recv_timeout(READY_WITHIN) {
            Ok(_) => Ok(rt),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(anyhow!(
                "`{shown}` printed no ready line within {} s{}",
                READY_WITHIN.as_secs(),
                rt.tail()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Stdout closed: the host is exiting; its last words are on stderr.
                let status = rt.child.as_mut().and_then(|c| wait_until(c, EXIT_WITHIN));
                std::thread::sleep(Duration::from_millis(50));
                Err(anyhow!(
                    "`{shown}` exited before it was ready ({}){}",
                    status.map_or("still running".into(), |s| s.to_string()),
                    rt.tail()
                ))
            }
        }
    }

    fn tail(&self) -> String {
        let t = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if t.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends: {}", Vec::from(t.clone()).join(" | "))
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        link_command(&self.ws, &self.root, args)
    }

    /// `link token create`: the bearer token, printed on stdout.
    pub(super) fn token(&self) -> Result<String> {
        let out = self
            .command(&["token", "create"])
            .stdin(Stdio::null())
            .output()
            .context("cannot run `link token create`")?;
        let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || token.is_empty() {
            bail!(
                "`link token create` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(token)
    }

    pub(super) fn create_agent(&self, token: &str) -> Result<()> {
        let out = self
            .command(&["agent", "create", "--token", token, AGENT])
            .stdin(Stdio::null())
            .output()
            .context("cannot run `link agent create`")?;
        if !out.status.success() {
            bail!(
                "`link agent create {AGENT}` failed ({}): {} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// One `link turn`, timed; its reply must be what the turn asked for ([`check_reply`]),
    /// or it is an error.
    pub(super) fn timed_turn(&self, token: &str, turn: Turn) -> Result<f64> {
        let message = turn.message();
        let command = self.command(&["turn", "--token", token, AGENT, message]);
        let (ns, out) = timed("link turn", command)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let refused = |why: &str| {
            anyhow!(
                "the turn `{message}` {why} ({}): {} {}",
                out.status,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        };
        if !out.status.success() {
            return Err(refused("was refused"));
        }
        let reply: serde_json::Value =
            serde_json::from_str(&stdout).map_err(|_| refused("answered no JSON"))?;
        check_reply(&reply, turn).map_err(|why| refused(&why))?;
        Ok(ns)
    }

    /// `link down`, the host's exit (SIGTERM, then SIGKILL past [`EXIT_WITHIN`]), the state
    /// root removed. An error when the host did not stop cleanly.
    pub(super) fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let down = self
            .command(&["down"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output();
        let down_ok = down.as_ref().is_ok_and(|o| o.status.success());
        if !down_ok {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&child),
                rustix::process::Signal::TERM,
            );
        }
        let status = match wait_until(&mut child, EXIT_WITHIN) {
            Some(s) => Some(s),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        };
        remove_dir(&self.root);
        match (down, status) {
            (Ok(d), Some(s)) if d.status.success() && s.success() => Ok(()),
            (down, status) => Err(anyhow!(
                "the benchmark's runtime did not stop cleanly: `link down` {}, the host {}{}",
                match down {
                    Ok(d) if d.status.success() => "succeeded".to_string(),
                    Ok(d) => format!(
                        "failed ({}): {}",
                        d.status,
                        String::from_utf8_lossy(&d.stderr).trim()
                    ),
                    Err(e) => format!("could not run: {e}"),
                },
                status.map_or(
                    format!("was killed after {} s", EXIT_WITHIN.as_secs()),
                    |s| format!("exited {s}")
                ),
                self.tail()
            )),
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            link_protocol::errln!("xtask: bench-sandbox: {e:#}");
        }
    }
}

/// The child's exit status once it exits, or `None` past `within` (through
/// [`link_os::process::wait_child`], which wakes at the exit rather than polling).
pub(super) fn wait_until(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    link_os::process::wait_child(child, within).ok().flatten()
}

/// A turn's reply is what it asked for: `run: true` made exactly one `run` call, which
/// succeeded with exit code 0; `list` exactly one `file` call, which succeeded; `hello` none.
pub fn check_reply(reply: &serde_json::Value, turn: Turn) -> Result<(), String> {
    if !reply.get("reply").is_some_and(|r| r.is_string()) {
        return Err("answered without a reply".into());
    }
    let calls = reply
        .get("tool_calls")
        .and_then(|c| c.as_array())
        .ok_or("answered without tool_calls")?;
    let Some(tool) = turn.tool() else {
        return match calls.len() {
            0 => Ok(()),
            n => Err(format!("made {n} tool call(s), expected none")),
        };
    };
    let [call] = &calls[..] else {
        return Err(format!("made {} tool calls, expected one", calls.len()));
    };
    if call.get("tool").and_then(|t| t.as_str()) != Some(tool) {
        return Err(format!("made a call that is not `{tool}`"));
    }
    if call.get("ok").and_then(|o| o.as_bool()) != Some(true) {
        return Err(format!("had its `{tool}` call refused"));
    }
    if turn != Turn::Run {
        return Ok(());
    }
    let code = call.pointer("/output/exit_code").and_then(|c| c.as_i64());
    if code != Some(0) {
        return Err(format!("ran `true` with exit code {code:?}, expected 0"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_checked_before_a_turn_counts() {
        let ok_run = serde_json::json!({"reply": "run: ok", "tool_calls": [
            {"tool": "run", "ok": true, "output": {"exit_code": 0}}]});
        assert_eq!(check_reply(&ok_run, Turn::Run), Ok(()));
        assert!(check_reply(&ok_run, Turn::Plain).is_err());
        assert!(check_reply(&ok_run, Turn::Tool)
            .unwrap_err()
            .contains("not `file`"));
        let refused = serde_json::json!({"reply": "no", "tool_calls": [
            {"tool": "run", "ok": false, "output": {"error": "unavailable"}}]});
        assert!(check_reply(&refused, Turn::Run)
            .unwrap_err()
            .contains("refused"));
        let failed = serde_json::json!({"reply": "x", "tool_calls": [
            {"tool": "run", "ok": true, "output": {"exit_code": 1}}]});
        assert!(check_reply(&failed, Turn::Run).is_err());
        let listed = serde_json::json!({"reply": "file: ok", "tool_calls": [
            {"tool": "file", "ok": true, "output": {"entries": []}}]});
        assert_eq!(check_reply(&listed, Turn::Tool), Ok(()));
        assert!(check_reply(&listed, Turn::Run).is_err());
        let unlisted = serde_json::json!({"reply": "no", "tool_calls": [
            {"tool": "file", "ok": false, "output": {"error": "denied"}}]});
        assert!(check_reply(&unlisted, Turn::Tool)
            .unwrap_err()
            .contains("refused"));
        let plain = serde_json::json!({"reply": "hi", "tool_calls": []});
        assert_eq!(check_reply(&plain, Turn::Plain), Ok(()));
        assert!(check_reply(&plain, Turn::Run).is_err());
        assert!(check_reply(&plain, Turn::Tool).is_err());
        assert!(check_reply(&serde_json::json!({}), Turn::Plain).is_err());
    }

    #[test]
    fn this_process_is_alive_and_a_free_pid_is_not() {
        assert!(alive(std::process::id()));
        // Above the kernel's largest pid_max (2^22).
        assert!(!alive(4_194_305));
    }

    #[test]
    fn only_this_benchmarks_leftover_names_are_swept() {
        assert_eq!(leftover_pid("bs1234"), Some(1234));
        assert_eq!(leftover_pid("bw7"), Some(7));
        for other in ["bs", "bsx1", "r0000", "bs12a", "b1234", "bench"] {
            assert_eq!(leftover_pid(other), None, "{other}");
        }
    }
}
