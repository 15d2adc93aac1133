//! Fixed-size buffers in place of `String` and `PathBuf`: the helper has no allocator.

use core::ffi::CStr;
use core::fmt::{self, Write as _};

/// The longest path the kernel takes, with its NUL.
pub const PATH_MAX: usize = 4096;

/// A path being built, always NUL-terminated.
pub struct Path {
    buf: [u8; PATH_MAX],
    len: usize,
}

impl core::fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_cstr())
    }
}

/// A path is longer than [`PATH_MAX`].
#[derive(Debug, PartialEq, Eq)]
pub struct TooLong;

impl Path {
    pub fn new(start: &[u8]) -> Result<Path, TooLong> {
        let mut p = Path {
            buf: [0; PATH_MAX],
            len: 0,
        };
        p.extend(start)?;
        Ok(p)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).expect("one NUL, at the end")
    }

    fn extend(&mut self, bytes: &[u8]) -> Result<(), TooLong> {
        if bytes.contains(&0) || self.len + bytes.len() >= PATH_MAX {
            return Err(TooLong);
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        self.buf[self.len] = 0;
        Ok(())
    }

    /// Appends `/name` (`name` alone after `/`); returns the length to [`truncate`] back to.
    ///
    /// [`truncate`]: Path::truncate
    pub fn push(&mut self, name: &[u8]) -> Result<usize, TooLong> {
        let before = self.len;
        let sep: &[u8] = if self.bytes().ends_with(b"/") || before == 0 {
            b""
        } else {
            b"/"
        };
        let pushed = self.extend(sep).and_then(|()| self.extend(name));
        if pushed.is_err() {
            self.truncate(before);
        }
        pushed.map(|()| before)
    }

    pub fn truncate(&mut self, len: usize) {
        self.len = len.min(self.len);
        self.buf[self.len] = 0;
    }
}

/// Whether `path` is `prefix` or lies beneath it, component by component (as
/// `std::path::Path::starts_with`).
pub fn is_within(path: &[u8], prefix: &[u8]) -> bool {
    path.starts_with(prefix)
        && (path.len() == prefix.len() || prefix.ends_with(b"/") || path[prefix.len()] == b'/')
}

/// The directory part of an absolute path (`/` for `/x`), or `None` for `/`.
pub fn parent(path: &[u8]) -> Option<&[u8]> {
    let path = path.strip_suffix(b"/").unwrap_or(path);
    let slash = path.iter().rposition(|b| *b == b'/')?;
    Some(if slash == 0 { b"/" } else { &path[..slash] })
}

/// The last component of a path.
pub fn file_name(path: &[u8]) -> &[u8] {
    let path = path.strip_suffix(b"/").unwrap_or(path);
    path.rsplit(|b| *b == b'/').next().unwrap_or(path)
}

/// One line of text; what does not fit is cut off.
pub struct Line {
    buf: [u8; 1024],
    len: usize,
}

impl Line {
    pub fn new() -> Line {
        Line {
            buf: [0; 1024],
            len: 0,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Default for Line {
    fn default() -> Self {
        Line::new()
    }
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Shows a string of the command line or the file system as lossy UTF-8 would, with control
/// characters escaped (`\x0a`): a status line stays one line whatever a name holds.
pub struct Lossy<'a>(pub &'a [u8]);

impl fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                if c.is_control() {
                    write!(f, "\\x{:02x}", c as u32)?;
                } else {
                    f.write_char(c)?;
                }
            }
            if !chunk.invalid().is_empty() {
                f.write_str("\u{FFFD}")?;
            }
        }
        Ok(())
    }
}

/// Whether `path` is absolute and names its file one way only: no `.`, `..` or empty
/// component, no trailing `/` (what the hidden-file rules compare byte by byte).
pub fn is_clean_absolute(path: &[u8]) -> bool {
    path.len() > 1
        && path[0] == b'/'
        && path[1..]
            .split(|b| *b == b'/')
            .all(|c| !matches!(c, b"" | b"." | b".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_grow_and_shrink_as_joined() {
        let mut p = Path::new(b"/").unwrap();
        let root = p.push(b"etc").unwrap();
        assert_eq!(p.as_cstr(), c"/etc");
        let etc = p.push(b"ssh").unwrap();
        assert_eq!(p.bytes(), b"/etc/ssh");
        p.truncate(etc);
        assert_eq!(p.as_cstr(), c"/etc");
        p.truncate(root);
        assert_eq!(p.as_cstr(), c"/");
        assert_eq!(p.push(&[b'x'; PATH_MAX]), Err(TooLong));
        assert_eq!(p.as_cstr(), c"/", "a failed push leaves the path as it was");
        assert_eq!(p.push(b"a\0b"), Err(TooLong));
    }

    #[test]
    fn components_as_std_reads_them() {
        assert!(is_within(b"/etc/shadow", b"/etc"));
        assert!(is_within(b"/etc", b"/etc"));
        assert!(is_within(b"/etc", b"/"));
        assert!(!is_within(b"/etcx/shadow", b"/etc"));
        assert_eq!(parent(b"/etc/shadow"), Some(&b"/etc"[..]));
        assert_eq!(parent(b"/x"), Some(&b"/"[..]));
        assert_eq!(parent(b"/"), None);
        assert_eq!(file_name(b"/etc/shadow"), b"shadow");
        let mut line = Line::new();
        core::fmt::Write::write_fmt(&mut line, format_args!("{}", Lossy(b"a\xffb\nerr x")))
            .unwrap();
        assert_eq!(line.bytes(), "a\u{FFFD}b\\x0aerr x".as_bytes());
        assert!(is_clean_absolute(b"/etc/shadow"));
        for unclean in [
            &b"etc/shadow"[..],
            b"/",
            b"/etc//shadow",
            b"/etc/./shadow",
            b"/x/../etc/shadow",
            b"/etc/shadow/",
            b"/etc/.",
        ] {
            assert!(
                !is_clean_absolute(unclean),
                "{:?}",
                core::str::from_utf8(unclean)
            );
        }
    }
}
