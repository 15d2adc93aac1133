//! The file tool as a real process with no router running: its own refusals happen before
//! any call leaves it; a valid request is forwarded and fails as `unavailable` because there
//! is no router. The full flow runs in `runtime.rs` under a real `link up`.

use link_harness_conformance::plugin_process::PluginProcess;
use link_protocol::plugin::{Mode, Profile};
use link_protocol::ErrorCode;
use serde_json::{json, Value};

const NAME: &str = "link-plugin-file-tool";

fn start(mode: Mode) -> PluginProcess {
    let exe = env!("CARGO_BIN_EXE_link-plugin-file-tool");
    let p = PluginProcess::start(exe, NAME, Profile::Link, mode, &[]);
    assert_eq!(p.ready_line().trim(), r#"ready {"routes":["tool.file"]}"#);
    p
}

/// The code a `tool.file` call for agent `a` from `caller` is refused with, and the message.
async fn refused(p: &PluginProcess, caller: Option<&str>, body: Value) -> (ErrorCode, String) {
    p.refusal(caller, "tool.file", Some("a"), body).await
}

const HARNESS: Option<&str> = Some("link-plugin-link-harness");

#[tokio::test]
async fn diagnostic_mode_disables_the_tool() {
    let p = start(Mode::Diagnostic);
    let (code, msg) = refused(&p, HARNESS, json!({"op": "read", "path": "a.txt"})).await;
    assert_eq!(code, ErrorCode::Unavailable);
    assert!(
        msg.contains("file tool disabled in diagnostic mode"),
        "{msg}"
    );
}

#[tokio::test]
async fn refuses_before_calling_the_store() {
    let p = start(Mode::Confined);
    let log = p.layout().agent_conversation("a");
    let (conv, up) = (
        log.display().to_string(),
        p.layout().seen_from_workspace("a", &log),
    );
    for (path, want) in [
        (up.as_str(), ErrorCode::Protected),
        (conv.as_str(), ErrorCode::Protected),
        ("../conversation.jsonl", ErrorCode::Forbidden),
        ("..", ErrorCode::Forbidden),
        ("../x", ErrorCode::Forbidden),
        ("/etc/passwd", ErrorCode::Forbidden),
        ("a/../../x", ErrorCode::Forbidden),
    ] {
        for op in ["read", "write", "list"] {
            let body = json!({"op": op, "path": path, "content": "x"});
            assert_eq!(refused(&p, HARNESS, body).await.0, want, "{op} {path}");
        }
    }
    let (code, _) = refused(&p, HARNESS, json!({"op": "delete", "path": "a"})).await;
    assert_eq!(code, ErrorCode::BadRequest);
    let (code, msg) = refused(
        &p,
        Some("link-plugin-link-run"),
        json!({"op": "read", "path": "a"}),
    )
    .await;
    assert_eq!(code, ErrorCode::Forbidden, "{msg}");

    // A valid request goes on to the router, which is not running here.
    let (code, msg) = refused(
        &p,
        HARNESS,
        json!({"op": "write", "path": "a.txt", "content": "x"}),
    )
    .await;
    assert_eq!(code, ErrorCode::Unavailable, "{msg}");
    assert!(!p.layout().agent_workspace("a").exists());
}
