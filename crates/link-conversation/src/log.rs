//! One agent's log: scanning, reading and appending.

use crate::window::PAGE_ENTRIES;
use crate::window::{entry_bytes, Page, PageRequest, MAX_PAGE_ENTRIES, PAGE_BYTES};
use crate::{sync, Error};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, Read, Seek, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;

/// What [`Log::count`] found: the intact entries' number and a torn tail's description.
#[derive(Debug, Clone, PartialEq)]
pub struct Count {
    pub entries: usize,
    pub torn: Option<String>,
}

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
    let (walked, _) = walk(bytes, |e| entries.push(e)).map_err(|stop| match stop {
        Stop::Corrupt(why) => why,
        Stop::Io(e) => e.to_string(),
    })?;
    Ok(Scan { entries, ..walked })
}

/// Why [`walk`] stopped before the end of the log.
enum Stop {
    /// A line other than the last is not an entry.
    Corrupt(String),
    Io(std::io::Error),
}

/// [`scan`] of what `input` reads, a line at a time, giving each entry to `each` as it is
/// parsed: a caller that keeps none holds one line and its entry at a time, whatever the
/// log's length (never the whole file). The returned `entries` is empty; with it, the number
/// of bytes read.
fn walk(mut input: impl BufRead, mut each: impl FnMut(Value)) -> Result<(Scan, u64), Stop> {
    let mut line = Vec::new();
    let mut pos = 0u64;
    let mut last_line = 0u64;
    let mut line_no = 0usize;
    let torn = |why: String, intact_len: u64, last_line: u64| Scan {
        entries: Vec::new(),
        intact_len,
        last_line,
        torn: Some(why),
    };
    loop {
        line.clear();
        let n = input.read_until(b'\n', &mut line).map_err(Stop::Io)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let Some(body) = line.strip_suffix(b"\n") else {
            let why = format!(
                "line {line_no} has no newline: {n} bytes at offset {pos} are an incomplete \
                 write (a crash during append?)"
            );
            return Ok((torn(why, pos, last_line), pos + n as u64));
        };
        match parse_entry(body) {
            Ok(entry) => each(entry),
            Err(e) if input.fill_buf().map_err(Stop::Io)?.is_empty() => {
                let why = format!(
                    "last line {line_no} ({} bytes at offset {pos}) is not a valid entry: {e}",
                    body.len()
                );
                return Ok((torn(why, pos, last_line), pos + n as u64));
            }
            Err(e) => {
                return Err(Stop::Corrupt(format!(
                    "line {line_no} is not a valid entry: {e}"
                )))
            }
        }
        last_line = pos;
        pos += n as u64;
    }
    let scan = Scan {
        entries: Vec::new(),
        intact_len: pos,
        last_line,
        torn: None,
    };
    Ok((scan, pos))
}

fn parse_entry(line: &[u8]) -> Result<Value, String> {
    let value: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err("not a JSON object".into());
    }
    Ok(value)
}

/// Checks entries a caller wants to append: objects with a string `role`.
pub fn check_entries(entries: &[Value]) -> Result<(), Error> {
    match entries
        .iter()
        .position(|e| !e.get("role").is_some_and(Value::is_string))
    {
        Some(index) => Err(Error::BadEntry { index }),
        None => Ok(()),
    }
}

/// `O_NOFOLLOW` for the count beside the log: a symlink put there is refused, not written
/// through.
const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;

/// One agent's log file.
#[derive(Debug, Clone)]
pub struct Log {
    pub path: PathBuf,
}

/// What a caller knows of a log it scanned completely or appended to itself, and the file
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
#[derive(Debug)]
pub struct Appended {
    pub count: usize,
    /// Intact entries in the log after the append.
    pub total: usize,
    /// The torn tail it cut first, if any.
    pub repaired: Option<Repair>,
    /// The log as this append left it, when nobody else wrote to it meanwhile.
    pub known: Option<Known>,
}

/// A torn tail an append cut off, as recorded in the repairs file.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair {
    /// Why the tail was not an entry (the scan's `torn`).
    pub reason: String,
    /// The log's length after the cut: its intact prefix.
    pub truncated_at: u64,
    pub removed_bytes: usize,
    /// Where the record of the cut was appended.
    pub recorded_in: PathBuf,
}

