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

use link_protocol::RemoteError;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a scan of the log found.
#[derive(Debug, PartialEq)]
pub struct Scan {
    pub entries: Vec<Value>,
    /// Length of the intact prefix (every complete, valid line).
    pub intact_len: u64,
    /// Why the bytes after `intact_len` are not a valid entry.
    pub torn: Option<String>,
}

/// Splits the log into entries, finding a torn tail; `Err` names a corrupt inner line.
pub fn scan(bytes: &[u8]) -> Result<Scan, String> {
    let mut entries = Vec::new();
    let mut pos = 0usize;
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
                    torn: Some(torn),
                });
            }
            Err(e) => return Err(format!("line {line_no} is not a valid entry: {e}")),
        }
        pos = nl + 1;
    }
    Ok(Scan {
        entries,
        intact_len: pos as u64,
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

/// What an append did.
pub struct Appended {
    pub count: usize,
    /// The torn tail it cut first, if any.
    pub repaired: Option<String>,
}

impl Log {
    pub fn new(path: PathBuf) -> Self {
        Log { path }
    }

    fn repairs_file(&self) -> PathBuf {
        self.path.with_file_name("conversation.repairs.jsonl")
    }

    /// Every intact entry, and the torn tail's description if there is one.
    pub fn read(&self) -> Result<Scan, RemoteError> {
        let bytes = std::fs::read(&self.path).map_err(|e| self.io_error(e))?;
        scan(&bytes).map_err(|e| self.corrupt(e))
    }

    /// Appends entries as lines with one write and an fsync, repairing a torn tail first.
    pub fn append(&self, entries: &[Value]) -> Result<Appended, RemoteError> {
        check_entries(entries)?;
        let mut buf = Vec::new();
        for e in entries {
            serde_json::to_writer(&mut buf, e)
                .map_err(|e| RemoteError::internal(format!("encoding entry: {e}")))?;
            buf.push(b'\n');
        }
        let scan = self.read()?;
        let repaired = match &scan.torn {
            Some(reason) => {
                self.repair(scan.intact_len, reason)?;
                Some(reason.clone())
            }
            None => None,
        };
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| self.io_error(e))?;
        if let Err(e) = file.write_all(&buf).and_then(|()| file.sync_data()) {
            // Leave no torn line behind when the disk refused the write (ENOSPC, EIO).
            let _ = file
                .set_len(scan.intact_len)
                .and_then(|()| file.sync_data());
            return Err(self.io_error(e));
        }
        Ok(Appended {
            count: entries.len(),
            repaired,
        })
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

    #[test]
    fn entries_need_a_role() {
        assert!(check_entries(&[json!({"role": "user", "content": "x"})]).is_ok());
        assert!(check_entries(&[json!({"content": "x"})]).is_err());
        assert!(check_entries(&[json!("x")]).is_err());
    }
}
