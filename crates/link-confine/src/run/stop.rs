//! Stopping every run of this process: [`stop_all`], the stop pipe that wakes each run, and
//! SIGTERM and SIGINT made to call it.

use super::output::cloexec_pipe;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

pub(super) static STOPPED: AtomicBool = AtomicBool::new(false);
/// The first signal [`stop_all_on_signals`] handled; 0 for none.
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);
static STOP: OnceLock<(OwnedFd, OwnedFd)> = OnceLock::new();

/// The stop pipe: its read end turns readable (and is never read) once [`stop_all`] was
/// called, which wakes every running [`run_blocking`](super::run_blocking).
pub(super) fn stop_pipe() -> std::io::Result<&'static (OwnedFd, OwnedFd)> {
    if let Some(pipe) = STOP.get() {
        return Ok(pipe);
    }
    let pipe = cloexec_pipe()?;
    Ok(STOP.get_or_init(|| pipe))
}

/// Kills every sandbox of this process and makes later runs fail with [`RunError::Stopped`](super::RunError::Stopped).
/// Each running [`run_blocking`](super::run_blocking) still reaps its processes before it returns.
pub fn stop_all() {
    // Once: the pipe is never read, and a full one would block a signal handler's write.
    if STOPPED.swap(true, Ordering::SeqCst) {
        return;
    }
    if let Ok((_, w)) = stop_pipe() {
        let _ = rustix::io::write(w, b"x");
    }
}

/// Makes SIGTERM and SIGINT call [`stop_all`]: each running [`run_blocking`](super::run_blocking) kills and reaps
/// its sandbox and returns, so a process stopped this way leaves nothing for its parent to
/// find; [`stopped_by`] then names the signal. For a blocking caller (the probe, which the
/// host stops with SIGTERM, and `exec`; a Ctrl-C in their terminal sends SIGINT); the plugin
/// stops through its runtime instead. A signal this process started with ignored (as a
/// non-interactive shell's background job starts with SIGINT) stays ignored.
pub fn stop_all_on_signals() -> std::io::Result<()> {
    // Made now: the handler must not allocate or block, only store, swap and write.
    stop_pipe()?;
    for signal in [libc::SIGTERM, libc::SIGINT] {
        if ignored(signal)? {
            continue;
        }
        // SAFETY: an atomic store, then `stop_all`, which swaps an atomic and writes one
        // byte, once, to a pipe that exists: all async-signal-safe.
        unsafe {
            signal_hook_registry::register(signal, move || {
                let _ = STOPPED_BY.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
                stop_all();
            })
        }?;
    }
    Ok(())
}

/// Whether `signal`'s disposition is SIG_IGN.
fn ignored(signal: i32) -> std::io::Result<bool> {
    // SAFETY: reads the disposition into a zeroed struct; changes nothing.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(old.sa_sigaction == libc::SIG_IGN)
}

/// Ends this process by `signal` at its default action, once its runs are over, so that its
/// parent sees what stopped it (a shell stops a script whose command died of SIGINT, and goes
/// on after one that exited 130); 128 + `signal` should the signal not end it.
pub fn die_of(signal: i32) -> ! {
    // SAFETY: resets one disposition and raises the signal at this process.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// The signal that stopped this process's runs ([`stop_all_on_signals`]), if one did.
pub fn stopped_by() -> Option<i32> {
    match STOPPED_BY.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}
