//! Issue 42's "leaks closed": no log holds what an agent was given or gave, a command's `PATH`
//! is a fixed system one, and an agent is always deletable whatever its commands did to the
//! modes of its files. Each test drives the real runtime through its HTTP contract.

use crate::support::{self, state_root};
use link_protocol::layout::StateLayout;
use serde_json::Value;

/// The `PATH` every agent's command gets, whatever the host's.
const FIXED_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A string no log would hold by chance: `what`, this test process and a counter.
fn marker(what: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    format!("lnkmark{what}{}q{n}", std::process::id())
}

/// Every file under the state root's `log/` that holds one of `markers`, with the line.
fn logged(root: &std::path::Path, markers: &[String]) -> Vec<String> {
    let dir = StateLayout::new(root).log_dir();
    let mut found = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
                continue;
            }
            let text =
                String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
            for line in text.lines() {
                if markers.iter().any(|m| line.contains(m.as_str())) {
                    found.push(format!("{}: {line}", path.display()));
                }
            }
        }
    }
    found
}

fn turn_text(reply: &Value) -> String {
    reply.to_string()
}

/// A refused write (its content and path a marker), an allowed one, a refused search pattern
/// and a plain message, through full Link and Mini: the replies carry them (the twin: the
/// runtime saw them), no log file does.
#[test]
fn no_log_holds_a_message_file_or_pattern() {
    if !support::sandbox_available() {
        return;
    }
    let root = state_root();
    let rt = support::spec("link", support::MODE)
        .env("RUST_LOG", "debug")
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    rt.create_agent("k");
    let (refused_path, refused_content) = (marker("rpath"), marker("rcontent"));
    let (kept_path, kept_content) = (marker("kpath"), marker("kcontent"));
    let (bad_pattern, pattern, said) = (marker("badpat"), marker("pat"), marker("said"));
    let (run_said, absolute) = (marker("run"), marker("abs"));
    let turns = [
        format!("write ../{refused_path}.txt: {refused_content}"),
        format!("write /{absolute}/x: {refused_content}"),
        format!("write {kept_path}.txt: {kept_content}"),
        format!("search ({bad_pattern}"),
        format!("search {pattern}"),
        format!("read {refused_path}"),
        format!("run: echo {run_said}"),
        format!("hello {said}"),
    ];
    let mut replies = String::new();
    for message in &turns {
        replies.push_str(&turn_text(&rt.turn("k", message)));
    }
    for seen in [&refused_path, &bad_pattern, &run_said] {
        assert!(replies.contains(seen.as_str()), "{seen} not in {replies}");
    }
    assert!(
        replies.contains("leaves the agent workspace"),
        "the write was refused: {replies}"
    );
    assert!(
        replies.contains("invalid search pattern"),
        "the pattern was refused: {replies}"
    );
    let markers = [
        refused_path,
        refused_content,
        kept_path,
        kept_content,
        bad_pattern,
        pattern,
        said.clone(),
        run_said,
        absolute,
    ];
    let mut rt = rt;
    rt.down();
    let leaked = logged(root.path(), &markers);
    assert!(
        leaked.is_empty(),
        "full Link's logs hold content:\n{}",
        leaked.join("\n")
    );
    // The twin: the logs are written at all (the refusal is there, as lengths and kinds).
    let file_tool = std::fs::read_to_string(
        StateLayout::new(root.path()).log_file(link_protocol::routes::programs::FILE_TOOL),
    )
    .unwrap_or_default();
    assert!(file_tool.contains("refused write of"), "{file_tool}");

    let mini_root = state_root();
    let mut mini = support::spec("mini", support::MODE)
        .env("RUST_LOG", "debug")
        .up_in(mini_root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    mini.create_agent("m");
    let (mini_said, mini_write) = (marker("minisaid"), marker("miniwrite"));
    let mut replies = String::new();
    for message in [
        format!("hello {mini_said}"),
        format!("write ../{mini_write}: {mini_write}"),
    ] {
        replies.push_str(&turn_text(&mini.turn("m", &message)));
    }
    assert!(replies.contains(&mini_said), "{replies}");
    mini.down();
    let leaked = logged(mini_root.path(), &[mini_said, mini_write]);
    assert!(
        leaked.is_empty(),
        "Mini's logs hold content:\n{}",
        leaked.join("\n")
    );
}

/// The host runs with a `PATH` holding a directory of its own; a command's is the fixed
/// system one.
#[test]
fn a_commands_path_is_the_fixed_system_one() {
    if !support::sandbox_available() {
        return;
    }
    let root = state_root();
    let mark = format!("/{}", marker("pathdir"));
    let host_path = format!(
        "{mark}:{}",
        std::env::var("PATH").unwrap_or_else(|_| FIXED_PATH.into())
    );
    let mut rt = support::spec("link", support::MODE)
        .env("PATH", &host_path)
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    rt.create_agent("p");
    let reply = rt.turn("p", "run: echo \"PATH=$PATH.\"");
    let stdout = reply["tool_calls"][0]["output"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("no stdout: {reply}"))
        .to_owned();
    rt.down();
    assert!(!stdout.contains(&mark), "the host's PATH leaked: {stdout}");
    assert_eq!(stdout.trim_end(), format!("PATH={FIXED_PATH}."), "{reply}");
}

/// A command closes directories of the workspace and the home to everyone (`chmod 000`) with
/// files in them (as root, all of them the agent's own uid): the agent is deleted all the
/// same, its directories are gone and its name can be created again.
#[test]
fn an_agent_is_deletable_whatever_its_commands_did_to_modes() {
    if !support::sandbox_available() {
        return;
    }
    let root = state_root();
    let mut rt = support::up(&root, "link");
    let layout = StateLayout::new(root.path());
    rt.create_agent("d");
    let close = "run: mkdir -p locked/inner \"$HOME/kept/deep\" && echo w > locked/inner/f \
                 && echo h > \"$HOME/kept/deep/f\" && chmod 000 locked/inner locked \
                 \"$HOME/kept/deep\" \"$HOME/kept\" && echo closed";
    let reply = rt.turn("d", close);
    assert!(
        reply["tool_calls"][0]["output"]["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("closed")),
        "{reply}"
    );
    let (workspace, home) = (layout.agent_workspace("d"), layout.agent_home("d"));
    assert!(workspace.join("locked").exists() && home.join("kept").exists());
    let conversation = layout.agent_dir("d");
    let (status, body) = rt.http("DELETE", "/v1/agents/d", None);
    assert_eq!(status, 200, "delete: {body}");
    assert!(!workspace.exists(), "{} is left", workspace.display());
    assert!(!conversation.exists(), "{} is left", conversation.display());
    assert!(!home.exists(), "{} is left", home.display());
    rt.create_agent("d");
    let again = rt.turn("d", "run: ls -a");
    assert_eq!(again["tool_calls"][0]["output"]["exit_code"], 0, "{again}");
    rt.down();
}

/// As an ordinary user (made for the test), whose commands run as that user: a command's
/// `chmod 000` on a workspace directory with files in it and on one of the home leaves the
/// agent deletable, its directories gone and its name free again.
#[test]
fn an_agent_is_deletable_by_an_ordinary_user_after_chmod_000() {
    use link_harness_conformance::fixture::{OpenParent, TestUser};
    use link_protocol::plugin::Profile;
    if !support::sandbox_available() {
        return;
    }
    let Some(user) = TestUser::or_skip("lnk-del") else {
        return;
    };
    // The programs where the user can reach them (the build may sit under a 0700 home).
    let parent = OpenParent::create("lnk-user-del").unwrap();
    let link = parent.programs(Profile::Link);
    let state = parent.state_for(&user);
    let (link_s, state_s) = (link.to_str().unwrap(), state.to_str().unwrap());
    let mut up = user.up(&link, "link", &state);
    let (code, token, err) = user.run(&[link_s, "token", "create", "--state", state_s]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_owned();
    let socket = state.join("run/connection.sock");
    let call = |method: &str, path: &str, body: Option<Value>| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let resp = rt
            .block_on(link_protocol::http::json(
                &socket,
                method,
                path,
                Some(&token),
                body.as_ref(),
            ))
            .expect("an answer");
        (resp.status, resp.json())
    };
    let create = || call("POST", "/v1/agents", Some(serde_json::json!({"name": "d"})));
    assert_eq!(create().0, 201);
    let close = "run: mkdir -p locked/inner \"$HOME/kept/deep\" && echo w > locked/inner/f \
                 && echo h > \"$HOME/kept/deep/f\" && chmod 000 locked/inner locked \
                 \"$HOME/kept/deep\" \"$HOME/kept\" && echo closed";
    let (status, reply) = call(
        "POST",
        "/v1/agents/d/turns",
        Some(serde_json::json!({ "message": close })),
    );
    assert_eq!(status, 200, "{reply}");
    assert!(reply.to_string().contains("closed"), "{reply}");
    let layout = StateLayout::new(&state);
    let (workspace, home) = (layout.agent_workspace("d"), layout.agent_home("d"));
    let (status, body) = call("DELETE", "/v1/agents/d", None);
    assert_eq!(status, 200, "delete: {body}");
    assert!(!workspace.exists(), "{} is left", workspace.display());
    assert!(!home.exists(), "{} is left", home.display());
    assert_eq!(create().0, 201, "the name is free again");
    let (code, _, err) = user.run(&[link_s, "down", "--state", state_s]);
    assert_eq!(code, 0, "{err}");
    let status = up.wait().unwrap();
    assert!(status.success(), "link up exited {status:?}");
}
