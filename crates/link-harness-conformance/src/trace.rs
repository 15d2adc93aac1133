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

use link_plugin_measure::{Phase, Report, TracePhase, TraceSection};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;

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

    /// Counts one phase: execs completed within its bounds, processes alive at its end.
    pub fn count(&self, phase: &Phase) -> TracePhase {
        let (start, end) = (phase.start_unix_ns, phase.end_unix_ns);
        let execs: Vec<&Exec> = self
            .execs
            .iter()
            .filter(|e| e.unix_ns >= start && e.unix_ns <= end)
            .collect();
        let pids: HashSet<i32> = execs.iter().map(|e| e.pid).collect();
        let resident = self
            .processes
            .iter()
            .filter(|p| p.born_ns <= end && p.ended_ns.is_none_or(|d| d > end))
            .count();
        TracePhase {
            name: phase.name.clone(),
            round: phase.round,
            execs: execs.len() as u64,
            executing_pids: pids.len() as u64,
            resident_processes: resident as u64,
        }
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

/// Fills `report.trace` from the trace file at `trace_path`.
pub fn apply_to_report(report: &mut Report, trace_path: &Path) {
    report.trace = Some(analyze_file(trace_path, &report.phases));
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
    out
}

fn section(counted: Result<Vec<TracePhase>, TraceError>) -> TraceSection {
    match counted {
        Ok(phases) => TraceSection {
            available: true,
            reason: None,
            phases,
        },
        Err(e) => TraceSection {
            available: false,
            reason: Some(e.to_string()),
            phases: Vec::new(),
        },
    }
}

/// Refuses phases the trace cannot speak for, so a wrong file never reads as zero activity.
fn count_phases(trace: &Trace, phases: &[Phase]) -> Result<Vec<TracePhase>, TraceError> {
    if phases.is_empty() {
        return Err(TraceError::Mismatch("the report has no phases".into()));
    }
    for p in phases {
        if p.start_unix_ns < trace.first_ns || p.end_unix_ns > trace.last_ns {
            return Err(TraceError::Mismatch(format!(
                "phase {} (round {}) runs {}..{} ns but the trace covers {}..{} ns; \
                 was the trace recorded for this report's run?",
                p.name, p.round, p.start_unix_ns, p.end_unix_ns, trace.first_ns, trace.last_ns
            )));
        }
    }
    Ok(phases.iter().map(|p| trace.count(p)).collect())
}

// ---------------------------------------------------------------------------------------------
// Lines

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Whole,
    Unfinished,
    Resumed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event<'a> {
    Call {
        name: &'a str,
        part: Part,
        /// A clone/clone3 with `CLONE_THREAD` (for resumed lines: taken from the start).
        thread: bool,
        /// The return value; `None` while unfinished or for `= ?`.
        ret: Option<i64>,
    },
    Exited,
    Superseded {
        by: i32,
    },
    Signal,
}

#[derive(Debug, Clone)]
struct Line<'a> {
    no: usize,
    pid: i32,
    ns: u128,
    text: &'a str,
    event: Event<'a>,
}

fn parse_lines(text: &str) -> Result<Vec<Line<'_>>, TraceError> {
    if text.trim().is_empty() {
        return Err(TraceError::Empty);
    }
    let raw: Vec<&str> = text.lines().collect();
    // strace ends every line with a newline; a missing one means the copy stopped mid-line.
    if !text.ends_with('\n') {
        let last = raw.len();
        return Err(TraceError::Truncated(format!(
            "the last line ({last}) stops mid-way: `{}`",
            excerpt(raw[last - 1])
        )));
    }
    let mut lines = Vec::with_capacity(raw.len());
    for (i, text) in raw.iter().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        let line = parse_line(i + 1, text).map_err(|problem| TraceError::Malformed {
            line: i + 1,
            problem,
            text: excerpt(text),
        })?;
        lines.push(line);
    }
    carry_clone_flags(&mut lines);
    Ok(lines)
}

