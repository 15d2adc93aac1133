//! Executing the command as glibc's `execvp` does, which is what the helper did before it
//! linked no C library: a name without `/` is looked up in `PATH` (`/bin:/usr/bin` when
//! unset), a directory that refuses (`EACCES`) does not end the search but is the answer if
//! nothing is found, and a file the kernel cannot execute (`ENOEXEC`, a script without `#!`)
//! is run by `/bin/sh`.

use crate::sys::{self, Errno};
use crate::text::Path;
use core::ffi::{c_char, CStr};

/// `_CS_PATH`, glibc's search path when `PATH` is unset.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// The value of `name` in `envp`.
///
/// # Safety
/// `envp` is a NULL-terminated array of NUL-terminated strings.
unsafe fn getenv<'a>(envp: *const *const c_char, name: &[u8]) -> Option<&'a [u8]> {
    let mut at = envp;
    loop {
        // SAFETY: as the caller promised, up to and including the NULL.
        let entry = unsafe { *at };
        if entry.is_null() {
            return None;
        }
        // SAFETY: as above.
        let entry = unsafe { CStr::from_ptr(entry) }.to_bytes();
        if let Some(value) = entry.strip_prefix(name).and_then(|r| r.strip_prefix(b"=")) {
            return Some(value);
        }
        // SAFETY: not past the NULL.
        at = unsafe { at.add(1) };
    }
}

/// Executes `argv[at..]` with `envp`; returns only why it could not.
///
/// # Safety
/// `argv` is a writable NULL-terminated array of NUL-terminated strings, `envp` a
/// NULL-terminated one, and `1 <= at` with `argv[at]` not NULL: the slot before the command
/// is overwritten to run a script with `/bin/sh`.
pub unsafe fn execvp(argv: *mut *const c_char, at: usize, envp: *const *const c_char) -> Errno {
    // SAFETY: as the caller promised.
    let file = unsafe { CStr::from_ptr(*argv.add(at)) };
    let run = |path: &CStr| {
        // SAFETY: as the caller promised; `path` lives through the call.
        unsafe { exec_or_script(path, argv, at, envp) }
    };
    if file.is_empty() {
        return Errno::NOENT;
    }
    if file.to_bytes().contains(&b'/') {
        return run(file);
    }
    // SAFETY: as the caller promised.
    let search = unsafe { getenv(envp, b"PATH") }.unwrap_or(DEFAULT_PATH);
    let mut refused = false;
    let mut last = Errno::NOENT;
    for dir in search.split(|b| *b == b':') {
        let Ok(mut path) = Path::new(dir) else {
            continue;
        };
        if path.push(file.to_bytes()).is_err() {
            continue;
        }
        match run(path.as_cstr()) {
            Errno::ACCES => refused = true,
            e @ (Errno::NOENT | Errno::STALE | Errno::NOTDIR | Errno::NODEV | Errno::TIMEDOUT) => {
                last = e
            }
            other => return other,
        }
    }
    if refused {
        Errno::ACCES
    } else {
        last
    }
}

/// # Safety
/// As for [`execvp`].
unsafe fn exec_or_script(
    path: &CStr,
    argv: *mut *const c_char,
    at: usize,
    envp: *const *const c_char,
) -> Errno {
    // SAFETY: as the caller promised.
    let e = unsafe { sys::execve(path, argv.add(at), envp) };
    if e != Errno::NOEXEC {
        return e;
    }
    // `/bin/sh PATH ARGS...`: the command's own first word gives way to its path, for this
    // exec only (glibc builds a new array; there is no allocator here).
    // SAFETY: `at - 1` and `at` are slots of the caller's writable array, put back below, so
    // the next candidate and the caller find them as they were.
    unsafe {
        let saved = (*argv.add(at - 1), *argv.add(at));
        *argv.add(at - 1) = c"/bin/sh".as_ptr();
        *argv.add(at) = path.as_ptr();
        let e = sys::execve(c"/bin/sh", argv.add(at - 1), envp);
        (*argv.add(at - 1), *argv.add(at)) = saved;
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::vec::Vec;

    #[test]
    fn the_search_path_is_read_from_the_environment() {
        let env: Vec<CString> = ["HOME=/h", "PATHX=/no", "PATH=/a:/b"]
            .into_iter()
            .map(|s| CString::new(s).unwrap())
            .collect();
        let mut envp: Vec<*const c_char> = env.iter().map(|e| e.as_ptr()).collect();
        envp.push(core::ptr::null());
        assert_eq!(
            unsafe { getenv(envp.as_ptr(), b"PATH") },
            Some(&b"/a:/b"[..])
        );
        assert_eq!(unsafe { getenv(envp.as_ptr(), b"USER") }, None);
    }
}
