//! The agent registry inside a real full Link runtime, through the HTTP endpoint. Skipped,
//! loudly, while the runtime cannot start; see the kit's
//! `runtime_process::up_or_skip`.

use link_harness_conformance::runtime_process;
use link_protocol::plugin::Mode;
use serde_json::json;

#[test]
fn agents_are_created_isolated_and_survive_a_restart() {
    let Some(mut rt) = runtime_process::up_or_skip(Mode::Diagnostic) else {
        return;
    };
    for name in ["a", "b"] {
        let made = rt.create_agent(name);
        assert_eq!(made["id"], name, "{made}");
        let layout = rt.layout();
        assert!(layout.agent_workspace(name).is_dir());
        assert_eq!(std::fs::read(layout.agent_conversation(name)).unwrap(), b"");
        for sub in [".config", ".cache", ".local/share"] {
            assert!(
                layout.agent_home(name).join(sub).is_dir(),
                "{name} home {sub}"
            );
        }
    }
    let (status, body) = rt.http("POST", "/v1/agents", Some(json!({"name": "a"})));
    assert_eq!(status, 409, "{body}");
    for bad in ["Bad", "../x", "", "a b"] {
        let (status, body) = rt.http("POST", "/v1/agents", Some(json!({"name": bad})));
        assert_eq!(status, 400, "{bad:?}: {body}");
    }
    let (status, got) = rt.http("GET", "/v1/agents/a", None);
    assert_eq!(status, 200, "{got}");
    assert_eq!(
        (got["id"].as_str(), got["name"].as_str()),
        (Some("a"), Some("a"))
    );
    let (status, _) = rt.http("GET", "/v1/agents/nobody", None);
    assert_eq!(status, 404);

    let registry = rt.layout().data("link-plugin-agent").join("agents.json");
    let text = std::fs::read_to_string(&registry).unwrap();
    assert!(text.contains("\"a\"") && text.contains("\"b\""), "{text}");

    rt.restart();
    let (status, got) = rt.http("GET", "/v1/agents/b", None);
    assert_eq!(status, 200, "{got}");
    let (status, _) = rt.http("POST", "/v1/agents", Some(json!({"name": "b"})));
    assert_eq!(status, 409, "still registered after a restart");
    rt.down();
}