/// A resumed clone line lacks its flags; they were on the `<unfinished ...>` half.
fn carry_clone_flags(lines: &mut [Line<'_>]) {
    let mut started: HashMap<i32, bool> = HashMap::new();
    for line in lines.iter_mut() {
        if let Event::Call {
            name, part, thread, ..
        } = &mut line.event
        {
            if !is_clone(name) {
                continue;
            }
            match part {
                Part::Unfinished => {
                    started.insert(line.pid, *thread);
                }
                Part::Resumed => *thread = started.remove(&line.pid).unwrap_or(false),
                Part::Whole => {}
            }
        }
    }
}

fn parse_line(no: usize, text: &str) -> Result<Line<'_>, String> {
    let (pid, rest) = split_word(text);
    let pid: i32 = pid
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or("expected a pid first (record with strace -f)")?;
    let (ts, body) = split_word(rest);
    let ns = parse_epoch(ts).ok_or("expected an epoch timestamp second (record with -ttt)")?;
    let event = parse_body(body)?;
    Ok(Line {
        no,
        pid,
        ns,
        text,
        event,
    })
}

fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

/// `1732990000.123456` (or with up to nine fraction digits) to nanoseconds.
fn parse_epoch(ts: &str) -> Option<u128> {
    let (secs, frac) = ts.split_once('.')?;
    if secs.is_empty() || frac.is_empty() || frac.len() > 9 {
        return None;
    }
    if !secs.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scale = 10u128.pow(9 - frac.len() as u32);
    Some(secs.parse::<u128>().ok()? * 1_000_000_000 + frac.parse::<u128>().ok()? * scale)
}

fn parse_body(body: &str) -> Result<Event<'_>, String> {
    if let Some(inner) = body
        .strip_prefix("+++ ")
        .and_then(|b| b.strip_suffix(" +++"))
    {
        return parse_exit(inner);
    }
    if body.starts_with("--- ") && body.ends_with(" ---") {
        return Ok(Event::Signal);
    }
    if let Some(rest) = body.strip_prefix("<... ") {
        let (name, tail) = rest
            .split_once(" resumed>")
            .ok_or("a `<...` line without `resumed>`")?;
        return call(name, Part::Resumed, tail, false);
    }
    let name_len = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(body.len());
    let (name, tail) = body.split_at(name_len);
    if name.is_empty() || !tail.starts_with('(') {
        return Err("not a system call, signal or exit line".into());
    }
    if tail.ends_with("<detached ...>") {
        return Err("strace detached from the process before the call completed".into());
    }
    let unfinished = tail.ends_with("<unfinished ...>")
        || (tail.ends_with(" ...>") && tail.contains("<pid changed to "));
    let thread = is_clone(name) && tail.contains("CLONE_THREAD");
    if unfinished {
        return Ok(Event::Call {
            name,
            part: Part::Unfinished,
            thread,
            ret: None,
        });
    }
    call(name, Part::Whole, tail, thread)
}

fn parse_exit(inner: &str) -> Result<Event<'static>, String> {
    if inner.starts_with("exited with ") || inner.starts_with("killed by ") {
        return Ok(Event::Exited);
    }
    if let Some(by) = inner.strip_prefix("superseded by execve in pid ") {
        let by = by
            .trim()
            .parse()
            .map_err(|_| "unreadable superseding pid")?;
        return Ok(Event::Superseded { by });
    }
    Err("unknown `+++` line".into())
}

/// A completed call: `...) = VALUE [ERRNO (text)]`.
fn call<'a>(name: &'a str, part: Part, tail: &str, thread: bool) -> Result<Event<'a>, String> {
    let eq = tail
        .rfind(" = ")
        .ok_or("the call has no return value (cut short?)")?;
    if !tail[..eq].trim_end().ends_with(')') {
        return Err("the call's arguments are not closed".into());
    }
    let value = tail[eq + 3..].split_whitespace().next().unwrap_or("");
    let ret = match value {
        "?" => None,
        v => Some(parse_value(v).ok_or("unreadable return value")?),
    };
    Ok(Event::Call {
        name,
        part,
        thread,
        ret,
    })
}

