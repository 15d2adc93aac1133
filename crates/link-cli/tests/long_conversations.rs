//! Conversations longer than a frame (4 MiB) in both runtimes: a log written on disk in a
//! stopped runtime's state, as the store writes it, stays readable page by page, and the
//! agent still takes turns, also after a restart. `LNK_LONG_MIB` sets the log's size
//! (default 17 MiB: over the frame limit and over the model service's 16 MiB body limit).
//! The timings are printed for the figures.

use crate::support;
use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::runtime_process::RuntimeProcess;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

const AGENT: &str = "long";

/// Writes a log of at least `mib` MiB of user/assistant pairs at `path`, one compact JSON
/// line per entry as the store appends them; → the number of entries.
fn write_long_log(path: &Path, mib: usize) -> usize {
    let filler = "lorem ipsum dolor sit amet ".repeat(38);
    let mut bytes = Vec::with_capacity(mib << 20);
    let mut entries = 0;
    while bytes.len() < mib << 20 {
        let n = entries / 2;
        let entry = if entries % 2 == 0 {
            json!({"role": "user", "content": format!("question {n}: {filler}")})
        } else {
            json!({"role": "assistant", "content": format!("answer {n}: {filler}")})
        };
        serde_json::to_writer(&mut bytes, &entry).unwrap();
        bytes.push(b'\n');
        entries += 1;
    }
    std::fs::write(path, &bytes).unwrap();
    entries
}

