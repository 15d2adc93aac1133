//! State is private: whatever umask `link up` starts with, what the host and its plugins
//! create under the state root is owner-only, and a second local user can neither list the
//! root nor read an agent's conversation. Secrets reach only the plugin that needs them.

use crate::support::{self, state_root};
use link_harness_conformance::fixture::{OpenParent, StateRoot, TestUser};
use link_harness_conformance::runtime_process::RuntimeProcess;
use link_protocol::plugin::{Profile, ENV_MODEL_REMOTE_KEY};
use link_protocol::routes::programs;
use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Every path under `root` (not following symlinks), with `root` itself.
fn walk(root: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue; // removed meanwhile (a temporary file)
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                todo.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
            }
        }
        out.push((path, meta));
    }
    out
}

/// Mini under the default umask (022, the test process's), with an agent and one turn.
fn mini_with_a_turn(root: &StateRoot) -> (RuntimeProcess, PathBuf) {
    let rt = support::up(root, "mini");
    let token = rt.create_token();
    let created = rt.post("/v1/agents", &token, serde_json::json!({ "name": "alpha" }));
    assert_eq!(created.status, 201, "{:?}", created.json());
    let turn = rt.post(
        "/v1/agents/alpha/turns",
        &token,
        serde_json::json!({ "message": "private words" }),
    );
    assert_eq!(turn.status, 200, "{:?}", turn.json());
    let log = walk(root.path())
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| p.ends_with("alpha/conversation.jsonl"))
        .expect("alpha's conversation log on disk");
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("private words"));
    (rt, log)
}

#[test]
fn nothing_under_the_state_root_is_readable_by_group_or_others() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let umask = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|m| u32::from_str_radix(m.trim(), 8).unwrap())
        .expect("Umask in /proc/self/status");
    // Under a stricter umask this test would prove nothing about the host.
    assert_eq!(
        umask & 0o077,
        0o022,
        "the test runs under the default umask"
    );
    let root = state_root();
    // What the kit made before the host ran (the root and `link`'s own HOME) is not the
    // host's; it must still be unreachable, behind the owner-only top directories.
    let before: BTreeSet<PathBuf> = walk(root.path()).into_iter().map(|(p, _)| p).collect();
    let (mut rt, _log) = mini_with_a_turn(&root);
    let entries = walk(root.path());
    let open: Vec<String> = entries
        .iter()
        .filter(|(p, m)| {
            !m.file_type().is_symlink() && m.mode() & 0o077 != 0 && !before.contains(p)
        })
        .map(|(p, m)| format!("{:o} {}", m.mode() & 0o7777, p.display()))
        .collect();
    assert!(
        open.is_empty(),
        "group/other bits on what the runtime made:\n{}",
        open.join("\n")
    );
    let top = ["", "run", "log", "auth", "home", "data", "control"];
    for dir in top {
        let path = root.path().join(dir);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", path.display());
    }
    for (path, _) in entries.iter().filter(|(p, _)| before.contains(p)) {
        let rel = path.strip_prefix(root.path()).unwrap();
        assert!(
            rel.as_os_str().is_empty() || top.iter().any(|t| !t.is_empty() && rel.starts_with(t)),
            "{} is outside the owner-only top directories",
            path.display()
        );
    }
    let checked = entries.len() - before.len();
    assert!(checked > 20, "only {checked} paths made by the runtime");
    rt.down();
}

fn assert_denied(what: &str, (code, out, err): (i32, String, String)) {
    assert!(
        code != 0 && code != 126 && code != 127,
        "{what}: exit {code} (127/126 would mean a missing tool)\nstdout: {out}\nstderr: {err}"
    );
    assert!(
        err.contains("Permission denied"),
        "{what}: not refused for permissions (exit {code}): {err}"
    );
    assert!(!out.contains("private words"), "{what} leaked: {out}");
}

#[test]
fn a_second_local_user_can_neither_list_nor_read_the_state() {
    let Some(user) = TestUser::or_skip("lnk-test") else {
        return;
    };
    let parent = OpenParent::create("lnk-private").unwrap();
    // The allowed twin: a world-readable file beside the state root, so the path there is
    // open to the user and a refusal below is the state root's own doing.
    let twin = parent.0.join("twin.txt");
    std::fs::write(&twin, "anyone may read this").unwrap();
    std::fs::set_permissions(&twin, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, out, err) = user.run(&["cat", twin.to_str().unwrap()]);
    assert_eq!(
        (code, out.as_str()),
        (0, "anyone may read this"),
        "the twin: {err}"
    );
    let (code, out, err) = user.run(&["ls", parent.0.to_str().unwrap()]);
    assert_eq!(code, 0, "listing the open parent: {err}");
    assert!(out.contains("twin.txt"), "{out}");

    let root = StateRoot::create_in(&parent.0).unwrap();
    let (mut rt, log) = mini_with_a_turn(&root);
    assert_denied(
        "reading the conversation",
        user.run(&["cat", log.to_str().unwrap()]),
    );
    assert_denied(
        "listing the state root",
        user.run(&["ls", root.path().to_str().unwrap()]),
    );
    assert_denied(
        "reading a plugin log",
        user.run(&[
            "cat",
            rt.layout().log_file("link-mini-harness").to_str().unwrap(),
        ]),
    );
    rt.down();
    drop(root);
}

