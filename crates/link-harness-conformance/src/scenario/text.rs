//! How check details are written: durations, one-line excerpts, log tails.

use std::time::Duration;

/// "12.3 ms".
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Lines joined with " / ", so a check detail stays on one line.
pub(super) fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ")
}

/// [`one_line`], cut at 160 characters.
pub(super) fn short(s: &str) -> String {
    let s = one_line(s);
    let s = s.as_str();
    if s.chars().count() <= 160 {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(160).collect::<String>())
    }
}

/// The last `lines` non-empty lines of `text` joined with " / "; `None` if there are none.
pub(super) fn tail(text: &str, lines: usize) -> Option<String> {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if all.is_empty() {
        return None;
    }
    Some(all[all.len().saturating_sub(lines)..].join(" / "))
}

/// [`tail`] of a file; `None` if it cannot be read or is empty.
pub(super) fn tail_file(path: &std::path::Path, lines: usize) -> Option<String> {
    tail(&std::fs::read_to_string(path).ok()?, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_stay_on_one_short_line() {
        assert_eq!(ms(Duration::from_micros(12_345)), "12.3 ms");
        assert_eq!(one_line("  a \n\n b\n"), "a / b");
        let long = "x".repeat(200);
        let cut = short(&long);
        assert_eq!(cut.chars().count(), 161);
        assert!(cut.ends_with('…'));
        assert_eq!(short("ok"), "ok");
    }

    #[test]
    fn tail_keeps_the_last_non_empty_lines() {
        assert_eq!(tail("a\n\nb\nc\n", 2).as_deref(), Some("b / c"));
        assert_eq!(tail("a\n", 8).as_deref(), Some("a"));
        assert_eq!(tail("\n \n", 3), None);
    }
}