impl Log {
    pub fn new(path: PathBuf) -> Self {
        Log { path }
    }

    /// Where cut torn tails are recorded: `<stem>.repairs.jsonl` beside the log.
    pub fn repairs_path(&self) -> PathBuf {
        self.beside("repairs.jsonl")
    }

    /// Where the acknowledged entry count is kept: `<stem>.acked` beside the log.
    pub fn acked_path(&self) -> PathBuf {
        self.beside("acked")
    }

    /// `<stem>.<extension>` in the log's directory.
    fn beside(&self, extension: &str) -> PathBuf {
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "conversation".into());
        self.path.with_file_name(format!("{stem}.{extension}"))
    }

    /// The acknowledged entry count, when one was recorded and is readable (a symlink in its
    /// place is not followed, a damaged one is said and ignored).
    fn acknowledged(&self) -> Option<usize> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.acked_path();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(NOFOLLOW)
            .open(&path)
            .ok()?;
        let mut head = [0u8; 32];
        let n = file.read(&mut head).ok()?;
        let first = head[..n].split(|b| *b == b'\n').next().unwrap_or_default();
        let count = std::str::from_utf8(first)
            .ok()
            .and_then(|t| t.trim().parse().ok());
        if count.is_none() {
            tracing::warn!(
                "{}: not an entry count; the log's length is not checked against it",
                path.display()
            );
        }
        count
    }

    /// Records `total` as acknowledged: one fixed-width write over the count, not synced
    /// (see the crate's documentation). A failure only loses the safeguard, never the append.
    fn record_acknowledged(&self, total: usize) {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(NOFOLLOW)
            .open(self.acked_path())
            .and_then(|f| f.write_all_at(format!("{total:020}\n").as_bytes(), 0));
        if let Err(e) = written {
            tracing::warn!(
                "{}: cannot record the acknowledged count {total}: {e}; a later cut of the \
                 log would go unnoticed",
                self.acked_path().display()
            );
        }
    }

    /// Refuses a log that holds fewer intact entries than were acknowledged.
    fn not_shortened(&self, found: usize) -> Result<(), Error> {
        match self.acknowledged() {
            Some(acknowledged) if acknowledged > found => Err(Error::Shortened {
                path: self.path.clone(),
                acked: self.acked_path(),
                found,
                acknowledged,
            }),
            _ => Ok(()),
        }
    }

    /// An error opening the log: a missing log whose entries were acknowledged was deleted.
    fn open_failed(&self, e: std::io::Error) -> Error {
        let missing = e.kind() == std::io::ErrorKind::NotFound;
        match self.not_shortened(0) {
            Err(shortened) if missing => shortened,
            _ => self.io(e),
        }
    }

    /// Every intact entry, the torn tail's description if there is one, and what the caller
    /// may remember of an intact log. Changes nothing.
    pub fn read(&self) -> Result<(Scan, Option<Known>), Error> {
        let mut entries = Vec::new();
        let (scan, known) = self.read_with(|e| entries.push(e))?;
        Ok((Scan { entries, ..scan }, known))
    }

    /// What [`Log::read`] finds, without keeping the entries: how many are intact (the
    /// [`Count`]), the torn tail's description, and what the caller may remember. It holds one
    /// line's entry at a time, so a caller that pages the log from disk ([`Log::read_page`])
    /// keeps nothing of it in memory. Changes nothing.
    pub fn count(&self) -> Result<(Count, Option<Known>), Error> {
        let mut entries = 0;
        let (scan, known) = self.read_with(|_| entries += 1)?;
        let count = Count {
            entries,
            torn: scan.torn,
        };
        Ok((count, known))
    }

    /// The log scanned with every entry given to `each`; the returned scan holds none.
    fn read_with(&self, mut each: impl FnMut(Value)) -> Result<(Scan, Option<Known>), Error> {
        let file = File::open(&self.path).map_err(|e| self.open_failed(e))?;
        let before = file.metadata().map_err(|e| self.io(e))?;
        let mut entries = 0;
        let (scan, read) = self.walk(&file, |e| {
            entries += 1;
            each(e)
        })?;
        self.not_shortened(entries)?;
        let after = file.metadata().map_err(|e| self.io(e))?;
        let stamp = Stamp::of(&after);
        let unchanged = Stamp::of(&before) == stamp && stamp.len == read;
        let known = (unchanged && scan.torn.is_none()).then_some(Known {
            stamp,
            entries,
            last_line: scan.last_line,
        });
        Ok((scan, known))
    }

    /// One page of the log as `req` asks ([`crate::window::page`]), the torn tail's description if there
    /// is one, and what the caller may remember of an intact log. When `known` still
    /// describes the file (nobody else wrote to it since), only the page's lines are read
    /// and parsed, so the cost of a page does not grow with the log; otherwise the log is
    /// scanned whole, as [`Log::count`] does, keeping only the page's entries: a caller
    /// that knows nothing of a log yet never holds more of it than a page. Changes nothing.
    pub fn read_page(
        &self,
        req: PageRequest,
        known: Option<Known>,
    ) -> Result<(PageRead, Option<Known>), Error> {
        if let Some(k) = known {
            let file = File::open(&self.path).map_err(|e| self.open_failed(e))?;
            if still(&file, &k) {
                if let Some(read) = page_of_intact(&file, &k, req) {
                    return Ok((read, Some(k)));
                }
            }
        }
        let mut pager = Pager::new(req);
        let (scan, known) = self.read_with(|e| pager.push(e))?;
        Ok((pager.done(scan.torn), known))
    }

    /// Appends entries as lines with one write and an `fdatasync`, repairing a torn tail
    /// first; they are durable when this returns. With `expect`, appends only to an intact
    /// log of exactly that many entries and refuses with [`Error::Conflict`] otherwise,
    /// changing nothing. `known` is what the caller remembers of this log; it is checked
    /// against the file before it is trusted. An append of no entries only repairs.
    pub fn append(
        &self,
        entries: &[Value],
        expect: Option<usize>,
        known: Option<Known>,
    ) -> Result<Appended, Error> {
        check_entries(entries)?;
        let mut buf = Vec::new();
        let mut last_in_buf = 0;
        for e in entries {
            last_in_buf = buf.len() as u64;
            serde_json::to_writer(&mut buf, e)?;
            buf.push(b'\n');
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.open_failed(e))?;
        let state = match known.filter(|k| still(&file, k)) {
            Some(k) => State {
                intact_len: k.stamp.len,
                entries: k.entries,
                last_line: k.last_line,
                torn: None,
            },
            None => {
                let state = self.state(&mut file)?;
                self.not_shortened(state.entries)?;
                state
            }
        };
        if let Some(want) = expect {
            self.expected(&state, want)?;
        }
        let repaired = match &state.torn {
            Some(reason) => Some(self.repair(state.intact_len, reason)?),
            None => None,
        };
        if let Err(e) = file.write_all(&buf).and_then(|()| sync::data(&file)) {
            // Leave no torn line behind when the disk refused the write (ENOSPC, EIO).
            let _ = file
                .set_len(state.intact_len)
                .and_then(|()| sync::data(&file));
            return Err(self.io(e));
        }
        let total = state.entries + entries.len();
        if !entries.is_empty() {
            self.record_acknowledged(total);
        }
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

    /// The log's state from a full scan of the open file, keeping none of its entries.
    fn state(&self, file: &mut File) -> Result<State, Error> {
        let mut entries = 0;
        let (scan, _) = self.walk(file, |_| entries += 1)?;
        Ok(State {
            intact_len: scan.intact_len,
            entries,
            last_line: scan.last_line,
            torn: scan.torn,
        })
    }

    /// Refuses an append whose caller expected another log than this one.
    fn expected(&self, state: &State, want: usize) -> Result<(), Error> {
        let why = match &state.torn {
            Some(reason) => format!("has a torn tail ({reason})"),
            None if state.entries != want => format!(
                "holds {} entries, not the {want} the caller expected",
                state.entries
            ),
            None => return Ok(()),
        };
        Err(Error::Conflict {
            path: self.path.clone(),
            why,
        })
    }

    /// Records the torn tail (durably), then truncates the log to its intact prefix.
    fn repair(&self, intact_len: u64, reason: &str) -> Result<Repair, Error> {
        // Only the torn bytes, never the intact log before them.
        let mut tail = Vec::new();
        File::open(&self.path)
            .and_then(|mut f| {
                f.seek(std::io::SeekFrom::Start(intact_len))?;
                f.read_to_end(&mut tail)
            })
            .map_err(|e| self.io(e))?;
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let record = json!({
            "unix_ms": unix_ms,
            "file": self.path.display().to_string(),
            "truncated_at": intact_len,
            "removed_bytes": tail.len(),
            "reason": reason,
            "removed": String::from_utf8_lossy(&tail[..tail.len().min(4096)]),
        });
        let mut line = record.to_string();
        line.push('\n');
        let repairs = self.repairs_path();
        let created = !repairs.exists();
        let mut rec = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&repairs)
            .map_err(|e| Error::io(&repairs, e))?;
        rec.write_all(line.as_bytes())
            .and_then(|()| sync::data(&rec))
            .map_err(|e| Error::io(&repairs, e))?;
        if created {
            if let Some(dir) = repairs.parent() {
                sync::dir(dir).map_err(|e| Error::io(dir, e))?;
            }
        }
        let log = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(|e| self.io(e))?;
        log.set_len(intact_len)
            .and_then(|()| sync::data(&log))
            .map_err(|e| self.io(e))?;
        Ok(Repair {
            reason: reason.to_owned(),
            truncated_at: intact_len,
            removed_bytes: tail.len(),
            recorded_in: repairs,
        })
    }

    /// [`walk`] of the open log from where it stands, buffered.
    fn walk(&self, file: &File, each: impl FnMut(Value)) -> Result<(Scan, u64), Error> {
        walk(std::io::BufReader::with_capacity(1 << 16, file), each).map_err(|stop| match stop {
            Stop::Corrupt(why) => self.corrupt(why),
            Stop::Io(e) => self.io(e),
        })
    }

    fn io(&self, e: std::io::Error) -> Error {
        Error::io(&self.path, e)
    }

    fn corrupt(&self, why: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            why,
        }
    }
}

