//! The last reap of this process's orphans, on [`link_os`]'s look at its children.

use rustix::process::Signal;

/// Kills and reaps any child this process still has: a last check before exiting, when every
/// child we started has already been waited for. Costs one system call when there is none.
pub fn reap_orphans() {
    loop {
        match link_os::reaper::peek_children() {
            Err(_) => return,
            Ok(true) => {
                let _ = rustix::process::wait(rustix::process::WaitOptions::empty());
            }
            Ok(false) => {
                let left = link_os::sample::children(std::process::id() as i32);
                tracing::warn!(?left, "killing processes left behind");
                for pid in left {
                    if let Ok(Some(fd)) = link_os::process::pidfd(pid) {
                        let _ = rustix::process::pidfd_send_signal(&fd, Signal::KILL);
                    }
                }
                let _ = rustix::process::wait(rustix::process::WaitOptions::empty());
            }
        }
    }
}
