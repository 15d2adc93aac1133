//! link-conversation: the one conversation log both runtimes use, so Mini (the baseline the
//! comparison divides by) and full Link's file store give a turn the same durability.
//!
//! A log is one JSON object per line (`role`, `content`, ...), appended with one write and
//! an `fdatasync` before [`Log::append`] returns; [`create`] makes an empty log with
//! owner-only permissions and fsyncs it and every directory whose entries it changed.
//!
//! A crash during an append can leave a torn last line (bytes without their newline, or a
//! last line that is not valid JSON). Reading never drops or half-parses it: the intact
//! entries come back together with [`Scan::torn`] naming what is wrong. The next append
//! repairs the log by truncating exactly the torn tail — never an intact line — and records
//! what it cut in `<stem>.repairs.jsonl` beside the log ([`Log::repairs_path`]) and in
//! [`Appended::repaired`], so nothing disappears silently and new entries never glue onto a
//! broken line. A malformed line that is *not* the last one is not a crash artefact: both
//! read and append refuse with [`Error::Corrupt`] naming the file and line, and nothing is
//! changed.
//!
//! With `expect` (the wire's `expect_total`) an append goes only to an intact log of exactly
//! that many entries and otherwise refuses with [`Error::Conflict`], writing nothing: a
//! caller that keeps the conversation in memory between turns still notices any change it
//! did not make.
//!
//! Appends come every turn, so a caller need not rescan a growing log each time: after a
//! scan or an append of its own it may keep the file's [`Known`] state. The next append
//! trusts it only when the file still matches and its last line is still a complete entry,
//! which is where a torn tail would be; anything else means a full scan.
//!
//! Reads and turns are bounded whatever the log's length ([`page`], [`context_window`]): a
//! reader gets pages of at most [`PAGE_ENTRIES`] entries (by default) and [`PAGE_BYTES`],
//! well under the frame limit, and the model gets the last [`CONTEXT_ENTRIES`] entries
//! within [`CONTEXT_BYTES`], starting at a user entry, in Mini and full Link alike.
//!
//! A log shorter than what was acknowledged is never served as if complete: after each
//! durable append the log's entry count is written to `<stem>.acked` beside it
//! ([`Log::acked_path`]), and a read or an append that finds fewer intact entries (the log
//! cut at a line boundary, emptied or deleted) refuses with [`Error::Shortened`]. The count
//! is written after the log's `fdatasync` and is not synced itself: after a crash it can only
//! lag behind the durable log, never run ahead of it, so it never flags a log a crash left
//! whole; it guards against changes made outside the runtime, not against the crash itself.
//!
//! Every agent has its own log, so damage is per agent: [`agent_logs`] lists the logs of a
//! directory of agents, each then counted ([`Log::count`]) and read a page at a time
//! ([`Log::read_page`]) on its own; one corrupt or unreadable log never stops the others.
//! Neither keeps a log's entries, nor its bytes: a scan holds one line at a time, so what a
//! caller holds of a conversation is a page, whatever the conversation's length.

mod dir;
mod earlier;
mod log;
mod window;

pub use dir::{agent_logs, create};
pub use earlier::{earlier_turn, user_entry, KeyReused, KEY_FIELD};
pub use log::{check_entries, scan, Appended, Count, Known, Log, PageRead, Repair, Scan};
pub use window::{
    context_window, context_window_measured, entry_bytes, page, Page, PageRequest, CONTEXT_BYTES,
    CONTEXT_ENTRIES, MAX_PAGE_ENTRIES, PAGE_BYTES, PAGE_ENTRIES,
};

use std::path::PathBuf;

/// Why a log could not be read or appended to.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log does not exist.
    #[error("no conversation log at {}", path.display())]
    NotFound { path: PathBuf },
    /// The file system refused.
    #[error("conversation log {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line other than the last is not an entry: not a torn append, so never repaired.
    #[error(
        "conversation log {} is corrupt: {why}. This is not a torn append; stop the \
         runtime, inspect the file and remove or fix that line by hand",
        path.display()
    )]
    Corrupt { path: PathBuf, why: String },
    /// The log is not the one the caller expected (`expect`); nothing was appended.
    #[error(
        "conversation log {} {why}; nothing was appended. Read it again (an append \
         without expect_total repairs a torn tail)",
        path.display()
    )]
    Conflict { path: PathBuf, why: String },
    /// The log holds fewer intact entries than the store acknowledged: it was cut at a line
    /// boundary, emptied, deleted or overwritten outside the runtime (a crash only ever tears
    /// an entry that was not yet acknowledged). Never served as if complete.
    #[error(
        "conversation log {} holds {found} intact entries, but {acknowledged} were \
         acknowledged (counted in {}): it was cut, emptied, deleted or overwritten outside \
         the runtime. Restore it from a backup; to accept it as it is, remove {}",
        path.display(),
        acked.display(),
        acked.display()
    )]
    Shortened {
        path: PathBuf,
        /// The file that keeps the acknowledged count ([`Log::acked_path`]).
        acked: PathBuf,
        found: usize,
        acknowledged: usize,
    },
    /// An entry to append is not an object with a string `role`; nothing was appended.
    #[error("entry {index} must be an object with a string `role`")]
    BadEntry { index: usize },
    /// An entry could not be encoded; nothing was appended.
    #[error("encoding entry: {0}")]
    Encode(#[from] serde_json::Error),
}

impl Error {
    fn io(path: &std::path::Path, source: std::io::Error) -> Error {
        if source.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound {
                path: path.to_owned(),
            }
        } else {
            Error::Io {
                path: path.to_owned(),
                source,
            }
        }
    }
}

/// The file operations whose durability the tests check, counted per thread in tests.
mod sync {
    use std::fs::File;

    #[cfg(test)]
    thread_local! {
        /// `(data syncs of logs, full syncs of files, syncs of directories)` so far.
        pub static COUNTS: std::cell::Cell<(usize, usize, usize)> =
            const { std::cell::Cell::new((0, 0, 0)) };
    }

    #[cfg(test)]
    fn count(f: impl FnOnce(&mut (usize, usize, usize))) {
        COUNTS.with(|c| {
            let mut v = c.get();
            f(&mut v);
            c.set(v);
        });
    }

    /// `fdatasync`: the appended bytes and the size that covers them.
    pub fn data(file: &File) -> std::io::Result<()> {
        #[cfg(test)]
        count(|c| c.0 += 1);
        file.sync_data()
    }

    /// `fsync` of a file just created.
    pub fn all(file: &File) -> std::io::Result<()> {
        #[cfg(test)]
        count(|c| c.1 += 1);
        file.sync_all()
    }

    /// `fsync` of a directory, so entries created in it survive a crash.
    pub fn dir(dir: &std::path::Path) -> std::io::Result<()> {
        #[cfg(test)]
        count(|c| c.2 += 1);
        File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests;
