//! Counting execs and resident processes per phase from an `strace -f -ttt -e trace=process` file.
//!
//! `runtime report REPORT.json TRACE` uses this to add the report's `trace` section. For each of
//! the report's phases (matched by their wall-clock epoch bounds) it counts:
//!
//! - **execs**: `execve`/`execveat` calls whose completion returned 0, whether on a whole line or
//!   on a `<... execve resumed>` line. When a non-leader thread execs, the kernel gives the new
//!   image the thread-group leader's pid, so the completion may carry another pid than its
//!   `<unfinished ...>` (or `<pid changed to N ...>`) half; strace then also prints
//!   `+++ superseded by execve in pid T +++`. Failed execs (`= -1 ENOENT`, a PATH search) are
//!   not counted.
//! - **executing pids**: distinct pids owning a successful exec completion in the phase.
//! - **resident processes**: processes (thread groups, not threads) alive at the phase's end,
//!   tracked from fork/vfork/clone/clone3 return values (a clone with `CLONE_THREAD` makes a
//!   thread), `+++ exited with` / `+++ killed by` lines and the first pid seen. A child's own
//!   lines may come before the clone that returns it; inside a pid namespace (bubblewrap's
//!   `--unshare-pid`) a clone returns a namespace-local number that never appears as a pid, and
//!   is paired with the next unknown pid instead of being counted as a process of its own.
//!
//! An empty, truncated or malformed trace never yields zeros: the section says
//! `available: false` with the reason.

mod count;
mod parse;
mod track;

use count::{count_phases, Counted};
use link_report::{Phase, Report, TraceSection};
use parse::parse_lines;
use std::path::Path;
use track::Tracker;

/// Why a trace cannot be counted; its text becomes the section's `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {message}")]
    Unreadable { path: String, message: String },
    #[error(
        "trace is empty: strace recorded nothing; record it with \
         `strace -f -ttt -e trace=process -o FILE PROGRAM...`"
    )]
    Empty,
    #[error("trace is truncated: {0}")]
    Truncated(String),
    #[error("trace is malformed at line {line}: {problem}: `{text}`")]
    Malformed {
        line: usize,
        problem: String,
        text: String,
    },
    #[error("trace does not match the report: {0}")]
    Mismatch(String),
}

/// One successful exec: when it completed and which pid owns the new image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exec {
    pub unix_ns: u128,
    pub pid: i32,
}

/// One process (thread group) of the trace: when it appeared and when it ended, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    pub pid: i32,
    pub born_ns: u128,
    pub ended_ns: Option<u128>,
}

/// What a complete trace says happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub execs: Vec<Exec>,
    pub processes: Vec<Lifetime>,
    /// Epoch bounds of the trace's lines.
    pub first_ns: u128,
    pub last_ns: u128,
}

impl Trace {
    /// Parses a whole trace; any doubt about completeness is an error.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let lines = parse_lines(text)?;
        Tracker::new(&lines).run()
    }
}

/// Counts every phase, or says why the trace cannot be used.
pub fn analyze(text: &str, phases: &[Phase]) -> TraceSection {
    section(Trace::parse(text).and_then(|t| count_phases(&t, phases)))
}

/// [`analyze`] on a file.
pub fn analyze_file(path: &Path, phases: &[Phase]) -> TraceSection {
    match std::fs::read_to_string(path) {
        Ok(text) => analyze(&text, phases),
        Err(e) => section(Err(TraceError::Unreadable {
            path: path.display().to_string(),
            message: e.to_string(),
        })),
    }
}

/// Fills `report.trace` from the trace file at `trace_path`; the section it wrote.
pub fn apply_to_report<'r>(report: &'r mut Report, trace_path: &Path) -> &'r TraceSection {
    report
        .trace
        .insert(analyze_file(trace_path, &report.phases))
}

/// A short table of the section, or the reason it is unavailable.
pub fn render_table(section: &TraceSection) -> String {
    if !section.available {
        let reason = section.reason.as_deref().unwrap_or("no reason given");
        return format!("trace unavailable: {reason}\n");
    }
    let mut out = format!(
        "{:<18} {:>5} {:>6} {:>15} {:>9}\n",
        "phase", "round", "execs", "executing pids", "resident"
    );
    for p in &section.phases {
        out.push_str(&format!(
            "{:<18} {:>5} {:>6} {:>15} {:>9}\n",
            p.name, p.round, p.execs, p.executing_pids, p.resident_processes
        ));
    }
    if let (Some(outside), Some(total)) = (section.outside_phases_execs, section.total_execs) {
        out.push_str(&format!("{:<24} {outside:>6}\n", "outside every phase"));
        out.push_str(&format!("{:<24} {total:>6}\n", "whole trace"));
    }
    out
}

fn section(counted: Result<Counted, TraceError>) -> TraceSection {
    match counted {
        Ok(c) => TraceSection {
            available: true,
            reason: None,
            phases: c.phases,
            outside_phases_execs: Some(c.outside_phases_execs),
            total_execs: Some(c.total_execs),
        },
        Err(e) => TraceSection {
            available: false,
            reason: Some(e.to_string()),
            phases: Vec::new(),
            outside_phases_execs: None,
            total_execs: None,
        },
    }
}

#[cfg(test)]
mod tests;
