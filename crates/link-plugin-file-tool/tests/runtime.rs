//! The file tool inside a real full Link runtime, driven by turns of the `link-local` model
//! (`write P: TEXT`, `read P`, `list`). Skipped, loudly, while the runtime (or confinement)
//! is not available; see the file store's `tests/support/runtime.rs`.

#[path = "../../link-plugin-file-store/tests/support/runtime.rs"]
mod support;

use serde_json::Value;
use support::Runtime;

/// The one tool call of a turn.
fn call(reply: &Value) -> &Value {
    let calls = reply["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 1, "{reply}");
    &calls[0]
}

#[tokio::test]
async fn files_through_turns_stay_in_each_workspace() {
    let Some(mut rt) = Runtime::up("ftool-rt", "confined").await else {
        return;
    };
    rt.create_agent("a").await;
    rt.create_agent("b").await;
    let c = rt.turn("a", "write notes/a.txt: hello").await;
    assert_eq!(call(&c)["tool"], "file");
    assert_eq!(call(&c)["ok"], true, "{c}");
    let on_disk = rt.layout.agent_workspace("a").join("notes/a.txt");
    assert_eq!(std::fs::read_to_string(on_disk).unwrap(), "hello");
    let c = rt.turn("b", "write notes/a.txt: from b").await;
    assert_eq!(call(&c)["ok"], true, "{c}");

    let c = rt.turn("a", "read notes/a.txt").await;
    assert_eq!(call(&c)["ok"], true, "{c}");
    assert!(call(&c)["output"].to_string().contains("hello"), "{c}");
    let c = rt.turn("b", "read notes/a.txt").await;
    assert!(call(&c)["output"].to_string().contains("from b"), "{c}");
    let c = rt.turn("a", "list notes").await;
    assert!(call(&c)["output"].to_string().contains("a.txt"), "{c}");

    // The conversation is out of the tool's reach, whatever the path says.
    let log = rt.layout.agent_conversation("a");
    for (message, code) in [
        ("write ../conversation.jsonl: forged", "protected"),
        ("read ../conversation.jsonl", "protected"),
        ("write /etc/passwd: forged", "forbidden"),
        ("write ../../b/workspace/x: forged", "forbidden"),
    ] {
        let c = rt.turn("a", message).await;
        assert_eq!(call(&c)["ok"], false, "{message}: {c}");
        let out = call(&c)["output"].to_string();
        assert!(out.contains(code), "{message}: {out}");
    }
    // Symlinks made by a command in the sandbox do not lead the tool out either.
    let c = rt
        .turn(
            "a",
            "run: ln -s ../conversation.jsonl conv && ln -s /etc/passwd pw",
        )
        .await;
    assert_eq!(call(&c)["ok"], true, "{c}");
    assert!(std::fs::symlink_metadata(rt.layout.agent_workspace("a").join("conv")).is_ok());
    for (message, code) in [
        ("read conv", "protected"),
        ("write conv: forged", "protected"),
        ("read pw", "forbidden"),
    ] {
        let c = rt.turn("a", message).await;
        assert_eq!(call(&c)["ok"], false, "{message}: {c}");
        let out = call(&c)["output"].to_string();
        assert!(out.contains(code), "{message}: {out}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line).expect("every line is an entry");
        assert!(entry["role"].is_string(), "{line}");
    }
    assert!(!text.lines().any(|l| l == "forged"));
    assert!(!rt.layout.agent_workspace("b").join("x").exists());
    rt.down().await;
}

#[tokio::test]
async fn diagnostic_mode_has_no_file_tool() {
    let Some(mut rt) = Runtime::up("ftool-diag", "diagnostic").await else {
        return;
    };
    rt.create_agent("a").await;
    // The harness does not even offer the tool, and nothing is written.
    let c = rt.turn("a", "write a.txt: hello").await;
    let calls = c["tool_calls"].as_array().unwrap();
    assert!(calls.iter().all(|t| t["ok"] == false), "{c}");
    assert!(c["reply"].to_string().contains("not available"), "{c}");
    assert!(!rt.layout.agent_workspace("a").join("a.txt").exists());
    rt.down().await;
}
