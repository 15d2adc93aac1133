//! A full disk (fault injection): the state root is a small tmpfs, filled to ENOSPC while
//! the runtime runs. A turn that cannot be stored answers 507 naming the state root, the log
//! on disk holds exactly the acknowledged entries (nothing partial), the host and every
//! plugin stay up, and once space is freed the next turn works. A disk that fills between
//! two appends of one full Link turn keeps what was stored and the 507 says so.
//!
//! Mounting needs root (CAP_SYS_ADMIN); where it is not permitted the tests print SKIPPED
//! with the reason, unless `LNK_REQUIRE_NATIVE=1` makes that a failure.

use crate::support;
use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::runtime_process::RuntimeProcess;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The tmpfs's size: room for the runtime's files, small enough to fill in a moment.
const SIZE: &str = "4m";

/// A tmpfs mounted on a state root; unmounted on drop, whatever happened (lazily when the
/// runtime still holds it), so a failing test leaves no mount behind.
struct Mount(PathBuf);

impl Mount {
    /// Mounts a tmpfs of [`SIZE`] on `dir`; `Err` with the reason when not permitted.
    fn tmpfs(dir: &Path) -> Result<Mount, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not running as root, so no tmpfs can be mounted".to_owned());
        }
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={SIZE},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs on {} failed: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Mount(dir.to_owned()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let done = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !done {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// The state root with a tmpfs on it, or `None` (SKIPPED printed) where mounting is not
/// permitted. Drop the mount before the root.
fn mounted_root() -> Option<(StateRoot, Mount)> {
    let root = support::state_root();
    match Mount::tmpfs(root.path()) {
        Ok(m) => Some((root, m)),
        Err(why) => {
            assert!(
                std::env::var("LNK_REQUIRE_NATIVE").as_deref() != Ok("1"),
                "a full-disk test is required (LNK_REQUIRE_NATIVE=1) but {why}"
            );
            link_harness_conformance::probe::skipped(&format!("SKIPPED: full disk: {why}"));
            None
        }
    }
}

/// Fills the file system holding `dir` with `dir/filler` until it answers ENOSPC.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("create the filler");
    for chunk in [64 * 1024, 4096, 512, 1] {
        let buf = vec![b'x'; chunk];
        loop {
            match f.write(&buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }
    let _ = f.sync_all();
    path
}

/// The agent's log on disk, found under `root` by name; every line must be a JSON entry.
fn log_on_disk(root: &Path, agent: &str) -> Vec<Value> {
    let path = find_log(root, agent)
        .unwrap_or_else(|| panic!("no conversation log of {agent} under {}", root.display()));
    let text = std::fs::read_to_string(&path).expect("read the log");
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{} ends in a partial line: {text:?}",
        path.display()
    );
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{} line {}: {e}: {line:?}", path.display(), n + 1))
        })
        .collect()
}

/// Every file or directory under `dir` whose name is `name`.
fn find_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_name() == name {
            found.push(entry.path());
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(find_named(&entry.path(), name));
        }
    }
    found
}

fn find_log(dir: &Path, agent: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let log = path.join("conversation.jsonl");
        if entry.file_name() == agent && log.is_file() {
            return Some(log);
        }
        if let Some(found) = find_log(&path, agent) {
            return Some(found);
        }
    }
    None
}

/// The agent's whole conversation over the HTTP contract (every page).
fn conversation(rt: &RuntimeProcess, token: &str, agent: &str) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let path = match all.len() {
            0 => format!("/v1/agents/{agent}"),
            n => format!("/v1/agents/{agent}?after={n}"),
        };
        let resp = rt.get(&path, Some(token));
        assert_eq!(resp.status, 200, "{:?}", resp.json());
        let body = resp.json();
        let page = body["conversation"].as_array().expect("a conversation");
        all.extend(page.iter().cloned());
        if body["conversation_next"].is_null() || page.is_empty() {
            return all;
        }
    }
}

/// The plugins `link status` lists, each checked alive in /proc.
fn alive_plugins(rt: &RuntimeProcess) -> Vec<String> {
    let mut names: Vec<_> = rt
        .plugin_pids()
        .into_iter()
        .map(|(name, pid)| {
            assert!(
                Path::new(&format!("/proc/{pid}")).exists(),
                "plugin {name} (pid {pid}) is gone: {}",
                rt.stderr()
            );
            name
        })
        .collect();
    names.sort();
    names
}

fn turn(rt: &RuntimeProcess, token: &str, agent: &str, message: &str) -> (u16, Value) {
    let resp = rt.post(
        &format!("/v1/agents/{agent}/turns"),
        token,
        json!({ "message": message }),
    );
    (resp.status, resp.json())
}

