//! The turn engine in the real full Link runtime: `link up --profile link` with every
//! program from this build's target directory, driven over the HTTP connection service.
//!
//! The programs are never built here: build them first with
//! `cargo build -p link-cli -p link-plugin-<each>` (the test names any that are missing).
//! Confined cases need bubblewrap and Landlock; where `link up` reports them unavailable the
//! case is skipped loudly, or fails when `LNK_REQUIRE_SANDBOX=1`.

use link_harness_conformance::programs;
use link_harness_conformance::runtime_process::{self, RuntimeProcess, RuntimeSpec};
use link_protocol::plugin::{Mode, Profile};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(120);

fn programs() -> PathBuf {
    let dir = runtime_process::test_programs();
    let plugins = link_protocol::manifest::programs_of(Profile::Link);
    let missing: Vec<&str> = std::iter::once(programs::HOST)
        .chain(plugins.iter().copied())
        .filter(|p| !dir.join(p).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "missing programs in {}: {}; build them first with `cargo build -p link-cli{}`",
        dir.display(),
        missing.join(", "),
        plugins
            .iter()
            .map(|p| format!(" -p {p}"))
            .collect::<String>()
    );
    dir
}

/// A running `link up` on a fresh state root, or `Err` with the reason `link up` gave when
/// confinement is unavailable here.
fn start(mode: Mode) -> Result<RuntimeProcess, String> {
    let spec = RuntimeSpec::new(programs(), Profile::Link, mode)
        .ready_within(PATIENCE)
        .exit_within(PATIENCE);
    match spec.up() {
        Ok(link) => Ok(link),
        Err(failure) if mode == Mode::Confined && failure.unconfinable() => Err(failure.stderr),
        Err(failure) => panic!("{failure}"),
    }
}

fn require_sandbox() -> bool {
    std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1")
}

/// Creates an agent; its id.
fn create_agent(link: &RuntimeProcess, name: &str) -> String {
    let made = link.create_agent(name);
    made["id"].as_str().unwrap().to_owned()
}

fn roles(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["role"].as_str().unwrap_or("?"))
        .collect()
}

/// Polls `f` until it gives `Some`, for at most [`PATIENCE`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Appends a user entry `by hand` to the conversation log behind the runtime's back.
fn append_by_hand(log: &std::path::Path) {
    let mut bytes = std::fs::read(log).unwrap();
    bytes.extend_from_slice(b"{\"role\":\"user\",\"content\":\"by hand\"}\n");
    std::fs::write(log, &bytes).unwrap();
}

