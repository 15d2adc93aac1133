//! What a client is told matches what is stored: a turn sent again with the
//! `Idempotency-Key` of one already stored is answered from what was stored and not run
//! again (Mini and full Link); a turn whose store did not answer in time is answered 504
//! and not stored later (full Link: the store does not start what reaches it after the
//! router gave up), and sending it again with its key runs it once.

use crate::deadlines::{about_the_deadline, Stopped, DEADLINE};
use crate::support::{self, state_root};
use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::reaper::wait_until;
use link_harness_conformance::runtime_process::RuntimeProcess;
use link_protocol::routes::programs;
use serde_json::Value;
use std::time::{Duration, Instant};

/// `profile` confined, with test hooks and the default deadline cut to [`DEADLINE`].
fn up(root: &StateRoot, profile: &str) -> RuntimeProcess {
    support::spec(profile, support::MODE)
        .env("LNK_TEST_DEADLINE_MS", &DEADLINE.as_millis().to_string())
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"))
}

/// How many user entries of `conversation` are `message`.
fn holding(conversation: &[Value], message: &str) -> usize {
    conversation
        .iter()
        .filter(|e| e["role"] == "user" && e["content"] == message)
        .count()
}

fn a_turn_sent_again_with_its_key_is_answered_from_the_first(profile: &str) {
    let root = state_root();
    let mut rt = up(&root, profile);
    rt.create_agent("a");

    let (status, first) = rt.turn_keyed("a", "hello there", "k-1");
    assert_eq!(status, 200, "{first}");
    let stored = rt.conversation("a");
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[0]["idempotency_key"], "k-1", "{stored:?}");

    // Sent again (a client that lost the answer): the same answer, nothing stored again.
    let (status, again) = rt.turn_keyed("a", "hello there", "k-1");
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, first);
    // In the IETF draft's quoted form too.
    let (status, quoted) = rt.turn_keyed("a", "hello there", "\"k-1\"");
    assert_eq!(status, 200, "{quoted}");
    assert_eq!(quoted, first);
    assert_eq!(rt.conversation("a"), stored);

    // The twins: another key runs the same message again; so does a message without a key.
    let (status, other) = rt.turn_keyed("a", "hello there", "k-2");
    assert_eq!(status, 200, "{other}");
    rt.turn("a", "hello there");
    assert_eq!(holding(&rt.conversation("a"), "hello there"), 3);

    // A key used for another message is refused, naming it; nothing is stored.
    let before = rt.conversation("a");
    let (status, body) = rt.turn_keyed("a", "something else", "k-1");
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"k-1\"") && message.contains("another message"),
        "{message}"
    );
    // A key that breaks the rule is refused before anything runs.
    let long = "k".repeat(256);
    for bad in [long.as_str(), "tab\tkey"] {
        let (status, body) = rt.turn_keyed("a", "hello there", bad);
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("idempotency-key") && message.contains("255"),
            "{message}"
        );
    }
    assert_eq!(rt.conversation("a"), before);

    // `link turn --idempotency-key` sends it: the stored turn's answer, nothing run again;
    // a key that breaks the rule is refused before anything is sent.
    let cli = |key: &str| {
        support::link(
            &[
                "turn",
                "a",
                "hello there",
                "--idempotency-key",
                key,
                "--state",
            ],
            root.path(),
        )
        .env("LNK_TOKEN", rt.token())
        .output()
        .expect("running link")
    };
    let out = cli("k-1");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap(), first);
    let out = cli("");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Idempotency-Key"));
    assert_eq!(rt.conversation("a"), before);
    rt.down();
}

#[test]
fn mini_a_turn_sent_again_with_its_key_is_answered_from_the_first() {
    a_turn_sent_again_with_its_key_is_answered_from_the_first("mini");
}

#[test]
fn full_link_a_turn_sent_again_with_its_key_is_answered_from_the_first() {
    a_turn_sent_again_with_its_key_is_answered_from_the_first("link");
}

/// A turn whose tool acted: sent again with its key, the first answer with its tool calls,
/// and the command did not run a second time (its effect is in the workspace once).
#[test]
fn full_link_a_tool_turn_sent_again_with_its_key_does_not_run_its_tools_again() {
    let root = state_root();
    let mut rt = up(&root, "link");
    let agent = rt.create_agent("t");
    let workspace = std::path::PathBuf::from(agent["workspace"].as_str().expect("a workspace"));
    let count = || std::fs::read_to_string(workspace.join("count.txt")).unwrap_or_default();

    let message = "run: echo once >> count.txt";
    let (status, first) = rt.turn_keyed("t", message, "tool-1");
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["tool_calls"][0]["tool"], "run", "{first}");
    assert_eq!(first["tool_calls"][0]["ok"], true, "{first}");
    assert_eq!(count(), "once\n");

    let (status, again) = rt.turn_keyed("t", message, "tool-1");
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, first);
    assert_eq!(count(), "once\n", "the command ran again");

    // The twin: a new key runs it.
    let (status, twin) = rt.turn_keyed("t", message, "tool-2");
    assert_eq!(status, 200, "{twin}");
    assert_eq!(count(), "once\nonce\n");
    rt.down();
}

/// The file store stopped (SIGSTOP) past the deadline while a turn appends: the client gets
/// 504 saying how to learn the outcome; continued, the store refuses the append that reached
/// it too late, so the turn is not stored behind the client's back; sent again with its key,
/// the turn runs once and is stored once, and a third send is answered from it.
#[test]
fn full_link_a_turn_answered_504_is_not_stored_later_and_its_retry_runs_once() {
    let root = state_root();
    let mut rt = up(&root, "link");
    rt.create_agent("s");
    rt.turn("s", "before the stop");
    let before = rt.conversation("s");
    let store = rt.plugin_pid(programs::FILE_STORE);
    let log = rt.layout().log_file(programs::FILE_STORE);
    let late = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("store.conversation.append arrived after its deadline")
    };
    assert!(!late());

    let stopped = Stopped::new(store);
    let started = Instant::now();
    let (status, body) = rt.turn_keyed("s", "held in the stop", "late-1");
    let took = started.elapsed();
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"]["code"], "timeout", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(programs::FILE_STORE) && message.contains("same Idempotency-Key"),
        "{message}"
    );
    about_the_deadline(took);

    drop(stopped);
    assert!(
        wait_until(Duration::from_secs(30), late),
        "the continued store never refused the late append; its log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(
        rt.conversation("s"),
        before,
        "the turn answered 504 was stored after all"
    );

    let (status, first) = rt.turn_keyed("s", "held in the stop", "late-1");
    assert_eq!(status, 200, "{first}");
    let (status, again) = rt.turn_keyed("s", "held in the stop", "late-1");
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, first);
    let after = rt.conversation("s");
    assert_eq!(after.len(), before.len() + 2, "{after:?}");
    assert_eq!(holding(&after, "held in the stop"), 1, "{after:?}");
    rt.down();
}
