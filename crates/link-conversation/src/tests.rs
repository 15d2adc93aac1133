use crate::log::still;
use crate::*;
use serde_json::{json, Value};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[test]
fn intact_log() {
    let s = scan(b"{\"role\":\"user\"}\n{\"role\":\"assistant\"}\n").unwrap();
    assert_eq!(s.entries.len(), 2);
    assert_eq!(s.torn, None);
    assert_eq!(s.intact_len, 37);
    assert_eq!(scan(b"").unwrap().entries.len(), 0);
}

#[test]
fn torn_tail_without_newline() {
    let s = scan(b"{\"role\":\"user\"}\n{\"role\":\"assi").unwrap();
    assert_eq!(s.entries.len(), 1);
    assert_eq!(s.intact_len, 16);
    assert!(s.torn.unwrap().contains("line 2 has no newline"));
    // Valid JSON without its newline is still an unfinished write.
    let s = scan(b"{\"role\":\"user\"}").unwrap();
    assert_eq!(s.entries.len(), 0);
    assert!(s.torn.is_some());
}

#[test]
fn torn_last_line_with_newline() {
    let s = scan(b"{\"role\":\"user\"}\n\0\0\0\n").unwrap();
    assert_eq!(s.entries.len(), 1);
    assert_eq!(s.intact_len, 16);
    assert!(s.torn.unwrap().contains("last line 2"));
}

#[test]
fn corrupt_inner_line_is_an_error() {
    let e = scan(b"{\"role\":\"user\"}\nnope\n{\"role\":\"user\"}\n").unwrap_err();
    assert!(e.contains("line 2"), "{e}");
}

