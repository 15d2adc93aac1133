//! The file tool as a real process with no router running: its own refusals happen before
//! any call leaves it; a valid request is forwarded and fails as `unavailable` because there
//! is no router. The full flow runs in `runtime.rs` under a real `link up`.

use link_protocol::layout::StateLayout;
use link_protocol::{Client, ErrorCode, Request};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

const NAME: &str = "link-plugin-file-tool";

struct Plugin {
    child: tokio::process::Child,
    layout: StateLayout,
}

impl Plugin {
    async fn start(mode: &str) -> Plugin {
        let home = std::env::var("HOME").expect("HOME");
        let root = PathBuf::from(home)
            .join(".cache/lnk-t")
            .join(format!("ftool-{}-{mode}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let layout = StateLayout::new(&root);
        for dir in [layout.run_dir(), layout.data(NAME), layout.home(NAME)] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_link-plugin-file-tool"))
            .env_clear()
            .env("LNK_PLUGIN", NAME)
            .env("LNK_STATE", layout.root())
            .env("LNK_SOCKET", layout.plugin_socket(NAME))
            .env("LNK_DATA", layout.data(NAME))
            .env("LNK_MODE", mode)
            .env("LNK_PROFILE", "link")
            .env("RUST_LOG", "error")
            .env("HOME", layout.home(NAME))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the file tool");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("ready line in time")
        .unwrap();
        assert_eq!(line.trim(), r#"ready {"routes":["tool.file"]}"#);
        Plugin { child, layout }
    }

    async fn code(&self, caller: Option<&str>, body: Value) -> (ErrorCode, String) {
        let mut client = Client::connect(&self.layout.plugin_socket(NAME))
            .await
            .unwrap();
        let req = Request {
            id: 1,
            route: "tool.file".into(),
            agent: Some("a".into()),
            caller: caller.map(str::to_owned),
            body: body.clone(),
        };
        let err = client.send(&req).await.unwrap_err();
        (
            err.code().unwrap_or_else(|| panic!("{body}: {err}")),
            err.to_string(),
        )
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(self.layout.root());
    }
}

const HARNESS: Option<&str> = Some("link-plugin-link-harness");

#[tokio::test]
async fn diagnostic_mode_disables_the_tool() {
    let p = Plugin::start("diagnostic").await;
    let (code, msg) = p
        .code(HARNESS, json!({"op": "read", "path": "a.txt"}))
        .await;
    assert_eq!(code, ErrorCode::Unavailable);
    assert!(
        msg.contains("file tool disabled in diagnostic mode"),
        "{msg}"
    );
}

#[tokio::test]
async fn refuses_before_calling_the_store() {
    let p = Plugin::start("confined").await;
    let conv = p.layout.agent_conversation("a").display().to_string();
    for (path, want) in [
        ("../conversation.jsonl", ErrorCode::Protected),
        (conv.as_str(), ErrorCode::Protected),
        ("..", ErrorCode::Protected),
        ("../x", ErrorCode::Forbidden),
        ("/etc/passwd", ErrorCode::Forbidden),
        ("a/../../x", ErrorCode::Forbidden),
    ] {
        for op in ["read", "write", "list"] {
            let body = json!({"op": op, "path": path, "content": "x"});
            assert_eq!(p.code(HARNESS, body).await.0, want, "{op} {path}");
        }
    }
    let (code, _) = p.code(HARNESS, json!({"op": "delete", "path": "a"})).await;
    assert_eq!(code, ErrorCode::BadRequest);
    let (code, msg) = p
        .code(
            Some("link-plugin-link-run"),
            json!({"op": "read", "path": "a"}),
        )
        .await;
    assert_eq!(code, ErrorCode::Forbidden, "{msg}");

    // A valid request goes on to the router, which is not running here.
    let (code, msg) = p
        .code(
            HARNESS,
            json!({"op": "write", "path": "a.txt", "content": "x"}),
        )
        .await;
    assert_eq!(code, ErrorCode::Unavailable, "{msg}");
    assert!(!p.layout.agent_workspace("a").exists());
}
