//! The small instruction language `link-local` reads in a user message.
//!
//! One instruction per non-empty line:
//!
//! ```text
//! run: <command>                    → run      {command}
//! write <path>: <text>              → file     {op: "write", path, content}
//! read <path>                       → file     {op: "read", path}
//! list [<path>]                     → file     {op: "list", path}   (path "." when absent)
//! search <pattern>                  → code     {op: "search", pattern}
//! patch <path>: <old> => <new>      → code     {op: "patch", path, old, new}
//! schedule <delay>: <message>       → schedule {delay_ms, message}  (delay: 500ms, 2s, 1m, 1h)
//! ```
//!
//! Paths are one word (no spaces), so ordinary prose such as "list of chores" is not
//! mistaken for an instruction.

use serde_json::{json, Value};

/// One parsed instruction: the tool it needs and that tool's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    pub tool: &'static str,
    pub arguments: Value,
}

/// Parses every non-empty line; `None` unless there is at least one line and every line is
/// an instruction.
pub fn parse_message(text: &str) -> Option<Vec<Instruction>> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return None;
    }
    lines.into_iter().map(parse_line).collect()
}

/// Parses one trimmed line.
pub fn parse_line(line: &str) -> Option<Instruction> {
    let (verb, rest) = match line.split_once([' ', ':']) {
        Some((verb, _)) => (verb, &line[verb.len()..]),
        None => (line, ""),
    };
    match verb {
        "run" => run(rest),
        "write" => write(rest),
        "read" => read(rest),
        "list" => list(rest),
        "search" => search(rest),
        "patch" => patch(rest),
        "schedule" => schedule(rest),
        _ => None,
    }
}

fn run(rest: &str) -> Option<Instruction> {
    let command = rest.strip_prefix(':')?.trim();
    non_empty(command)?;
    Some(tool("run", json!({ "command": command })))
}

fn write(rest: &str) -> Option<Instruction> {
    let (path, text) = path_and_text(rest)?;
    Some(tool(
        "file",
        json!({ "op": "write", "path": path, "content": text }),
    ))
}

fn read(rest: &str) -> Option<Instruction> {
    let path = word(rest.strip_prefix(' ')?)?;
    Some(tool("file", json!({ "op": "read", "path": path })))
}

fn list(rest: &str) -> Option<Instruction> {
    let path = if rest.trim().is_empty() {
        "."
    } else {
        word(rest.strip_prefix(' ')?)?
    };
    Some(tool("file", json!({ "op": "list", "path": path })))
}

fn search(rest: &str) -> Option<Instruction> {
    let pattern = rest.strip_prefix(' ')?.trim();
    non_empty(pattern)?;
    Some(tool("code", json!({ "op": "search", "pattern": pattern })))
}

fn patch(rest: &str) -> Option<Instruction> {
    let (path, text) = path_and_text(rest)?;
    let (old, new) = text.split_once(" => ")?;
    non_empty(old)?;
    Some(tool(
        "code",
        json!({ "op": "patch", "path": path, "old": old, "new": new }),
    ))
}

fn schedule(rest: &str) -> Option<Instruction> {
    let (delay, message) = rest.strip_prefix(' ')?.split_once(':')?;
    let delay_ms = parse_delay(delay.trim())?;
    let message = message.trim();
    non_empty(message)?;
    Some(tool(
        "schedule",
        json!({ "delay_ms": delay_ms, "message": message }),
    ))
}

/// `500ms`, `2s`, `1m`, `1h` → milliseconds.
pub fn parse_delay(text: &str) -> Option<u64> {
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// ` <path>: <text>` → (path, text); the text may be empty, one space after ':' is dropped.
fn path_and_text(rest: &str) -> Option<(&str, &str)> {
    let (path, text) = rest.strip_prefix(' ')?.split_once(':')?;
    let path = word(path)?;
    Some((path, text.strip_prefix(' ').unwrap_or(text)))
}

/// One non-empty word without whitespace.
fn word(text: &str) -> Option<&str> {
    let text = text.trim();
    (!text.is_empty() && !text.contains(char::is_whitespace)).then_some(text)
}

fn non_empty(text: &str) -> Option<()> {
    (!text.is_empty()).then_some(())
}

fn tool(tool: &'static str, arguments: Value) -> Instruction {
    Instruction { tool, arguments }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> (&'static str, Value) {
        let i = parse_line(line).unwrap_or_else(|| panic!("{line:?} should parse"));
        (i.tool, i.arguments)
    }

    #[test]
    fn each_instruction() {
        assert_eq!(
            one("run: echo hi there"),
            ("run", json!({"command": "echo hi there"}))
        );
        assert_eq!(
            one("write notes/a.txt: hello: world"),
            (
                "file",
                json!({"op": "write", "path": "notes/a.txt", "content": "hello: world"})
            )
        );
        assert_eq!(
            one("write empty.txt:"),
            (
                "file",
                json!({"op": "write", "path": "empty.txt", "content": ""})
            )
        );
        assert_eq!(
            one("read a.txt"),
            ("file", json!({"op": "read", "path": "a.txt"}))
        );
        assert_eq!(one("list"), ("file", json!({"op": "list", "path": "."})));
        assert_eq!(
            one("list src"),
            ("file", json!({"op": "list", "path": "src"}))
        );
        assert_eq!(
            one("search fn main"),
            ("code", json!({"op": "search", "pattern": "fn main"}))
        );
        assert_eq!(
            one("patch a.rs: foo() => bar(1)"),
            (
                "code",
                json!({"op": "patch", "path": "a.rs", "old": "foo()", "new": "bar(1)"})
            )
        );
        assert_eq!(
            one("schedule 2s: check the build"),
            (
                "schedule",
                json!({"delay_ms": 2000, "message": "check the build"})
            )
        );
    }

    #[test]
    fn delays() {
        assert_eq!(parse_delay("500ms"), Some(500));
        assert_eq!(parse_delay("2s"), Some(2_000));
        assert_eq!(parse_delay("1m"), Some(60_000));
        assert_eq!(parse_delay("1h"), Some(3_600_000));
        for bad in [
            "",
            "ms",
            "2",
            "2 s",
            "-1s",
            "1.5s",
            "2d",
            "99999999999999999999s",
        ] {
            assert_eq!(parse_delay(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn prose_is_not_an_instruction() {
        for line in [
            "hello",
            "list of chores",
            "read the manual please",
            "run away",
            "run:",
            "running: x",
            "search",
            "write: x",
            "write a b: c",
            "patch a.rs: no arrow",
            "schedule soon: x",
            "schedule 2s:",
            "reader a.txt",
        ] {
            assert_eq!(parse_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn whole_messages() {
        let all = parse_message("run: ls\n\n  read a.txt  \n").unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].arguments, json!({"op": "read", "path": "a.txt"}));
        assert_eq!(parse_message("run: ls\nand then tell me"), None);
        assert_eq!(parse_message(""), None);
        assert_eq!(parse_message(" \n "), None);
    }
}
