//! Each judge on real-shaped inputs: one passing case and the failures it must name.

use super::*;
use link_report::CheckName;
use serde_json::json;

fn reply(text: &str, calls: Value) -> TurnReply {
    serde_json::from_value(json!({"reply": text, "tool_calls": calls})).unwrap()
}

fn call(tool: &str, ok: bool, output: Value) -> Value {
    json!({"tool": tool, "ok": ok, "output": output})
}

fn view(entries: &[(&str, &str)]) -> AgentView {
    let conversation: Vec<Value> = entries
        .iter()
        .map(|(role, text)| json!({"role": role, "content": text}))
        .collect();
    serde_json::from_value(json!({"id": "x", "conversation": conversation})).unwrap()
}

fn monitor(completed: u64, stopped: bool) -> MonitorStatus {
    MonitorStatus {
        interval_ms: 1000,
        completed_samples: completed,
        stopped,
    }
}

#[test]
fn tool_call_finds_the_tool_or_names_the_calls_made() {
    let r = reply("done", json!([call("file", true, json!("wrote"))]));
    assert_eq!(tool_call(&r, "file").unwrap().output_text(), "wrote");
    let err = tool_call(&r, "run").unwrap_err();
    assert!(err.contains("made no run tool call"), "{err}");
    assert!(err.contains("[\"file\"]"), "{err}");
    assert!(tool_ok(&r, "file").is_ok());
    let failed = reply("", json!([call("file", false, json!("denied"))]));
    assert_eq!(
        tool_ok(&failed, "file").unwrap_err(),
        "the file tool failed: denied"
    );
}

fn mini_status(state: &str, mode: &str) -> Value {
    let plugins: Vec<Value> = link_protocol::manifest::programs_of(Profile::Mini)
        .iter()
        .enumerate()
        .map(|(i, n)| json!({"name": n, "pid": 100 + i, "state": state}))
        .collect();
    json!({"pid": 99, "profile": "mini", "mode": mode, "plugins": plugins})
}

#[test]
fn startup_passes_with_every_plugin_ready_and_fails_naming_what_is_not() {
    let status = mini_status("ready", "confined");
    let socket = Path::new("/s/run/connection.sock");
    let s = |status, exists| Startup {
        profile: Profile::Mini,
        mode: Mode::Confined,
        status,
        socket,
        socket_exists: exists,
        took: Duration::from_millis(250),
    };
    let ok = startup(&s(&status, true)).unwrap();
    assert!(
        ok.starts_with("ready in 250.0 ms with 4 plugins (link-plugin-measure,"),
        "{ok}"
    );
    let err = startup(&s(&status, false)).unwrap_err();
    assert_eq!(err, "ready socket /s/run/connection.sock does not exist");
    let starting = mini_status("starting", "confined");
    let err = startup(&s(&starting, true)).unwrap_err();
    assert!(err.contains("not ready: link-plugin-measure"), "{err}");
    let other = mini_status("ready", "diagnostic");
    let err = startup(&s(&other, true)).unwrap_err();
    assert!(
        err.starts_with("host.status reports another profile or mode"),
        "{err}"
    );
    let roles = roles(&status);
    assert!(roles.contains(&(99, "host".to_owned())));
    assert!(roles.contains(&(100, "link-plugin-measure".to_owned())));
}

#[test]
fn a_local_reply_is_parsed_or_refused() {
    assert_eq!(
        LocalReply::parse("link-local reply #12: warm turn 3"),
        Some(LocalReply {
            users: 12,
            message: "warm turn 3"
        })
    );
    for other in [
        "",
        "hi there",
        "link-local reply #x: hi",
        "link-local reply #1 hi",
    ] {
        assert_eq!(LocalReply::parse(other), None, "{other:?}");
    }
}

