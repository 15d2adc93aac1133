//! Full Link through the real host: the grant table with real callers, tokens, a plugin
//! killed mid-turn, and what survives `down` + `up`.

use crate::support;
use link_protocol::routes::Route as _;

use crate::support::state_root;
use link_harness_conformance::runtime_process::{self, RuntimeProcess};
use link_protocol::routes as r;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Every route of full Link, with a body that is harmless for an agent that does not exist.
const ROUTES: &[&str] = &[
    r::agent::Create::NAME,
    r::agent::Get::NAME,
    r::agent::List::NAME,
    r::agent::Delete::NAME,
    r::agent::Turn::NAME,
    r::auth::Issue::NAME,
    r::auth::Verify::NAME,
    r::auth::Revoke::NAME,
    r::secret::Get::NAME,
    r::secret::Put::NAME,
    r::secret::Delete::NAME,
    r::store::ConversationAppend::NAME,
    r::store::ConversationRead::NAME,
    r::store::FileRead::NAME,
    r::store::FileWrite::NAME,
    r::store::FileList::NAME,
    r::store::AgentCreate::NAME,
    r::store::AgentDelete::NAME,
    r::tool::Run::NAME,
    r::tool::File::NAME,
    r::tool::Code::NAME,
    r::sandbox::Exec::NAME,
    r::schedule::Create::NAME,
    r::schedule::List::NAME,
    r::schedule::Cancel::NAME,
    r::schedule::DeleteAgent::NAME,
    r::host::MonitorStatus::NAME,
    r::host::MonitorStop::NAME,
    r::host::MonitorSamples::NAME,
];

/// The grants the host's router must hold, written out again here so a change to the table
/// in the host is a visible change to this test.
fn granted(caller: &str, route: &str) -> bool {
    let grants: &[(&str, &[&str])] = &[
        (
            "link-plugin-link-harness",
            &[
                r::store::ConversationAppend::NAME,
                r::store::ConversationRead::NAME,
                r::agent::Get::NAME,
                r::tool::Run::NAME,
                r::tool::File::NAME,
                r::tool::Code::NAME,
                r::schedule::Create::NAME,
            ],
        ),
        ("link-plugin-link-scheduler", &[r::agent::Turn::NAME]),
        (
            "link-plugin-agent",
            &[
                r::store::AgentCreate::NAME,
                r::store::AgentDelete::NAME,
                r::schedule::DeleteAgent::NAME,
            ],
        ),
        ("link-plugin-link-run", &[r::sandbox::Exec::NAME]),
        (
            "link-plugin-file-tool",
            &[
                r::store::FileRead::NAME,
                r::store::FileWrite::NAME,
                r::store::FileList::NAME,
            ],
        ),
        (
            "link-plugin-link-code",
            &[
                r::store::FileRead::NAME,
                r::store::FileWrite::NAME,
                r::store::FileList::NAME,
            ],
        ),
    ];
    grants
        .iter()
        .any(|(c, routes)| *c == caller && routes.contains(&route))
}

