//! The helper's command line: `[--status-fd N] [--drop-to UID:GID] [--limits P,M,C,F]
//! [--chdir DIR] [--rw DIR]... [--shrink DIR]... [--hide FILE]... -- COMMAND...`, read in place from the
//! kernel's argument array (nothing is copied: there is no allocator).

use core::ffi::{c_char, CStr};
use core::fmt;

/// The limits a command runs under, as `--limits processes,memory,cpu,file_size` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub processes: u64,
    pub memory_bytes: u64,
    pub cpu_seconds: u64,
    pub file_size_bytes: u64,
}

impl Limits {
    /// Parses `processes,memory,cpu,file_size`.
    pub fn parse(s: &[u8]) -> Option<Limits> {
        let mut numbers = s.split(|b| *b == b',').map(number::<u64>);
        let limits = Limits {
            processes: numbers.next()??,
            memory_bytes: numbers.next()??,
            cpu_seconds: numbers.next()??,
            file_size_bytes: numbers.next()??,
        };
        numbers.next().is_none().then_some(limits)
    }
}

/// The parsed command line. `rw`, `shrink` and `hide` are read again from the options when used.
#[derive(Debug)]
pub struct Args<'a> {
    pub status_fd: Option<i32>,
    /// The dedicated identity to become (when bwrap runs as root).
    pub drop_to: Option<(u32, u32)>,
    pub limits: Option<Limits>,
    /// The working directory, entered once the identity is the command's.
    pub chdir: Option<&'a CStr>,
    /// The options before `--`, in pairs.
    options: &'a [*const c_char],
    /// Index of the command's first word in the whole argument array.
    pub command_at: usize,
    pub command: &'a [*const c_char],
}

/// What is wrong with a command line.
#[derive(Debug, PartialEq, Eq)]
pub enum ArgError<'a> {
    /// An option without its value, with what the value must be.
    Needs(&'a CStr, &'static str),
    Unexpected(&'a CStr),
    NoCommand,
}

impl fmt::Display for ArgError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Needs(option, what) => {
                write!(f, "{} needs {what}", option.to_str().unwrap_or("?"))
            }
            ArgError::Unexpected(arg) => write!(f, "unexpected argument {arg:?}"),
            ArgError::NoCommand => f.write_str("missing `-- COMMAND...`"),
        }
    }
}

/// The string at `p`.
///
/// # Safety
/// `p` points to a NUL-terminated string that outlives `'a`.
unsafe fn arg<'a>(p: *const c_char) -> &'a CStr {
    // SAFETY: as the caller promised.
    unsafe { CStr::from_ptr(p) }
}

fn number<T: core::str::FromStr>(bytes: &[u8]) -> Option<T> {
    core::str::from_utf8(bytes).ok()?.parse().ok()
}

impl<'a> Args<'a> {
    /// Parses `argv` (the whole array, the program's name first).
    ///
    /// # Safety
    /// Every pointer of `argv` points to a NUL-terminated string that outlives `'a`.
    pub unsafe fn parse(argv: &'a [*const c_char]) -> Result<Args<'a>, ArgError<'a>> {
        let mut args = Args {
            status_fd: None,
            drop_to: None,
            limits: None,
            chdir: None,
            options: &[],
            command_at: argv.len(),
            command: &[],
        };
        let mut i = 1;
        while i < argv.len() {
            // SAFETY: as the caller promised, for this and the value below.
            let option = unsafe { arg(argv[i]) };
            if option.to_bytes() == b"--" {
                args.options = &argv[1..i];
                args.command_at = i + 1;
                args.command = &argv[i + 1..];
                return Ok(args);
            }
            let value = argv.get(i + 1).map(|p| unsafe { arg(*p) }.to_bytes());
            let needs = |what| move || ArgError::Needs(option, what);
            match option.to_bytes() {
                b"--status-fd" => {
                    let fd = value.and_then(number);
                    args.status_fd = Some(fd.ok_or_else(needs("a descriptor number"))?);
                }
                b"--drop-to" => {
                    let ids = value.and_then(|v| {
                        let colon = v.iter().position(|b| *b == b':')?;
                        Some((number(&v[..colon])?, number(&v[colon + 1..])?))
                    });
                    args.drop_to = Some(ids.ok_or_else(needs("UID:GID"))?);
                }
                b"--limits" => {
                    let limits = value.and_then(Limits::parse);
                    args.limits = Some(limits.ok_or_else(needs("four numbers"))?);
                }
                b"--chdir" => {
                    value.ok_or_else(needs("a directory"))?;
                    // SAFETY: as above; `value` showed it exists.
                    args.chdir = Some(unsafe { arg(argv[i + 1]) });
                }
                b"--rw" | b"--shrink" => {
                    value.ok_or_else(needs("a directory"))?;
                }
                b"--hide" => {
                    value.ok_or_else(needs("a file"))?;
                }
                _ => return Err(ArgError::Unexpected(option)),
            }
            i += 2;
        }
        Err(ArgError::NoCommand)
    }