#[test]
fn a_cold_turn_must_bring_back_the_local_models_reply() {
    let ok = cold_turn(
        "a1",
        &reply(
            "link-local reply #1: hello from the runtime runner",
            json!([]),
        ),
        Duration::from_millis(5),
    )
    .unwrap();
    assert_eq!(
        ok,
        "agent a1 created and answered its first turn in 5.0 ms: \"link-local reply #1: hello from the runtime runner\""
    );
    // An error text in the reply's place, an empty reply, a reply with a history the new
    // agent cannot have: each is not the answer to this turn.
    for wrong in [
        "model service answered 503: unavailable",
        "  ",
        "link-local reply #2: hello from the runtime runner",
    ] {
        let err = cold_turn("a1", &reply(wrong, json!([])), Duration::ZERO).unwrap_err();
        assert!(
            err.starts_with("agent a1's first turn answered")
                && err.ends_with("(\"link-local reply #1: hello from the runtime runner\")"),
            "{err}"
        );
    }
}

#[test]
fn a_warm_turn_must_bring_back_the_local_models_reply_with_the_history() {
    assert!(warm_turn(2, &reply("link-local reply #3: warm turn 2", json!([]))).is_ok());
    // Past the context window the oldest messages are left out: a smaller count.
    assert!(warm_turn(
        300,
        &reply("link-local reply #100: warm turn 300", json!([]))
    )
    .is_ok());
    for wrong in [
        "harness: the model service did not answer",
        "",
        // No history sent, more messages than were sent, another turn's message.
        "link-local reply #1: warm turn 2",
        "link-local reply #4: warm turn 2",
        "link-local reply #3: warm turn 1",
    ] {
        let err = warm_turn(2, &reply(wrong, json!([]))).unwrap_err();
        assert!(
            err.starts_with("warm turn 2 answered")
                && err.ends_with("(\"link-local reply #3: warm turn 2\")"),
            "{err}"
        );
    }
    let times = [3, 1, 2].map(Duration::from_millis).to_vec();
    assert_eq!(
        warm_turns(times),
        "3 warm turns: min 1.0 ms, median 2.0 ms, max 3.0 ms"
    );
}

#[test]
fn conversations_must_hold_only_their_own_messages() {
    let a = view(&[
        ("user", "hello from the runtime runner"),
        ("assistant", "hi"),
    ]);
    let b = view(&[("user", "hello from beta"), ("assistant", "hi")]);
    assert_eq!(
        conversations_separate("a", "b", &a, &b).unwrap(),
        "conversations separate (2 and 2 entries)"
    );
    let leaked = view(&[
        ("user", "hello from the runtime runner"),
        ("user", "hello from beta"),
    ]);
    assert_eq!(
        conversations_separate("a", "b", &leaked, &b).unwrap_err(),
        "agent a's conversation holds beta's message"
    );
    assert_eq!(
        conversations_separate("a", "b", &a, &leaked).unwrap_err(),
        "agent b's conversation holds alpha's messages"
    );
    // Empty conversations hold no other agent's message, and prove nothing: each fails.
    let empty = view(&[]);
    assert_eq!(
        conversations_separate("a", "b", &a, &empty).unwrap_err(),
        "agent b's conversation lacks its own message \"hello from beta\": []"
    );
    assert_eq!(
        conversations_separate("a", "b", &empty, &b).unwrap_err(),
        "agent a's conversation lacks its own message \"hello from the runtime runner\": []"
    );
}

#[test]
fn disk_logs_and_workspaces_stay_apart() {
    assert!(on_disk("hello from the runtime runner", "hello from beta", None).is_ok());
    assert_eq!(
        on_disk("hello from beta", "", None).unwrap_err(),
        "a conversation log on disk holds the other agent's messages"
    );
    let (a, b) = ("hello from the runtime runner", "hello from beta");
    assert_eq!(
        on_disk(a, b, Some(Path::new("/w/b"))).unwrap_err(),
        "workspace /w/b does not exist"
    );
    // Empty logs hold no other agent's message, and prove nothing: each fails.
    assert_eq!(
        on_disk("", b, None).unwrap_err(),
        "alpha's conversation log on disk lacks its own message \"hello from the runtime runner\" (0 bytes)"
    );
    assert_eq!(
        on_disk(a, "", None).unwrap_err(),
        "beta's conversation log on disk lacks its own message \"hello from beta\" (0 bytes)"
    );
}