#[test]
fn every_plugin_is_refused_every_route_it_has_no_grant_for() {
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "diagnostic");
    // The model serves HTTP, not routes, so it has no debug hook to call through; it holds
    // no grant.
    let plugins: Vec<String> = rt
        .plugin_pids()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n != "link-plugin-model")
        .collect();
    assert_eq!(plugins.len(), 11, "{plugins:?}");
    let (mut refused, mut passed) = (0, 0);
    for plugin in &plugins {
        for route in ROUTES {
            let body = json!({ "plugin": plugin, "route": route, "agent": "nobody", "body": { "name": "nobody", "id": "s0" } });
            let result = rt.host_call(r::host::DebugCall::NAME, body).unwrap();
            let message = result["message"].as_str().unwrap_or_default();
            let no_grant = result["code"] == "forbidden"
                && message.contains(&format!("has no grant for route {route}"));
            if granted(plugin, route) {
                assert!(
                    !no_grant,
                    "{plugin} → {route} must pass the grant check: {result}"
                );
                passed += 1;
            } else {
                assert_eq!(
                    result["ok"], false,
                    "{plugin} → {route} was executed: {result}"
                );
                assert!(
                    no_grant,
                    "{plugin} → {route} must be refused as forbidden naming the route: {result}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(passed, 18);
    assert_eq!(refused, plugins.len() * ROUTES.len() - 18);
    // The harness holds grants for tools, but only for an agent whose turn it is serving.
    let lease = rt
        .host_call(r::host::DebugCall::NAME, json!({ "plugin": "link-plugin-link-harness", "route": r::tool::File::NAME, "agent": "nobody", "body": {} }))
        .unwrap();
    assert_eq!(lease["code"], "forbidden", "{lease}");
    assert!(
        lease["message"]
            .as_str()
            .unwrap()
            .contains("only for an agent whose call it is serving"),
        "{lease}"
    );
    assert!(
        rt.stderr().contains("router refused"),
        "refusals must be logged"
    );
    rt.down();
}

#[test]
fn unauthenticated_wrong_and_revoked_tokens_get_401() {
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "diagnostic");
    let token = rt.create_token();
    let revoked = rt.create_token();
    assert_eq!(
        rt.post("/v1/agents", &token, json!({ "name": "a" })).status,
        201
    );
    assert_eq!(
        rt.get("/v1/agents/a", Some(&revoked)).status,
        200,
        "valid before revoking"
    );
    support::link_ok(&["token", "revoke", &revoked, "--state"], root.path());
    for (what, tok) in [
        ("none", None),
        ("wrong", Some("lnk_0000")),
        ("revoked", Some(revoked.as_str())),
    ] {
        let resp = rt.request("POST", "/v1/agents", tok, Some(br#"{"name":"b"}"#.to_vec()));
        assert_eq!(resp.status, 401, "{what}");
        assert_eq!(resp.json()["error"]["code"], "unauthorized", "{what}");
    }
    assert_eq!(
        rt.get("/v1/agents/b", Some(&token)).status,
        404,
        "a refused create made an agent"
    );
    assert_eq!(
        rt.get("/v1/agents/a", Some(&token)).status,
        200,
        "the other token still works"
    );
    rt.down();
}

#[test]
fn agents_files_conversations_and_schedules_survive_down_and_up() {
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "diagnostic");
    let token = rt.create_token();
    assert_eq!(
        rt.post("/v1/agents", &token, json!({ "name": "keeper" }))
            .status,
        201
    );
    let turns = ["hello", "schedule 1h: much later"];
    for message in turns {
        let resp = rt.post(
            "/v1/agents/keeper/turns",
            &token,
            json!({ "message": message }),
        );
        assert_eq!(resp.status, 200, "{message}: {:?}", resp.json());
    }
    let workspace = link_protocol::layout::StateLayout::new(root.path()).agent_workspace("keeper");
    std::fs::write(workspace.join("notes.txt"), "kept").unwrap();
    let before = rt.get("/v1/agents/keeper", Some(&token)).json();
    assert_eq!(before["schedules"].as_array().unwrap().len(), 1, "{before}");
    rt.down();

    let mut rt = support::up_in(&root, "link", "diagnostic");
    let after = rt.get("/v1/agents/keeper", Some(&token)).json();
    assert_eq!(after["conversation"], before["conversation"]);
    assert_eq!(after["schedules"], before["schedules"]);
    let listed = rt.get("/v1/agents", Some(&token)).json();
    assert!(listed.to_string().contains("keeper"), "{listed}");
    let search = rt
        .post(
            "/v1/agents/keeper/turns",
            &token,
            json!({ "message": "search kept" }),
        )
        .json();
    assert!(
        search["tool_calls"][0]["output"]
            .to_string()
            .contains("notes.txt"),
        "{search}"
    );
    assert_eq!(
        rt.request("DELETE", "/v1/agents/keeper", Some(&token), None)
            .status,
        200
    );
    assert!(
        !workspace.exists(),
        "deleting an agent must remove its files"
    );
    rt.down();
}

/// A plugin SIGKILLed while a turn waits on a confined `run: sleep`: the turn ends with a clear
/// error, the host stops with a non-zero status, nothing it started remains, and after `up`
/// the conversation holds the user message the runtime had acknowledged.
#[test]
fn a_plugin_killed_mid_turn_ends_the_turn_and_the_runtime_cleanly() {
    if !support::sandbox_available() {
        return;
    }
    for victim in [
        "link-plugin-link-run",
        "link-plugin-sandbox",
        "link-plugin-link-harness",
        "link-plugin-file-store",
    ] {
        let root = state_root();
        let mut rt = support::up_in(&root, "link", "confined");
        let token = rt.create_token();
        assert_eq!(
            rt.post("/v1/agents", &token, json!({ "name": "k" })).status,
            201
        );
        let pid = rt.plugin_pid(victim);
        let socket = root.path().join("run/connection.sock");
        let turn = support::turn_in_thread(socket, token.clone(), "run: sleep 30");
        support::wait_for_process("sleep", rt.host_pid());
        let started = support::tree(rt.host_pid());
        support::kill(pid, 9);
        let resp = turn
            .join()
            .unwrap()
            .expect("the turn must get an answer, not a dropped connection");
        assert_eq!(resp.status, 503, "{victim}: {:?}", resp.json());
        let message = resp.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains(victim) || message.contains("stopping"),
            "{victim}: {message}"
        );
        let status = rt.wait_exit();
        assert!(!status.success(), "{victim}: host exited {status:?}");
        support::assert_gone(&started);
        drop(rt);
        let mut rt = support::up_in(&root, "link", "diagnostic");
        let log = rt.get("/v1/agents/k", Some(&token)).json();
        assert!(
            log["conversation"].to_string().contains("run: sleep 30"),
            "{victim}: {log}"
        );
        rt.down();
    }
}

/// Without bubblewrap, confined full Link refuses to start, names the probe's reason and the
/// explicit alternative, and leaves no socket behind.
#[test]
fn confined_link_refuses_to_start_without_bubblewrap() {
    let root = state_root();
    let programs = std::path::Path::new(env!("CARGO_BIN_EXE_link"))
        .parent()
        .unwrap();
    let out = support::link(
        &[
            "up",
            "--profile",
            "link",
            "--mode",
            "confined",
            "--programs",
        ],
        programs,
    )
    .arg("--state")
    .arg(root.path())
    .env("PATH", "/nonexistent")
    .output()
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("confined mode is unavailable") && stderr.contains("bwrap"),
        "{stderr}"
    );
    assert!(stderr.contains("--mode diagnostic"), "{stderr}");
    let layout = link_protocol::layout::StateLayout::new(root.path());
    let left = layout.present_sockets();
    assert!(left.is_empty(), "sockets left behind: {left:?}");
}

/// A schedule the model made is listed with `GET /v1/agents/{id}/schedules` and cancelled
/// with `DELETE /v1/agents/{id}/schedules/{sid}`, for good (also after a restart); another
/// agent cannot cancel it, and an agent that does not exist has no schedules to list.
#[test]
fn schedules_are_listed_and_cancelled_over_http() {
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "diagnostic");
    let token = rt.create_token();
    for name in ["owner", "other"] {
        let created = rt.post("/v1/agents", &token, json!({ "name": name }));
        assert_eq!(created.status, 201, "{:?}", created.json());
    }
    for message in ["schedule 1h: much later", "schedule 2h: later still"] {
        let resp = rt.post(
            "/v1/agents/owner/turns",
            &token,
            json!({ "message": message }),
        );
        assert_eq!(resp.status, 200, "{message}: {:?}", resp.json());
    }
    let listed = rt.get("/v1/agents/owner/schedules", Some(&token));
    assert_eq!(listed.status, 200, "{:?}", listed.json());
    let schedules = listed.json()["schedules"].as_array().unwrap().clone();
    assert_eq!(schedules.len(), 2, "{schedules:?}");
    let sid = schedules[0]["id"].as_str().unwrap().to_owned();
    let other = rt.get("/v1/agents/other/schedules", Some(&token)).json();
    assert_eq!(other["schedules"], json!([]), "{other}");

    // Refused: another agent's path, a schedule that does not exist, an unknown agent, no
    // token. Each leaves both schedules in place.
    let cancel = |agent: &str, sid: &str, token: Option<&str>| {
        let path = format!("/v1/agents/{agent}/schedules/{sid}");
        rt.request("DELETE", &path, token, None)
    };
    let foreign = cancel("other", &sid, Some(&token));
    assert_eq!(foreign.status, 403, "{:?}", foreign.json());
    assert_eq!(cancel("owner", "no-such", Some(&token)).status, 404);
    let unknown = rt.get("/v1/agents/nobody/schedules", Some(&token));
    assert_eq!(unknown.status, 404, "{:?}", unknown.json());
    assert_eq!(cancel("owner", &sid, None).status, 401);
    let still = rt.get("/v1/agents/owner/schedules", Some(&token)).json();
    assert_eq!(still["schedules"].as_array().unwrap().len(), 2, "{still}");

    // The allowed twin: its owner cancels it, once.
    let done = cancel("owner", &sid, Some(&token));
    assert_eq!(done.status, 200, "{:?}", done.json());
    assert_eq!(cancel("owner", &sid, Some(&token)).status, 404);
    let left = rt.get("/v1/agents/owner/schedules", Some(&token)).json();
    let left = left["schedules"].as_array().unwrap().clone();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_ne!(left[0]["id"], sid.as_str());
    rt.down();

    let rt = support::up_in(&root, "link", "diagnostic");
    let after = rt.get("/v1/agents/owner/schedules", Some(&token)).json();
    assert_eq!(
        after["schedules"].as_array().unwrap().clone(),
        left,
        "{after}"
    );
    drop(rt);
}