fn parse_value(v: &str) -> Option<i64> {
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok().map(|u| u as i64),
        None => v.parse().ok(),
    }
}

fn is_clone(name: &str) -> bool {
    matches!(name, "clone" | "clone3" | "fork" | "vfork")
}

fn is_exec(name: &str) -> bool {
    matches!(name, "execve" | "execveat")
}

fn excerpt(text: &str) -> String {
    const MAX: usize = 160;
    match text.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// A fork/clone completion: which line returned which child, and whether it is a thread.
#[derive(Debug, Clone, Copy)]
struct Creation {
    line: usize,
    caller: i32,
    thread: bool,
}

/// A creation whose returned pid never shows up in the trace: the caller lives in another pid
/// namespace (bubblewrap's `--unshare-pid`), so the number is namespace-local while strace
/// prints the child's lines under its real pid. It is paired with the next unknown pid.
#[derive(Debug, Clone, Copy)]
struct Phantom {
    creation: Creation,
    ns: u128,
}

/// A call seen start (`<unfinished ...>`) but not yet its completion.
#[derive(Debug, Clone, Copy)]
struct Pending<'a> {
    name: &'a str,
    line: usize,
}

/// Replays the lines in order, following processes, threads and unfinished calls.
struct Tracker<'l, 'a> {
    lines: &'l [Line<'a>],
    /// Child pid → the lines that returned it (a child's own lines may come first).
    creations: HashMap<i32, Vec<Creation>>,
    consumed: HashSet<usize>,
    /// Lines of creations whose child number never appears after them.
    phantom_lines: Vec<usize>,
    /// Phantom creations already completed, waiting for their child's real pid.
    phantoms: VecDeque<Phantom>,
    /// Live processes (thread-group leaders) → index in `processes`.
    live: HashMap<i32, usize>,
    /// Live non-leader threads → their thread group.
    threads: HashMap<i32, i32>,
    pending: HashMap<i32, Pending<'a>>,
    processes: Vec<Lifetime>,
    execs: Vec<Exec>,
}