/// One page of a log, as [`Log::read_page`] read it.
#[derive(Debug, PartialEq)]
pub struct PageRead {
    /// The page's entries, `page.start..page.end` of the log's `page.total`.
    pub entries: Vec<Value>,
    /// Why the bytes after the intact entries are not a valid entry.
    pub torn: Option<String>,
    pub page: Page,
}

/// The page `req` asks for of an intact log `known` describes, reading only its lines (and,
/// for a page after the start, the newlines before it); `None` when the file does not read
/// as `known` says, so the caller scans it whole.
fn page_of_intact(file: &File, known: &Known, req: PageRequest) -> Option<PageRead> {
    let total = known.entries;
    let len = known.stamp.len;
    let mut fill = Filling {
        entries: Vec::new(),
        bytes: 0,
        limit: req.limit.unwrap_or(PAGE_ENTRIES).min(MAX_PAGE_ENTRIES),
    };
    let start = if req.tail {
        // Lines from the end, in a window of the file that grows until the page is done.
        let mut window = (2 * PAGE_BYTES as u64).min(len);
        loop {
            let from = len - window;
            let mut buf = vec![0; window as usize];
            file.read_exact_at(&mut buf, from).ok()?;
            let lines: Vec<&[u8]> = match buf.strip_suffix(b"\n") {
                Some(body) => body.rsplit(|&b| b == b'\n').collect(),
                None if total == 0 => Vec::new(),
                None => return None,
            };
            // The first line of the window may have begun before it.
            let complete = if from == 0 {
                lines.len()
            } else {
                lines.len() - 1
            };
            fill.entries.clear();
            fill.bytes = 0;
            let mut full = false;
            for line in &lines[..complete] {
                if !fill.take(line)? {
                    full = true;
                    break;
                }
            }
            if full || from == 0 {
                break;
            }
            window = (window * 2).min(len);
        }
        fill.entries.reverse();
        total.checked_sub(fill.entries.len())?
    } else {
        let start = req.after.unwrap_or(0).min(total);
        let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
        let mut line = Vec::new();
        for _ in 0..start {
            line.clear();
            reader.read_until(b'\n', &mut line).ok()?;
        }
        while start + fill.entries.len() < total {
            line.clear();
            reader.read_until(b'\n', &mut line).ok()?;
            if !fill.take(line.strip_suffix(b"\n")?)? {
                break;
            }
        }
        start
    };
    let end = start + fill.entries.len();
    Some(PageRead {
        entries: fill.entries,
        torn: None,
        page: Page {
            start,
            end,
            total,
            next: (end < total).then_some(end),
        },
    })
}

