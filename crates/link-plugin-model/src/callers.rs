//! Who may call the model: the turn engine the host started (full Link's link harness,
//! Mini's harness), as recorded in `run/pids.json` with its start time, and the host itself;
//! and full Link's agent registry, for the model list alone (it checks an agent's model when
//! the agent is created). Another plugin that connects is answered one `403` naming why and
//! closed: it holds no grant to the model, and the model's socket is plain HTTP, outside the
//! router's grant checks.

use link_protocol::layout::StateLayout;
use link_protocol::manifest::{self, ModelAccess};
use link_protocol::pids::PidsFile;
use std::collections::HashSet;
use tokio::net::{UnixListener, UnixStream};

/// What a connection's caller may ask, as the handlers read it (`ConnectInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A turn engine, or the host: everything ([`ModelAccess::Full`]).
    Granted,
    /// The model list ([`ModelAccess::ListOnly`]).
    ListOnly,
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Granted>> for Caller {
    fn connect_info(stream: axum::serve::IncomingStream<'_, Granted>) -> Caller {
        *stream.remote_addr()
    }
}

/// The model's listener: accepts only the callers the manifest grants the model
/// (`manifest::Plugin::model`) and the parent.
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

    /// What `stream`'s peer may ask, or who it is when it may not call.
    fn caller(&mut self, stream: &UnixStream) -> Result<Caller, String> {
        let pid = match stream.peer_cred().map(|c| c.pid()) {
            Ok(Some(pid)) => pid,
            _ => return Err("a caller without credentials".into()),
        };
        if pid == std::os::unix::process::parent_id() as i32 {
            return Ok(Caller::Granted);
        }
        let started = link_os::process::start_time(pid);
        if started.is_some_and(|t| self.known.contains(&(pid, t))) {
            return Ok(Caller::Granted);
        }
        let recorded = PidsFile::read(&self.layout).ok().flatten();
        let Some(name) = recorded.as_ref().and_then(|f| f.plugin_of(pid)) else {
            return Err(format!("pid {pid}, which the host did not start"));
        };
        match manifest::find(name).map_or(ModelAccess::None, |p| p.model) {
            ModelAccess::Full => {
                if let Some(t) = started {
                    self.known.insert((pid, t));
                }
                Ok(Caller::Granted)
            }
            ModelAccess::ListOnly => Ok(Caller::ListOnly),
            ModelAccess::None => Err(format!(
                "{name} (pid {pid}), which holds no grant to the model"
            )),
        }
    }
}

/// How long a refused connection waits for the caller's request head before it is answered,
/// and then for the caller to read the answer.
const REFUSAL_LINGER: std::time::Duration = std::time::Duration::from_millis(200);

/// Answers a refused caller one `403` naming why, then closes: an HTTP client reports that,
/// where a connection reset without a byte reads as a model service that is down. Waits a
/// moment for the request head first (a client that reads an answer before it has sent its
/// request takes it for a broken connection), off the accept loop.
fn refuse(mut stream: UnixStream, who: String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let message = format!(
        "refused a connection from {who}: only the turn engine (and, for the model list, the \
         agent registry) may call the model service"
    );
    let error = link_protocol::RemoteError::forbidden(message);
    let body = link_protocol::model::openai_error_body(&error, None).to_string();
    let answer = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\nconnection: close\r\n\
         {}: {}\r\ncontent-length: {}\r\n\r\n{body}",
        link_protocol::model::ERROR_CODE_HEADER,
        error.code.as_str(),
        body.len()
    );
    tokio::spawn(async move {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        let read_head = async {
            while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
        };
        let _ = tokio::time::timeout(REFUSAL_LINGER, read_head).await;
        let _ = tokio::time::timeout(REFUSAL_LINGER, stream.write_all(answer.as_bytes())).await;
        let _ = stream.shutdown().await;
        // Read what is left, so the caller's request write does not fail before it reads.
        let drain = async { while let Ok(1..) = stream.read(&mut buf).await {} };
        let _ = tokio::time::timeout(REFUSAL_LINGER, drain).await;
    });
}

impl axum::serve::Listener for Granted {
    type Io = UnixStream;
    type Addr = Caller;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, _) = axum::serve::Listener::accept(&mut self.listener).await;
            match self.caller(&stream) {
                Ok(caller) => return (stream, caller),
                Err(who) => {
                    tracing::warn!("refused a connection from {who}");
                    refuse(stream, who);
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        // Only axum's own logging asks; the model serves one socket.
        Ok(Caller::Granted)
    }
}
