//! The scheduler's grant is bound to the schedules it serves: a `turn.run` it makes through
//! the router passes only as a due firing of a schedule made for that agent and message,
//! once. Played with the scheduler's own identity (`host.debug_call`: the real scheduler
//! process makes the call through the router as itself, as a compromised one would), beside
//! its twin, the scheduler firing a real schedule on time.

use crate::support::{self, state_root};
use link_harness_conformance::reaper::wait_until;
use link_protocol::routes::{agent, programs, Route as _};
use serde_json::{json, Value};
use std::time::Duration;

/// `turn.run` for `agent` with `message`, made by the scheduler through the router.
fn scheduler_turn(
    rt: &link_harness_conformance::runtime_process::RuntimeProcess,
    agent: &str,
    message: &str,
) -> Value {
    rt.call_as(
        programs::SCHEDULER,
        agent::Turn::NAME,
        agent,
        json!({ "message": message }),
    )
}

/// Waits (at most 30 s) for the scheduler's turn of `agent` with `message` to be in its
/// conversation.
fn runs(
    rt: &link_harness_conformance::runtime_process::RuntimeProcess,
    agent: &str,
    message: &str,
) {
    let fired = || {
        rt.conversation(agent)
            .iter()
            .any(|e| e["role"] == "user" && e["content"] == message)
    };
    assert!(
        wait_until(Duration::from_secs(30), fired),
        "the scheduled turn {message:?} did not run: {:?}",
        rt.conversation(agent)
    );
}

/// Asserts the call was refused by the router with `why` in its message.
fn refused(got: &Value, why: &str) {
    assert_eq!(got["ok"], false, "{got}");
    assert_eq!(got["code"], "forbidden", "{got}");
    let message = got["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("due firing of a schedule") && message.contains(why),
        "{message}"
    );
}

#[test]
fn the_scheduler_runs_only_due_firings_of_its_agents_schedules() {
    let root = state_root();
    let mut rt = support::up(&root, "link");
    rt.create_agent("own");
    let victim = rt.create_agent("victim");
    let victim_workspace = std::path::PathBuf::from(victim["workspace"].as_str().unwrap());

    // An agent with no schedule: refused, nothing run or stored.
    let got = scheduler_turn(&rt, "victim", "write pwned.txt: x");
    refused(&got, "agent victim has no schedule");
    assert!(!victim_workspace.join("pwned.txt").exists());
    assert!(rt.conversation("victim").is_empty());

    // A schedule not due yet, and a message no schedule has: refused.
    rt.turn("own", "schedule 1h: much later");
    for message in ["much later", "write pwned.txt: x"] {
        let got = scheduler_turn(&rt, "own", message);
        refused(&got, "with that message is due");
    }

    // The twin: the scheduler fires a schedule at its time, and its turn runs.
    rt.turn("own", "schedule 1s: soon");
    runs(&rt, "own", "soon");
    // Once: the same firing again is refused.
    let got = scheduler_turn(&rt, "own", "soon");
    refused(&got, "with that message is due");

    // A schedule due at once fires the moment the scheduler has stored it, before the router
    // has read its answer: it was recorded before it was forwarded, so it runs.
    rt.turn("own", "schedule 0ms: at once");
    runs(&rt, "own", "at once");
    rt.down();
}