#[test]
fn diagnostic_turns_code_tool_and_scheduler() {
    let Ok(mut link) = start(Mode::Diagnostic) else {
        unreachable!("diagnostic mode needs no confinement")
    };
    let a = create_agent(&link, "a");

    // Two plain turns: the second sees the first in the history.
    let first = link.turn(&a, "hello");
    assert_eq!(first["reply"], "link-local reply #1: hello", "{first}");
    assert_eq!(first["tool_calls"], json!([]));
    let second = link.turn(&a, "hello again");
    assert_eq!(second["reply"], "link-local reply #2: hello again");
    let log = link.conversation(&a);
    assert_eq!(roles(&log), ["user", "assistant", "user", "assistant"]);
    assert_eq!(log[2]["content"], "hello again");

    // A torn tail (an append cut short by a crash) fails the next turn with what happened,
    // is cut off, and the turn after that runs on the intact log.
    let log_file = link.layout().agent_conversation(&a);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&log_file)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"role\":\"user\",\"con").unwrap();
    drop(f);
    let (status, err) = link.http(
        "POST",
        &format!("/v1/agents/{a}/turns"),
        Some(json!({"message": "after the crash"})),
    );
    assert_eq!(status, 409, "{err}");
    assert_eq!(err["error"]["code"], "conflict");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("torn"),
        "{err}"
    );
    let after = link.turn(&a, "after the crash");
    assert_eq!(after["reply"], "link-local reply #3: after the crash");
    assert_eq!(link.conversation(&a).len(), 6);
    assert!(std::fs::read(&log_file).unwrap().ends_with(b"}\n"));

    // The file tool is not offered in diagnostic mode; the code tool is.
    let refused = link.turn(&a, "write a.txt: hi");
    assert_eq!(refused["tool_calls"], json!([]), "{refused}");
    assert!(
        refused["reply"].as_str().unwrap().contains("not available"),
        "{refused}"
    );
    let search = link.turn(&a, "search hello");
    let call = &search["tool_calls"][0];
    assert_eq!(call["tool"], "code", "{search}");
    assert_eq!(call["input"]["pattern"], "hello");
    assert_eq!(call["ok"], true, "{search}");
    let log = link.conversation(&a);
    let n = log.len();
    assert_eq!(
        roles(&log[n - 4..]),
        ["user", "assistant", "tool", "assistant"]
    );

    // A scheduled turn fires through the router and lands in the conversation.
    let scheduled = link.turn(&a, "schedule 1s: ping");
    let call = &scheduled["tool_calls"][0];
    assert_eq!(call["tool"], "schedule", "{scheduled}");
    assert_eq!(call["ok"], true, "{scheduled}");
    let id = call["output"]["id"].as_str().unwrap().to_owned();
    let fired = wait_for("the scheduled turn", || {
        let log = link.conversation(&a);
        let i = log
            .iter()
            .position(|e| e["role"] == "user" && e["content"] == "ping")?;
        log.get(i + 1).cloned()
    });
    assert_eq!(fired["role"], "assistant");
    assert!(
        fired["content"].as_str().unwrap().ends_with(": ping"),
        "{fired}"
    );
    let book = link
        .layout()
        .data("link-plugin-link-scheduler")
        .join("schedules.json");
    let recorded = wait_for("the recorded firing", || {
        let book: Value = serde_json::from_slice(&std::fs::read(&book).ok()?).ok()?;
        let s = book["schedules"]
            .as_array()?
            .iter()
            .find(|s| s["id"] == id.as_str())?
            .clone();
        (!s["last_result"].is_null()).then_some(s)
    });
    assert_eq!(recorded["fired"], 1, "{recorded}");
    assert_eq!(recorded["done"], true);
    assert_eq!(recorded["agent"], a.as_str());
    assert_eq!(recorded["last_result"]["ok"], true, "{recorded}");

    // Turns of one agent are serialised, of different agents concurrent: every user
    // message is directly followed by its own reply.
    let b = create_agent(&link, "b");
    std::thread::scope(|s| {
        for (agent, n) in [(&a, 0), (&a, 1), (&a, 2), (&b, 0), (&b, 1)] {
            let link = &link;
            s.spawn(move || {
                let reply = link.turn(agent, &format!("burst {n}"));
                assert!(reply["reply"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("burst {n}")));
            });
        }
    });
    for agent in [&a, &b] {
        let log = link.conversation(agent);
        for (i, e) in log.iter().enumerate() {
            if let Some(text) = e["content"].as_str().filter(|t| t.starts_with("burst")) {
                if e["role"] == "user" {
                    let reply = log[i + 1]["content"].as_str().unwrap();
                    assert!(reply.ends_with(text), "{text} answered by {reply}");
                }
            }
        }
    }
    link.down();
}

#[test]
fn confined_file_and_run_tools() {
    let mut link = match start(Mode::Confined) {
        Ok(link) => link,
        Err(reason) if !require_sandbox() => {
            link_harness_conformance::probe::skipped(&format!(
                "SKIPPED confined_file_and_run_tools: {reason}"
            ));
            return;
        }
        Err(reason) => panic!("LNK_REQUIRE_SANDBOX=1 but: {reason}"),
    };
    let a = create_agent(&link, "a");
    let wrote = link.turn(&a, "write a.txt: hi");
    let call = &wrote["tool_calls"][0];
    assert_eq!(call["tool"], "file", "{wrote}");
    assert_eq!(call["ok"], true, "{wrote}");
    let on_disk = link.layout().agent_workspace(&a).join("a.txt");
    assert_eq!(std::fs::read_to_string(on_disk).unwrap(), "hi");

    let read = link.turn(&a, "read a.txt");
    let call = &read["tool_calls"][0];
    assert_eq!(call["ok"], true, "{read}");
    assert_eq!(call["output"]["content"], "hi", "{read}");
    assert!(read["reply"].as_str().unwrap().contains("hi"), "{read}");

    // The run tool runs in the agent's workspace, through the sandbox.
    let ran = link.turn(&a, "run: cat a.txt");
    let call = &ran["tool_calls"][0];
    assert_eq!(call["tool"], "run", "{ran}");
    assert_eq!(call["ok"], true, "{ran}");
    assert_eq!(call["output"]["exit_code"], 0, "{ran}");
    assert_eq!(call["output"]["stdout"], "hi", "{ran}");

    // The conversation itself is out of the file tool's reach: refused, fed back, recorded.
    let up = "../../agents/".to_owned() + a.as_str() + "/conversation.jsonl";
    let refused = link.turn(&a, &format!("read {up}"));
    let call = &refused["tool_calls"][0];
    assert_eq!(call["ok"], false, "{refused}");
    let log = link.conversation(&a);
    let last_tool = log.iter().rev().find(|e| e["role"] == "tool").unwrap();
    assert_eq!(last_tool["ok"], false, "{last_tool}");
    link.down();
}

