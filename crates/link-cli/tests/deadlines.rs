//! Every routed call and every model call has a deadline: a stopped plugin (SIGSTOP) costs
//! the calls that need it a `timeout` (504) naming it, shows `unresponsive` in the host's
//! status until it answers again (a routed plugin: the model is reached outside the router),
//! and stalls nothing else. The blame falls on the plugin that did not answer, not on one
//! that was waiting for it.

use crate::support::state_root;
use link_harness_conformance::runtime_process::{self, RuntimeProcess, RuntimeSpec};

use link_protocol::routes::{host, programs, Route as _};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// The default deadline under test (`LNK_TEST_DEADLINE_MS`, honoured with test hooks only).
pub const DEADLINE: Duration = Duration::from_millis(3000);

/// Sends `signal` (a name: STOP, CONT) to `pid`.
fn signal(pid: i32, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success())
}

/// A plugin stopped with SIGSTOP; continued (SIGCONT) on drop, so a failing test leaves
/// nothing stopped.
pub struct Stopped(i32);

impl Stopped {
    pub fn new(pid: i32) -> Stopped {
        assert!(signal(pid, "STOP"), "cannot stop {pid}");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// Full Link, diagnostic mode, test hooks on, the default deadline cut to [`DEADLINE`].
fn up(root: &link_harness_conformance::fixture::StateRoot) -> RuntimeProcess {
    up_as(root, "link")
}

/// [`up`] in `profile` (`mini`, `link`).
pub fn up_as(root: &link_harness_conformance::fixture::StateRoot, profile: &str) -> RuntimeProcess {
    let spec = RuntimeSpec::new(
        runtime_process::test_programs(),
        profile.parse().unwrap(),
        "diagnostic".parse().unwrap(),
    )
    .with_test_hooks()
    .env("LNK_TEST_DEADLINE_MS", &DEADLINE.as_millis().to_string());
    spec.up_in(root.path()).unwrap_or_else(|f| panic!("{f}"))
}

/// Asserts that `took` is about [`DEADLINE`]: not before it, and generously after it (a slow
/// machine is no failure).
pub fn about_the_deadline(took: Duration) {
    assert!(
        took >= DEADLINE - Duration::from_millis(100) && took < DEADLINE + Duration::from_secs(15),
        "answered after {took:?}; the deadline is {DEADLINE:?}"
    );
}

/// `POST path` with `body` and `rt`'s token → (status, JSON, time taken). The test fails if no
/// answer comes within [`DEADLINE`] and a generous while more, rather than hang on a runtime
/// that waits without end.
fn post_timed(rt: &RuntimeProcess, path: &str, body: Value) -> (u16, Value, Duration) {
    let socket = rt.layout().connection_socket();
    let (token, path) = (rt.token().to_owned(), path.to_owned());
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let resp = runtime_process::block_on(|| {
            link_protocol::http::json(&socket, "POST", &path, Some(&token), Some(&body))
        });
        let _ = tx.send((resp, started.elapsed()));
    });
    let (resp, took) = rx
        .recv_timeout(DEADLINE + Duration::from_secs(60))
        .expect("no answer long after the deadline: the call waits without one");
    let resp = resp.expect("the request must be answered, not dropped");
    (resp.status, resp.json(), took)
}

/// `plugin`'s state in a host status.
fn state_of<'a>(status: &'a Value, plugin: &str) -> &'a str {
    status["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .find(|p| p["name"] == plugin)
        .and_then(|p| p["state"].as_str())
        .unwrap_or_else(|| panic!("no {plugin} in {status}"))
}