#[test]
fn tools_keep_each_agent_in_its_workspace() {
    let refused: ToolCall = serde_json::from_value(call(
        "file",
        false,
        json!("forbidden: path \"../../a/workspace/alpha-only.txt\" leaves the agent workspace"),
    ))
    .unwrap();
    assert!(cross_read_refused("a", "b", &refused).is_ok());
    // A read that failed for another reason (the file was simply not there) proves nothing.
    let missing: ToolCall =
        serde_json::from_value(call("file", false, json!("not found"))).unwrap();
    assert!(cross_read_refused("a", "b", &missing)
        .unwrap_err()
        .contains("not as leaving the workspace"));
    let read: ToolCall = serde_json::from_value(call("file", true, json!("alpha-secret"))).unwrap();
    assert_eq!(
        cross_read_refused("a", "b", &read).unwrap_err(),
        "agent b read agent a's file: alpha-secret"
    );
    let mut w = Workspaces {
        alpha_in_a: Some("alpha-secret".into()),
        beta_in_b: Some("beta-secret".into()),
        ..Workspaces::default()
    };
    assert!(files_in_own_workspace(&w).is_ok());
    w.beta_in_a = Some("beta-secret".into());
    assert_eq!(
        files_in_own_workspace(&w).unwrap_err(),
        "a file written by one agent appeared in the other's workspace"
    );
    w.alpha_in_a = None;
    assert!(files_in_own_workspace(&w)
        .unwrap_err()
        .contains("is not in its agent's workspace"));
    let cat: ToolCall = serde_json::from_value(call(
        "run",
        true,
        json!({"exit_code": 1, "stdout": "", "stderr": "cat: '/s/a/workspace/alpha-only.txt': No such file or directory\n"}),
    ))
    .unwrap();
    assert!(run_cat_refused("a", "b", &cat).is_ok());
    // Failing for some other reason (no stderr, a zero exit) is not evidence.
    let silent: ToolCall =
        serde_json::from_value(call("run", true, json!({"exit_code": 1}))).unwrap();
    assert!(run_cat_refused("a", "b", &silent)
        .unwrap_err()
        .contains("out of sight"));
    let empty: ToolCall = serde_json::from_value(call(
        "run",
        true,
        json!({"exit_code": 0, "stdout": "", "stderr": ""}),
    ))
    .unwrap();
    assert!(run_cat_refused("a", "b", &empty).is_err());
    let leak: ToolCall = serde_json::from_value(call("run", true, json!("alpha-secret"))).unwrap();
    assert_eq!(
        run_cat_refused("a", "b", &leak).unwrap_err(),
        "agent b's run tool read agent a's file"
    );
    assert!(run_lists_own_workspace("a", "alpha-only.txt\n").is_ok());
    assert!(run_lists_own_workspace("a", "alpha-only.txt beta-only.txt")
        .unwrap_err()
        .contains("sees the wrong workspace"));
}

#[test]
fn unauthenticated_requests_must_all_be_refused_without_a_trace() {
    let answers = vec![
        (
            "POST /v1/agents without a valid token".to_owned(),
            401,
            "{}".to_owned(),
        ),
        (
            "GET /v1/status without a valid token".to_owned(),
            401,
            "{}".to_owned(),
        ),
    ];
    assert_eq!(
        unauthenticated(&answers, false).unwrap(),
        "2 requests without a valid token answered 401; the refused turn left no trace"
    );
    assert_eq!(
        unauthenticated(&answers, true).unwrap_err(),
        "the unauthenticated turn reached the conversation"
    );
    let mut open = answers.clone();
    open[1].1 = 200;
    assert!(unauthenticated(&open, false)
        .unwrap_err()
        .starts_with("GET /v1/status without a valid token answered 200, not 401"));
    let mut leak = answers;
    leak[0].2 = "hello from the runtime runner".into();
    assert!(unauthenticated(&leak, false)
        .unwrap_err()
        .contains("leaked conversation content"));
    // No answers show no refusal: the twin of the two answers above.
    assert_eq!(
        unauthenticated(&[], false).unwrap_err(),
        "no request without a valid token was answered: nothing shows one is refused"
    );
    assert!(holds_unauthenticated_turn(&view(&[(
        "user",
        "unauthenticated turn"
    )])));
    assert!(!holds_unauthenticated_turn(&view(&[("user", "hello")])));
}