/// A fresh directory under `$HOME/.cache/lnk-t`, removed on drop.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Temp {
        let dir = PathBuf::from(std::env::var("HOME").unwrap()).join(format!(
            ".cache/lnk-t/conversation-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Temp(dir)
    }

    /// A temporary directory holding one empty log.
    fn log(name: &str) -> (Temp, Log) {
        let t = Temp::new(name);
        let path = t.0.join("conversation.jsonl");
        create(&path).unwrap();
        (t, Log::new(path))
    }

    /// An agent directory `<id>/conversation.jsonl` holding `bytes`.
    fn agent(&self, id: &str, bytes: &[u8]) -> Log {
        let path = self.0.join(id).join("conversation.jsonl");
        create(&path).unwrap();
        std::fs::write(&path, bytes).unwrap();
        Log::new(path)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn syncs() -> (usize, usize, usize) {
    sync::COUNTS.with(|c| c.get())
}

#[test]
fn appends_remember_the_log_and_count_it() {
    let (_dir, log) = Temp::log("known");
    let (_, known) = log.read().unwrap();
    let known = known.expect("an empty log is intact");
    assert_eq!(known.entries, 0);
    let done = log
        .append(&[user("a"), user("b")], Some(0), Some(known))
        .unwrap();
    assert_eq!((done.count, done.total), (2, 2));
    let known = done.known.expect("nobody else wrote");
    assert!(still(&File::open(&log.path).unwrap(), &known));
    let done = log.append(&[user("c")], Some(2), Some(known)).unwrap();
    assert_eq!(done.total, 3);
    let (scan, again) = log.read().unwrap();
    assert_eq!(scan.entries.len(), 3);
    assert_eq!(
        again, done.known,
        "a full scan finds what the append remembered"
    );
    // An empty append changes nothing it knows.
    let empty = log.append(&[], Some(3), done.known).unwrap();
    assert_eq!(empty.total, 3);
    assert_eq!(empty.known.unwrap().entries, 3);
}

#[test]
fn a_wrong_expectation_writes_nothing() {
    let (dir, log) = Temp::log("expect");
    let done = log.append(&[user("a")], None, None).unwrap();
    let before = std::fs::read(&log.path).unwrap();
    for (want, known) in [(5, done.known), (0, done.known), (5, None), (0, None)] {
        let e = log.append(&[user("b")], Some(want), known).err().unwrap();
        assert!(matches!(e, Error::Conflict { .. }), "{e}");
        assert!(e.to_string().contains("holds 1 entries"), "{e}");
        assert!(e.to_string().contains("nothing was appended"), "{e}");
        assert_eq!(std::fs::read(&log.path).unwrap(), before);
    }

    // A torn log is not the log any caller expected: refused, torn tail kept, nothing
    // recorded.
    let mut torn = before.clone();
    torn.extend_from_slice(br#"{"role":"us"#);
    std::fs::write(&log.path, &torn).unwrap();
    let e = log.append(&[user("b")], Some(1), None).err().unwrap();
    assert!(matches!(e, Error::Conflict { .. }), "{e}");
    assert!(e.to_string().contains("torn tail"), "{e}");
    assert_eq!(std::fs::read(&log.path).unwrap(), torn);
    assert!(!log.repairs_path().exists());
    let mut names: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["conversation.acked", "conversation.jsonl"],
        "only the log and its count are there"
    );
}

#[test]
fn changes_by_others_are_never_trusted() {
    let (_dir, log) = Temp::log("others");
    let done = log.append(&[user("a"), user("b")], None, None).unwrap();
    let known = done.known.unwrap();
    let intact = std::fs::read(&log.path).unwrap();

    // A torn tail written behind the store's back: refused with `expect`, repaired
    // without it.
    let mut torn = intact.clone();
    torn.extend_from_slice(br#"{"role":"user","con"#);
    std::fs::write(&log.path, &torn).unwrap();
    assert!(!still(&File::open(&log.path).unwrap(), &known));
    let e = log
        .append(&[user("c")], Some(2), Some(known))
        .err()
        .unwrap();
    assert!(matches!(e, Error::Conflict { .. }), "{e}");
    assert!(e.to_string().contains("torn"), "{e}");
    assert_eq!(std::fs::read(&log.path).unwrap(), torn);
    let done = log.append(&[user("c")], None, Some(known)).unwrap();
    assert!(done.repaired.is_some());
    assert_eq!(done.total, 3);

    // The last line overwritten in place with as many bytes: its size and inode stay,
    // yet the broken line is found.
    let known = done.known.unwrap();
    let mut bytes = std::fs::read(&log.path).unwrap();
    let n = bytes.len();
    bytes[n - 3] = b'\0';
    std::fs::write(&log.path, &bytes).unwrap();
    let f = File::open(&log.path).unwrap();
    assert_eq!(f.metadata().unwrap().len(), known.len());
    assert!(!still(&f, &known));
    // That line was acknowledged, so this is no torn append: refused, not cut...
    let e = log.append(&[user("d")], None, Some(known)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shortened {
                found: 2,
                acknowledged: 3,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(std::fs::read(&log.path).unwrap(), bytes);
    // ...until the count is removed, as the error says; then it is repaired and recorded.
    std::fs::remove_file(log.acked_path()).unwrap();
    let done = log.append(&[user("d")], None, Some(known)).unwrap();
    assert!(done.repaired.unwrap().reason.contains("last line 3"));
    assert_eq!(done.total, 3);
}

#[test]
fn entries_need_a_role() {
    assert!(check_entries(&[json!({"role": "user", "content": "x"})]).is_ok());
    assert!(matches!(
        check_entries(&[user("a"), json!({"content": "x"})]),
        Err(Error::BadEntry { index: 1 })
    ));
    assert!(check_entries(&[json!("x")]).is_err());
    // A bad entry anywhere means none is appended.
    let (_dir, log) = Temp::log("role");
    let e = log
        .append(&[user("a"), json!({"role": 1})], None, None)
        .err()
        .unwrap();
    assert!(e.to_string().contains("entry 1"), "{e}");
    assert_eq!(std::fs::read(&log.path).unwrap(), b"");
}

#[test]
fn a_torn_tail_is_reported_then_cut_and_recorded_on_the_next_append() {
    let (_dir, log) = Temp::log("torn");
    log.append(&[user("a"), user("b")], None, None).unwrap();
    let intact = std::fs::read(&log.path).unwrap();
    let mut torn = intact.clone();
    torn.extend_from_slice(br#"{"role":"user","content":"half"#);
    std::fs::write(&log.path, &torn).unwrap();

    // Reported, with the intact entries, and nothing changes by reading.
    let (scan, known) = log.read().unwrap();
    assert_eq!(scan.entries.len(), 2);
    assert!(scan.torn.as_deref().unwrap().contains("no newline"));
    assert_eq!(known, None, "a torn log is never remembered");
    assert_eq!(std::fs::read(&log.path).unwrap(), torn);
    assert!(!log.repairs_path().exists());

    // The next append cuts exactly the tail, records it, then appends cleanly.
    let done = log.append(&[user("again")], None, known).unwrap();
    let repair = done.repaired.expect("the tail was cut");
    assert!(repair.reason.contains("no newline"), "{repair:?}");
    assert_eq!(repair.truncated_at, intact.len() as u64);
    assert_eq!(repair.removed_bytes, torn.len() - intact.len());
    assert_eq!(repair.recorded_in, log.repairs_path());
    assert_eq!(done.total, 3);
    let after = std::fs::read(&log.path).unwrap();
    assert!(
        after.starts_with(&intact),
        "intact lines kept byte for byte"
    );
    assert_eq!(
        &after[intact.len()..],
        b"{\"content\":\"again\",\"role\":\"user\"}\n"
    );
    let repairs = std::fs::read_to_string(log.repairs_path()).unwrap();
    assert_eq!(repairs.lines().count(), 1);
    let record: Value = serde_json::from_str(repairs.lines().next().unwrap()).unwrap();
    assert_eq!(record["truncated_at"], intact.len());
    assert_eq!(record["removed_bytes"], torn.len() - intact.len());
    assert_eq!(record["removed"], r#"{"role":"user","content":"half"#);
    assert_eq!(record["file"], log.path.display().to_string());
    assert!(record["reason"].as_str().unwrap().contains("no newline"));
    assert!(record["unix_ms"].as_u64().unwrap() > 0);

    // Intact again: the next append repairs nothing and records nothing.
    let (scan, known) = log.read().unwrap();
    assert_eq!((scan.entries.len(), scan.torn), (3, None));
    let done = log.append(&[user("more")], Some(3), known).unwrap();
    assert!(done.repaired.is_none());
    assert_eq!(
        std::fs::read_to_string(log.repairs_path()).unwrap(),
        repairs
    );

    // An append of no entries only repairs.
    let before = std::fs::read(&log.path).unwrap();
    let mut torn = before.clone();
    torn.extend_from_slice(b"\0\0\n");
    std::fs::write(&log.path, &torn).unwrap();
    let done = log.append(&[], None, None).unwrap();
    assert!(done.repaired.unwrap().reason.contains("last line 5"));
    assert_eq!((done.count, done.total), (0, 4));
    assert_eq!(std::fs::read(&log.path).unwrap(), before);
    assert_eq!(
        std::fs::read_to_string(log.repairs_path())
            .unwrap()
            .lines()
            .count(),
        2
    );
}

#[test]
fn a_damaged_middle_line_isolates_only_that_agent() {
    let t = Temp::new("isolation");
    let good =
        b"{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"assistant\",\"content\":\"ho\"}\n";
    t.agent("a", good);
    let mut corrupt = b"{\"role\":\"user\"}\nnot json\n".to_vec();
    corrupt.extend_from_slice(good);
    let damaged = t.agent("b", &corrupt);
    t.agent("c", b"{\"role\":\"user\"}\n{\"role\":\"assis");
    std::fs::create_dir(t.0.join("d")).unwrap(); // no log at all
    std::fs::write(t.0.join(".tmp-x"), b"").unwrap(); // a temporary name, skipped

    let logs = agent_logs(&t.0, "conversation.jsonl").unwrap();
    let ids: Vec<_> = logs.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
    let counted: Vec<_> = logs.iter().map(|(_, log)| log.count()).collect();
    let (count, known) = counted[0].as_ref().unwrap();
    assert_eq!((count.entries, &count.torn), (2, &None));
    assert_eq!(known.unwrap().entries, 2);
    let e = counted[1].as_ref().unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("line 2") && msg.contains("b/conversation.jsonl"),
        "{msg}"
    );
    let (count, _) = counted[2].as_ref().unwrap();
    assert_eq!(count.entries, 1, "a torn tail is not damage");
    assert!(count.torn.is_some());
    assert!(matches!(
        counted[3].as_ref().unwrap_err(),
        Error::NotFound { .. }
    ));

    // The damaged log is refused and left as it is; the others take appends.
    let e = damaged.append(&[user("x")], None, None).err().unwrap();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert_eq!(std::fs::read(&damaged.path).unwrap(), corrupt);
    assert!(!damaged.repairs_path().exists());
    for (id, log) in &logs[..3] {
        if id != "b" {
            log.append(&[user("x")], None, None).unwrap();
        }
    }
    assert_eq!(logs[0].1.count().unwrap().0.entries, 3);
    assert_eq!(logs[2].1.count().unwrap().0.entries, 2);

    // Only an unreadable directory of agents fails the whole listing.
    assert!(agent_logs(&t.0.join("nowhere"), "conversation.jsonl").is_err());
}

#[test]
fn appends_are_durable_when_they_return() {
    let t = Temp::new("durable");
    let path = t.0.join("agents/a/conversation.jsonl");

    // Create: the missing directories, the log and each directory whose entries changed are
    // synced; the log is owner-only.
    let before = syncs();
    create(&path).unwrap();
    let after = syncs();
    assert_eq!(after.1 - before.1, 1, "the new log is fsync'd");
    assert_eq!(
        after.2 - before.2,
        3,
        "t (for agents), agents (for a) and a (for the log) are fsync'd"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    // Creating again keeps what is there.
    let log = Log::new(path.clone());
    log.append(&[user("kept")], None, None).unwrap();
    create(&path).unwrap();
    assert_eq!(log.read().unwrap().0.entries.len(), 1);

    // Every append is one data sync, and its bytes are in the file when it returns, seen
    // through another open file description.
    let mut known = log.read().unwrap().1;
    for n in 0..3 {
        let before = syncs();
        let done = log
            .append(&[user(&format!("m{n}")), user("r")], Some(1 + 2 * n), known)
            .unwrap();
        assert_eq!(syncs().0 - before.0, 1, "append {n}: one fdatasync");
        known = done.known;
        let on_disk = std::fs::read(&path).unwrap();
        assert!(on_disk.ends_with(
            format!("{{\"content\":\"m{n}\",\"role\":\"user\"}}\n{{\"content\":\"r\",\"role\":\"user\"}}\n")
                .as_bytes()
        ));
        let (scan, _) = Log::new(path.clone()).read().unwrap();
        assert_eq!(scan.entries.len(), 3 + 2 * n);
    }

    // A refused append syncs nothing; a repair syncs its record and the cut too.
    let before = syncs();
    assert!(log.append(&[user("no")], Some(0), known).is_err());
    assert!(log.append(&[json!({})], None, known).is_err());
    assert_eq!(syncs(), before);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{");
    std::fs::write(&path, &bytes).unwrap();
    let before = syncs();
    log.append(&[user("after")], None, known).unwrap();
    let after = syncs();
    assert_eq!(
        after.0 - before.0,
        3,
        "the record, the cut and the append are each synced"
    );
    assert_eq!(after.2 - before.2, 1, "the new repairs file's directory");
}

#[test]
fn missing_logs_and_bad_places() {
    let t = Temp::new("missing");
    let log = Log::new(t.0.join("none/conversation.jsonl"));
    assert!(matches!(log.read(), Err(Error::NotFound { .. })));
    assert!(matches!(
        log.append(&[user("a")], None, None),
        Err(Error::NotFound { .. })
    ));
    assert!(!t.0.join("none").exists(), "an append creates nothing");
    std::fs::write(t.0.join("file"), b"").unwrap();
    let e = create(&t.0.join("file/conversation.jsonl")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert_eq!(
        Log::new(PathBuf::from("/x/conversation.jsonl")).repairs_path(),
        Path::new("/x/conversation.repairs.jsonl")
    );
}

fn sized(role: &str, bytes: usize) -> Value {
    json!({"role": role, "content": "x".repeat(bytes)})
}

#[test]
fn pages_are_bounded_and_cover_the_log() {
    let entries: Vec<Value> = (0..1234).map(|i| user(&format!("m{i}"))).collect();
    let first = page(&entries, PageRequest::default());
    assert_eq!((first.start, first.end), (0, PAGE_ENTRIES));
    assert_eq!((first.total, first.next), (1234, Some(PAGE_ENTRIES)));
    // Following `next` reads every entry exactly once.
    let mut seen = 0;
    let mut after = None;
    loop {
        let p = page(
            &entries,
            PageRequest {
                after,
                limit: Some(300),
                tail: false,
            },
        );
        assert_eq!(p.start, seen);
        assert!(p.end - p.start <= 300);
        seen = p.end;
        match p.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, entries.len());
    // A limit above the maximum is capped; limit 0 answers only the total; past the end is empty.
    let big = page(
        &entries,
        PageRequest {
            limit: Some(usize::MAX),
            ..Default::default()
        },
    );
    assert_eq!(big.end, MAX_PAGE_ENTRIES);
    let none = page(
        &entries,
        PageRequest {
            limit: Some(0),
            ..Default::default()
        },
    );
    assert_eq!((none.start, none.end, none.next), (0, 0, Some(0)));
    let past = page(
        &entries,
        PageRequest {
            after: Some(5000),
            ..Default::default()
        },
    );
    assert_eq!((past.start, past.end, past.next), (1234, 1234, None));
    // The tail page ends with the last entry.
    let tail = page(
        &entries,
        PageRequest {
            tail: true,
            after: Some(3),
            limit: Some(10),
        },
    );
    assert_eq!((tail.start, tail.end, tail.next), (1224, 1234, None));
    assert_eq!(page(&[], PageRequest::default()).next, None);
}

#[test]
fn pages_keep_under_the_byte_budget() {
    // 100 KiB entries: 10 fit in a page, whatever the limit.
    let entries: Vec<Value> = (0..50).map(|_| sized("user", 100 * 1024)).collect();
    let p = page(
        &entries,
        PageRequest {
            limit: Some(1000),
            ..Default::default()
        },
    );
    let bytes: usize = entries[p.start..p.end].iter().map(entry_bytes).sum();
    assert!(bytes <= PAGE_BYTES, "{bytes}");
    assert_eq!(p.end, 10);
    let t = page(
        &entries,
        PageRequest {
            tail: true,
            ..Default::default()
        },
    );
    assert_eq!((t.start, t.end), (40, 50));
    // One entry bigger than the budget still comes, alone.
    let huge = vec![sized("user", 2 * PAGE_BYTES), user("after")];
    let p = page(&huge, PageRequest::default());
    assert_eq!((p.end, p.next), (1, Some(1)));
    let t = page(
        &huge,
        PageRequest {
            tail: true,
            ..Default::default()
        },
    );
    assert_eq!((t.start, t.end), (1, 2));
    assert_eq!(
        entry_bytes(&user("a")),
        r#"{"content":"a","role":"user"}"#.len() + 1
    );
}

#[test]
fn the_context_window_is_bounded_and_starts_at_a_user_entry() {
    let mut entries = Vec::new();
    for i in 0..1000 {
        entries.push(user(&format!("u{i}")));
        entries.push(
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": format!("c{i}")}]}),
        );
        entries.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "ok"}));
        entries.push(json!({"role": "assistant", "content": format!("a{i}")}));
    }
    let w = context_window(&entries);
    assert!(
        w.len() <= CONTEXT_ENTRIES && w.len() > CONTEXT_ENTRIES - 4,
        "{}",
        w.len()
    );
    assert_eq!(w[0]["role"], "user");
    assert_eq!(w.last(), entries.last());
    // Short conversations go whole.
    assert_eq!(context_window(&entries[..8]), &entries[..8]);
    // Bytes bound it too: 10 KiB entries, at most 25 of them.
    let big: Vec<Value> = (0..100).map(|_| sized("user", 10 * 1024)).collect();
    let w = context_window(&big);
    assert!(w.iter().map(entry_bytes).sum::<usize>() <= CONTEXT_BYTES);
    assert_eq!(w.len(), CONTEXT_BYTES / (10 * 1024 + 40));
    // The last entry always goes, however big.
    let w = context_window(&big[..0]);
    assert!(w.is_empty());
    let one = vec![sized("user", 2 * CONTEXT_BYTES)];
    assert_eq!(context_window(&one).len(), 1);
    // No user entry in the window: it starts after the tool results, never with one.
    let mut turn = vec![user("one long turn")];
    for i in 0..CONTEXT_ENTRIES {
        turn.push(
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": format!("c{i}")}]}),
        );
        turn.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "ok"}));
    }
    let w = context_window(&turn);
    assert_eq!(w[0]["role"], "assistant");
}

#[test]
fn the_window_of_a_tail_page_is_the_window_of_the_whole_log() {
    // Sizes that make the entry count, the context budget and the page budget bind in turn.
    let sizes = [10, 3_000, 30_000, 300 * 1024, 2 * 1024 * 1024];
    let roles = [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "tool",
        "tool",
    ];
    let mut entries = Vec::new();
    for i in 0..400 {
        let size = sizes[(i * 7 + i / 13) % sizes.len()] * usize::from(i % 11 != 0) + 1;
        entries.push(sized(
            roles[(i * 5 + i / 3) % roles.len()],
            size % (200 * 1024),
        ));
        if i % 97 == 96 {
            entries.push(sized("user", sizes[i % sizes.len()]));
        }
        if i % 5 != 0 {
            continue;
        }
        let whole = context_window(&entries);
        let t = page(
            &entries,
            PageRequest {
                tail: true,
                limit: Some(CONTEXT_ENTRIES),
                after: None,
            },
        );
        assert_eq!(t.end, entries.len());
        assert_eq!(
            context_window(&entries[t.start..]),
            whole,
            "after {} entries",
            entries.len()
        );
        let kept = &entries[entries.len().saturating_sub(CONTEXT_ENTRIES)..];
        assert_eq!(context_window(kept), whole);
    }
}

/// Sizes measured beforehand pick the very entries measuring them on the spot does, with
/// the entry count, the byte budget and a last entry beyond it binding in turn.
#[test]
fn a_measured_window_is_the_context_window() {
    let sizes = [1, 700, 9_000, 40 * 1024, CONTEXT_BYTES + 5];
    let roles = ["user", "assistant", "tool", "assistant", "tool"];
    let (mut entries, mut bytes) = (Vec::new(), Vec::new());
    for i in 0..3 * CONTEXT_ENTRIES {
        let entry = sized(
            roles[(i * 3 + i / 7) % roles.len()],
            sizes[(i * i) % 17 % 5],
        );
        bytes.push(entry_bytes(&entry));
        entries.push(entry);
        for start in [0, entries.len().saturating_sub(CONTEXT_ENTRIES + 3)] {
            let (e, b) = (&entries[start..], &bytes[start..]);
            let (measured, measuring) = (context_window_measured(e, b), context_window(e));
            assert_eq!(
                (measured.as_ptr(), measured.len()),
                (measuring.as_ptr(), measuring.len()),
                "{} entries from {start}",
                entries.len()
            );
            let sum: usize = b[b.len() - measured.len()..].iter().sum();
            assert!(measured.len() <= CONTEXT_ENTRIES);
            assert!(measured.len() <= 1 || sum <= CONTEXT_BYTES, "{sum} bytes");
        }
    }
}

#[test]
fn pages_read_from_a_known_log_are_the_pages_of_a_full_scan() {
    let (_dir, log) = Temp::log("pages");
    let mut known = log.read().unwrap().1;
    let reqs = |total: usize| {
        let mut reqs = vec![PageRequest::default()];
        for limit in [None, Some(0), Some(1), Some(7), Some(5000)] {
            for after in [None, Some(1), Some(total / 2), Some(total), Some(total + 9)] {
                reqs.push(PageRequest {
                    after,
                    limit,
                    tail: false,
                });
            }
            reqs.push(PageRequest {
                limit,
                tail: true,
                after: None,
            });
        }
        reqs
    };
    // Small entries, big ones that make the byte budget bind, and one bigger than the
    // tail's first window of the file.
    let batches: Vec<Vec<Value>> = vec![
        vec![],
        (0..450).map(|i| user(&format!("m{i}"))).collect(),
        (0..12).map(|_| sized("assistant", 300 * 1024)).collect(),
        vec![sized("user", 3 * PAGE_BYTES)],
        (0..3).map(|i| user(&format!("after {i}"))).collect(),
    ];
    for batch in batches {
        let done = log.append(&batch, None, known).unwrap();
        known = done.known;
        let k = known.expect("nobody else wrote");
        let (scan, _) = log.read().unwrap();
        for req in reqs(k.entries) {
            let (fast, again) = log.read_page(req, Some(k)).unwrap();
            assert_eq!(again, Some(k), "{req:?}");
            let p = page(&scan.entries, req);
            assert_eq!(fast.page, p, "{req:?} of {}", k.entries);
            assert_eq!(fast.entries, scan.entries[p.start..p.end], "{req:?}");
            assert_eq!(fast.torn, None);
            // A reader that knows nothing scans the log, keeping only the page: the same one.
            let (slow, scanned) = log.read_page(req, None).unwrap();
            assert_eq!(slow, fast, "{req:?} of {}, scanned", k.entries);
            assert_eq!(scanned, Some(k));
        }
        let req = PageRequest {
            tail: true,
            ..Default::default()
        };
        let (full, scanned) = log.read_page(req, None).unwrap();
        assert_eq!(scanned, Some(k));
        assert_eq!(full, log.read_page(req, Some(k)).unwrap().0);
    }
    // A log changed behind the reader's back is scanned again: torn tails are reported.
    let k = known.unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&log.path)
        .unwrap();
    std::io::Write::write_all(&mut file, br#"{"role":"us"#).unwrap();
    let (read, again) = log
        .read_page(
            PageRequest {
                tail: true,
                ..Default::default()
            },
            Some(k),
        )
        .unwrap();
    assert!(read.torn.is_some());
    assert_eq!(again, None);
    assert_eq!(read.page.total, k.entries);
    // Every page of the torn log is the page of its intact entries.
    let (scan, _) = log.read().unwrap();
    for req in reqs(k.entries) {
        let (slow, again) = log.read_page(req, None).unwrap();
        let p = page(&scan.entries, req);
        assert_eq!(slow.page, p, "{req:?} of a torn log");
        assert_eq!(slow.entries, scan.entries[p.start..p.end], "{req:?}");
        assert_eq!((slow.torn.is_some(), again), (true, None), "{req:?}");
    }
}

/// Three acknowledged entries, then the log changed outside the store.
fn acknowledged_three(name: &str) -> (Temp, Log, Vec<u8>) {
    let (t, log) = Temp::log(name);
    log.append(&[user("a"), user("b"), user("c")], Some(0), None)
        .unwrap();
    let bytes = std::fs::read(&log.path).unwrap();
    (t, log, bytes)
}

fn shortened(e: Error) -> (usize, usize) {
    match e {
        Error::Shortened {
            found,
            acknowledged,
            ..
        } => (found, acknowledged),
        other => panic!("expected Shortened, got {other}"),
    }
}

#[test]
fn a_log_shorter_than_acknowledged_is_refused_never_served() {
    // Cut at a line boundary: two of three entries left.
    let (_t, log, bytes) = acknowledged_three("cut");
    let two = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(1)
        .unwrap()
        .0
        + 1;
    std::fs::write(&log.path, &bytes[..two]).unwrap();
    let e = log.read().unwrap_err();
    let text = e.to_string();
    assert_eq!(shortened(e), (2, 3));
    assert!(
        text.contains("holds 2 intact entries, but 3 were acknowledged"),
        "{text}"
    );
    assert!(
        text.contains(&log.acked_path().display().to_string()),
        "{text}"
    );
    // An append refuses too and writes nothing: it would hide the cut.
    assert_eq!(
        shortened(log.append(&[user("d")], None, None).unwrap_err()),
        (2, 3)
    );
    assert_eq!(std::fs::read(&log.path).unwrap(), &bytes[..two]);
    let page = log.read_page(PageRequest::default(), None).unwrap_err();
    assert_eq!(shortened(page), (2, 3));
    // Removing the count accepts the log as it is, as the error says.
    std::fs::remove_file(log.acked_path()).unwrap();
    assert_eq!(log.read().unwrap().0.entries.len(), 2);
    assert_eq!(log.append(&[user("d")], None, None).unwrap().total, 3);
    assert_eq!(log.read().unwrap().0.entries.len(), 3);

    // Emptied, and deleted.
    let (_t, log, _) = acknowledged_three("emptied");
    std::fs::write(&log.path, b"").unwrap();
    assert_eq!(shortened(log.read().unwrap_err()), (0, 3));
    std::fs::remove_file(&log.path).unwrap();
    assert_eq!(shortened(log.read().unwrap_err()), (0, 3));
    assert_eq!(
        shortened(log.append(&[user("d")], None, None).unwrap_err()),
        (0, 3)
    );
    assert!(!log.path.exists(), "the refused append created nothing");
}

#[test]
fn what_a_crash_leaves_is_never_taken_for_a_cut() {
    // A torn tail after the acknowledged entries: a crash mid-append, not a cut.
    let (_t, log, mut bytes) = acknowledged_three("torn");
    bytes.extend_from_slice(b"{\"role\":\"us");
    std::fs::write(&log.path, &bytes).unwrap();
    let (scan, _) = log.read().unwrap();
    assert_eq!(scan.entries.len(), 3);
    assert!(scan.torn.is_some());
    let done = log.append(&[user("d")], Some(3), None);
    assert!(
        matches!(done, Err(Error::Conflict { .. })),
        "expect refuses a torn log"
    );
    assert_eq!(log.append(&[user("d")], None, None).unwrap().total, 4);
    // A count that lags behind the log (its write was lost in the crash) is no cut.
    std::fs::write(log.acked_path(), b"2\n").unwrap();
    assert_eq!(log.read().unwrap().0.entries.len(), 4);
    // Nor is a count the crash tore: unreadable means unknown.
    std::fs::write(log.acked_path(), b"\0\0").unwrap();
    assert_eq!(log.read().unwrap().0.entries.len(), 4);
    // The count is owner-only, beside the log, and follows every append.
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(log.acked_path()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    log.append(&[user("e")], None, None).unwrap();
    let count = std::fs::read_to_string(log.acked_path()).unwrap();
    assert_eq!(count.trim().parse::<usize>().unwrap(), 5);
}

#[test]
fn a_new_log_starts_without_a_count_and_the_count_is_never_written_through_a_link() {
    // A count left by a delete that did not finish does not make a new log look cut.
    let t = Temp::new("stale-count");
    let path = t.0.join("agent/conversation.jsonl");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let log = Log::new(path.clone());
    std::fs::write(log.acked_path(), format!("{:020}\n", 7)).unwrap();
    create(&path).unwrap();
    assert!(!log.acked_path().exists());
    assert_eq!(log.read().unwrap().0.entries.len(), 0);
    // An existing log keeps its count when created again.
    log.append(&[user("a")], None, None).unwrap();
    create(&path).unwrap();
    assert!(log.acked_path().exists());

    // A symlink in the count's place is not written through, nor read.
    let target = t.0.join("elsewhere");
    std::fs::write(&target, b"keep me").unwrap();
    std::fs::remove_file(log.acked_path()).unwrap();
    std::os::unix::fs::symlink(&target, log.acked_path()).unwrap();
    assert_eq!(log.append(&[user("b")], None, None).unwrap().total, 2);
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    assert_eq!(log.read().unwrap().0.entries.len(), 2);
}