/// A page being filled: at most `limit` entries and [`PAGE_BYTES`] (but at least one).
struct Filling {
    entries: Vec<Value>,
    bytes: usize,
    limit: usize,
}

impl Filling {
    /// Takes the next entry unless the page is full: `Some(false)` when it is, `None` when
    /// the line is not an entry.
    fn take(&mut self, line: &[u8]) -> Option<bool> {
        if self.entries.len() >= self.limit {
            return Some(false);
        }
        Some(self.take_entry(parse_entry(line).ok()?))
    }

    /// Takes `entry` unless the page is full; false when it is.
    fn take_entry(&mut self, entry: Value) -> bool {
        if self.entries.len() >= self.limit {
            return false;
        }
        self.bytes += entry_bytes(&entry);
        if self.bytes > PAGE_BYTES && !self.entries.is_empty() {
            return false;
        }
        self.entries.push(entry);
        true
    }
}

/// The page a scan of the whole log is cut to, one entry at a time, keeping only that page's
/// entries: the same page as [`page`] cuts from all of them, at the cost of a page.
struct Pager {
    req: PageRequest,
    /// Entries scanned so far: the log's total once the scan is done.
    seen: usize,
    /// Forward pages: the page being filled, and whether it is done.
    fill: Filling,
    full: bool,
    /// Tail pages: the longest suffix so far within the page's limits (entry, its bytes).
    suffix: std::collections::VecDeque<(Value, usize)>,
    suffix_bytes: usize,
}