#[test]
fn a_conversation_write_must_be_refused_and_leave_the_log_whole() {
    let before = b"{\"role\":\"user\"}\n".to_vec();
    let grown = [before.clone(), b"{\"role\":\"assistant\"}\n".to_vec()].concat();
    let refused = reply("", json!([call("file", false, json!("path is protected"))]));
    let write = |reply: &TurnReply, after: &[u8]| {
        conversation_write(reply, Ok(before.clone()), Ok(after.to_vec()))
    };
    let ok = write(&refused, &grown).unwrap();
    assert!(
        ok.contains("refused as protected (path is protected)"),
        "{ok}"
    );
    assert!(ok.contains("kept its 16 earlier bytes"), "{ok}");
    let accepted = reply("", json!([call("file", true, json!("wrote"))]));
    assert!(write(&accepted, &grown)
        .unwrap_err()
        .starts_with("the file tool accepted a write"));
    let other = reply("", json!([call("file", false, json!("no such file"))]));
    assert!(write(&other, &grown)
        .unwrap_err()
        .contains("not as protected"));
    let appended = [before.clone(), b"x\n".to_vec()].concat();
    assert_eq!(
        write(&refused, &appended).unwrap_err(),
        "conversation log line 2 is not a logged entry: \"x\""
    );
    assert!(write(&refused, b"{}\n")
        .unwrap_err()
        .contains("was rewritten"));
    assert_eq!(
        conversation_write(&refused, Ok(before.clone()), Err("cannot read log".into()))
            .unwrap_err(),
        "cannot read log"
    );
}

#[test]
fn a_conversation_write_needs_the_log_as_it_was_before() {
    let refused = reply("", json!([call("file", false, json!("path is protected"))]));
    // The twin that passes: the log read before, then grown by an entry.
    let before = b"{\"role\":\"user\"}\n".to_vec();
    let grown = [before.clone(), b"{\"role\":\"assistant\"}\n".to_vec()].concat();
    assert!(conversation_write(&refused, Ok(before), Ok(grown.clone())).is_ok());
    // Unread (or empty) before: any content after would pass, so the check fails.
    assert_eq!(
        conversation_write(
            &refused,
            Err("cannot read /s/c.jsonl: Permission denied".into()),
            Ok(grown.clone())
        )
        .unwrap_err(),
        "cannot read /s/c.jsonl: Permission denied, before the write: nothing to compare with"
    );
    assert_eq!(
        conversation_write(&refused, Ok(Vec::new()), Ok(grown)).unwrap_err(),
        "the conversation log was empty before the write, though alpha had taken turns"
    );
}

#[test]
fn the_token_hash_is_the_first_sha256_word() {
    let hash = "ab".repeat(32);
    assert_eq!(token_hash(&format!("{{\"sha256\":\"{hash}\"}}\n")), hash);
    assert_eq!(token_hash("plain line\nsecond"), "plain line");
    assert_eq!(token_hash(""), "");
}

fn run_replies(echo: Value, tokens: Value) -> Vec<TurnReply> {
    vec![
        reply("", json!([call("run", true, echo)])),
        reply("", json!([call("run", true, tokens)])),
        reply("", json!([call("run", true, json!({"exit_code": 1}))])),
    ]
}

