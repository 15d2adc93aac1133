//! A run's pipes: made close-on-exec, each read to its end, keeping up to a cap.

use rustix::io::Errno;
use std::io::Write;
use std::os::fd::OwnedFd;

/// One pipe read to its end, keeping up to `cap` bytes (and copying to our stderr if `tee`).
pub(super) struct Reader {
    pub(super) fd: Option<OwnedFd>,
    pub(super) kept: Vec<u8>,
    pub(super) cap: usize,
    pub(super) truncated: bool,
    pub(super) tee: bool,
}

impl Reader {
    pub(super) fn new(fd: Option<OwnedFd>, cap: usize, tee: bool) -> Reader {
        Reader {
            fd,
            kept: Vec::new(),
            cap,
            truncated: false,
            tee,
        }
    }

    /// Reads what is there; drops the descriptor at end of file (or on error).
    pub(super) fn read_once(&mut self) {
        let Some(fd) = &self.fd else { return };
        let mut buf = [0u8; 16 * 1024];
        let n = match rustix::io::read(fd, &mut buf) {
            Ok(0) => {
                self.fd = None;
                return;
            }
            Ok(n) => n,
            Err(Errno::INTR) | Err(Errno::AGAIN) => return,
            Err(_) => {
                self.fd = None;
                return;
            }
        };
        if self.tee {
            let _ = std::io::stderr().write_all(&buf[..n]);
        }
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&buf[..n.min(room)]);
        // A tee keeps a bounded copy for the diagnosis only: never report it truncated.
        self.truncated |= n > room && !self.tee;
    }
}

/// A pipe no program inherits unless `spawn.rs` hands it over (its `inherit`).
pub(super) fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}
