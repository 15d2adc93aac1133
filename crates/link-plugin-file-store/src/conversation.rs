//! The per-agent conversation log: one JSON object per line, appended and fsync'd.
//!
//! A crash during an append can leave a torn last line (bytes without their newline, or a
//! last line that is not valid JSON). Reading never drops or half-parses it: the intact
//! entries come back together with `torn` naming what is wrong. The next append repairs the
//! log by truncating exactly the torn tail — never an intact line — and records what it cut
//! in `conversation.repairs.jsonl` beside the log (and in the plugin log), so nothing
//! disappears silently and new entries never glue onto a broken line. A malformed line that
//! is *not* the last one is not a crash artefact: both read and append refuse with an error
//! naming the file and line, and nothing is changed.
//!
//! Appends come every turn, so the store does not rescan a growing log each time: after a
//! scan or an append of its own it remembers the file's [`Known`] state (inode, size,
//! change time, entry count, where the last line starts). The next append trusts it only
//! when the file still matches and its last line is still a complete entry, which is where
//! a torn tail would be; anything else (another writer, a re-created agent, a failed write)
//! means a full scan as before.

use link_protocol::{ErrorCode, RemoteError};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What a scan of the log found.
#[derive(Debug, PartialEq)]
pub struct Scan {
    pub entries: Vec<Value>,
    /// Length of the intact prefix (every complete, valid line).
    pub intact_len: u64,
    /// Where the last intact line starts (0 when there is none).
    pub last_line: u64,
    /// Why the bytes after `intact_len` are not a valid entry.
    pub torn: Option<String>,
}

/// Splits the log into entries, finding a torn tail; `Err` names a corrupt inner line.
pub fn scan(bytes: &[u8]) -> Result<Scan, String> {
    let mut entries = Vec::new();
    let mut pos = 0usize;
    let mut last_line = 0usize;
    let mut line_no = 0usize;
    while pos < bytes.len() {
        line_no += 1;
        let Some(nl) = bytes[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|n| pos + n)
        else {
            let torn = format!(
                "line {line_no} has no newline: {} bytes at offset {pos} are an incomplete \
                 write (a crash during append?)",
                bytes.len() - pos
            );
            return Ok(Scan {
                entries,
                intact_len: pos as u64,
                last_line: last_line as u64,
                torn: Some(torn),
            });
        };
        match parse_entry(&bytes[pos..nl]) {
            Ok(entry) => entries.push(entry),
            Err(e) if nl + 1 == bytes.len() => {
                let torn = format!(
                    "last line {line_no} ({} bytes at offset {pos}) is not a valid entry: {e}",
                    nl - pos
                );
                return Ok(Scan {
                    entries,
                    intact_len: pos as u64,
                    last_line: last_line as u64,
                    torn: Some(torn),
                });
            }
            Err(e) => return Err(format!("line {line_no} is not a valid entry: {e}")),
        }
        last_line = pos;
        pos = nl + 1;
    }
    Ok(Scan {
        entries,
        intact_len: pos as u64,
        last_line: last_line as u64,
        torn: None,
    })
}

fn parse_entry(line: &[u8]) -> Result<Value, String> {
    let value: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err("not a JSON object".into());
    }
    Ok(value)
}

/// Checks entries a caller wants to append: objects with a string `role`.
pub fn check_entries(entries: &[Value]) -> Result<(), RemoteError> {
    for (i, e) in entries.iter().enumerate() {
        if !e.get("role").is_some_and(Value::is_string) {
            return Err(RemoteError::bad_request(format!(
                "entry {i} must be an object with a string `role`"
            )));
        }
    }
    Ok(())
}

/// One agent's log file.
pub struct Log {
    pub path: PathBuf,
}

/// What the store knows of a log it scanned completely or appended to itself, and the file
/// state that knowledge belongs to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Known {
    stamp: Stamp,
    /// Intact entries in the log.
    pub entries: usize,
    /// Where the last line starts.
    last_line: u64,
}

/// File identity, size and times: any write to the log by anyone changes one of them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The log before an append: its intact prefix, and the torn tail after it if any.
struct State {
    intact_len: u64,
    entries: usize,
    last_line: u64,
    torn: Option<String>,
}

/// What an append did.
pub struct Appended {
    pub count: usize,
    /// Intact entries in the log after the append.
    pub total: usize,
    /// The torn tail it cut first, if any.
    pub repaired: Option<String>,
    /// The log as this append left it, when nobody else wrote to it meanwhile.
    pub known: Option<Known>,
}

