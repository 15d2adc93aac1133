//! The code tool as a real process with no router running: bad requests are refused before
//! any call leaves it; a valid one is forwarded and fails as `unavailable` because there is
//! no router. Search and patch on real files run in `runtime.rs` under a real `link up`.

use link_protocol::layout::StateLayout;
use link_protocol::{Client, ErrorCode, Request};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

const NAME: &str = "link-plugin-link-code";
const HARNESS: Option<&str> = Some("link-plugin-link-harness");

struct Plugin {
    child: tokio::process::Child,
    layout: StateLayout,
}

impl Plugin {
    async fn start() -> Plugin {
        let home = std::env::var("HOME").expect("HOME");
        let root = PathBuf::from(home)
            .join(".cache/lnk-t")
            .join(format!("code-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let layout = StateLayout::new(&root);
        for dir in [layout.run_dir(), layout.data(NAME), layout.home(NAME)] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_link-plugin-link-code"))
            .env_clear()
            .env("LNK_PLUGIN", NAME)
            .env("LNK_STATE", layout.root())
            .env("LNK_SOCKET", layout.plugin_socket(NAME))
            .env("LNK_DATA", layout.data(NAME))
            .env("LNK_MODE", "diagnostic")
            .env("LNK_PROFILE", "link")
            .env("RUST_LOG", "error")
            .env("HOME", layout.home(NAME))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the code tool");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("ready line in time")
        .unwrap();
        assert_eq!(line.trim(), r#"ready {"routes":["tool.code"]}"#);
        Plugin { child, layout }
    }

    async fn code(&self, caller: Option<&str>, body: Value) -> (ErrorCode, String) {
        let mut client = Client::connect(&self.layout.plugin_socket(NAME))
            .await
            .unwrap();
        let req = Request {
            id: 1,
            route: "tool.code".into(),
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

#[tokio::test]
async fn refuses_bad_requests_and_needs_the_router() {
    let p = Plugin::start().await;
    for body in [
        json!({"op": "search"}),
        json!({"op": "search", "pattern": "("}),
        json!({"op": "search", "pattern": ""}),
        json!({"op": "patch", "path": "a"}),
        json!({"op": "delete"}),
        json!({}),
    ] {
        assert_eq!(
            p.code(HARNESS, body.clone()).await.0,
            ErrorCode::BadRequest,
            "{body}"
        );
    }
    let (code, _) = p
        .code(
            Some("link-plugin-file-tool"),
            json!({"op": "search", "pattern": "x"}),
        )
        .await;
    assert_eq!(code, ErrorCode::Forbidden);
    let (code, msg) = p
        .code(HARNESS, json!({"op": "search", "pattern": "x"}))
        .await;
    assert_eq!(code, ErrorCode::Unavailable, "{msg}");
    let (code, msg) = p
        .code(
            HARNESS,
            json!({"op": "patch", "path": "a", "old": "x", "new": "y"}),
        )
        .await;
    assert_eq!(code, ErrorCode::Unavailable, "{msg}");
}