/// A schedule that fell due while the runtime was down fires as soon as it is back up. The
/// scheduler fires it right after its ready line, when the harness, started at the same
/// time, may not be ready yet (here it is made 500 ms late): the router holds that call
/// until the harness is, so the turn runs (a failed fire would record `ok: false` and never
/// run again).
#[test]
fn a_schedule_due_while_down_fires_when_the_runtime_is_back() {
    let root = state_root();
    let late = support::Wrapped::new(link_protocol::routes::programs::HARNESS, "sleep 0.5");
    let spec = || {
        use link_protocol::plugin::{Mode, Profile};
        runtime_process::RuntimeSpec::new(late.dir(), Profile::Link, Mode::Diagnostic)
    };
    let mut rt = spec().up_in(root.path()).unwrap_or_else(|f| panic!("{f}"));
    let token = rt.create_token();
    let created = rt.post("/v1/agents", &token, json!({ "name": "sleeper" }));
    assert_eq!(created.status, 201, "{:?}", created.json());
    let message = "schedule 2s: wake up";
    let resp = rt.post(
        "/v1/agents/sleeper/turns",
        &token,
        json!({ "message": message }),
    );
    assert_eq!(resp.status, 200, "{:?}", resp.json());
    let listed = rt.get("/v1/agents/sleeper/schedules", Some(&token)).json();
    let due = listed["schedules"][0]["next_unix_ms"].as_u64().unwrap();
    rt.down();
    while link_protocol::clock::unix_ms() <= due + 200 {
        std::thread::sleep(Duration::from_millis(50));
    }

    let restarted = link_protocol::clock::unix_ms();
    let rt = spec().up_in(root.path()).unwrap_or_else(|f| panic!("{f}"));
    let fired = wait_for_fire(&rt, &token, "sleeper");
    assert_eq!(fired["fired"], 1, "{fired}");
    let at = fired["last_result"]["at_unix_ms"].as_u64().unwrap();
    assert!(at >= restarted, "it fired before the restart: {fired}");
    let last = &fired["last_result"];
    assert_eq!(last["ok"], true, "the overdue fire failed: {fired}");
    let agent = rt.get("/v1/agents/sleeper", Some(&token)).json();
    assert!(
        agent["conversation"].to_string().contains("wake up"),
        "the scheduled turn is not in the conversation: {agent}"
    );
    drop(rt);
}

