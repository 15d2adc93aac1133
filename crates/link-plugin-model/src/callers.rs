//! Who may call the model: the turn engine the host started (full Link's link harness,
//! Mini's harness), as recorded in `run/pids.json` with its start time, and the host itself.
//! Another plugin that connects is closed without a byte: it holds no grant to the model, and
//! the model's socket is plain HTTP, outside the router's grant checks.

use link_protocol::layout::StateLayout;
use link_protocol::pids::PidsFile;
use link_protocol::routes::programs;
use std::collections::HashSet;
use tokio::net::{unix::SocketAddr, UnixListener, UnixStream};

/// The plugins granted the model.
pub const GRANTED: &[&str] = &[programs::HARNESS, programs::MINI_HARNESS];

/// The model's listener: accepts only [`GRANTED`] callers and the parent.
pub struct Granted {
    listener: UnixListener,
    layout: StateLayout,
    /// Callers found granted, by (pid, start time): a process stays the plugin it was
    /// recorded as, so each turn's connection does not read the pids file again.
    known: HashSet<(i32, u64)>,
}

impl Granted {
    pub fn new(listener: UnixListener, layout: StateLayout) -> Granted {
        Granted {
            listener,
            layout,
            known: HashSet::new(),
        }
    }

    /// Why `stream`'s peer may not call, or `None` when it may.
    fn refusal(&mut self, stream: &UnixStream) -> Option<String> {
        let pid = match stream.peer_cred().map(|c| c.pid()) {
            Ok(Some(pid)) => pid,
            _ => return Some("a caller without credentials".into()),
        };
        if pid == std::os::unix::process::parent_id() as i32 {
            return None;
        }
        let started = link_protocol::pids::start_time(pid);
        if started.is_some_and(|t| self.known.contains(&(pid, t))) {
            return None;
        }
        let recorded = PidsFile::read(&self.layout).ok().flatten();
        match recorded.as_ref().and_then(|f| f.plugin_of(pid)) {
            Some(name) if GRANTED.contains(&name) => {
                if let Some(t) = started {
                    self.known.insert((pid, t));
                }
                None
            }
            Some(name) => Some(format!(
                "{name} (pid {pid}), which holds no grant to the model"
            )),
            None => Some(format!("pid {pid}, which the host did not start")),
        }
    }
}

impl axum::serve::Listener for Granted {
    type Io = UnixStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = axum::serve::Listener::accept(&mut self.listener).await;
            match self.refusal(&stream) {
                None => return (stream, addr),
                Some(who) => tracing::warn!("refused a connection from {who}"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}