fn size_mib() -> usize {
    std::env::var("LNK_LONG_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(17)
}

/// GET of the agent's first page: 200, the right total, a bounded page; → its entries.
fn first_page(rt: &RuntimeProcess, token: &str, total: usize, label: &str) -> Vec<Value> {
    let started = Instant::now();
    let resp = rt.get(&format!("/v1/agents/{AGENT}"), Some(token));
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let bytes = resp.body.len();
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let body = resp.json();
    eprintln!("{label}: GET first page of {total} entries: {ms:.1} ms, {bytes} bytes");
    assert_eq!(body["conversation_total"], total, "{label}");
    assert_eq!(body["conversation_start"], 0, "{label}");
    let page = body["conversation"].as_array().unwrap().clone();
    assert_eq!(page.len(), link_conversation::PAGE_ENTRIES, "{label}");
    assert_eq!(body["conversation_next"], page.len(), "{label}");
    assert!(bytes < 2 << 20, "{label}: a first page of {bytes} bytes");
    page
}

/// One turn, timed; → the conversation's total after it.
fn timed_turn(rt: &RuntimeProcess, token: &str, message: &str, label: &str) -> usize {
    let started = Instant::now();
    let resp = rt.post(
        &format!("/v1/agents/{AGENT}/turns"),
        token,
        json!({ "message": message }),
    );
    let ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(
        resp.status,
        200,
        "{label}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    let reply = resp.json()["reply"].as_str().unwrap().to_owned();
    assert!(reply.contains(message), "{label}: {reply}");
    eprintln!("{label}: turn: {ms:.1} ms");
    let tail = rt.get(
        &format!("/v1/agents/{AGENT}?tail=true&limit=2"),
        Some(token),
    );
    assert_eq!(tail.status, 200);
    let tail = tail.json();
    let last = tail["conversation"].as_array().unwrap();
    assert_eq!(last.len(), 2, "{tail}");
    assert_eq!(last[0]["content"], message, "{tail}");
    assert_eq!(last[1]["role"], "assistant", "{tail}");
    tail["conversation_total"].as_u64().unwrap() as usize
}

/// The whole scenario for one profile: `log` is where that runtime keeps the agent's log.
fn long_conversation(profile: &str, mode: &str, log: impl Fn(&StateRoot) -> PathBuf) {
    let root = support::state_root();
    let mut rt = support::up_in(&root, profile, mode);
    let token = rt.create_token();
    let created = rt.post("/v1/agents", &token, json!({ "name": AGENT }));
    assert_eq!(created.status, 201, "{:?}", created.json());
    let short = keeper_memory(&rt, profile);
    rt.down();

    let log = log(&root);
    assert!(log.is_file(), "{}", log.display());
    let mib = size_mib();
    let total = write_long_log(&log, mib);
    let label = format!("{profile} ({mode}), {mib} MiB log");

    let mut rt = support::up_in(&root, profile, mode);
    let started = keeper_memory(&rt, profile);
    eprintln!("{label}: the conversations' keeper after start: {started:?}");
    let page = first_page(&rt, &token, total, &label);
    assert_eq!(page[0]["role"], "user");
    assert!(page[0]["content"]
        .as_str()
        .unwrap()
        .starts_with("question 0:"));

    // Every page is bounded and they meet: the last ones, and an empty one past the end.
    let resp = rt.get(
        &format!("/v1/agents/{AGENT}?after={}&limit=10", total - 3),
        Some(&token),
    );
    assert_eq!(resp.status, 200);
    let end = resp.json();
    assert_eq!(end["conversation"].as_array().unwrap().len(), 3, "{end}");
    assert_eq!(end["conversation_start"], total - 3);
    assert!(end.get("conversation_next").is_none_or(Value::is_null));
    let resp = rt.get(&format!("/v1/agents/{AGENT}?limit=x"), Some(&token));
    assert_eq!(resp.status, 400);

    let after = timed_turn(&rt, &token, "hello after a long history", &label);
    assert_eq!(after, total + 2, "{label}");
    // Neither runtime keeps a conversation in memory where its conversations are kept (Mini's
    // harness, full Link's file store), not even for a moment: they count a log and read the
    // pages and the tail a turn needs from it, a line at a time. Against that process with a
    // short conversation, in the same run, both now and at its peak: holding this one once
    // (its bytes, or its entries, 1.7 times them, measured) would cost more than half the
    // log; reading pages costs a few MiB whatever the length (the page buffers and what the
    // allocator keeps).
    let long = keeper_memory(&rt, profile);
    eprintln!(
        "{label}: the conversations' keeper with a short conversation {short:?}, after a \
         page read and a turn with this one {long:?}"
    );
    for (what, before, now) in [
        ("resident memory", short.rss_kib, long.rss_kib),
        ("peak resident memory", short.peak_kib, long.peak_kib),
    ] {
        let grew_mib = now.saturating_sub(before) as f64 / 1024.0;
        assert!(
            grew_mib < mib as f64 / 2.0,
            "{label}: the conversations' keeper's {what} grew by {grew_mib:.1} MiB ({before} \
             → {now} KiB) with a {mib} MiB conversation"
        );
    }

    rt.down();
    let rt = support::up_in(&root, profile, mode);
    let label = format!("{label}, after a restart");
    first_page(&rt, &token, total + 2, &label);
    let after = timed_turn(&rt, &token, "and again after a restart", &label);
    assert_eq!(after, total + 4, "{label}");
    let after = timed_turn(&rt, &token, "a second turn, kept in memory", &label);
    assert_eq!(after, total + 6, "{label}");
    drop(rt);
}

/// The memory of a process, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy)]
struct Memory {
    /// `VmRSS`: resident now.
    rss_kib: u64,
    /// `VmHWM`: the most it was ever resident.
    peak_kib: u64,
}

/// The memory of the process that keeps the conversations and serves their pages: Mini's
/// harness, full Link's file store.
fn keeper_memory(rt: &RuntimeProcess, profile: &str) -> Memory {
    use link_protocol::routes::programs::{FILE_STORE, MINI_HARNESS};
    let keeper = if profile == "mini" {
        MINI_HARNESS
    } else {
        FILE_STORE
    };
    let (_, pid) = rt
        .plugin_pids()
        .into_iter()
        .find(|(name, _)| name == keeper)
        .unwrap_or_else(|| panic!("{profile} runs {keeper}"));
    let status = procfs::process::Process::new(pid)
        .unwrap()
        .status()
        .unwrap();
    Memory {
        rss_kib: status.vmrss.expect("a live process has VmRSS"),
        peak_kib: status.vmhwm.expect("a live process has VmHWM"),
    }
}

#[test]
fn mini_reads_and_turns_a_conversation_longer_than_a_frame() {
    long_conversation("mini", support::MODE, |root| {
        root.path()
            .join("data/mini-harness/agents")
            .join(AGENT)
            .join("conversation.jsonl")
    });
}

#[test]
fn link_reads_and_turns_a_conversation_longer_than_a_frame() {
    long_conversation("link", "diagnostic", |root| {
        link_protocol::layout::StateLayout::new(root.path()).agent_conversation(AGENT)
    });
}
