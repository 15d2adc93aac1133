//! The file tool inside a real full Link runtime, driven by turns of the `link-local` model
//! (`write P: TEXT`, `read P`, `list`). Skipped, loudly, while the runtime (or confinement)
//! is not available; see the kit's
//! `runtime_process::up_or_skip`.

use link_harness_conformance::runtime_process;
use link_protocol::plugin::Mode;
use serde_json::Value;

/// The one tool call of a turn.
fn call(reply: &Value) -> &Value {
    let calls = reply["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 1, "{reply}");
    &calls[0]
}

#[test]
fn files_through_turns_stay_in_each_workspace() {
    let Some(mut rt) = runtime_process::up_or_skip(Mode::Confined) else {
        return;
    };
    rt.create_agent("a");
    rt.create_agent("b");
    let c = rt.turn("a", "write notes/a.txt: hello");
    assert_eq!(call(&c)["tool"], "file");
    assert_eq!(call(&c)["ok"], true, "{c}");
    let on_disk = rt.layout().agent_workspace("a").join("notes/a.txt");
    assert_eq!(std::fs::read_to_string(on_disk).unwrap(), "hello");
    let c = rt.turn("b", "write notes/a.txt: from b");
    assert_eq!(call(&c)["ok"], true, "{c}");

    let c = rt.turn("a", "read notes/a.txt");
    assert_eq!(call(&c)["ok"], true, "{c}");
    assert!(call(&c)["output"].to_string().contains("hello"), "{c}");
    let c = rt.turn("b", "read notes/a.txt");
    assert!(call(&c)["output"].to_string().contains("from b"), "{c}");
    let c = rt.turn("a", "list notes");
    assert!(call(&c)["output"].to_string().contains("a.txt"), "{c}");

    // The conversation is out of the tool's reach, whatever the path says.
    let log = rt.layout().agent_conversation("a");
    let up = rt.layout().seen_from_workspace("a", &log);
    for (message, code) in [
        (format!("write {up}: forged"), "protected"),
        (format!("read {up}"), "protected"),
        ("write /etc/passwd: forged".into(), "forbidden"),
        ("write ../b/x: forged".into(), "forbidden"),
    ] {
        let c = rt.turn("a", &message);
        assert_eq!(call(&c)["ok"], false, "{message}: {c}");
        let out = call(&c)["output"].to_string();
        assert!(out.contains(code), "{message}: {out}");
    }
    // Symlinks made by a command in the sandbox do not lead the tool out either.
    let c = rt.turn(
        "a",
        &format!("run: ln -s {up} conv && ln -s /etc/passwd pw"),
    );
    assert_eq!(call(&c)["ok"], true, "{c}");
    assert!(std::fs::symlink_metadata(rt.layout().agent_workspace("a").join("conv")).is_ok());
    for (message, code) in [
        ("read conv", "protected"),
        ("write conv: forged", "protected"),
        ("read pw", "forbidden"),
    ] {
        let c = rt.turn("a", message);
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
    assert!(!rt.layout().agent_workspace("b").join("x").exists());
    rt.down();
}

#[test]
fn diagnostic_mode_has_no_file_tool() {
    let Some(mut rt) = runtime_process::up_or_skip(Mode::Diagnostic) else {
        return;
    };
    rt.create_agent("a");
    // The harness does not even offer the tool, and nothing is written.
    let c = rt.turn("a", "write a.txt: hello");
    let calls = c["tool_calls"].as_array().unwrap();
    assert!(calls.iter().all(|t| t["ok"] == false), "{c}");
    assert!(c["reply"].to_string().contains("not available"), "{c}");
    assert!(!rt.layout().agent_workspace("a").join("a.txt").exists());
    rt.down();
}
