//! Fault injection: kill -9 of each plugin, between two turns and during one, in both
//! runtimes. Each time the host stops with a line naming the plugin, nothing it started is
//! left, `link up` on the same state starts again, and every acknowledged turn is still in
//! the conversation (a turn cut short by the kill may be missing; one that was answered 200
//! may not).

use crate::support::{self, state_root};
use link_harness_conformance::runtime_process::RuntimeProcess;
use serde_json::json;
use std::time::Duration;

/// Generous: the host notices a dead plugin at once; this only bounds a broken run.
const STOPS_WITHIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    BetweenTurns,
    /// A turn sent just before the kill, unsynchronised: the kill lands at whatever point the
    /// turn has reached (before the plugin, inside it, or after), which varies run to run.
    DuringATurn,
}

/// The user messages of the agent `k` that were answered, in order, checked against the
/// conversation after each restart.
struct Acknowledged(Vec<String>);

impl Acknowledged {
    fn turn(&mut self, rt: &RuntimeProcess, token: &str, message: String) {
        let resp = rt.post("/v1/agents/k/turns", token, json!({ "message": message }));
        assert_eq!(resp.status, 200, "{message}: {:?}", resp.json());
        self.0.push(message);
    }

    fn all_present(&self, rt: &RuntimeProcess, token: &str, after: &str) {
        let resp = rt.get("/v1/agents/k?limit=1000", Some(token));
        assert_eq!(resp.status, 200, "after {after}: {:?}", resp.json());
        let body = resp.json();
        let users: Vec<&str> = body["conversation"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["role"] == "user")
            .filter_map(|e| e["content"].as_str())
            .collect();
        for m in &self.0 {
            assert!(
                users.contains(&m.as_str()),
                "after {after}: the acknowledged turn {m:?} is missing from {users:?}"
            );
        }
    }
}

/// Kills `plugin` in `phase`; → whether the turn in flight (if any) was acknowledged.
fn kill_plugin(rt: &mut RuntimeProcess, token: &str, plugin: &str, phase: Phase) -> Option<String> {
    let started = rt.started_processes();
    let pid = rt.plugin_pid(plugin);
    let message = format!("in flight while {plugin} was killed");
    let in_flight = (phase == Phase::DuringATurn).then(|| {
        support::turn_in_thread(rt.layout().connection_socket(), token.to_owned(), &message)
    });
    support::kill(pid, 9);
    let status = rt.wait_timeout(STOPS_WITHIN);
    assert!(
        status.is_some(),
        "the host still runs {STOPS_WITHIN:?} after kill -9 of {plugin}: {}",
        rt.stderr()
    );
    assert!(
        rt.stderr().contains(plugin),
        "the host's output does not name {plugin}:\n{}",
        rt.stderr()
    );
    support::assert_gone(&started);
    let answered = in_flight
        .map(|t| t.join().expect("the turn thread"))
        .is_some_and(|r| r.is_ok_and(|resp| resp.status == 200));
    answered.then_some(message)
}

fn every_plugin_killed(profile: &str, mode: &str) {
    let root = state_root();
    let mut rt = support::up_in(&root, profile, mode);
    let token = rt.create_token();
    let created = rt.post("/v1/agents", &token, json!({ "name": "k" }));
    assert_eq!(created.status, 201, "{:?}", created.json());
    let plugins: Vec<String> = rt.plugin_pids().into_iter().map(|(n, _)| n).collect();
    let mut acked = Acknowledged(Vec::new());
    for plugin in &plugins {
        for phase in [Phase::BetweenTurns, Phase::DuringATurn] {
            let what = format!("kill -9 of {plugin} ({phase:?}, {profile})");
            acked.turn(&rt, &token, format!("before the {what}"));
            if let Some(answered) = kill_plugin(&mut rt, &token, plugin, phase) {
                acked.0.push(answered);
            }
            rt.start_again();
            acked.all_present(&rt, &token, &what);
            acked.turn(&rt, &token, format!("after the {what}"));
        }
    }
    eprintln!(
        "{profile}: {} plugins killed in 2 phases each; {} acknowledged turns, none lost",
        plugins.len(),
        acked.0.len()
    );
    rt.down();
}

#[test]
fn mini_survives_a_kill_of_each_plugin_without_losing_a_turn() {
    every_plugin_killed("mini", support::MODE);
}

#[test]
fn link_survives_a_kill_of_each_plugin_without_losing_a_turn() {
    every_plugin_killed("link", "diagnostic");
}
