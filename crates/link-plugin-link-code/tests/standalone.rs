//! The code tool as a real process with no router running: bad requests are refused before
//! any call leaves it; a valid one is forwarded and fails as `unavailable` because there is
//! no router. Search and patch on real files run in `runtime.rs` under a real `link up`.

use link_harness_conformance::plugin_process::PluginProcess;
use link_protocol::plugin::{Mode, Profile};
use link_protocol::ErrorCode;
use serde_json::{json, Value};

const NAME: &str = "link-plugin-link-code";
const HARNESS: Option<&str> = Some("link-plugin-link-harness");

fn start() -> PluginProcess {
    let exe = env!("CARGO_BIN_EXE_link-plugin-link-code");
    let p = PluginProcess::start(exe, NAME, Profile::Link, Mode::Diagnostic, &[]);
    assert_eq!(p.ready_line().trim(), r#"ready {"routes":["tool.code"]}"#);
    p
}

/// The code a `tool.code` call for agent `a` from `caller` is refused with, and the message.
async fn refused(p: &PluginProcess, caller: Option<&str>, body: Value) -> (ErrorCode, String) {
    p.refusal(caller, "tool.code", Some("a"), body).await
}

#[tokio::test]
async fn refuses_bad_requests_and_needs_the_router() {
    let p = start();
    for body in [
        json!({"op": "search"}),
        json!({"op": "search", "pattern": "("}),
        json!({"op": "search", "pattern": ""}),
        json!({"op": "patch", "path": "a"}),
        json!({"op": "delete"}),
        json!({}),
    ] {
        assert_eq!(
            refused(&p, HARNESS, body.clone()).await.0,
            ErrorCode::BadRequest,
            "{body}"
        );
    }
    let (code, _) = refused(
        &p,
        Some("link-plugin-file-tool"),
        json!({"op": "search", "pattern": "x"}),
    )
    .await;
    assert_eq!(code, ErrorCode::Forbidden);
    let (code, msg) = refused(&p, HARNESS, json!({"op": "search", "pattern": "x"})).await;
    assert_eq!(code, ErrorCode::Unavailable, "{msg}");
    let (code, msg) = refused(
        &p,
        HARNESS,
        json!({"op": "patch", "path": "a", "old": "x", "new": "y"}),
    )
    .await;
    assert_eq!(code, ErrorCode::Unavailable, "{msg}");
}
