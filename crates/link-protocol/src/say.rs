//! Output that never panics: `println!` and `eprintln!` panic when stdout or stderr is closed
//! or full (`EPIPE` when a reader such as `| head` went away, `ENOSPC` on a full disk), which
//! would stop a host, a runner or a plugin before it cleans up. Every line a process prints on
//! a path that must survive goes through [`outln!`](crate::outln) / [`errln!`](crate::errln)
//! (or [`out!`](crate::out) / [`err!`](crate::err) without the newline), which drop the error;
//! plugins' logs go through [`QuietStderr`].

use std::io::Write;

/// Writes to stdout, ignoring errors; the body of [`outln!`](crate::outln).
#[doc(hidden)]
pub fn write_out(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.flush());
}

/// Writes to stderr, ignoring errors; the body of [`errln!`](crate::errln).
#[doc(hidden)]
pub fn write_err(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `print!` that ignores a closed or full stdout.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::say::write_out(format_args!($($arg)*)) };
}

/// `println!` that ignores a closed or full stdout.
#[macro_export]
macro_rules! outln {
    () => { $crate::say::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::say::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that ignores a closed or full stderr.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::say::write_err(format_args!($($arg)*)) };
}

/// `eprintln!` that ignores a closed or full stderr.
#[macro_export]
macro_rules! errln {
    () => { $crate::say::write_err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::say::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Stderr that reports every write as done, whatever happened: a log line that cannot be
/// written is lost, and the process goes on.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_macros_format_like_std() {
        crate::outln!();
        crate::outln!("{} {x}", 1, x = 2);
        crate::out!("{}", "no newline\n");
        crate::errln!("{:>3}", 7);
        crate::err!("plain\n");
    }
}
