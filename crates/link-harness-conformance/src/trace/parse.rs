//! Lines: an strace line into a pid, an epoch timestamp and an event.

use super::TraceError;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Whole,
    Unfinished,
    Resumed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event<'a> {
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
pub(super) struct Line<'a> {
    pub(super) no: usize,
    pub(super) pid: i32,
    pub(super) ns: u128,
    pub(super) text: &'a str,
    pub(super) event: Event<'a>,
}

pub(super) fn parse_lines(text: &str) -> Result<Vec<Line<'_>>, TraceError> {
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
pub(super) fn parse_epoch(ts: &str) -> Option<u128> {
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
    // strace writes `???` for a call it could not decode: strace 6.1 does for a process
    // killed right after its exec (`???( <unfinished ...>`, `<... ??? resumed>) = ?`, then
    // `+++ killed by SIGKILL +++`). It is neither an exec nor a clone, so nothing counts it.
    let name_len = if body.starts_with(UNDECODED) {
        UNDECODED.len()
    } else {
        body.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len())
    };
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

/// The name strace gives a system call it could not decode.
const UNDECODED: &str = "???";

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

pub(super) fn is_clone(name: &str) -> bool {
    matches!(name, "clone" | "clone3" | "fork" | "vfork")
}

pub(super) fn is_exec(name: &str) -> bool {
    matches!(name, "execve" | "execveat")
}

pub(super) fn excerpt(text: &str) -> String {
    const MAX: usize = 160;
    match text.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}
