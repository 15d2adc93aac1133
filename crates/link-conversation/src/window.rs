//! Bounded views of a conversation: the pages a reader gets, and the context window a turn
//! engine sends the model. Both runtimes use these, so a read never outgrows a frame and a
//! turn's cost does not grow with the conversation's length.
//!
//! An entry's size is its compact JSON line ([`entry_bytes`]), the same measure for pages
//! and windows, so the window of a tail page is the window of the whole log
//! ([`context_window`]).

use serde_json::Value;

/// Entries in a page when the reader names no limit.
pub const PAGE_ENTRIES: usize = 200;
/// The most entries one page holds, whatever limit the reader names.
pub const MAX_PAGE_ENTRIES: usize = 1000;
/// Bytes of entries (as JSON lines) a page holds at most, well under the 4 MiB frame limit;
/// a page always holds at least one entry when one is left, whatever its size.
pub const PAGE_BYTES: usize = 1024 * 1024;

/// The most entries of a conversation the model is sent.
pub const CONTEXT_ENTRIES: usize = 200;
/// The most bytes of entries (as JSON lines) the model is sent, beyond the last entry.
pub const CONTEXT_BYTES: usize = 256 * 1024;

// A tail page of the default limit always holds the context window.
const _: () = assert!(PAGE_ENTRIES >= CONTEXT_ENTRIES && PAGE_BYTES >= CONTEXT_BYTES);

/// The size of an entry as a line of the log: its compact JSON and the newline.
pub fn entry_bytes(entry: &Value) -> usize {
    /// Counts what is written, keeping nothing.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(1);
    let _ = serde_json::to_writer(&mut count, entry);
    count.0
}

/// Which page a reader asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// How many entries come before the page (a previous page's `next`); 0 when absent.
    pub after: Option<usize>,
    /// The most entries wanted: [`PAGE_ENTRIES`] when absent, at most [`MAX_PAGE_ENTRIES`].
    pub limit: Option<usize>,
    /// The last page: it ends with the log's last entry (`after` is ignored).
    pub tail: bool,
}

/// The entries `start..end` of a log of `total` entries; `next` is the `after` of the page
/// following it, when entries are left after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub start: usize,
    pub end: usize,
    pub total: usize,
    pub next: Option<usize>,
}

/// The page of `entries` that `req` asks for: at most its limit of entries and
/// [`PAGE_BYTES`] of them (but at least one while any is left).
pub fn page(entries: &[Value], req: PageRequest) -> Page {
    let total = entries.len();
    let limit = req.limit.unwrap_or(PAGE_ENTRIES).min(MAX_PAGE_ENTRIES);
    let (start, end) = if req.tail {
        let size = |i| entry_bytes(&entries[i]);
        (suffix_start(total, limit, PAGE_BYTES, size), total)
    } else {
        let start = req.after.unwrap_or(0).min(total);
        let mut end = start;
        let mut bytes = 0;
        while end < total && end - start < limit {
            bytes += entry_bytes(&entries[end]);
            if bytes > PAGE_BYTES && end > start {
                break;
            }
            end += 1;
        }
        (start, end)
    };
    Page {
        start,
        end,
        total,
        next: (end < total).then_some(end),
    }
}

/// Where the longest suffix of `len` entries, entry `i` being `size(i)` bytes, of at most
/// `count` entries and `budget` bytes starts; it holds at least the last entry (when
/// `count > 0`), whatever its size.
fn suffix_start(len: usize, count: usize, budget: usize, size: impl Fn(usize) -> usize) -> usize {
    let mut start = len;
    let mut bytes = 0;
    while start > 0 && len - start < count {
        bytes += size(start - 1);
        if bytes > budget && start < len {
            break;
        }
        start -= 1;
    }
    start
}

/// The entries a turn sends the model, the same rule in Mini and full Link: the longest
/// suffix of at most [`CONTEXT_ENTRIES`] entries and [`CONTEXT_BYTES`] bytes (at least the
/// last entry), then starting at its first `user` entry, so the window begins at a turn
/// and never holds a tool result without the call it answers; a window without a user
/// entry starts at its first entry that is not a tool result.
///
/// It depends only on the log's last entries: any suffix of the log that is a tail
/// [`page`] with a limit of at least [`CONTEXT_ENTRIES`] (the default), or that holds at
/// least [`CONTEXT_ENTRIES`] entries, gives the same window as the whole log.
pub fn context_window(entries: &[Value]) -> &[Value] {
    window_of(entries, |i| entry_bytes(&entries[i]))
}

/// [`context_window`] of entries whose sizes are known already: `bytes[i]` is
/// [`entry_bytes`] of `entries[i]`. A turn engine that keeps a log's last entries between
/// turns measures each one once, when it comes, not on every model call.
pub fn context_window_measured<'a>(entries: &'a [Value], bytes: &[usize]) -> &'a [Value] {
    assert_eq!(entries.len(), bytes.len(), "one size per entry");
    window_of(entries, |i| bytes[i])
}

/// [`context_window`] with entry `i` being `size(i)` bytes.
fn window_of(entries: &[Value], size: impl Fn(usize) -> usize) -> &[Value] {
    let start = suffix_start(entries.len(), CONTEXT_ENTRIES, CONTEXT_BYTES, size);
    let window = &entries[start..];
    fn role(e: &Value) -> Option<&str> {
        e.get("role").and_then(Value::as_str)
    }
    let at = window
        .iter()
        .position(|e| role(e) == Some("user"))
        .or_else(|| window.iter().position(|e| role(e) != Some("tool")))
        .unwrap_or(window.len());
    &window[at..]
}