impl Log {
    pub fn new(path: PathBuf) -> Self {
        Log { path }
    }

    fn repairs_file(&self) -> PathBuf {
        self.path.with_file_name("conversation.repairs.jsonl")
    }

    /// Every intact entry, the torn tail's description if there is one, and what the store
    /// may remember of an intact log.
    pub fn read(&self) -> Result<(Scan, Option<Known>), RemoteError> {
        let mut file = File::open(&self.path).map_err(|e| self.io_error(e))?;
        let before = file.metadata().map_err(|e| self.io_error(e))?;
        let mut bytes = Vec::with_capacity(before.len() as usize);
        file.read_to_end(&mut bytes).map_err(|e| self.io_error(e))?;
        let scan = scan(&bytes).map_err(|e| self.corrupt(e))?;
        let after = file.metadata().map_err(|e| self.io_error(e))?;
        let stamp = Stamp::of(&after);
        let unchanged = Stamp::of(&before) == stamp && stamp.len == bytes.len() as u64;
        let known = (unchanged && scan.torn.is_none()).then_some(Known {
            stamp,
            entries: scan.entries.len(),
            last_line: scan.last_line,
        });
        Ok((scan, known))
    }

    /// Appends entries as lines with one write and an fsync, repairing a torn tail first.
    /// With `expect`, appends only to an intact log of exactly that many entries and
    /// refuses with `conflict` otherwise, changing nothing. `known` is what the store
    /// remembers of this log; it is checked against the file before it is trusted.
    pub fn append(
        &self,
        entries: &[Value],
        expect: Option<usize>,
        known: Option<Known>,
    ) -> Result<Appended, RemoteError> {
        check_entries(entries)?;
        let mut buf = Vec::new();
        let mut last_in_buf = 0;
        for e in entries {
            last_in_buf = buf.len() as u64;
            serde_json::to_writer(&mut buf, e)
                .map_err(|e| RemoteError::internal(format!("encoding entry: {e}")))?;
            buf.push(b'\n');
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.io_error(e))?;
        let state = match known.filter(|k| still(&file, k)) {
            Some(k) => State {
                intact_len: k.stamp.len,
                entries: k.entries,
                last_line: k.last_line,
                torn: None,
            },
            None => self.state(&mut file)?,
        };
        if let Some(want) = expect {
            self.expected(&state, want)?;
        }
        let repaired = match &state.torn {
            Some(reason) => {
                self.repair(state.intact_len, reason)?;
                Some(reason.clone())
            }
            None => None,
        };
        if let Err(e) = file.write_all(&buf).and_then(|()| file.sync_data()) {
            // Leave no torn line behind when the disk refused the write (ENOSPC, EIO).
            let _ = file
                .set_len(state.intact_len)
                .and_then(|()| file.sync_data());
            return Err(self.io_error(e));
        }
        let total = state.entries + entries.len();
        let last_line = if entries.is_empty() {
            state.last_line
        } else {
            state.intact_len + last_in_buf
        };
        let known = file
            .metadata()
            .ok()
            .map(|m| Stamp::of(&m))
            .and_then(|stamp| {
                (stamp.len == state.intact_len + buf.len() as u64).then_some(Known {
                    stamp,
                    entries: total,
                    last_line,
                })
            });
        Ok(Appended {
            count: entries.len(),
            total,
            repaired,
            known,
        })
    }

