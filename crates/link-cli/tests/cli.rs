//! The client verbs through the real `link` binary: `token create` refuses a directory `link
//! up` never prepared, and `agent create|list|delete` and `turn` work on a running Mini with
//! the token from `--token`/`LNK_TOKEN`, never minting one of their own.

use crate::support::{self, state_root};
use std::path::Path;
use std::process::Output;

/// `link ARGS... --state STATE` with `LNK_TOKEN` set to `token` (unset when `None`).
fn link(args: &[&str], state: &Path, token: Option<&str>) -> Output {
    let mut cmd = support::link(args, state);
    cmd.env_remove("LNK_TOKEN");
    if let Some(t) = token {
        cmd.env("LNK_TOKEN", t);
    }
    cmd.output().expect("running link")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

/// The stored token hashes, one a line.
fn token_lines(state: &Path) -> Vec<String> {
    std::fs::read_to_string(state.join("auth/tokens"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn token_create_refuses_a_directory_link_up_never_prepared() {
    let root = state_root();
    let plain = root.path().join("not-a-runtime");
    std::fs::create_dir(&plain).unwrap();
    let out = link(&["token", "create", "--state"], &plain, None);
    assert!(!out.status.success(), "token create succeeded on {plain:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("is not a Link runtime state root")
            && err.contains("no run/ directory")
            && err.contains(&format!(
                "link up --profile mini --state {}",
                plain.display()
            )),
        "the error does not name the problem and the command: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "printed a token: {}",
        text(&out.stdout)
    );
    let left: Vec<_> = std::fs::read_dir(&plain).unwrap().flatten().collect();
    assert!(left.is_empty(), "token create wrote {left:?}");
    // Nor does revoke make its store or lock there.
    let out = support::link(&["token", "revoke", "--state"], &plain)
        .arg("a-token")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "token revoke succeeded on {plain:?}");
    assert!(
        err.contains("no run/ directory") && err.contains("link token revoke --state"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&plain).unwrap().flatten().collect();
    assert!(left.is_empty(), "token revoke wrote {left:?}");

    // A directory that does not exist stays that way.
    let missing = root.path().join("typo");
    let out = link(&["token", "create", "--state"], &missing, None);
    assert!(!out.status.success());
    assert!(!missing.exists(), "token create made {missing:?}");
}

#[test]
fn agent_verbs_and_turns_work_on_mini_with_one_token() {
    let root = state_root();
    let mut rt = support::up(&root, "mini");
    let state = root.path();

    let out = link(&["token", "create", "--state"], state, None);
    assert!(out.status.success(), "token create: {}", text(&out.stderr));
    let token = text(&out.stdout).trim().to_owned();
    assert!(token.starts_with("lnk_"), "{token}");
    let tokens = token_lines(state);

    // Without a token the connection verbs refuse and say how to get one; nothing is minted.
    for args in [
        &["turn", "alpha", "hi", "--state"][..],
        &["agent", "list", "--state"][..],
    ] {
        let out = link(args, state, None);
        assert!(!out.status.success(), "{args:?} ran without a token");
        let err = text(&out.stderr);
        assert!(
            err.contains("LNK_TOKEN") && err.contains("link token create --state"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(token_lines(state), tokens, "a token was minted without one");

    let out = link(
        &["agent", "create", "alpha", "--state"],
        state,
        Some(&token),
    );
    assert!(out.status.success(), "agent create: {}", text(&out.stderr));
    assert_eq!(json(&out)["id"], "alpha", "{}", text(&out.stdout));

    // `--token` works as well as LNK_TOKEN.
    let out = link(
        &["agent", "list", "--token", &token, "--state"],
        state,
        None,
    );
    assert!(out.status.success(), "agent list: {}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(
        listed.contains("\"alpha\""),
        "alpha is not listed: {listed}"
    );

    for n in 1..=3 {
        let out = link(&["turn", "alpha", "hello", "--state"], state, Some(&token));
        assert!(out.status.success(), "turn {n}: {}", text(&out.stdout));
        let reply = json(&out)["reply"].as_str().unwrap_or_default().to_owned();
        assert!(reply.contains(&format!("#{n}")), "turn {n}: {reply}");
    }
    assert_eq!(
        token_lines(state),
        tokens,
        "`link turn` changed the token file"
    );

    let out = link(
        &["agent", "delete", "alpha", "--state"],
        state,
        Some(&token),
    );
    assert!(out.status.success(), "agent delete: {}", text(&out.stdout));
    let out = link(&["agent", "list", "--state"], state, Some(&token));
    assert!(out.status.success());
    assert!(
        !text(&out.stdout).contains("\"alpha\""),
        "alpha is still listed: {}",
        text(&out.stdout)
    );
    // A refusal is printed and is a failure exit.
    let out = link(
        &["agent", "delete", "alpha", "--state"],
        state,
        Some(&token),
    );
    assert!(!out.status.success(), "deleting a deleted agent succeeded");
    let out = link(
        &["turn", "alpha", "hi", "--state"],
        state,
        Some("lnk_wrong"),
    );
    assert!(!out.status.success(), "a wrong token was accepted");
    assert_eq!(token_lines(state), tokens);
    rt.down();
}

/// Who the CLI talks to at `run/connection.sock` is checked against the runtime's pids file:
/// a process that is not its server (a replaced socket) gets nothing, not even the token;
/// the twin, with the listener on record as the server, gets the request.
#[test]
fn the_cli_sends_nothing_to_a_server_that_is_not_the_runtimes() {
    use std::io::Read;
    let root = state_root();
    let run = root.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let pids = run.join("pids.json");
    let on_record = |host: u32| {
        let file = serde_json::json!({ "host": host, "plugins": [] });
        std::fs::write(&pids, file.to_string()).unwrap();
    };
    let listener = std::os::unix::net::UnixListener::bind(run.join("connection.sock")).unwrap();
    let received = |listener: &std::os::unix::net::UnixListener| {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut got = vec![0; 4096];
        let n = stream.read(&mut got).unwrap_or(0);
        String::from_utf8_lossy(&got[..n]).into_owned()
    };

    on_record(1);
    let out = link(
        &["agent", "list", "--state"],
        root.path(),
        Some("tok-secret"),
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("not by its owner (pid 1)"), "{stderr}");
    assert_eq!(
        received(&listener),
        "",
        "a request reached a server not on record"
    );

    on_record(std::process::id());
    let state = root.path().to_owned();
    let call =
        std::thread::spawn(move || link(&["agent", "list", "--state"], &state, Some("tok-secret")));
    let request = received(&listener);
    assert!(request.starts_with("GET /v1/agents"), "{request}");
    assert!(request.contains("tok-secret"), "{request}");
    drop(listener);
    let _ = call.join().unwrap();
}

/// `link token create` whose output cannot be written — `/dev/full`, a closed standard output
/// (which the process gets as `/dev/null`), a pipe whose reader is gone — fails, says why, and
/// stores nothing: before, it exited 0 and stored a permanent valid token nobody received. The
/// twin: written to a file, the token is whole there and stored.
#[test]
fn token_create_stores_nothing_when_its_output_cannot_be_written() {
    let root = state_root();
    let state = root.path();
    std::fs::create_dir_all(state.join("run")).unwrap();
    let bin = env!("CARGO_BIN_EXE_link");
    let state_arg = state.display().to_string();
    let full = std::process::Command::new("sh")
        .args([
            "-c",
            r#"exec "$0" token create --state "$1" >/dev/full"#,
            bin,
        ])
        .arg(&state_arg)
        .output()
        .unwrap();
    let closed = std::process::Command::new("sh")
        .args(["-c", r#"exec "$0" token create --state "$1" >&-"#, bin])
        .arg(&state_arg)
        .output()
        .unwrap();
    // A pipe whose read end is closed before `link` starts: its write fails with EPIPE.
    let (read, write) = rustix::pipe::pipe().unwrap();
    drop(read);
    let mut cmd = support::link(&["token", "create", "--state"], state);
    cmd.stdout(std::process::Stdio::from(write));
    let broken = cmd.output().unwrap();
    for (what, out, reason) in [
        ("/dev/full", &full, "No space left on device"),
        ("a closed stdout", &closed, "standard output is /dev/null"),
        ("a closed pipe", &broken, "Broken pipe"),
    ] {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(
            err.contains(reason) && err.contains("no token was stored"),
            "{what}: {err}"
        );
        assert_eq!(token_lines(state), Vec::<String>::new(), "{what}: stored");
    }

    let file = state.join("token.out");
    let out = std::process::Command::new("sh")
        .args(["-c", r#"exec "$0" token create --state "$1" >"$2""#, bin])
        .arg(&state_arg)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let token = std::fs::read_to_string(&file).unwrap();
    let token = token.strip_suffix('\n').expect("a whole line");
    assert!(link_protocol::tokens::verify(&state.join("auth/tokens"), token).unwrap());
    assert_eq!(token_lines(state).len(), 1);
}

/// A tokens file with a damaged line (here not even UTF-8): before, every request was a 500
/// and `token create` failed "writing" the file. Now the damaged line is never valid, the good
/// token still works on Mini and on full Link (whose auth plugin reads the same store), and
/// `token create` refuses before it shows a token, naming the line; the file is unchanged.
#[test]
fn a_damaged_tokens_line_costs_no_good_token_and_token_create_names_it() {
    for profile in ["mini", "link"] {
        let root = state_root();
        let state = root.path();
        let mut rt = support::up(&root, profile);
        let out = link(&["token", "create", "--state"], state, None);
        assert!(out.status.success(), "token create: {}", text(&out.stderr));
        let token = text(&out.stdout).trim().to_owned();
        let file = state.join("auth/tokens");
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.extend_from_slice(b"\xff\xfe\n");
        std::fs::write(&file, &bytes).unwrap();

        let out = link(&["agent", "list", "--state"], state, Some(&token));
        assert!(out.status.success(), "{profile}: {}", text(&out.stderr));
        let out = link(&["agent", "list", "--state"], state, Some("lnk_not-stored"));
        assert!(!out.status.success(), "{profile}: a wrong token was let in");

        let out = link(&["token", "create", "--state"], state, None);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{profile}: {err}");
        assert!(
            err.contains("line(s) 2 are damaged") && err.contains("no token was created"),
            "{profile}: {err}"
        );
        assert!(out.stdout.is_empty(), "{profile}: showed a token");
        assert_eq!(std::fs::read(&file).unwrap(), bytes, "{profile}: changed");
        rt.down();
    }
}