/// The agent's one schedule once it has a result (a fire that ran, or one that failed).
fn wait_for_fire(rt: &RuntimeProcess, token: &str, agent: &str) -> Value {
    let path = format!("/v1/agents/{agent}/schedules");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = rt.get(&path, Some(token)).json();
        let schedule = listed["schedules"][0].clone();
        if !schedule["last_result"].is_null() {
            return schedule;
        }
        assert!(Instant::now() < deadline, "no fire within 30 s: {listed}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A tool plugin acts only for the agent of a tool call in flight to it: the file and code
/// tools' store calls and the run tool's `sandbox.exec` for an existing agent are refused
/// outside one, while the same file read through a turn's tool call works.
#[test]
fn tools_act_only_for_the_agent_of_their_call_in_flight() {
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "diagnostic");
    let token = rt.create_token();
    let created = rt.post("/v1/agents", &token, json!({ "name": "alpha" }));
    assert_eq!(created.status, 201, "{:?}", created.json());
    let workspace = link_protocol::layout::StateLayout::new(root.path()).agent_workspace("alpha");
    std::fs::write(workspace.join("notes.txt"), "leased").unwrap();
    let outside = [
        (
            "link-plugin-file-tool",
            r::store::FileRead::NAME,
            json!({ "path": "notes.txt" }),
        ),
        (
            "link-plugin-link-code",
            r::store::FileList::NAME,
            json!({ "path": "." }),
        ),
        (
            "link-plugin-link-run",
            r::sandbox::Exec::NAME,
            json!({ "argv": ["/bin/true"] }),
        ),
    ];
    for (plugin, route, body) in outside {
        let call = json!({ "plugin": plugin, "route": route, "agent": "alpha", "body": body });
        let result = rt.host_call(r::host::DebugCall::NAME, call).unwrap();
        assert_eq!(result["code"], "forbidden", "{plugin} → {route}: {result}");
        let message = result["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("only for an agent whose call it is serving")
                && message.contains("\"alpha\""),
            "{plugin} → {route}: {result}"
        );
    }
    // The allowed twin: a turn's search tool call lists the same workspace through the
    // code tool (diagnostic mode offers code and schedule only).
    let turn = rt.post(
        "/v1/agents/alpha/turns",
        &token,
        json!({ "message": "search leased" }),
    );
    assert_eq!(turn.status, 200, "{:?}", turn.json());
    let reply = turn.json();
    assert_eq!(reply["tool_calls"][0]["ok"], true, "{reply}");
    assert!(
        reply["tool_calls"][0]["output"]
            .to_string()
            .contains("notes.txt"),
        "{reply}"
    );
    rt.down();
}

/// The sandbox probe's `enforced` answer is kept beside the programs for the machine as it
/// is: a later confined start goes on with it (`link status` says `cached`), still runs the
/// probe behind it, and says `cached, confirmed` once that agrees.
#[test]
fn a_kept_probe_answer_is_said_and_confirmed_by_the_probe_behind_it() {
    if !support::sandbox_available() {
        return;
    }
    let probe_of = |rt: &link_harness_conformance::runtime_process::RuntimeProcess| {
        let status = rt.host_call(r::host::Status::NAME, json!({})).unwrap();
        status["sandbox"]["probe"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    // The first start may find an answer kept by another test; either way it keeps one.
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "confined");
    assert!(
        ["ran", "cached", "cached, confirmed"].contains(&probe_of(&rt).as_str()),
        "{}",
        probe_of(&rt)
    );
    rt.down();
    let mut rt = support::up_in(&root, "link", "confined");
    let first = probe_of(&rt);
    assert!(
        first.starts_with("cached"),
        "the kept answer was not used: {first}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while probe_of(&rt) != "cached, confirmed" {
        assert!(
            std::time::Instant::now() < deadline,
            "the probe behind the kept answer never confirmed it: {}",
            probe_of(&rt)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    rt.down();
}

/// A process a plugin left running (started with no death signal, alive when the plugin
/// stops) is adopted by the host, its child subreaper, and killed at `down`, which names it.
/// The twin: a runtime whose plugins leave nothing names no leftover.
#[test]
fn down_kills_what_a_plugin_left_running_and_names_it() {
    use link_harness_conformance::reaper::{is_alive, read_proc};
    use link_protocol::plugin::{Mode, Profile};
    let wrapped = support::Wrapped::new(
        link_protocol::routes::programs::MEASURE,
        "sleep 300 </dev/null >/dev/null 2>&1 &\necho $! > \"$0.stray\"",
    );
    let root = state_root();
    let mut rt = runtime_process::RuntimeSpec::new(wrapped.dir(), Profile::Link, Mode::Diagnostic)
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    let stray_file = wrapped.dir().join(format!(
        "{}.stray",
        link_protocol::routes::programs::MEASURE
    ));
    let pid: i32 = std::fs::read_to_string(&stray_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stray = read_proc(pid).expect("the plugin's stray is running");
    assert_eq!(stray.comm, "sleep");
    rt.down();
    assert!(
        !is_alive(pid, stray.start_time_ticks),
        "the stray outlived the runtime"
    );
    let said = format!("link: killing leftover process {pid} (sleep)");
    assert!(
        rt.stderr().contains(&said),
        "no {said:?} in:\n{}",
        rt.stderr()
    );

    let clean = state_root();
    let mut rt = support::up_in(&clean, "link", "diagnostic");
    rt.down();
    assert!(
        !rt.stderr().contains("killing leftover"),
        "a leftover named where none was left:\n{}",
        rt.stderr()
    );
}