#[test]
fn the_run_tool_works_inside_and_cannot_reach_the_state_root() {
    let escape = Path::new("/s/escape-run.txt");
    let mut e = ToolEvidence {
        secret: "feedface",
        in_workspace: "hi\n".into(),
        escape,
        escaped: false,
    };
    let good = run_replies(
        json!({"exit_code": 0, "stdout": "hi\n"}),
        json!({"exit_code": 1, "stderr": "No such file"}),
    );
    let ok = run_tool(&good, &e).unwrap();
    assert!(
        ok.contains("answered \"exit 0, stdout \\\"hi\\\"\""),
        "{ok}"
    );
    let read = run_replies(
        json!({"exit_code": 0, "stdout": "hi"}),
        json!({"exit_code": 0, "stdout": "feedface"}),
    );
    assert_eq!(
        run_tool(&read, &e).unwrap_err(),
        "the run tool read the state root's token hashes"
    );
    let readable = run_replies(
        json!({"exit_code": 0, "stdout": "hi"}),
        json!({"exit_code": 0, "stdout": "{}"}),
    );
    assert!(run_tool(&readable, &e)
        .unwrap_err()
        .starts_with("the run tool could read the state root's tokens file"));
    e.escaped = true;
    assert_eq!(
        run_tool(&good, &e).unwrap_err(),
        "the run tool wrote /s/escape-run.txt outside its workspace"
    );
    e.in_workspace = String::new();
    assert_eq!(
        run_tool(&good, &e).unwrap_err(),
        "ran.txt in the workspace holds \"\", not \"hi\""
    );
}

#[test]
fn the_file_tool_works_inside_and_refuses_outside() {
    let escape = Path::new("/s/escape-file.txt");
    let mut e = ToolEvidence {
        secret: "feedface",
        in_workspace: "hello-file".into(),
        escape,
        escaped: false,
    };
    let replies = |traverse_ok: bool, outside_ok: bool| {
        vec![
            reply("", json!([call("file", true, json!("wrote"))])),
            reply("", json!([call("file", true, json!("hello-file"))])),
            reply(
                "",
                json!([call("file", traverse_ok, json!("outside the workspace"))]),
            ),
            reply(
                "",
                json!([call("file", outside_ok, json!("absolute path refused"))]),
            ),
        ]
    };
    let ok = file_tool(&replies(false, false), &e).unwrap();
    assert!(
        ok.ends_with("an absolute path outside refused (absolute path refused)"),
        "{ok}"
    );
    assert!(file_tool(&replies(true, false), &e)
        .unwrap_err()
        .starts_with("the file tool read outside the workspace"));
    assert_eq!(
        file_tool(&replies(false, true), &e).unwrap_err(),
        "the file tool wrote /s/escape-file.txt outside the workspace"
    );
    e.escaped = true;
    assert!(file_tool(&replies(false, false), &e).is_err());
    e.in_workspace = "other".into();
    assert!(file_tool(&replies(false, false), &e)
        .unwrap_err()
        .starts_with("tool-file.txt in the workspace holds \"other\""));
}

#[test]
fn a_scheduled_turn_is_a_user_ping_of_its_own() {
    assert!(scheduled_turn_fired(&view(&[
        ("user", "schedule 1s: ping"),
        ("user", "ping")
    ])));
    assert!(!scheduled_turn_fired(&view(&[(
        "user",
        "schedule 1s: ping"
    )])));
    assert!(!scheduled_turn_fired(&view(&[("assistant", "ping")])));
}

#[test]
fn idle_needs_the_samples_it_waited_for_and_kept_rounds() {
    let ok = idle(
        &monitor(2, false),
        &monitor(5, false),
        3,
        Duration::from_secs(3),
        5,
    )
    .unwrap();
    assert_eq!(
        ok,
        "3 samples completed at a 1000 ms interval during 3000.0 ms (from 2 to 5); 5 rounds kept"
    );
    let (first, last) = (monitor(2, false), monitor(5, false));
    assert_eq!(
        idle(&first, &last, 3, Duration::ZERO, 0).unwrap_err(),
        "monitor.samples returned no rounds"
    );
    // No sample completed while idle: the case the check exists for.
    assert_eq!(
        idle(&first, &monitor(2, false), 3, Duration::from_secs(3), 5).unwrap_err(),
        "only 0 of 3 samples completed during 3000.0 ms (from 2 to 2)"
    );
    // A count that went back must not wrap into a huge number of samples.
    assert_eq!(
        idle(&last, &first, 3, Duration::from_secs(3), 5).unwrap_err(),
        "the monitor's completed samples went back from 5 to 2: it restarted or miscounts"
    );
}

