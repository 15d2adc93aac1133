//! The agent plugin as a real process with no router running: everything that does not need
//! another plugin works, and a create that needs the file store fails cleanly, leaving
//! nothing behind. The full flow runs in `runtime.rs` under a real `link up`.

use link_protocol::layout::StateLayout;
use link_protocol::{Client, ErrorCode};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

const NAME: &str = "link-plugin-agent";

struct Plugin {
    child: tokio::process::Child,
    layout: StateLayout,
}

impl Plugin {
    fn root() -> PathBuf {
        let home = std::env::var("HOME").expect("HOME");
        PathBuf::from(home)
            .join(".cache/lnk-t")
            .join(format!("agent-{}", std::process::id()))
    }

    async fn start(layout: &StateLayout) -> Plugin {
        for dir in [layout.run_dir(), layout.data(NAME), layout.home(NAME)] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_link-plugin-agent"))
            .env_clear()
            .env("LNK_PLUGIN", NAME)
            .env("LNK_STATE", layout.root())
            .env("LNK_SOCKET", layout.plugin_socket(NAME))
            .env("LNK_DATA", layout.data(NAME))
            .env("LNK_MODE", "diagnostic")
            .env("LNK_PROFILE", "link")
            .env("RUST_LOG", "warn")
            .env("HOME", layout.home(NAME))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the agent plugin");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("ready line in time")
        .unwrap();
        assert!(line.starts_with("ready "), "{line:?}");
        Plugin {
            child,
            layout: layout.clone(),
        }
    }

    async fn call(
        &self,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> Result<Value, link_protocol::Error> {
        Client::connect(&self.layout.plugin_socket(NAME))
            .await?
            .call(route, agent, body)
            .await
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Removes the state root when the test ends, passed or not.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn works_alone_and_fails_cleanly_without_the_router() {
    let root = Plugin::root();
    let _ = std::fs::remove_dir_all(&root);
    let _cleanup = Cleanup(root.clone());
    let layout = StateLayout::new(&root);
    let p = Plugin::start(&layout).await;

    let list = p.call("agent.list", None, json!({})).await.unwrap();
    assert_eq!(list, json!({"agents": []}));
    let err = p.call("agent.get", Some("a"), json!({})).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotFound));
    let err = p
        .call("agent.delete", Some("a"), json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotFound));
    for bad in ["", "Bad", "../x", "a b"] {
        let err = p
            .call("agent.create", None, json!({"name": bad}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{bad}");
    }
    let err = p.call("agent.create", None, json!({})).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest));

    // The file store is unreachable: refused as unavailable, nothing registered or made.
    let err = p
        .call("agent.create", None, json!({"name": "a"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Unavailable), "{err}");
    assert!(err.to_string().contains("store.agent.create"), "{err}");
    assert!(!layout.agent_home("a").exists());
    assert!(!layout.data(NAME).join("agents.json").exists());
    assert_eq!(
        p.call("agent.list", None, json!({})).await.unwrap(),
        json!({"agents": []})
    );
    p.stop().await;

    // A registry written by an earlier run is served after a restart.
    std::fs::write(
        layout.data(NAME).join("agents.json"),
        r#"{"agents": [{"id": "old", "name": "old", "created_unix_ms": 1}]}"#,
    )
    .unwrap();
    let p = Plugin::start(&layout).await;
    let got = p.call("agent.get", Some("old"), json!({})).await.unwrap();
    assert_eq!(
        got,
        json!({
            "id": "old",
            "name": "old",
            "workspace": layout.agent_workspace("old"),
            "home": layout.agent_home("old"),
        })
    );
    let err = p
        .call("agent.create", None, json!({"name": "old"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Conflict));
    p.stop().await;
}