/// The runtime on `root`, a token, and agent `alpha` after one turn (`first`) answered 200.
fn up_after_a_first_turn(
    root: &StateRoot,
    profile: &str,
    mode: &str,
) -> (RuntimeProcess, String, &'static str) {
    let rt = support::up_in(root, profile, mode);
    let token = rt.create_token();
    let agent = "alpha";
    let created = rt.post("/v1/agents", &token, json!({ "name": agent }));
    assert_eq!(created.status, 201, "{:?}", created.json());
    let (status, body) = turn(&rt, &token, agent, "first");
    assert_eq!(status, 200, "{body}");
    (rt, token, agent)
}

/// The scenario, for one profile and mode.
fn full_disk(profile: &str, mode: &str) {
    let Some((root, mount)) = mounted_root() else {
        return;
    };
    let state = root.path().to_owned();
    let (mut rt, token, agent) = up_after_a_first_turn(&root, profile, mode);
    let acknowledged = conversation(&rt, &token, agent);
    assert!(!acknowledged.is_empty());
    let plugins = alive_plugins(&rt);

    let filler = fill(&state);
    // Larger than any page a file already holds, so the append needs new blocks.
    let big = "y".repeat(16 * 1024);
    let (status, body) = turn(&rt, &token, agent, &big);
    assert_eq!(status, 507, "a turn on a full disk: {body}");
    assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("the disk holding {} is full", state.display())),
        "the message names the state root: {body}"
    );
    println!("{profile} ({mode}) on a full disk: {status} {body}");
    // A failed create leaves nothing either.
    let refused = rt.post("/v1/agents", &token, json!({ "name": "beta" }));
    assert_eq!(refused.status, 507, "{:?}", refused.json());
    let left = find_named(&state, "beta");
    assert!(left.is_empty(), "a failed create left {left:?}");
    let list = rt.get("/v1/agents", Some(&token)).json();
    assert!(
        !list.to_string().contains("\"beta\""),
        "a failed create is listed: {list}"
    );

    assert_eq!(
        log_on_disk(&state, agent),
        acknowledged,
        "the log on disk is exactly the acknowledged entries"
    );
    assert_eq!(
        rt.try_wait().expect("the host's status"),
        None,
        "the host stopped: {}",
        rt.stderr()
    );
    assert_eq!(
        alive_plugins(&rt),
        plugins,
        "plugins changed on a full disk"
    );

    std::fs::remove_file(&filler).expect("remove the filler");
    let (status, body) = turn(&rt, &token, agent, "after space was freed");
    assert_eq!(status, 200, "{body}");
    let after = conversation(&rt, &token, agent);
    assert_eq!(after[..acknowledged.len()], acknowledged[..], "{after:?}");
    assert!(
        after[acknowledged.len()..]
            .iter()
            .any(|e| e["content"] == "after space was freed"),
        "{after:?}"
    );
    assert!(
        !after.iter().any(|e| e["content"] == big.as_str()),
        "the refused turn was stored"
    );
    assert_eq!(log_on_disk(&state, agent), after);
    assert_eq!(alive_plugins(&rt), plugins);
    // Nothing acknowledged is lost across a restart either, and the runtime starts.
    rt.restart();
    assert_eq!(conversation(&rt, &token, agent), after);
    let (status, body) = turn(&rt, &token, agent, "after a restart");
    assert_eq!(status, 200, "{body}");
    rt.down();
    drop(rt);
    drop(mount);
    drop(root);
}

/// `link up` on a state root whose disk is full refuses, naming the file it could not write
/// and saying to free space (before, `link: No space left on device (os error 28)` alone),
/// and leaves no process. The twin: the same `up` once space is freed starts, and stops.
#[test]
fn up_on_a_full_disk_names_what_it_could_not_write_and_what_to_do() {
    let Some((root, mount)) = mounted_root() else {
        return;
    };
    let filler = fill(root.path());
    let out = support::up_refused(root.path(), "mini");
    let msg = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains("No space left on device")
            && msg.contains(&root.path().display().to_string())
            && msg.contains("the file system is full: free space on it and run this again"),
        "{msg}"
    );
    std::fs::remove_file(&filler).unwrap();
    let mut rt = support::up(&root, "mini");
    let started = rt.started_processes();
    rt.down();
    support::assert_gone(&started);
    drop(mount);
}

#[test]
fn mini_answers_507_on_a_full_disk_and_recovers() {
    let mode = if support::sandbox_available() {
        "confined"
    } else {
        "diagnostic"
    };
    full_disk("mini", mode);
}

#[test]
fn link_answers_507_on_a_full_disk_and_recovers() {
    full_disk("link", "diagnostic");
}

/// The bytes free in the last page of `path`: an append that fits needs no new block.
fn page_slack(path: &Path) -> usize {
    const PAGE: u64 = 4096;
    let len = std::fs::metadata(path).expect("the log's size").len();
    ((PAGE - len % PAGE) % PAGE) as usize
}