/// A turn's first model call is made on the conversation the harness kept from the last turn,
/// and its entries are appended only to a log that still ends there. When that log changed
/// behind the harness (an entry written by hand), the append is refused as a conflict: the
/// completion's reply is thrown away, the log is loaded again, and the turn is answered once,
/// after the hand-written entry.
#[test]
fn a_turn_on_a_log_changed_behind_the_harness_is_answered_once() {
    let Ok(link) = start(Mode::Diagnostic) else {
        unreachable!("diagnostic mode needs no confinement")
    };
    let id = create_agent(&link, "kept");
    link.turn(&id, "first");
    let log = link.layout().agent_conversation(&id);
    append_by_hand(&log);
    // The model counts the user messages it is shown: three means the log as it is now.
    let reply = link.turn(&id, "second");
    assert_eq!(reply["reply"], "link-local reply #3: second", "{reply}");
    // ... and the harness had kept the conversation: the conflict path ran, not a plain load.
    let harness_log =
        std::fs::read_to_string(link.layout().log_file("link-plugin-link-harness")).unwrap();
    assert!(
        harness_log.contains(&format!("loading the conversation of {id} again")),
        "{harness_log}"
    );
    let log = link.conversation(&id);
    assert_eq!(
        roles(&log),
        ["user", "assistant", "user", "user", "assistant"],
        "{log:?}"
    );
    assert_eq!(log[2]["content"], "by hand");
    assert_eq!(log[3]["content"], "second");
    assert_eq!(log[4]["content"], reply["reply"]);
    // The next turn goes on from the log as this one left it.
    let third = link.turn(&id, "third");
    assert_eq!(third["reply"], "link-local reply #4: third", "{third}");
    assert_eq!(link.conversation(&id).len(), 7);
}

/// Connections to `socket` the kernel holds, accepted or not: every server-side socket of a
/// connection carries the listener's path in `/proc/net/unix`, as the listener does.
fn connections_to(socket: &std::path::Path) -> usize {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let path = socket.to_str().unwrap();
    let named = table.lines().filter(|l| l.ends_with(path)).count();
    named.saturating_sub(1)
}

/// A model process held with SIGSTOP, let go on drop whatever happened.
struct Held(rustix::process::Pid);

impl Held {
    fn stop(pid: i32) -> Held {
        let pid = rustix::process::Pid::from_raw(pid).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
        Held(pid)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(self.0, rustix::process::Signal::CONT);
    }
}

/// A turn's first entries are stored only to a log that still ends where the conversation the
/// model was shown ends, a loaded one too. After a restart the harness keeps nothing, so the
/// turn loads the log; an entry written by hand while the model is held (SIGSTOP, once the
/// harness has connected to it) makes that append a conflict: the turn answers 409 saying
/// nothing of it was stored, the log holds the hand-written entry and nothing else new, and the
/// next turn is answered from the log as it is. The twin: the same turn with the model held
/// and nothing written is answered 200.
#[test]
fn a_log_changed_during_a_turns_first_model_call_stores_nothing_of_it() {
    let Ok(mut link) = start(Mode::Diagnostic) else {
        unreachable!("diagnostic mode needs no confinement")
    };
    let id = create_agent(&link, "moved");
    link.turn(&id, "first");
    let log = link.layout().agent_conversation(&id);
    let socket = link.layout().plugin_socket("link-plugin-model");
    let turn_path = format!("/v1/agents/{id}/turns");
    for write_by_hand in [false, true] {
        link.restart();
        let model = link.plugin_pid("link-plugin-model");
        let held = Held::stop(model);
        let (status, body) = std::thread::scope(|s| {
            let turn =
                s.spawn(|| link.http("POST", &turn_path, Some(json!({"message": "second"}))));
            wait_for("the harness to call the held model", || {
                (connections_to(&socket) > 0).then_some(())
            });
            if write_by_hand {
                append_by_hand(&log);
            }
            drop(held);
            turn.join().unwrap()
        });
        if !write_by_hand {
            assert_eq!(status, 200, "{body}");
            continue;
        }
        assert_eq!(status, 409, "{body}");
        let said = body["error"]["message"].as_str().unwrap_or_default();
        for part in [
            "changed while its turn ran",
            "nothing of this turn was stored",
        ] {
            assert!(said.contains(part), "the 409 says {part:?}: {body}");
        }
    }
    let entries = link.conversation(&id);
    assert_eq!(
        roles(&entries),
        ["user", "assistant", "user", "assistant", "user"],
        "{entries:?}"
    );
    assert_eq!(entries[4]["content"], "by hand");
    // Four user messages are in the log once this one is: first, second, by hand, third.
    let third = link.turn(&id, "third");
    assert_eq!(third["reply"], "link-local reply #4: third", "{third}");
    assert_eq!(link.conversation(&id).len(), 7);
}