impl<'l, 'a> Tracker<'l, 'a> {
    fn new(lines: &'l [Line<'a>]) -> Self {
        let mut creations: HashMap<i32, Vec<Creation>> = HashMap::new();
        let mut last_seen: HashMap<i32, usize> = HashMap::new();
        for (i, line) in lines.iter().enumerate() {
            last_seen.insert(line.pid, i);
            if let Some((child, thread)) = created(line) {
                creations.entry(child).or_default().push(Creation {
                    line: i,
                    caller: line.pid,
                    thread,
                });
            }
        }
        let mut phantom_lines: Vec<usize> = creations
            .iter()
            .flat_map(|(child, all)| {
                let last = last_seen.get(child).copied();
                all.iter()
                    .filter(move |c| last.is_none_or(|l| l <= c.line))
                    .map(|c| c.line)
            })
            .collect();
        phantom_lines.sort_unstable();
        Tracker {
            lines,
            creations,
            consumed: HashSet::new(),
            phantom_lines,
            phantoms: VecDeque::new(),
            live: HashMap::new(),
            threads: HashMap::new(),
            pending: HashMap::new(),
            processes: Vec::new(),
            execs: Vec::new(),
        }
    }

    fn run(mut self) -> Result<Trace, TraceError> {
        let lines = self.lines;
        for (i, line) in lines.iter().enumerate() {
            self.ensure_known(line.pid, i, line.ns);
            self.step(i, line)?;
        }
        self.finish()
    }

    fn step(&mut self, i: usize, line: &Line<'a>) -> Result<(), TraceError> {
        match line.event {
            Event::Call {
                name, part, ret, ..
            } => {
                match part {
                    Part::Unfinished => self.start(i, line, name)?,
                    Part::Resumed => self.resume(line, name)?,
                    Part::Whole => {}
                }
                if part != Part::Unfinished {
                    self.complete(i, line, name, ret);
                }
            }
            Event::Exited => self.exited(line.pid, line.ns),
            Event::Superseded { by } => self.superseded(line.pid, by, line.ns),
            Event::Signal => {}
        }
        Ok(())
    }

    fn start(&mut self, i: usize, line: &Line<'a>, name: &'a str) -> Result<(), TraceError> {
        if let Some(open) = self.pending.get(&line.pid) {
            return Err(malformed(
                line,
                format!(
                    "pid {} starts {name} while its {} from line {} is unfinished",
                    line.pid, open.name, self.lines[open.line].no
                ),
            ));
        }
        self.pending.insert(line.pid, Pending { name, line: i });
        Ok(())
    }

    fn resume(&mut self, line: &Line<'a>, name: &str) -> Result<(), TraceError> {
        if !self.pending.contains_key(&line.pid) && is_exec(name) {
            self.adopt_thread_exec(line.pid);
        }
        match self.pending.remove(&line.pid) {
            Some(open) if open.name == name => Ok(()),
            Some(open) => Err(malformed(
                line,
                format!(
                    "resumes {name} but pid {}'s unfinished call is {}",
                    line.pid, open.name
                ),
            )),
            None => Err(malformed(
                line,
                format!("resumes {name} that pid {} never started", line.pid),
            )),
        }
    }

    /// Without a `superseded` line, a leader's resumed exec belongs to one of its threads.
    fn adopt_thread_exec(&mut self, leader: i32) {
        let group = self.tgid(leader);
        let thread = self
            .threads
            .iter()
            .find(|(t, g)| **g == group && self.pending.get(t).is_some_and(|p| is_exec(p.name)))
            .map(|(t, _)| *t);
        if let Some(t) = thread {
            let open = self.pending.remove(&t).expect("found above");
            self.threads.remove(&t);
            self.pending.insert(leader, open);
        }
    }

    fn complete(&mut self, i: usize, line: &Line<'a>, name: &str, ret: Option<i64>) {
        if is_exec(name) && ret == Some(0) {
            self.execs.push(Exec {
                unix_ns: line.ns,
                pid: line.pid,
            });
        }
        if let Some((child, thread)) = created(line) {
            if !self.consumed.insert(i) || self.is_known(child) {
                return;
            }
            let creation = Creation {
                line: i,
                caller: line.pid,
                thread,
            };
            if self.phantom_lines.binary_search(&i).is_ok() {
                self.phantoms.push_back(Phantom {
                    creation,
                    ns: line.ns,
                });
            } else {
                self.register(child, thread, line.pid, line.ns);
            }
        }
    }

    fn exited(&mut self, pid: i32, ns: u128) {
        self.pending.remove(&pid);
        if self.threads.remove(&pid).is_some() {
            return;
        }
        if let Some(idx) = self.live.remove(&pid) {
            self.processes[idx].ended_ns = Some(ns);
        }
        // A group's threads end with it, whether or not strace printed each one.
        let gone: Vec<i32> = self
            .threads
            .iter()
            .filter(|(_, g)| **g == pid)
            .map(|(t, _)| *t)
            .collect();
        for t in gone {
            self.threads.remove(&t);
            self.pending.remove(&t);
        }
    }

    /// Thread `by` exec'd and took over `leader`'s pid: the thread is gone, the process lives on.
    fn superseded(&mut self, leader: i32, by: i32, ns: u128) {
        self.threads.remove(&by);
        if by != leader {
            if let Some(idx) = self.live.remove(&by) {
                self.processes[idx].ended_ns = Some(ns);
            }
        }
        match self.pending.remove(&by) {
            Some(open) => {
                self.pending.insert(leader, open);
            }
            None => {
                self.pending.remove(&leader);
            }
        }
    }

    /// A pid's first line may precede the fork that returns it; look ahead for its creator.
    fn ensure_known(&mut self, pid: i32, i: usize, ns: u128) {
        if self.is_known(pid) {
            return;
        }
        let creation = self
            .creations
            .get(&pid)
            .and_then(|all| {
                all.iter()
                    .find(|c| c.line > i && !self.consumed.contains(&c.line))
            })
            .copied();
        if let Some(c) = creation {
            self.consumed.insert(c.line);
            return self.register(pid, c.thread, c.caller, ns);
        }
        if let Some(p) = self.phantoms.pop_front() {
            let c = p.creation;
            return self.register(pid, c.thread, c.caller, p.ns.min(ns));
        }
        if let Some(c) = self.upcoming_phantom(i) {
            self.consumed.insert(c.line);
            return self.register(pid, c.thread, c.caller, ns);
        }
        // The first pid of the trace, or one whose creation strace did not show.
        self.register(pid, false, pid, ns)
    }

    /// A namespaced child may print before its creator's clone returns: the earliest phantom
    /// creation still to come whose caller is inside a clone right now.
    fn upcoming_phantom(&self, i: usize) -> Option<Creation> {
        let from = self.phantom_lines.partition_point(|&l| l <= i);
        self.phantom_lines[from..]
            .iter()
            .copied()
            .filter(|l| !self.consumed.contains(l))
            .find_map(|line| {
                let caller = self.lines[line].pid;
                let (_, thread) = created(&self.lines[line])?;
                let in_clone = self.pending.get(&caller).is_some_and(|p| is_clone(p.name));
                in_clone.then_some(Creation {
                    line,
                    caller,
                    thread,
                })
            })
    }

    fn register(&mut self, pid: i32, thread: bool, caller: i32, ns: u128) {
        if thread {
            let group = self.tgid(caller);
            self.threads.insert(pid, group);
        } else {
            self.live.insert(pid, self.processes.len());
            self.processes.push(Lifetime {
                pid,
                born_ns: ns,
                ended_ns: None,
            });
        }
    }

    fn is_known(&self, pid: i32) -> bool {
        self.live.contains_key(&pid) || self.threads.contains_key(&pid)
    }

    fn tgid(&self, tid: i32) -> i32 {
        self.threads.get(&tid).copied().unwrap_or(tid)
    }

    fn finish(self) -> Result<Trace, TraceError> {
        let lines = self.lines;
        let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
            return Err(TraceError::Empty);
        };
        if let Some((pid, open)) = self.pending.iter().min_by_key(|(_, p)| p.line) {
            return Err(TraceError::Truncated(format!(
                "pid {pid}'s {} (line {}) never completed and the process did not exit; \
                 strace stopped before the run ended",
                open.name, lines[open.line].no
            )));
        }
        let root = first.pid;
        if self.live.contains_key(&root) {
            return Err(TraceError::Truncated(format!(
                "the traced program (pid {root}) never exited; strace stopped before the run ended"
            )));
        }
        Ok(Trace {
            execs: self.execs,
            processes: self.processes,
            first_ns: first.ns,
            last_ns: lines.iter().map(|l| l.ns).max().unwrap_or(last.ns),
        })
    }
}