    /// The log's state from a full scan of the open file.
    fn state(&self, file: &mut File) -> Result<State, RemoteError> {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| self.io_error(e))?;
        let scan = scan(&bytes).map_err(|e| self.corrupt(e))?;
        Ok(State {
            intact_len: scan.intact_len,
            entries: scan.entries.len(),
            last_line: scan.last_line,
            torn: scan.torn,
        })
    }

    /// Refuses an append whose caller expected another log than this one.
    fn expected(&self, state: &State, want: usize) -> Result<(), RemoteError> {
        let why = match &state.torn {
            Some(reason) => format!("has a torn tail ({reason})"),
            None if state.entries != want => format!(
                "holds {} entries, not the {want} the caller expected",
                state.entries
            ),
            None => return Ok(()),
        };
        Err(RemoteError::new(
            ErrorCode::Conflict,
            format!(
                "conversation log {} {why}; nothing was appended. Read it again \
                 (an append without expect_total repairs a torn tail)",
                self.path.display()
            ),
        ))
    }

    /// Records the torn tail, then truncates the log to its intact prefix.
    fn repair(&self, intact_len: u64, reason: &str) -> Result<(), RemoteError> {
        let bytes = std::fs::read(&self.path).map_err(|e| self.io_error(e))?;
        let tail = &bytes[intact_len as usize..];
        let record = json!({
            "unix_ms": link_protocol::clock::unix_ms(),
            "file": self.path.display().to_string(),
            "truncated_at": intact_len,
            "removed_bytes": tail.len(),
            "reason": reason,
            "removed": String::from_utf8_lossy(&tail[..tail.len().min(4096)]),
        });
        tracing::warn!(
            "conversation log {} has a torn tail ({reason}); truncating {} bytes at offset \
             {intact_len}, recorded in {}",
            self.path.display(),
            tail.len(),
            self.repairs_file().display()
        );
        let mut line = record.to_string();
        line.push('\n');
        let mut rec = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.repairs_file())
            .map_err(|e| self.io_error(e))?;
        rec.write_all(line.as_bytes())
            .and_then(|()| rec.sync_data())
            .map_err(|e| self.io_error(e))?;
        let log = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(|e| self.io_error(e))?;
        log.set_len(intact_len)
            .and_then(|()| log.sync_data())
            .map_err(|e| self.io_error(e))
    }

    fn io_error(&self, e: std::io::Error) -> RemoteError {
        if e.kind() == std::io::ErrorKind::NotFound {
            return RemoteError::not_found(format!(
                "no conversation log at {}: the agent does not exist in the file store \
                 (create it with agent.create)",
                self.path.display()
            ));
        }
        RemoteError::internal(format!("conversation log {}: {e}", self.path.display()))
    }

    fn corrupt(&self, why: String) -> RemoteError {
        RemoteError::internal(format!(
            "conversation log {} is corrupt: {why}. This is not a torn append; stop the \
             runtime, inspect the file and remove or fix that line by hand",
            self.path.display()
        ))
    }
}

/// True when the open log is still the file `known` describes and its last line is still a
/// complete entry (where a torn tail would be), so its intact prefix need not be rescanned.
fn still(file: &File, known: &Known) -> bool {
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if Stamp::of(&meta) != known.stamp {
        return false;
    }
    if known.stamp.len == 0 {
        return known.entries == 0;
    }
    // From the newline ending the line before, to the end.
    let from = known.last_line.saturating_sub(1);
    let mut tail = vec![0; (known.stamp.len - from) as usize];
    if file.read_exact_at(&mut tail, from).is_err() {
        return false;
    }
    let line = if known.last_line == 0 {
        &tail[..]
    } else if tail[0] == b'\n' {
        &tail[1..]
    } else {
        return false;
    };
    match line.split_last() {
        Some((b'\n', entry)) => !entry.contains(&b'\n') && parse_entry(entry).is_ok(),
        _ => false,
    }
}

/// Creates an empty log (keeping an existing one) with owner-only permissions.
pub fn create_empty(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A log in a fresh directory under `$HOME/.cache/lnk-t`, removed on drop.
    struct TempLog(PathBuf);

    impl TempLog {
        fn new(name: &str) -> (TempLog, Log) {
            let dir = PathBuf::from(std::env::var("HOME").unwrap()).join(format!(
                ".cache/lnk-t/file-store-{name}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("conversation.jsonl");
            create_empty(&path).unwrap();
            (TempLog(dir), Log::new(path))
        }
    }

    impl Drop for TempLog {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    #[test]
    fn appends_remember_the_log_and_count_it() {
        let (_dir, log) = TempLog::new("known");
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
        let (_dir, log) = TempLog::new("expect");
        let done = log.append(&[user("a")], None, None).unwrap();
        let before = std::fs::read(&log.path).unwrap();
        let e = log.append(&[user("b")], Some(5), done.known).err().unwrap();
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(e.message.contains("holds 1 entries"), "{e}");
        assert_eq!(std::fs::read(&log.path).unwrap(), before);
    }

    #[test]
    fn changes_by_others_are_never_trusted() {
        let (_dir, log) = TempLog::new("others");
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
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(e.message.contains("torn"), "{e}");
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
        assert_eq!(f.metadata().unwrap().len(), known.stamp.len);
        assert!(!still(&f, &known));
        let done = log.append(&[user("d")], None, Some(known)).unwrap();
        assert!(done.repaired.unwrap().contains("last line 3"));
        assert_eq!(done.total, 3);
    }

    #[test]
    fn entries_need_a_role() {
        assert!(check_entries(&[json!({"role": "user", "content": "x"})]).is_ok());
        assert!(check_entries(&[json!({"content": "x"})]).is_err());
        assert!(check_entries(&[json!("x")]).is_err());
    }
}
