//! A conversation log shorter than what its agent acknowledged — emptied, cut at a line
//! boundary or deleted while the runtime was down — is reported, never served as if complete,
//! in both runtimes: that agent answers 500 naming the log and its acknowledged count, every
//! other agent works, and the runtime starts. Removing the count, as the error says, accepts
//! the log as it is.

use crate::support;
use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::runtime_process::RuntimeProcess;
use serde_json::json;
use std::path::{Path, PathBuf};

fn turn(rt: &RuntimeProcess, token: &str, agent: &str, message: &str) -> (u16, String) {
    let resp = rt.post(
        &format!("/v1/agents/{agent}/turns"),
        token,
        json!({ "message": message }),
    );
    (
        resp.status,
        String::from_utf8_lossy(&resp.body).into_owned(),
    )
}

fn get(rt: &RuntimeProcess, token: &str, agent: &str) -> (u16, String) {
    let resp = rt.get(&format!("/v1/agents/{agent}"), Some(token));
    (
        resp.status,
        String::from_utf8_lossy(&resp.body).into_owned(),
    )
}

/// Keeps the first `lines` lines of the log at `path`.
fn keep_lines(path: &Path, lines: usize) {
    let bytes = std::fs::read(path).unwrap();
    let end = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(lines.wrapping_sub(1))
        .map_or(0, |(i, _)| i + 1);
    std::fs::write(path, &bytes[..end]).unwrap();
}

/// One profile: `log` is where that runtime keeps an agent's log.
fn shortened_logs(profile: &str, mode: &str, log: impl Fn(&StateRoot, &str) -> PathBuf) {
    let root = support::state_root();
    let mut rt = support::up_in(&root, profile, mode);
    let token = rt.create_token();
    let agents = ["emptied", "cut", "deleted", "whole"];
    for a in agents {
        let created = rt.post("/v1/agents", &token, json!({ "name": a }));
        assert_eq!(created.status, 201, "{:?}", created.json());
        for m in ["one", "two"] {
            let (status, body) = turn(&rt, &token, a, m);
            assert_eq!(status, 200, "{a}: {body}");
        }
    }
    rt.down();
    // Each turn acknowledged two entries: four in every log.
    keep_lines(&log(&root, "emptied"), 0);
    keep_lines(&log(&root, "cut"), 2);
    std::fs::remove_file(log(&root, "deleted")).unwrap();

    let mut rt = support::up_in(&root, profile, mode);
    for (a, found) in [("emptied", 0), ("cut", 2), ("deleted", 0)] {
        let shown = log(&root, a).display().to_string();
        let (status, body) = get(&rt, &token, a);
        assert_eq!(status, 500, "{profile} {a}: {body}");
        assert!(
            body.contains(&format!(
                "holds {found} intact entries, but 4 were acknowledged"
            )),
            "{profile} {a}: {body}"
        );
        assert!(body.contains(&shown), "{profile} {a}: {body}");
        let (status, body) = turn(&rt, &token, a, "three");
        assert_eq!(
            status, 500,
            "{profile} {a}: a turn on a shortened log: {body}"
        );
    }
    // The allowed twin: the untouched agent reads and turns in the same runtime.
    let (status, body) = get(&rt, &token, "whole");
    assert_eq!(status, 200, "{profile}: {body}");
    let (status, body) = turn(&rt, &token, "whole", "three");
    assert_eq!(status, 200, "{profile}: {body}");
    rt.down();
    assert_eq!(
        std::fs::read(log(&root, "cut"))
            .unwrap()
            .iter()
            .filter(|b| **b == b'\n')
            .count(),
        2,
        "{profile}: the refused turn wrote nothing"
    );

    // Removing the count accepts the cut log as it is, as the error says.
    let count = log(&root, "cut").with_file_name("conversation.acked");
    std::fs::remove_file(count).unwrap();
    let rt = support::up_in(&root, profile, mode);
    let (status, body) = get(&rt, &token, "cut");
    assert_eq!(status, 200, "{profile}: {body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["conversation_total"],
        2
    );
    let (status, body) = turn(&rt, &token, "cut", "three");
    assert_eq!(status, 200, "{profile}: {body}");
    drop(rt);
}

#[test]
fn mini_reports_a_log_shorter_than_acknowledged() {
    shortened_logs("mini", support::MODE, |root, agent| {
        root.path()
            .join("data/mini-harness/agents")
            .join(agent)
            .join("conversation.jsonl")
    });
}

#[test]
fn link_reports_a_log_shorter_than_acknowledged() {
    shortened_logs("link", "diagnostic", |root, agent| {
        link_protocol::layout::StateLayout::new(root.path()).agent_conversation(agent)
    });
}