    /// The values of every `flag` option, in order.
    pub fn values(&self, flag: &'static [u8]) -> impl Iterator<Item = &'a CStr> + '_ {
        self.options.chunks(2).filter_map(move |pair| {
            // SAFETY: `parse` read each of these strings already.
            let (option, value) = unsafe { (arg(pair[0]), arg(*pair.get(1)?)) };
            (option.to_bytes() == flag).then_some(value)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// The strings of `line` and a NULL-terminated array of them, as the kernel gives them.
    fn argv(line: &str) -> (Vec<CString>, Vec<*const c_char>) {
        let words: Vec<CString> = line.split(' ').map(|w| CString::new(w).unwrap()).collect();
        let mut ptrs: Vec<*const c_char> = words.iter().map(|w| w.as_ptr()).collect();
        ptrs.push(core::ptr::null());
        (words, ptrs)
    }

    #[test]
    fn options_then_the_command() {
        let (_keep, ptrs) = argv(
            "helper --status-fd 7 --rw /w --hide /s --drop-to 3:4 --limits 1,2,3,4 --rw /h \
             --chdir /w -- sh -c --rw",
        );
        let all = &ptrs[..ptrs.len() - 1];
        let a = unsafe { Args::parse(all) }.unwrap();
        assert_eq!((a.status_fd, a.drop_to), (Some(7), Some((3, 4))));
        let limits = Limits {
            processes: 1,
            memory_bytes: 2,
            cpu_seconds: 3,
            file_size_bytes: 4,
        };
        assert_eq!(a.limits, Some(limits));
        assert_eq!(a.chdir, Some(c"/w"));
        assert_eq!(a.values(b"--rw").collect::<Vec<_>>(), [c"/w", c"/h"]);
        assert_eq!(a.values(b"--hide").collect::<Vec<_>>(), [c"/s"]);
        let command: Vec<_> = a.command.iter().map(|p| unsafe { arg(*p) }).collect();
        assert_eq!(command, [c"sh", c"-c", c"--rw"]);
        assert_eq!(a.command_at, all.len() - 3);
    }

    #[test]
    fn each_mistake_is_named() {
        for (line, error) in [
            ("helper --rw /w", ArgError::NoCommand),
            ("helper --bogus -- x", ArgError::Unexpected(c"--bogus")),
            (
                "helper --status-fd x -- y",
                ArgError::Needs(c"--status-fd", "a descriptor number"),
            ),
            (
                "helper --drop-to 3 -- y",
                ArgError::Needs(c"--drop-to", "UID:GID"),
            ),
            (
                "helper --limits 1,2,3 -- y",
                ArgError::Needs(c"--limits", "four numbers"),
            ),
            (
                "helper --limits 1,2,3,4,5 -- y",
                ArgError::Needs(c"--limits", "four numbers"),
            ),
            ("helper --hide", ArgError::Needs(c"--hide", "a file")),
        ] {
            let (_keep, ptrs) = argv(line);
            let all = &ptrs[..ptrs.len() - 1];
            assert_eq!(unsafe { Args::parse(all) }.unwrap_err(), error, "{line}");
        }
        let shown = std::format!("{}", ArgError::Unexpected(c"--bogus"));
        assert_eq!(shown, "unexpected argument \"--bogus\"");
    }
}
