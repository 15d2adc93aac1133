//! Processes: replays parsed lines, following processes, threads and unfinished calls.

use super::parse::{excerpt, is_clone, is_exec, Event, Line, Part};
use super::{Exec, Lifetime, Trace, TraceError};
use std::collections::{HashMap, HashSet, VecDeque};

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
pub(super) struct Tracker<'l, 'a> {
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
    pub(super) fn new(lines: &'l [Line<'a>]) -> Self {
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

    pub(super) fn run(mut self) -> Result<Trace, TraceError> {
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