impl Pager {
    fn new(req: PageRequest) -> Pager {
        Pager {
            req,
            seen: 0,
            fill: Filling {
                entries: Vec::new(),
                bytes: 0,
                limit: req.limit.unwrap_or(PAGE_ENTRIES).min(MAX_PAGE_ENTRIES),
            },
            full: false,
            suffix: std::collections::VecDeque::new(),
            suffix_bytes: 0,
        }
    }

    /// The log's next entry.
    fn push(&mut self, entry: Value) {
        let index = self.seen;
        self.seen += 1;
        if self.req.tail {
            // A suffix within the limits stays so without its first entry, so the longest
            // one ending here is the last one, extended, less what no longer fits.
            let bytes = entry_bytes(&entry);
            self.suffix.push_back((entry, bytes));
            self.suffix_bytes += bytes;
            while self.suffix.len() > self.fill.limit
                || (self.suffix_bytes > PAGE_BYTES && self.suffix.len() > 1)
            {
                let (_, gone) = self.suffix.pop_front().expect("not empty");
                self.suffix_bytes -= gone;
            }
        } else if index >= self.req.after.unwrap_or(0) && !self.full {
            self.full = !self.fill.take_entry(entry);
        }
    }

    /// The page, once every entry was pushed.
    fn done(self, torn: Option<String>) -> PageRead {
        let total = self.seen;
        let (start, entries) = if self.req.tail {
            let entries: Vec<Value> = self.suffix.into_iter().map(|(e, _)| e).collect();
            (total - entries.len(), entries)
        } else {
            (self.req.after.unwrap_or(0).min(total), self.fill.entries)
        };
        let end = start + entries.len();
        PageRead {
            entries,
            torn,
            page: Page {
                start,
                end,
                total,
                next: (end < total).then_some(end),
            },
        }
    }
}

/// True when the open log is still the file `known` describes and its last line is still a
/// complete entry (where a torn tail would be), so its intact prefix need not be rescanned.
pub(crate) fn still(file: &File, known: &Known) -> bool {
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

impl Known {
    /// The log's length this knowledge belongs to.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.stamp.len
    }
}
