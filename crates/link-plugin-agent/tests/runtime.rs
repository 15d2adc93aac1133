//! The agent registry inside a real full Link runtime, through the HTTP endpoint. Skipped,
//! loudly, while the runtime cannot start; see the file store's `tests/support/runtime.rs`.

#[path = "../../link-plugin-file-store/tests/support/runtime.rs"]
mod support;

use serde_json::json;
use support::Runtime;

#[tokio::test]
async fn agents_are_created_isolated_and_survive_a_restart() {
    let Some(mut rt) = Runtime::up("agent-rt", "diagnostic").await else {
        return;
    };
    for name in ["a", "b"] {
        let made = rt.create_agent(name).await;
        assert_eq!(made["id"], name, "{made}");
        let layout = &rt.layout;
        assert!(layout.agent_workspace(name).is_dir());
        assert_eq!(std::fs::read(layout.agent_conversation(name)).unwrap(), b"");
        for sub in [".config", ".cache", ".local/share"] {
            assert!(
                layout.agent_home(name).join(sub).is_dir(),
                "{name} home {sub}"
            );
        }
    }
    let (status, body) = rt
        .http("POST", "/v1/agents", Some(json!({"name": "a"})))
        .await;
    assert_eq!(status, 409, "{body}");
    for bad in ["Bad", "../x", "", "a b"] {
        let (status, body) = rt
            .http("POST", "/v1/agents", Some(json!({"name": bad})))
            .await;
        assert_eq!(status, 400, "{bad:?}: {body}");
    }
    let (status, got) = rt.http("GET", "/v1/agents/a", None).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(
        (got["id"].as_str(), got["name"].as_str()),
        (Some("a"), Some("a"))
    );
    let (status, _) = rt.http("GET", "/v1/agents/nobody", None).await;
    assert_eq!(status, 404);

    let registry = rt.layout.data("link-plugin-agent").join("agents.json");
    let text = std::fs::read_to_string(&registry).unwrap();
    assert!(text.contains("\"a\"") && text.contains("\"b\""), "{text}");

    rt.restart().await;
    let (status, got) = rt.http("GET", "/v1/agents/b", None).await;
    assert_eq!(status, 200, "{got}");
    let (status, _) = rt
        .http("POST", "/v1/agents", Some(json!({"name": "b"})))
        .await;
    assert_eq!(status, 409, "still registered after a restart");
    rt.down().await;
}