/// True when the environment of `pid` holds `needle` anywhere (name or value).
fn environ_holds(name: &str, pid: i32, needle: &str) -> bool {
    let environ = std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/environ of {name}: {e}"));
    let text = String::from_utf8_lossy(&environ);
    assert!(
        text.contains("PATH="),
        "{name} lacks PATH: the environ read is wrong"
    );
    text.contains(needle)
}

/// `link model-key VERB --state ROOT` with `stdin` → (exit code, stdout, stderr).
fn model_key(verb: &str, root: &Path, stdin: &str) -> (i32, String, String) {
    let mut cmd = support::link(&["model-key", verb, "--state"], root);
    let out = support::output_with_stdin(&mut cmd, stdin);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn the_remote_model_key_is_kept_by_the_secret_plugin_and_in_no_environment() {
    let root = state_root();
    let secret = "sk-lnk-test-never-elsewhere";
    // The key in the environment, as before: refused, naming the verb, nothing started.
    let failure = support::spec("link", support::MODE)
        .env(ENV_MODEL_REMOTE_KEY, secret)
        .up_in(root.path())
        .err()
        .expect("link up refuses a key in its environment");
    assert!(
        failure.output().contains("link model-key set"),
        "{}",
        failure.output()
    );
    let layout = link_protocol::layout::StateLayout::new(root.path());
    assert!(!layout.pids_file().exists());
    assert_eq!(layout.present_sockets(), Vec::<PathBuf>::new());

    let mut rt = support::spec("link", support::MODE)
        .env(
            link_protocol::plugin::ENV_MODEL_REMOTE_URL,
            "http://127.0.0.1:9",
        )
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    // A data area only for the plugins that keep one (the others may make none).
    for plugin in link_protocol::manifest::programs_of(Profile::Link) {
        let made = layout.data(plugin).is_dir();
        let keeps = link_protocol::manifest::find(plugin).unwrap().data;
        assert_eq!(made, keeps, "{plugin}");
    }
    let (code, _, err) = model_key("set", root.path(), &format!("{secret}\n"));
    assert_eq!(code, 0, "{err}");
    // Kept by the secret plugin's file backend, owner-only.
    let stored = layout
        .data(programs::SECRET)
        .join("secrets/model.remote-key");
    let meta = std::fs::metadata(&stored).unwrap_or_else(|e| panic!("{}: {e}", stored.display()));
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&stored).unwrap().contains(secret));
    // In no plugin's environment and no log.
    let plugins = rt.plugin_pids();
    assert_eq!(
        plugins.len(),
        link_protocol::manifest::programs_of(Profile::Link).len(),
        "{plugins:?}"
    );
    for (name, pid) in &plugins {
        assert!(!environ_holds(name, *pid, secret), "{name} has the key");
    }
    for entry in std::fs::read_dir(layout.log_dir()).unwrap() {
        let path = entry.unwrap().path();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        assert!(!text.contains(secret), "{} holds the key", path.display());
    }
    // A bad key is refused without repeating it, and the stored one stays.
    let (code, _, err) = model_key("set", root.path(), "sk two words\n");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("nothing was stored") && !err.contains("two words"),
        "{err}"
    );
    assert!(std::fs::read_to_string(&stored).unwrap().contains(secret));
    // Deleted once; the second delete finds nothing.
    let (code, out, err) = model_key("delete", root.path(), "");
    assert_eq!((code, out.trim()), (0, r#"{"deleted":true}"#), "{err}");
    assert!(!stored.exists());
    let (code, out, _) = model_key("delete", root.path(), "");
    assert_eq!((code, out.trim()), (0, r#"{"deleted":false}"#));
    rt.down();
}

#[test]
fn mini_keeps_no_remote_model_key_and_says_so() {
    let root = state_root();
    let mut rt = support::up(&root, "mini");
    // Of Mini's plugins only its harness keeps data.
    let layout = link_protocol::layout::StateLayout::new(root.path());
    for plugin in link_protocol::manifest::programs_of(Profile::Mini) {
        let made = layout.data(plugin).is_dir();
        let keeps = link_protocol::manifest::find(plugin).unwrap().data;
        assert_eq!(made, keeps, "{plugin}");
    }
    let (code, _, err) = model_key("set", root.path(), "sk-mini\n");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("Mini has no secret plugin"), "{err}");
    assert!(!err.contains("sk-mini"), "{err}");
    // No runtime at all: nothing is sent, and the error says how to start one.
    rt.down();
    let (code, _, err) = model_key("set", root.path(), "sk-mini\n");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("link up --profile link"), "{err}");
}

/// `link model-key set` on a state root it refuses (here a symlink) refuses before it reads
/// the key: the refusal comes while its standard input is a pipe still open and never
/// written. Before, it read standard input to its end first, so it took the key of a command
/// it was about to refuse, and here it waited for an end that never came.
#[test]
fn model_key_set_refuses_an_unsafe_state_root_before_reading_the_key() {
    use std::io::Read;
    use std::process::Stdio;
    let root = state_root();
    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let alias = root.path().join("alias");
    std::os::unix::fs::symlink(&real, &alias).unwrap();
    let mut child = support::link(&["model-key", "set", "--state"], &alias)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open and never written until the command has ended (or been given up on).
    let stdin = child.stdin.take();
    let limit = std::time::Duration::from_secs(30);
    let exited = link_os::process::wait_or_kill(&mut child, limit).unwrap();
    drop(stdin);
    let status = exited.expect("model-key set waited for standard input on a refused root");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("state root {} is a symlink", alias.display())),
        "{err}"
    );
}