fn point(index: u32, status: u16, ms: u64) -> StatusPoint {
    StatusPoint {
        index,
        start_unix_ns: 0,
        duration_ns: ms as u128 * 1_000_000,
        http_status: status,
    }
}

#[test]
fn the_status_series_needs_200s_with_the_monitor_stopped() {
    let points = [point(0, 200, 1), point(1, 200, 3), point(2, 200, 2)];
    let ok = status_series(&points, &monitor(7, true), &monitor(7, true)).unwrap();
    assert_eq!(
        ok,
        "3 requests answered 200 (median 2.0 ms, max 3.0 ms) with the monitor stopped at 7 samples"
    );
    assert_eq!(
        status_series(&[], &monitor(7, true), &monitor(7, true)).unwrap_err(),
        "no status requests were made"
    );
    assert_eq!(
        status_series(&[point(0, 500, 1)], &monitor(7, true), &monitor(7, true)).unwrap_err(),
        "GET /v1/status #0 answered 500"
    );
    assert!(
        status_series(&points, &monitor(7, false), &monitor(7, true))
            .unwrap_err()
            .contains("did not report itself stopped")
    );
    assert_eq!(
        status_series(&points, &monitor(7, true), &monitor(8, true)).unwrap_err(),
        "the monitor kept sampling during the series (7 → 8 samples)"
    );
}

#[test]
fn the_outcome_is_the_first_failure_or_a_pass() {
    let passed = vec![Check::passed(CheckName::Startup, "ok")];
    assert_eq!(outcome(&passed, &[], None, false).status, Status::Passed);
    assert_eq!(outcome(&passed, &[], None, false).reason, None);
    let diagnostic = outcome(&passed, &[], None, true);
    assert_eq!(diagnostic.status, Status::Passed);
    assert!(diagnostic.reason.unwrap().starts_with("diagnostic run"));
    let failed = vec![
        Check::passed(CheckName::Startup, "ok"),
        Check::failed(CheckName::ColdTurn, "no reply"),
    ];
    let o = outcome(&failed, &[], None, false);
    assert_eq!(o.status, Status::Failed);
    assert_eq!(o.reason.as_deref(), Some("cold_turn: no reply"));
    let o = outcome(&failed, &[], Some("startup: first"), false);
    assert_eq!(o.reason.as_deref(), Some("startup: first"));
}

#[test]
fn a_check_not_reached_fails_the_run_unlike_a_planned_skip() {
    let checks = vec![
        Check::passed(CheckName::Startup, "ok"),
        Check::skipped(CheckName::SchedulerFired, "Mini has no scheduler"),
        Check::skipped(CheckName::ColdTurn, "not reached"),
    ];
    let planned = outcome(&checks[..2], &[], None, false);
    assert_eq!(planned.status, Status::Passed, "{planned:?}");
    let o = outcome(&checks, &[CheckName::ColdTurn], None, false);
    assert_eq!(o.status, Status::Failed);
    assert_eq!(
        o.reason.as_deref(),
        Some("the run stopped before 1 check(s): cold_turn")
    );
}

#[test]
fn cross_agent_reads_name_a_path_that_reaches_the_other_file() {
    use super::super::second_agent::{cross_cat_message, cross_read_message};
    // Resolved naively from beta's workspace, the file tool's path is alpha's file.
    let layout = link_protocol::layout::StateLayout::new("/s");
    let agents = layout.workspaces_dir();
    let msg = cross_read_message(&layout, "a1", "b1");
    let rel = msg.strip_prefix("read ").unwrap();
    let resolved = agents.join("b1").join(rel);
    let mut norm = std::path::PathBuf::new();
    for c in resolved.components() {
        match c {
            std::path::Component::ParentDir => {
                norm.pop();
            }
            other => norm.push(other),
        }
    }
    assert_eq!(norm, agents.join("a1/alpha-only.txt"));
    assert_eq!(rel, "../a1/alpha-only.txt");
    assert_eq!(
        cross_cat_message(&agents.join("a1")),
        format!("run: cat '{}'", agents.join("a1/alpha-only.txt").display())
    );
}

