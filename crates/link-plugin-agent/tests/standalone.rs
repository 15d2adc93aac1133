//! The agent plugin as a real process with no router running: everything that does not need
//! another plugin works, and a create that needs the file store fails cleanly, leaving
//! nothing behind. The full flow runs in `runtime.rs` under a real `link up`.

use link_harness_conformance::plugin_process::PluginProcess;
use link_protocol::plugin::{Mode, Profile};
use link_protocol::ErrorCode;
use serde_json::json;

const NAME: &str = "link-plugin-agent";

fn start() -> PluginProcess {
    let p = PluginProcess::start(
        env!("CARGO_BIN_EXE_link-plugin-agent"),
        NAME,
        Profile::Link,
        Mode::Diagnostic,
        &[],
    );
    assert!(p.ready_line().starts_with("ready "), "{:?}", p.ready_line());
    p
}

#[tokio::test]
async fn works_alone_and_fails_cleanly_without_the_router() {
    let mut p = start();
    let layout = p.layout().clone();

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
    // A model other than link-local is checked with the model service, which is not running.
    let err = p
        .call("agent.create", None, json!({"name": "a", "model": "gpt-x"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Unavailable), "{err}");
    assert!(err.to_string().contains("link-plugin-model"), "{err}");

    // The file store is unreachable: refused as unavailable, nothing registered or made.
    let err = p
        .call("agent.create", None, json!({"name": "a"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Unavailable), "{err}");
    assert!(err.to_string().contains("store.agent.create"), "{err}");
    assert!(!layout.agent_home("a").exists());
    assert!(!layout.data(NAME).join("agents").exists());
    assert_eq!(
        p.call("agent.list", None, json!({})).await.unwrap(),
        json!({"agents": []})
    );
    p.kill();

    // The registry of an older runtime (one `agents.json`) is migrated and served.
    std::fs::write(
        layout.data(NAME).join("agents.json"),
        r#"{"agents": [{"id": "old", "name": "old", "created_unix_ms": 1}]}"#,
    )
    .unwrap();
    p.restart();
    assert!(p.ready_line().starts_with("ready "), "{:?}", p.ready_line());
    let got = p.call("agent.get", Some("old"), json!({})).await.unwrap();
    assert_eq!(
        got,
        json!({
            "id": "old",
            "name": "old",
            // Stored before agents had a model: the runtime's default.
            "model": "link-local",
            "workspace": layout.agent_workspace("old"),
            "home": layout.agent_home("old"),
        })
    );
    assert!(layout.data(NAME).join("agents/old.json").is_file());
    assert!(layout.data(NAME).join("agents.json.migrated").is_file());
    let err = p
        .call("agent.create", None, json!({"name": "old"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Conflict));
    p.kill();
}
