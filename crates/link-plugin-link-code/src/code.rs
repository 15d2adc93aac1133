//! The pure parts of the code tool: matching lines under output bounds, and exact patches.

pub use link_protocol::routes::tool::Match;
use link_protocol::text::truncate;
use link_protocol::{ErrorCode, RemoteError};

/// At most this many matches are returned.
pub const MAX_MATCHES: usize = 200;
/// At most this many bytes of paths and line text are returned in all.
pub const MAX_OUTPUT: usize = 64 * 1024;
/// A matching line longer than this is cut (at a character boundary).
pub const MAX_LINE: usize = 512;

/// Matches gathered so far, within the bounds.
#[derive(Debug, Default)]
pub struct Found {
    pub matches: Vec<Match>,
    pub bytes: usize,
    pub truncated: bool,
}

impl Found {
    /// True once no more matches fit.
    pub fn full(&self) -> bool {
        self.truncated
    }

    /// Adds the lines of `content` that match; stops and marks `truncated` at a bound.
    pub fn search(&mut self, re: &regex::Regex, path: &str, content: &str) {
        for (i, line) in content.lines().enumerate() {
            if self.truncated {
                return;
            }
            if !re.is_match(line) {
                continue;
            }
            let text = truncate(line, MAX_LINE).to_owned();
            let size = path.len() + text.len();
            if self.matches.len() == MAX_MATCHES || self.bytes + size > MAX_OUTPUT {
                self.truncated = true;
                return;
            }
            self.bytes += size;
            self.matches.push(Match {
                path: path.to_owned(),
                line: i + 1,
                text,
            });
        }
    }
}

/// Compiles a search pattern with a size limit, as `bad_request` when it is not valid.
pub fn compile(pattern: &str) -> Result<regex::Regex, RemoteError> {
    if pattern.is_empty() {
        return Err(RemoteError::bad_request(
            "code search needs a non-empty `pattern`",
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| RemoteError::bad_request(format!("invalid search pattern: {e}")))
}

/// How many times `needle` occurs in `hay`, overlapping occurrences included (so a patch
/// whose `old` could be read two ways is refused rather than guessed).
pub fn occurrences(hay: &str, needle: &str) -> usize {
    let mut n = 0;
    let mut from = 0;
    while let Some(i) = hay[from..].find(needle) {
        n += 1;
        let at = from + i;
        from = at + hay[at..].chars().next().map_or(1, char::len_utf8);
        if from > hay.len() {
            break;
        }
    }
    n
}

/// Replaces the single occurrence of `old` by `new`, or refuses.
pub fn apply_patch(path: &str, content: &str, old: &str, new: &str) -> Result<String, RemoteError> {
    if old.is_empty() {
        return Err(RemoteError::bad_request(
            "patch needs a non-empty `old` text to replace",
        ));
    }
    match occurrences(content, old) {
        1 => Ok(content.replacen(old, new, 1)),
        n => Err(RemoteError::new(
            ErrorCode::Conflict,
            format!(
                "patch does not apply cleanly: OLD found {n} times in {path:?} (it must occur \
                 exactly once; include more surrounding text)"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_lines() {
        let re = compile(r"fn \w+").unwrap();
        let mut found = Found::default();
        found.search(&re, "src/a.rs", "use x;\nfn main() {}\n\nfn other() {}\n");
        assert_eq!(
            found.matches,
            [
                Match {
                    path: "src/a.rs".into(),
                    line: 2,
                    text: "fn main() {}".into()
                },
                Match {
                    path: "src/a.rs".into(),
                    line: 4,
                    text: "fn other() {}".into()
                },
            ]
        );
        assert!(!found.truncated);
    }

    #[test]
    fn search_is_bounded() {
        let re = compile("x").unwrap();
        let mut found = Found::default();
        found.search(&re, "f", &"x\n".repeat(500));
        assert_eq!(found.matches.len(), MAX_MATCHES);
        assert!(found.truncated);

        let mut found = Found::default();
        found.search(&compile(".").unwrap(), "f", &"é".repeat(1000));
        let text = &found.matches[0].text;
        assert!(text.len() <= MAX_LINE && text.chars().all(|c| c == 'é'));
        let line = "x".repeat(MAX_LINE);
        let text = format!("{line}\n").repeat(200);
        let mut found = Found::default();
        found.search(&re, "f", &text);
        assert!(found.truncated);
        assert!(found.bytes <= MAX_OUTPUT);
        assert_eq!(found.matches.len(), MAX_OUTPUT / (MAX_LINE + 1));
    }

    #[test]
    fn bad_patterns() {
        assert_eq!(compile("(").unwrap_err().code, ErrorCode::BadRequest);
        assert_eq!(compile("").unwrap_err().code, ErrorCode::BadRequest);
        assert_eq!(
            compile(r"\w{1000}{1000}").unwrap_err().code,
            ErrorCode::BadRequest
        );
    }

    #[test]
    fn patches() {
        assert_eq!(apply_patch("p", "a b c", "b", "B").unwrap(), "a B c");
        assert_eq!(apply_patch("p", "héllo", "é", "e").unwrap(), "hello");
        let e = apply_patch("p", "a b b", "b", "B").unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(
            e.message
                .contains("patch does not apply cleanly: OLD found 2 times"),
            "{}",
            e.message
        );
        let e = apply_patch("p", "abc", "x", "y").unwrap_err();
        assert!(e.message.contains("found 0 times"));
        // Overlapping occurrences count: "aa" is in "aaa" twice.
        assert_eq!(occurrences("aaa", "aa"), 2);
        assert_eq!(
            apply_patch("p", "aaa", "aa", "b").unwrap_err().code,
            ErrorCode::Conflict
        );
        assert_eq!(
            apply_patch("p", "x", "", "y").unwrap_err().code,
            ErrorCode::BadRequest
        );
        assert_eq!(occurrences("ééé", "é"), 3);
    }
}
