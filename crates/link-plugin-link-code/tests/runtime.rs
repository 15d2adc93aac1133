//! The code tool inside a real full Link runtime, driven by turns of the `link-local` model
//! (`search PAT`, `patch P: OLD => NEW`), in both modes (the code tool is offered in
//! diagnostic mode too); the files are put into the workspace by hand. Skipped, loudly,
//! while the runtime cannot start; see the kit's
//! `runtime_process::up_or_skip`.

use link_harness_conformance::runtime_process;
use link_protocol::plugin::Mode;
use serde_json::Value;

fn call(reply: &Value) -> &Value {
    let calls = reply["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 1, "{reply}");
    &calls[0]
}

#[test]
fn search_and_patch_through_turns_diagnostic() {
    search_and_patch(Mode::Diagnostic);
}

#[test]
fn search_and_patch_through_turns_confined() {
    search_and_patch(Mode::Confined);
}

fn search_and_patch(mode: Mode) {
    let Some(mut rt) = runtime_process::up_or_skip(mode) else {
        return;
    };
    rt.create_agent("a");
    rt.create_agent("b");
    let ws = rt.layout().agent_workspace("a");
    std::fs::create_dir_all(ws.join("src/deep")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {\n    run();\n}\n").unwrap();
    std::fs::write(
        ws.join("src/deep/lib.rs"),
        "pub fn run() {}\nfn helper() {}\n",
    )
    .unwrap();
    std::fs::write(
        rt.layout().agent_workspace("b").join("other.rs"),
        "fn secret() {}\n",
    )
    .unwrap();

    let c = rt.turn("a", r"search fn \w+");
    assert_eq!(call(&c)["tool"], "code");
    assert_eq!(call(&c)["ok"], true, "{c}");
    let out = &call(&c)["output"];
    let found: Vec<(String, u64)> = out["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().to_owned(),
                m["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("src/deep/lib.rs".to_owned(), 1),
            ("src/deep/lib.rs".to_owned(), 2),
            ("src/main.rs".to_owned(), 1)
        ],
        "{out}"
    );
    assert_eq!(out["truncated"], false);

    let c = rt.turn("a", "patch src/main.rs: run() => start()");
    assert_eq!(call(&c)["ok"], true, "{c}");
    assert_eq!(
        std::fs::read_to_string(ws.join("src/main.rs")).unwrap(),
        "fn main() {\n    start();\n}\n"
    );
    let c = rt.turn("a", "patch src/main.rs: missing => x");
    assert_eq!(call(&c)["ok"], false, "{c}");
    assert!(
        call(&c)["output"].to_string().contains("found 0 times"),
        "{c}"
    );
    let up = rt
        .layout()
        .seen_from_workspace("a", &rt.layout().agent_conversation("a"));
    let c = rt.turn("a", &format!("patch {up}: user => admin"));
    assert_eq!(call(&c)["ok"], false, "{c}");
    assert!(call(&c)["output"].to_string().contains("protected"), "{c}");
    rt.down();
}