#[test]
fn a_stopped_plugin_times_out_its_routes_is_marked_unresponsive_and_recovers() {
    let victim = "link-plugin-agent";
    let root = state_root();
    let mut rt = up(&root);
    let token = rt.create_token();
    assert_eq!(rt.get("/v1/agents", Some(&token)).status, 200);
    let pid = rt.plugin_pid(victim);
    let stopped = Stopped::new(pid);

    // GET /v1/agents needs agent.list → the agent plugin; it is held in a thread while the
    // status, which does not need the agent, answers meanwhile.
    let socket = root.path().join("run/connection.sock");
    let started = Instant::now();
    let stuck = std::thread::spawn({
        let token = token.clone();
        move || {
            let resp = runtime_process::block_on(|| {
                link_protocol::http::request(&socket, "GET", "/v1/agents", Some(&token), None)
            })
            .expect("GET /v1/agents must be answered, not dropped");
            (resp, started.elapsed())
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let status = rt.get("/v1/status", Some(&token));
    assert_eq!(status.status, 200, "{:?}", status.json());
    assert!(
        !stuck.is_finished(),
        "the status must answer while the agent's call waits for its deadline"
    );

    let (resp, took) = stuck.join().unwrap();
    assert_eq!(resp.status, 504, "{:?}", resp.json());
    let error = &resp.json()["error"];
    assert_eq!(error["code"], "timeout", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(victim)
            && message.contains("agent.list")
            && message.contains("unresponsive"),
        "{message}"
    );
    about_the_deadline(took);

    // `link status` and host.status show it unresponsive, the runtime still ready.
    let cli = rt.status();
    assert_eq!(state_of(&cli, victim), "unresponsive", "{cli}");
    assert_eq!(cli["state"], "ready", "{cli}");
    assert_eq!(state_of(&cli, "link-plugin-auth"), "ready", "{cli}");
    let hs = rt
        .host_call(host::Status::NAME, serde_json::json!({}))
        .unwrap();
    assert_eq!(state_of(&hs, victim), "unresponsive", "{hs}");
    let http = rt.get("/v1/status", Some(&token));
    assert_eq!(http.status, 200);
    assert!(
        http.json().to_string().contains("unresponsive"),
        "{:?}",
        http.json()
    );

    // Continued, it answers the next call, and is ready again.
    drop(stopped);
    let again = rt.get("/v1/agents", Some(&token));
    assert_eq!(again.status, 200, "{:?}", again.json());
    let cli = rt.status();
    assert_eq!(state_of(&cli, victim), "ready", "{cli}");
    assert!(
        rt.stderr().contains("did not answer agent.list"),
        "the timeout must be logged"
    );
    rt.down();
}

/// A token the auth plugin found valid is taken again without asking it (so a stopped auth
/// plugin does not stall it) until the token store changes (asked of `GET /v1/agents`, which
/// needs no auth call beyond the token's: `/v1/status` health-checks every plugin, auth too); then it is asked again — here it
/// is stopped, so the request times out instead of being let in — and answers once continued.
#[test]
fn a_verified_token_needs_no_auth_call_until_the_token_store_changes() {
    let root = state_root();
    let mut rt = up(&root);
    let token = rt.create_token();
    assert_eq!(rt.get("/v1/agents", Some(&token)).status, 200);
    let stopped = Stopped::new(rt.plugin_pid("link-plugin-auth"));
    let started = Instant::now();
    for _ in 0..3 {
        let resp = rt.get("/v1/agents", Some(&token));
        assert_eq!(resp.status, 200, "{:?}", resp.json());
    }
    assert!(
        started.elapsed() < DEADLINE,
        "a remembered token waited for the stopped auth plugin"
    );
    // Another token made by hand changes the store: nothing remembered stands.
    link_protocol::tokens::create(&rt.layout().tokens_file()).unwrap();
    let resp = rt.get("/v1/agents", Some(&token));
    assert_eq!(resp.status, 504, "{:?}", resp.json());
    assert_eq!(resp.json()["error"]["code"], "timeout", "{:?}", resp.json());
    drop(stopped);
    assert_eq!(rt.get("/v1/agents", Some(&token)).status, 200);
    rt.down();
}

/// A turn while the model service is stopped: `timeout` (504) naming the model service and
/// the deadline, after about the deadline; nothing of the turn is stored; continued, the
/// model answers the next turn.
fn a_stopped_model_times_out_the_turn_and_nothing_is_stored(profile: &str) {
    let root = state_root();
    let mut rt = up_as(&root, profile);
    rt.create_agent("a");
    rt.turn("a", "before the stop");
    let before = rt.conversation("a");
    let stopped = Stopped::new(rt.plugin_pid(programs::MODEL));

    let turn = json!({"message": "lost in the stop"});
    let (status, body, took) = post_timed(&rt, "/v1/agents/a/turns", turn);
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"]["code"], "timeout", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    let within = format!("within {} s", DEADLINE.as_secs());
    assert!(
        message.contains(programs::MODEL) && message.contains(&within),
        "{message}"
    );
    about_the_deadline(took);
    assert_eq!(
        rt.conversation("a"),
        before,
        "a failed turn stored something"
    );
    if profile == "link" {
        // The harness answered, with the model's timeout: it was not the silent one.
        let status = rt.status();
        assert_eq!(state_of(&status, programs::HARNESS), "ready", "{status}");
    }

    drop(stopped);
    let reply = rt.turn("a", "after the stop");
    assert!(reply["reply"].is_string(), "{reply}");
    let after = rt.conversation("a");
    assert_eq!(after[..before.len()], before[..], "{after:?}");
    assert_eq!(after.len(), before.len() + 2, "{after:?}");
    assert!(
        !after
            .iter()
            .any(|e| e.to_string().contains("lost in the stop")),
        "{after:?}"
    );
    rt.down();
}

#[test]
fn mini_a_stopped_model_times_out_the_turn_and_nothing_is_stored() {
    a_stopped_model_times_out_the_turn_and_nothing_is_stored("mini");
}

#[test]
fn full_link_a_stopped_model_times_out_the_turn_and_nothing_is_stored() {
    a_stopped_model_times_out_the_turn_and_nothing_is_stored("link");
}

/// The agent plugin waits for the stopped file store when an agent is created: the file
/// store is the silent one, named by the 504 and marked `unresponsive`; the agent plugin
/// stays `ready`.
#[test]
fn a_timeout_blames_the_silent_owner_not_the_one_waiting_for_it() {
    let (waiting, silent) = (programs::AGENT, programs::FILE_STORE);
    let root = state_root();
    let mut rt = up(&root);
    rt.create_agent("first");
    let stopped = Stopped::new(rt.plugin_pid(silent));

    let (status, body, took) = post_timed(&rt, "/v1/agents", json!({"name": "stalled"}));
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"]["code"], "timeout", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(silent) && message.contains("store.agent.create"),
        "{message}"
    );
    about_the_deadline(took);
    let status = rt.status();
    assert_eq!(state_of(&status, silent), "unresponsive", "{status}");
    assert_eq!(state_of(&status, waiting), "ready", "{status}");

    drop(stopped);
    rt.create_agent("second");
    let status = rt.status();
    assert_eq!(state_of(&status, silent), "ready", "{status}");
    assert_eq!(state_of(&status, waiting), "ready", "{status}");
    rt.down();
}

/// `link status` and the endpoint's `GET /v1/status` (while it is served) health-check every
/// running plugin: one
/// that does not answer within the bound (`health::BOUND`) shows `unresponsive` though no call
/// to it was routed, the model service (HTTP, never routed) and a frame plugin alike, while a
/// twin that answers stays `ready`; continued, each shows `ready` again at the next status.
fn a_plugin_silent_to_its_health_check_shows_unresponsive_until_it_answers(
    profile: &str,
    silent: &[&str],
    twin: &str,
) {
    let root = state_root();
    let mut rt = up_as(&root, profile);
    let status = rt.status();
    for plugin in silent.iter().chain([&twin]) {
        assert_eq!(state_of(&status, plugin), "ready", "{status}");
    }
    let stopped: Vec<Stopped> = silent
        .iter()
        .map(|plugin| Stopped::new(rt.plugin_pid(plugin)))
        .collect();

    // The endpoint first (a status answered after `link status` would show its finding), and
    // only where its own service is not among the stopped (Mini's).
    let mut statuses = vec![];
    if !silent.contains(&programs::MINI_CONNECTION) {
        let (code, endpoint) = rt.http("GET", "/v1/status", None);
        assert_eq!(code, 200, "{endpoint}");
        statuses.push(endpoint);
    }
    statuses.push(rt.status());
    for status in statuses {
        for plugin in silent {
            assert_eq!(state_of(&status, plugin), "unresponsive", "{status}");
        }
        assert_eq!(state_of(&status, twin), "ready", "{status}");
        assert_eq!(status["state"], "ready", "{status}");
    }

    drop(stopped);
    let status = rt.status();
    for plugin in silent.iter().chain([&twin]) {
        assert_eq!(state_of(&status, plugin), "ready", "{status}");
    }
    rt.down();
}

#[test]
fn mini_a_plugin_silent_to_its_health_check_shows_unresponsive_until_it_answers() {
    a_plugin_silent_to_its_health_check_shows_unresponsive_until_it_answers(
        "mini",
        &[
            programs::MODEL,
            programs::MINI_HARNESS,
            programs::MINI_CONNECTION,
        ],
        programs::MEASURE,
    );
}

#[test]
fn full_link_a_plugin_silent_to_its_health_check_shows_unresponsive_until_it_answers() {
    a_plugin_silent_to_its_health_check_shows_unresponsive_until_it_answers(
        "link",
        &[programs::MODEL, programs::HARNESS],
        programs::AUTH,
    );
}