/// The child a completed fork/clone line returned, and whether it is a thread.
fn created(line: &Line<'_>) -> Option<(i32, bool)> {
    match line.event {
        Event::Call {
            name,
            part: Part::Whole | Part::Resumed,
            thread,
            ret: Some(child),
        } if is_clone(name) && child > 0 => Some((i32::try_from(child).ok()?, thread)),
        _ => None,
    }
}

fn malformed(line: &Line<'_>, problem: String) -> TraceError {
    TraceError::Malformed {
        line: line.no,
        problem,
        text: excerpt(line.text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
    }

    fn read(name: &str) -> String {
        std::fs::read_to_string(data(name)).unwrap()
    }

    fn phase(name: &str, start: &str, end: &str) -> Phase {
        let (s, e) = (parse_epoch(start).unwrap(), parse_epoch(end).unwrap());
        Phase {
            name: name.into(),
            round: 0,
            start_unix_ns: s,
            end_unix_ns: e,
            duration_ns: e - s,
        }
    }

    /// (execs, executing pids, resident processes) per phase, after asserting availability.
    fn counts(name: &str, phases: &[Phase]) -> Vec<(u64, u64, u64)> {
        let section = analyze(&read(name), phases);
        assert!(section.available, "{name}: {:?}", section.reason);
        assert_eq!(section.phases.len(), phases.len());
        for (got, want) in section.phases.iter().zip(phases) {
            assert_eq!((&got.name, got.round), (&want.name, want.round));
        }
        section
            .phases
            .iter()
            .map(|p| (p.execs, p.executing_pids, p.resident_processes))
            .collect()
    }

    fn unavailable(text: &str, phases: &[Phase]) -> String {
        let section = analyze(text, phases);
        assert!(!section.available, "expected unavailable, got {section:?}");
        assert!(section.phases.is_empty(), "no counts when unavailable");
        section.reason.expect("a reason")
    }

    fn pipeline_phases() -> Vec<Phase> {
        vec![
            phase("start", "1796068337.573501", "1796068337.580000"),
            phase("pipeline", "1796068337.582000", "1796068337.585000"),
            phase("drain", "1796068337.600000", "1796068337.607400"),
            // wc's exec started at .584015 but completes at .584729: only tr's counts.
            phase("cut", "1796068337.584000", "1796068337.584600"),
        ]
    }

    #[test]
    fn pipeline_counts_resumed_execs_and_live_children() {
        assert_eq!(
            counts("pipeline.trace", &pipeline_phases()),
            vec![(1, 1, 1), (2, 2, 3), (0, 0, 1), (1, 1, 3)]
        );
    }

    #[test]
    fn path_search_failures_are_not_execs() {
        let phases = [
            phase("search", "1796068342.290000", "1796068342.302700"),
            phase("second", "1796068342.303000", "1796068342.321000"),
            phase("whole", "1796068342.272914", "1796068342.326153"),
        ];
        // `second`: env then true in one pid: two execs, one executing pid.
        // `whole`: ends on the root's exit line, so nothing is resident any more.
        assert_eq!(
            counts("path_search.trace", &phases),
            vec![(0, 0, 1), (2, 1, 2), (4, 3, 0)]
        );
    }

    #[test]
    fn thread_exec_completes_on_the_leader_pid() {
        let phases = [
            phase("before", "1796068427.866031", "1796068427.900000"),
            phase("thread_exec", "1796068428.000000", "1796068428.070000"),
            phase("orphan", "1796068428.100000", "1796068428.300000"),
        ];
        assert_eq!(
            counts("thread_exec_c.trace", &phases),
            vec![(1, 1, 2), (1, 1, 2), (0, 0, 1)]
        );
        let trace = Trace::parse(&read("thread_exec_c.trace")).unwrap();
        let pids: Vec<i32> = trace.execs.iter().map(|e| e.pid).collect();
        assert_eq!(
            pids,
            vec![8728, 8728],
            "the thread 8730 never owns an image"
        );
        assert_eq!(trace.processes.len(), 2, "8730 is a thread: {trace:?}");
    }

    #[test]
    fn pid_changed_marker_is_an_unfinished_exec() {
        let phases = [phase("exec", "1796068427.700000", "1796068427.714000")];
        assert_eq!(counts("thread_exec_py.trace", &phases), vec![(1, 1, 1)]);
    }

    #[test]
    fn process_tree_tells_threads_from_processes() {
        let phases = [
            phase("threads", "1796068439.083637", "1796068439.100000"),
            phase("spawn", "1796068439.100000", "1796068439.200000"),
            phase("kill", "1796068439.200000", "1796068439.300000"),
            phase("end", "1796068439.300000", "1796068439.409400"),
        ];
        assert_eq!(
            counts("process_tree.trace", &phases),
            vec![(1, 1, 2), (2, 2, 3), (0, 0, 2), (0, 0, 1)]
        );
        let trace = Trace::parse(&read("process_tree.trace")).unwrap();
        let pids: Vec<i32> = trace.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![8880, 8882, 8883, 8884]);
        assert!(trace.processes.iter().all(|p| p.ended_ns.is_some()));
        // 8883 printed lines before clone3 returned it: born at its first line.
        assert_eq!(trace.processes[2].born_ns, 1_796_068_439_176_146_000);
    }

    #[test]
    fn pid_namespace_children_are_not_phantoms() {
        let phases = [
            phase("sandbox", "1796068750.630837", "1796068750.700000"),
            phase("inner", "1796068750.700000", "1796068750.711000"),
            phase("after", "1796068750.711000", "1796068750.712600"),
        ];
        assert_eq!(
            counts("bwrap_pidns.trace", &phases),
            vec![(2, 2, 3), (1, 1, 3), (0, 0, 1)]
        );
        let trace = Trace::parse(&read("bwrap_pidns.trace")).unwrap();
        let pids: Vec<i32> = trace.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![16257, 16258, 16259, 16260], "no pid 2 or 3");
    }

    #[test]
    fn pid_namespace_threads_and_early_children() {
        let phases = [
            phase("start", "1796068798.596077", "1796068798.615000"),
            phase("tree", "1796068798.615000", "1796068798.700000"),
            phase("kill", "1796068798.700000", "1796068798.800000"),
            phase("end", "1796068798.800000", "1796068798.940000"),
        ];
        assert_eq!(
            counts("bwrap_pidns_tree.trace", &phases),
            vec![(2, 2, 3), (2, 2, 5), (0, 0, 4), (0, 0, 2)]
        );
        let trace = Trace::parse(&read("bwrap_pidns_tree.trace")).unwrap();
        let pids: Vec<i32> = trace.processes.iter().map(|p| p.pid).collect();
        // 17913 is the namespaced thread; 17926 printed before `clone3 ... = 5` returned.
        assert_eq!(pids, vec![17905, 17907, 17912, 17914, 17926, 17928]);
        assert!(trace.processes.iter().all(|p| p.ended_ns.is_some()));
    }

    #[test]
    fn empty_traces_are_unavailable() {
        let phases = pipeline_phases();
        for text in ["", "\n", "  \n\n"] {
            assert!(unavailable(text, &phases).contains("empty"));
        }
    }

    #[test]
    fn a_line_cut_mid_way_is_truncated() {
        let text = read("pipeline.trace");
        let cut = &text[..text.find("<... execve resumed>) = 0").unwrap() + 12];
        let reason = unavailable(cut, &pipeline_phases());
        assert!(
            reason.contains("truncated") && reason.contains("mid-way"),
            "{reason}"
        );
    }

    #[test]
    fn an_unfinished_call_never_resumed_is_truncated() {
        let text = read("pipeline.trace");
        let head: String = text.lines().take(11).map(|l| format!("{l}\n")).collect();
        assert!(head.ends_with("<unfinished ...>\n"));
        let reason = unavailable(&head, &pipeline_phases());
        assert!(
            reason.contains("truncated") && reason.contains("never completed"),
            "{reason}"
        );
    }

    #[test]
    fn a_root_that_never_exits_is_truncated() {
        let text = read("pipeline.trace");
        let head: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
        let reason = unavailable(&head, &[phase("a", "1796068337.573501", "1796068337.5800")]);
        assert!(reason.contains("never exited"), "{reason}");
    }

    #[test]
    fn malformed_traces_are_unavailable_with_the_line() {
        let text = read("pipeline.trace");
        let phases = pipeline_phases();

        let mut lines: Vec<&str> = text.lines().collect();
        lines.insert(5, "this is not strace output");
        let reason = unavailable(&(lines.join("\n") + "\n"), &phases);
        assert!(reason.contains("malformed at line 6"), "{reason}");

        // Recorded without -f: no pid column.
        let no_pids: String = text
            .lines()
            .map(|l| format!("{}\n", l.split_once(' ').unwrap().1.trim_start()))
            .collect();
        assert!(unavailable(&no_pids, &phases).contains("strace -f"));

        // Recorded with -tt instead of -ttt.
        let clock = text.replace("1796068337.", "19:46:33.");
        assert!(unavailable(&clock, &phases).contains("-ttt"));

        // A resumed call with no start.
        let orphan: String = text
            .lines()
            .filter(|l| !l.contains("execve(\"/usr/bin/tr\""))
            .map(|l| format!("{l}\n"))
            .collect();
        let reason = unavailable(&orphan, &phases);
        assert!(reason.contains("never started"), "{reason}");
    }

    #[test]
    fn phases_outside_the_trace_are_refused() {
        let text = read("pipeline.trace");
        let reason = unavailable(&text, &[phase("x", "1700000000.0", "1700000001.0")]);
        assert!(reason.contains("does not match"), "{reason}");
        assert!(unavailable(&text, &[]).contains("no phases"));
    }

    #[test]
    fn apply_to_report_fills_the_section_and_serializes() {
        let mut report = Report {
            phases: pipeline_phases(),
            ..Report::default()
        };
        apply_to_report(&mut report, &data("pipeline.trace"));
        let section = report.trace.clone().unwrap();
        assert!(section.available);
        assert_eq!(section.phases[1].execs, 2);
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(json["trace"]["available"], true);
        assert_eq!(json["trace"]["phases"][1]["resident_processes"], 3);

        apply_to_report(&mut report, &data("missing.trace"));
        let section = report.trace.unwrap();
        assert!(!section.available);
        assert!(section.reason.unwrap().contains("cannot read trace"));
    }

    #[test]
    fn table_lists_each_phase_or_the_reason() {
        let section = analyze(&read("pipeline.trace"), &pipeline_phases());
        let table = render_table(&section);
        assert_eq!(table.lines().count(), 1 + 4, "{table}");
        assert!(table.lines().next().unwrap().contains("executing pids"));
        assert!(table.contains("pipeline"), "{table}");
        let table = render_table(&analyze("", &pipeline_phases()));
        assert!(
            table.starts_with("trace unavailable: trace is empty"),
            "{table}"
        );
    }

    /// Records a fresh trace with the installed strace, so a format change shows up here.
    #[test]
    fn live_strace_recording_is_counted() {
        let Ok(strace) = which_strace() else {
            eprintln!("skipped: strace is not installed (apt-get install -y strace)");
            return;
        };
        let dir = live_dir();
        let out = dir.join("live.trace");
        let start = link_plugin_measure::sample::unix_ns();
        let status = std::process::Command::new(strace)
            .args(["-f", "-ttt", "-e", "trace=process", "-o"])
            .arg(&out)
            .args(["/bin/sh", "-c", "/bin/true & wait; /bin/true"])
            .status()
            .unwrap();
        let end = link_plugin_measure::sample::unix_ns();
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        std::fs::remove_dir_all(&dir).ok();
        if !status.success() || text.is_empty() {
            eprintln!("skipped: strace cannot trace here (ptrace refused?)");
            return;
        }
        let trace = Trace::parse(&text).unwrap();
        // Widen the phase to the trace itself: the clocks agree but the bounds must be inside.
        let whole = Phase {
            name: "whole".into(),
            start_unix_ns: trace.first_ns.max(start),
            end_unix_ns: trace.last_ns.min(end),
            ..Phase::default()
        };
        let counted = trace.count(&whole);
        assert_eq!(counted.execs, 3, "sh, true, true:\n{text}");
        assert_eq!(counted.resident_processes, 0, "{text}");
    }

    fn which_strace() -> Result<PathBuf, ()> {
        ["/usr/bin/strace", "/bin/strace", "/usr/local/bin/strace"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or(())
    }

    fn live_dir() -> PathBuf {
        let home = std::env::var_os("HOME").expect("HOME");
        let dir = PathBuf::from(home).join(format!(
            ".cache/lnk-t/trace-{}-{}",
            std::process::id(),
            link_plugin_measure::sample::unix_ns()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
