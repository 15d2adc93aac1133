//! The file store inside a real full Link runtime (diagnostic mode is enough: no protected
//! tool is needed). Skipped, loudly, while the runtime cannot start; see the kit's
//! `runtime_process::up_or_skip`.

use link_harness_conformance::runtime_process;
use link_protocol::plugin::Mode;
use serde_json::{json, Value};

fn entries(agent: &Value) -> Vec<Value> {
    agent["conversation"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn conversations_through_turns_and_a_torn_tail() {
    let Some(rt) = runtime_process::up_or_skip(Mode::Diagnostic) else {
        return;
    };
    rt.create_agent("a");
    let log = rt.layout().agent_conversation("a");
    assert_eq!(std::fs::read(&log).unwrap(), b"");

    rt.turn("a", "hello");
    let (status, agent) = rt.http("GET", "/v1/agents/a", None);
    assert_eq!(status, 200, "{agent}");
    let before = entries(&agent);
    assert!(before.len() >= 2, "{agent}");
    assert_eq!(before[0]["role"], "user");
    assert_eq!(before[0]["content"], "hello");
    assert!(
        agent.get("conversation_torn").is_none_or(Value::is_null),
        "{agent}"
    );

    // A crash mid-append, by hand: the endpoint reports it, the next turn repairs it.
    let intact = std::fs::read(&log).unwrap();
    let mut torn = intact.clone();
    torn.extend_from_slice(br#"{"role":"assistant","content":"cut sh"#);
    std::fs::write(&log, &torn).unwrap();
    let (_, agent) = rt.http("GET", "/v1/agents/a", None);
    assert_eq!(entries(&agent), before, "intact entries are all there");
    if agent.get("conversation_torn").is_some() {
        assert!(
            agent["conversation_torn"]
                .as_str()
                .unwrap()
                .contains("no newline"),
            "{agent}"
        );
    }
    // The harness has the store repair the log (an empty append) and asks for a resend.
    let (status, body) = rt.http(
        "POST",
        "/v1/agents/a/turns",
        Some(json!({"message": "lost"})),
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("torn"), "{body}");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        intact,
        "exactly the torn tail was cut"
    );
    rt.turn("a", "again");
    let after = std::fs::read(&log).unwrap();
    assert!(after.starts_with(&intact));
    assert!(!String::from_utf8_lossy(&after).contains("cut sh"));
    let (_, agent) = rt.http("GET", "/v1/agents/a", None);
    assert!(
        entries(&agent).iter().any(|e| e["content"] == "again"),
        "{agent}"
    );
    let repairs = log.with_file_name("conversation.repairs.jsonl");
    assert!(std::fs::read_to_string(repairs).unwrap().contains("cut sh"));

    // Only the harness may append: other plugins are refused by the router and the store.
    let now = std::fs::read(&log).unwrap();
    for plugin in [
        "link-plugin-file-tool",
        "link-plugin-link-code",
        "link-plugin-agent",
    ] {
        let got = rt.call_as(
            plugin,
            "store.conversation.append",
            "a",
            json!({"entries": [{"role": "user", "content": "forged"}]}),
        );
        assert_eq!(got["ok"], false, "{plugin}: {got}");
        assert_eq!(got["code"], "forbidden", "{plugin}: {got}");
    }
    assert_eq!(std::fs::read(&log).unwrap(), now, "the log is unchanged");
}