#[test]
fn no_orphans_names_what_was_adopted_and_reaped() {
    let none = no_orphans(13, &[], &[], &[], 100).unwrap();
    assert!(none.contains("13 recorded processes"), "{none}");
    assert!(none.contains("adopted and reaped no orphan"), "{none}");
    let reaped = vec![
        Adopted {
            program: "link-plugin-model".into(),
            pid: 41,
            status: "killed by signal 9".into(),
        },
        Adopted {
            program: "sh".into(),
            pid: 42,
            status: "exit status 0".into(),
        },
    ];
    let two = no_orphans(13, &reaped, &[], &[], 100).unwrap();
    assert!(
        two.ends_with(
            "the runner adopted and reaped 2 orphans of this run: link-plugin-model (pid 41, killed by signal 9), sh (pid 42, exit status 0)"
        ),
        "{two}"
    );
    let left = vec![
        ProcInfo {
            pid: 43,
            ppid: 100,
            start_time_ticks: 7,
            comm: "sleep".into(),
            exe: "/usr/bin/sleep".into(),
            argv: vec!["sleep".into(), "300".into()],
            state: 'S',
        },
        ProcInfo {
            pid: 44,
            ppid: 43,
            start_time_ticks: 8,
            comm: "cat".into(),
            exe: "/usr/bin/cat".into(),
            argv: vec![],
            state: 'S',
        },
    ];
    let err = no_orphans(13, &reaped[..1], &left, &[], 100).unwrap_err();
    assert!(
        err.starts_with("2 still running after shutdown (now killed): pid 43 (sleep 300; ppid 100"),
        "{err}"
    );
    assert!(
        err.contains("[adopted by the runner]; pid 44 (cat;"),
        "{err}"
    );
    assert!(err.contains("[not adopted]"), "{err}");
    assert!(
        err.ends_with(
            "adopted and reaped 1 orphan of this run: link-plugin-model (pid 41, killed by signal 9)"
        ),
        "{err}"
    );
    // A zombie child the runner did not reap would outlive it: a failure, naming it.
    let zombie = ProcInfo {
        state: 'Z',
        argv: vec![],
        comm: "link-plugin-mea".into(),
        ..left[0].clone()
    };
    let err = no_orphans(13, &reaped, &[], &[zombie], 100).unwrap_err();
    assert!(
        err.starts_with(
            "1 zombie child of the runner not reaped (they would outlive it): pid 43 (link-plugin-mea; ppid 100, state Z"
        ),
        "{err}"
    );
}

#[test]
fn a_disabled_tool_must_be_refused_and_write_nothing() {
    let instruction = "run: echo hi > ran.txt";
    let not_offered = reply(
        "link-local: cannot follow these instructions: tool `run` is not available",
        json!([]),
    );
    let ok = tool_refused(&not_offered, "run", instruction, false).unwrap();
    assert!(
        ok.contains("did not offer it") && ok.contains("wrote nothing"),
        "{ok}"
    );
    let refused = reply(
        "",
        json!([call(
            "run",
            false,
            json!("unavailable: the run tool is disabled")
        )]),
    );
    let ok = tool_refused(&refused, "run", instruction, false).unwrap();
    assert!(
        ok.contains("its call was refused: ") && ok.contains("unavailable"),
        "{ok}"
    );
    // The failing twins: a call that ran, and a file that landed.
    let ran = reply(
        "",
        json!([call("run", true, json!({"exit_code": 0, "stdout": ""}))]),
    );
    let err = tool_refused(&ran, "run", instruction, false).unwrap_err();
    assert!(err.contains("ran in diagnostic mode, unconfined"), "{err}");
    let err = tool_refused(&not_offered, "run", instruction, true).unwrap_err();
    assert!(err.contains("wrote its file in the workspace"), "{err}");
}
