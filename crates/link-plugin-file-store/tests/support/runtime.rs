//! A real full Link runtime for integration tests: `link up --profile link` on a fresh state
//! root under `$HOME/.cache/lnk-t`, with the programs found beside the test executable
//! (`target/<profile>/`). Shared by the runtime tests of the file store, agent, file tool
//! and code tool (included with `#[path]`).
//!
//! When the runtime cannot come up because a program is missing or still a stub, the test
//! is skipped loudly (a line on stderr) — unless `LNK_REQUIRE_RUNTIME=1`, which makes that a
//! failure. Any other start-up failure fails the test with the host's output.

#![allow(dead_code)]

use link_protocol::layout::StateLayout;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

pub struct Runtime {
    pub layout: StateLayout,
    pub programs: PathBuf,
    pub mode: String,
    pub token: String,
    child: Option<tokio::process::Child>,
}

/// `target/<profile>/`: the test executable lives in its `deps/`.
fn programs() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_owned()
}

fn skip(reason: &str) -> Option<Runtime> {
    if std::env::var("LNK_REQUIRE_RUNTIME").is_ok_and(|v| v == "1") {
        panic!("LNK_REQUIRE_RUNTIME=1 but the runtime cannot start: {reason}");
    }
    eprintln!("SKIPPED (runtime not available): {reason}");
    None
}

impl Runtime {
    /// Starts full Link in `mode` (`confined` or `diagnostic`), or `None` when skipped.
    pub async fn up(tag: &str, mode: &str) -> Option<Runtime> {
        let programs = programs();
        if !programs.join("link").is_file() {
            return skip(&format!(
                "no `link` in {}; build it with `cargo build -p link-cli`",
                programs.display()
            ));
        }
        let home = std::env::var("HOME").expect("HOME");
        let root = PathBuf::from(home)
            .join(".cache/lnk-t")
            .join(format!("{tag}-{}", std::process::id()));
        if let Err(e) = StateLayout::new(&root).check() {
            panic!("cannot use {} as a state root: {e}", root.display());
        }
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let mut rt = Runtime {
            layout: StateLayout::new(&root),
            programs,
            mode: mode.to_owned(),
            token: String::new(),
            child: None,
        };
        if let Err(output) = rt.start().await {
            let stub = rt.stub_plugins();
            if output.contains("missing programs") || !stub.is_empty() {
                return skip(&format!("{} {}", output.trim(), stub.join(" ")));
            }
            panic!("link up failed:\n{output}");
        }
        let out = std::process::Command::new(rt.programs.join("link"))
            .args(["token", "create", "--state"])
            .arg(rt.layout.root())
            .output()
            .unwrap();
        assert!(out.status.success(), "link token create: {out:?}");
        rt.token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        Some(rt)
    }

    /// Runs `link up` and waits for its `ready` line; `Err` carries its output.
    async fn start(&mut self) -> Result<(), String> {
        let mut child = tokio::process::Command::new(self.programs.join("link"))
            .args(["up", "--profile", "link", "--mode", &self.mode, "--state"])
            .arg(self.layout.root())
            .arg("--programs")
            .arg(&self.programs)
            .env("LNK_KEYCHAIN", "off")
            .env("LNK_TEST_HOOKS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn link up");
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut stderr = child.stderr.take().unwrap();
        let mut line = String::new();
        let read =
            tokio::time::timeout(Duration::from_secs(180), stdout.read_line(&mut line)).await;
        if matches!(read, Ok(Ok(n)) if n > 0) && line.starts_with("ready ") {
            // Keep draining stderr so the host never blocks on a full pipe.
            tokio::spawn(async move {
                let mut sink = Vec::new();
                let _ = stderr.read_to_end(&mut sink).await;
            });
            tokio::spawn(async move {
                let mut sink = String::new();
                let _ = stdout.read_line(&mut sink).await;
            });
            self.child = Some(child);
            return Ok(());
        }
        let _ = child.start_kill();
        let mut err = String::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(30), stderr.read_to_string(&mut err)).await;
        let _ = child.wait().await;
        Err(format!("{line}{err}"))
    }

    /// Plugins whose logs say they are placeholders.
    fn stub_plugins(&self) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.layout.log_dir()) else {
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

    /// Stops the runtime with `link down` and waits for the host to exit.
    pub async fn down(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let status = tokio::process::Command::new(self.programs.join("link"))
            .args(["down", "--state"])
            .arg(self.layout.root())
            .status()
            .await
            .unwrap();
        assert!(status.success(), "link down failed");
        let exited = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
        assert!(exited.is_ok(), "the host did not exit after link down");
    }

    /// Stops and starts again on the same state root.
    pub async fn restart(&mut self) {
        self.down().await;
        if let Err(output) = self.start().await {
            panic!("link up (restart) failed:\n{output}");
        }
    }

    /// One HTTP request to the connection endpoint: status and JSON body.
    pub async fn http(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let resp = link_protocol::http::json(
            &self.layout.connection_socket(),
            method,
            path,
            Some(&self.token),
            body.as_ref(),
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        (resp.status, resp.json())
    }

    /// Creates an agent; panics unless 201.
    pub async fn create_agent(&self, name: &str) -> Value {
        let (status, body) = self
            .http(
                "POST",
                "/v1/agents",
                Some(serde_json::json!({ "name": name })),
            )
            .await;
        assert_eq!(status, 201, "create {name}: {body}");
        body
    }

    /// Runs one turn; panics unless 200.
    pub async fn turn(&self, agent: &str, message: &str) -> Value {
        let path = format!("/v1/agents/{agent}/turns");
        let (status, body) = self
            .http(
                "POST",
                &path,
                Some(serde_json::json!({ "message": message })),
            )
            .await;
        assert_eq!(status, 200, "turn {message:?}: {body}");
        body
    }

    /// Asks the host (test hooks on) to make `plugin` call `route` through the router as
    /// itself: `{ok, result?, code?, message?}`.
    pub async fn call_as(&self, plugin: &str, route: &str, agent: &str, body: Value) -> Value {
        link_protocol::client::call_once(
            &self.layout.host_socket(),
            link_protocol::routes::HOST_DEBUG_CALL,
            None,
            serde_json::json!({"plugin": plugin, "route": route, "agent": agent, "body": body}),
        )
        .await
        .unwrap_or_else(|e| panic!("host.debug_call {plugin} {route}: {e}"))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if self.child.is_some() {
            // Never leave plugins behind, even when a test failed half-way.
            let _ = std::process::Command::new(self.programs.join("link"))
                .args(["down", "--state"])
                .arg(self.layout.root())
                .status();
            if let Some(child) = self.child.as_mut() {
                let _ = child.start_kill();
            }
        }
        let _ = std::fs::remove_dir_all(self.layout.root());
    }
}
