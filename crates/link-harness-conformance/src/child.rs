//! A child process the kit started and owns: its first line, a wait with a timeout (through
//! the [`reaper`](crate::reaper), which owns every wait), a signal that never reaches a reused
//! pid, a kill that reaps. One leaf both the plugin and the runtime processes use.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ExitStatus};
use std::sync::mpsc;
use std::time::Duration;

/// The first line `out` gives (empty at end of input); the rest is drained in the background
/// so the writer never meets a closed pipe.
pub(crate) fn first_line(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(out);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
    });
    rx
}

/// Polls for the child's exit for up to `timeout`.
pub(crate) fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    link_os::process::wait_child(child, timeout).expect("waiting for a child")
}

/// Sends `sig` unless the child has already been reaped (its pid may be reused).
pub(crate) fn signal(child: &mut Child, sig: rustix::process::Signal) {
    if matches!(child.try_wait(), Ok(None)) {
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("child pid");
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// SIGKILLs the child if it still runs, and reaps it.
pub(crate) fn kill_and_reap(child: &mut Child) {
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
        let _ = child.wait();
    }
}
