//! The agent registry inside a real full Link runtime, through the HTTP endpoint. Skipped,
//! loudly, while the runtime cannot start; see the kit's
//! `runtime_process::up_or_skip`.

use link_harness_conformance::runtime_process;
use link_protocol::plugin::Mode;
use serde_json::json;
use std::path::Path;

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

    let records = rt.layout().data("link-plugin-agent").join("agents");
    for name in ["a", "b"] {
        let text = std::fs::read_to_string(records.join(format!("{name}.json"))).unwrap();
        assert!(text.contains(&format!("\"{name}\"")), "{text}");
    }

    rt.restart();
    let (status, got) = rt.http("GET", "/v1/agents/b", None);
    assert_eq!(status, 200, "{got}");
    let (status, _) = rt.http("POST", "/v1/agents", Some(json!({"name": "b"})));
    assert_eq!(status, 409, "still registered after a restart");
    rt.down();
}

/// The answer to a request of a damaged agent: 500, naming the agent, the file and what to do.
fn assert_damaged(rt: &runtime_process::RuntimeProcess, agent: &str, file: &Path) {
    let (status, body) = rt.http("GET", &format!("/v1/agents/{agent}"), None);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(status, 500, "{body}");
    assert!(
        message.contains(&format!("agent {agent} is damaged"))
            && message.contains(&file.display().to_string())
            && message.contains("restart"),
        "{body}"
    );
    let path = format!("/v1/agents/{agent}/turns");
    let (status, body) = rt.http("POST", &path, Some(json!({"message": "hi"})));
    assert_eq!(status, 500, "a turn of damaged {agent}: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&file.display().to_string()),
        "{body}"
    );
    // Creating it again is refused and rewrites nothing.
    let (status, body) = rt.http("POST", "/v1/agents", Some(json!({"name": agent})));
    assert_eq!(status, 409, "{body}");
}

/// The other agents still work: get, turn, list, and a new one is created and runs.
fn assert_others_work(rt: &runtime_process::RuntimeProcess, others: &[&str], new: &str) {
    for agent in others {
        let (status, body) = rt.http("GET", &format!("/v1/agents/{agent}"), None);
        assert_eq!(status, 200, "{agent}: {body}");
        rt.turn(agent, "hello");
    }
    rt.create_agent(new);
    rt.turn(new, "hello");
    let (status, body) = rt.http("GET", "/v1/agents", None);
    assert_eq!(status, 200, "{body}");
    let listed: Vec<_> = body["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    for agent in others.iter().chain([&new]) {
        assert!(listed.iter().any(|l| l == agent), "{agent} in {body}");
    }
}

/// Issue 43: a damaged registry never stops full Link from starting. The registry of an older
/// runtime (`agents.json`) with one unreadable entry, then cut mid-JSON, then an agent's own
/// record file of garbage bytes: after each `link up` succeeds, the damaged agent answers 500
/// naming the file and what to do, the others keep working, and the damaged bytes stay on disk.
#[test]
fn damage_to_the_registry_stays_with_its_agent() {
    let Some(mut rt) = runtime_process::up_or_skip(Mode::Confined) else {
        return;
    };
    for name in ["a", "b", "c"] {
        rt.create_agent(name);
        rt.turn(name, "hello");
    }
    rt.down();
    let data = rt.layout().data("link-plugin-agent");
    let legacy = data.join("agents.json");
    let records = data.join("agents");

    // An older runtime's registry, b's entry unreadable (a number for a name).
    let _ = std::fs::remove_dir_all(&records);
    let bad_entry = br#"{"agents": [
  {"id": "a", "name": "a", "created_unix_ms": 1},
  {"id": "b", "name": 7, "created_unix_ms": 2},
  {"id": "c", "name": "c", "created_unix_ms": 3}
]}
"#;
    std::fs::write(&legacy, bad_entry).unwrap();
    rt.start_again();
    assert_damaged(&rt, "b", &legacy);
    assert_others_work(&rt, &["a", "c"], "d");
    assert_eq!(std::fs::read(&legacy).unwrap(), bad_entry, "kept as it was");
    rt.down();

    // The whole file cut mid-JSON, then bytes that are not UTF-8: the agents it held that
    // have no record of their own yet are damaged, the runtime starts.
    for damage in [&bad_entry[..40], b"\xff\xfe{\"agents\": [\x80".as_slice()] {
        std::fs::write(&legacy, damage).unwrap();
        rt.start_again();
        assert_damaged(&rt, "b", &legacy);
        assert_others_work(&rt, &["a", "c", "d"], &format!("e{}", damage.len()));
        assert_eq!(std::fs::read(&legacy).unwrap(), damage, "kept as it was");
        rt.down();
    }

    // One agent's own record file, garbage.
    let c = records.join("c.json");
    let garbage = b"\x00\x01not json\xff";
    std::fs::write(&c, garbage).unwrap();
    rt.start_again();
    assert_damaged(&rt, "c", &c);
    assert_damaged(&rt, "b", &legacy);
    assert_others_work(&rt, &["a", "d"], "f");
    assert_eq!(std::fs::read(&c).unwrap(), garbage, "kept as it was");

    // A record put there while the runtime runs is not written over by a create.
    let late = records.join("late.json");
    std::fs::write(&late, garbage).unwrap();
    let (status, body) = rt.http("POST", "/v1/agents", Some(json!({"name": "late"})));
    assert_eq!(status, 409, "{body}");
    assert_eq!(std::fs::read(&late).unwrap(), garbage, "kept as it was");
    rt.down();
}