/// Full Link stores a turn step by step: the message with the model's first reply in one
/// append, then each tool result and later reply as it happens, so a disk can fill between two
/// of them. Two turns on a full disk, each sized against the slack of the log's last page (an
/// append that fits it needs no new block):
/// - a plain message that would fit alone but not with its reply: 507 saying nothing was
///   stored, and the log is as it was;
/// - a `search` whose message and tool call fit and whose tool result does not: 507 saying
///   the message and the entry after it stay, the log holds exactly those (no partial line).
///
/// The runtime goes on once space is freed.
#[test]
fn link_says_what_of_a_turn_was_kept_when_the_disk_fills_mid_turn() {
    let Some((root, mount)) = mounted_root() else {
        return;
    };
    let state = root.path().to_owned();
    let (mut rt, token, agent) = up_after_a_first_turn(&root, "link", "diagnostic");
    let log = find_log(&state, agent).expect("the agent's log");
    let plugins = alive_plugins(&rt);
    // A probe of a search turn (message, tool call, tool result, reply): its first two lines
    // each hold the pattern once.
    let (status, body) = turn(&rt, &token, agent, "search Q");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tool_calls"][0]["tool"], "code", "{body}");
    let text = std::fs::read_to_string(&log).expect("read the log");
    let lines: Vec<&str> = text.lines().collect();
    let probe = &lines[lines.len() - 4..lines.len() - 2];
    assert!(probe[0].contains("\"search Q\""), "{probe:?}");
    for line in probe {
        assert_eq!(line.matches('Q').count(), 1, "{line}");
    }
    let pair = probe.iter().map(|l| l.len() + 1).sum::<usize>();
    let pad = |rt: &RuntimeProcess, room: usize| {
        while page_slack(&log) < room {
            let (status, body) = turn(rt, &token, agent, &"p".repeat(300));
            assert_eq!(status, 200, "{body}");
        }
    };

    // The plain message fills the slack; its reply would need a new block.
    pad(&rt, 256);
    let empty = json!({"content": "", "role": "user"}).to_string().len() + 1;
    let message = "y".repeat(page_slack(&log) - empty);
    let acknowledged = conversation(&rt, &token, agent);
    let filler = fill(&state);
    let (status, body) = turn(&rt, &token, agent, &message);
    assert_eq!(
        status, 507,
        "neither the message nor its reply could be stored: {body}"
    );
    let said = body["error"]["message"].as_str().unwrap_or_default();
    for part in ["conversation log", "nothing was stored"] {
        assert!(said.contains(part), "the 507 says {part:?}: {body}");
    }
    assert_eq!(
        log_on_disk(&state, agent),
        acknowledged,
        "the log is as it was"
    );
    std::fs::remove_file(&filler).expect("remove the filler");

    // The search's message and tool call fill the slack, to the byte or one short: each
    // pattern byte is in both lines.
    pad(&rt, pair + 256);
    let pattern = "y".repeat(1 + (page_slack(&log) - pair) / 2);
    let message = format!("search {pattern}");
    let acknowledged = conversation(&rt, &token, agent);
    let filler = fill(&state);
    let (status, body) = turn(&rt, &token, agent, &message);
    assert_eq!(status, 507, "the tool's result could not be stored: {body}");
    let said = body["error"]["message"].as_str().unwrap_or_default();
    for part in [
        format!("the disk holding {} is full", state.display()),
        "your message and the entry after it had been stored".to_owned(),
        "the model's final reply is not in it".to_owned(),
        "sending the message again would store it".to_owned(),
    ] {
        assert!(said.contains(&part), "the 507 says {part:?}: {body}");
    }
    let on_disk = log_on_disk(&state, agent);
    assert_eq!(on_disk[..acknowledged.len()], acknowledged[..]);
    let kept = &on_disk[acknowledged.len()..];
    assert_eq!(
        kept.len(),
        2,
        "the message and its tool call, nothing after: {kept:?}"
    );
    assert_eq!(kept[0], json!({"role": "user", "content": message}));
    assert_eq!(kept[1]["role"], "assistant", "{kept:?}");
    assert!(
        kept[1]["tool_calls"].to_string().contains(&pattern),
        "{kept:?}"
    );
    assert_eq!(conversation(&rt, &token, agent), on_disk);
    assert_eq!(
        rt.try_wait().expect("the host's status"),
        None,
        "{}",
        rt.stderr()
    );
    assert_eq!(alive_plugins(&rt), plugins);

    std::fs::remove_file(&filler).expect("remove the filler");
    let (status, body) = turn(&rt, &token, agent, "after space was freed");
    assert_eq!(status, 200, "{body}");
    let after = conversation(&rt, &token, agent);
    assert_eq!(after[..on_disk.len()], on_disk[..]);
    assert_eq!(log_on_disk(&state, agent), after);
    rt.restart();
    assert_eq!(conversation(&rt, &token, agent), after);
    rt.down();
    drop(rt);
    drop(mount);
    drop(root);
}
