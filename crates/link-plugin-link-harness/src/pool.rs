//! Connections to the router, kept open between calls.
//!
//! A turn makes several calls through the router; connecting for each one cost a socket,
//! an accept and a peer-credential check on both sides every time. The router serves many
//! requests per connection and identifies the caller once, at accept, from the connection's
//! peer credentials, so a kept connection carries exactly the same identity and checks.

use link_protocol::frame::{read_message, write_message};
use link_protocol::message::{Outcome, Request, Response};
use link_protocol::Error;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::net::UnixStream;

/// Idle connections kept per socket; more concurrent calls simply open more.
const MAX_IDLE: usize = 8;

/// Idle connections to one socket.
pub struct Pool {
    socket: PathBuf,
    idle: Mutex<Vec<UnixStream>>,
    next_id: AtomicU64,
}

impl Pool {
    pub fn new(socket: PathBuf) -> Pool {
        Pool {
            socket,
            idle: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        }
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Calls `route` for `agent`. A connection goes back to the pool only after a complete
    /// answer; one that failed, or whose call was cancelled, is dropped with its state. A
    /// request is sent once and never retried, since it may have taken effect.
    pub async fn call(
        &self,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> Result<Value, Error> {
        let req = Request {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            route: route.to_owned(),
            agent: agent.map(link_protocol::AgentId::parse).transpose()?,
            caller: None,
            body,
        };
        let mut stream = match self.take() {
            Some(stream) => stream,
            None => UnixStream::connect(&self.socket).await?,
        };
        write_message(&mut stream, &req).await?;
        let resp: Response = read_message(&mut stream).await?.ok_or(Error::Closed)?;
        if resp.id != req.id {
            return Err(Error::IdMismatch {
                want: req.id,
                got: resp.id,
            });
        }
        self.put(stream);
        match resp.outcome {
            Outcome::Ok(v) => Ok(v),
            Outcome::Error(e) => Err(Error::Remote(e)),
        }
    }

    /// An idle connection the peer has not closed, if there is one.
    fn take(&self) -> Option<UnixStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(stream) = idle.pop() {
            if still_open(&stream) {
                return Some(stream);
            }
        }
        None
    }

    fn put(&self, stream: UnixStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(stream);
        }
    }
}

/// True when an idle connection has neither been closed by the peer nor received anything
/// unasked (a peek that would block).
pub fn still_open(stream: &UnixStream) -> bool {
    use rustix::net::RecvFlags;
    let mut byte = [0u8; 1];
    matches!(
        rustix::net::recv(stream, &mut byte[..], RecvFlags::PEEK | RecvFlags::DONTWAIT),
        Err(rustix::io::Errno::AGAIN)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use link_protocol::RemoteError;
    use serde_json::json;

    /// Answers `answers` requests on one connection (echo, or not_found for other routes),
    /// then closes it.
    async fn serve_one(listener: tokio::net::UnixListener, answers: usize) {
        let (mut stream, _) = listener.accept().await.unwrap();
        for _ in 0..answers {
            let req: Request = read_message(&mut stream).await.unwrap().unwrap();
            let outcome = match req.route.as_str() {
                "echo" => Outcome::Ok(req.body),
                _ => Outcome::Error(RemoteError::not_found("no such route")),
            };
            write_message(
                &mut stream,
                &Response {
                    id: req.id,
                    outcome,
                },
            )
            .await
            .unwrap();
        }
    }

    #[tokio::test]
    async fn connections_are_reused_and_closed_ones_dropped() {
        let dir = PathBuf::from(std::env::var("HOME").unwrap())
            .join(format!(".cache/lnk-t/harness-pool-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        // One connection serves all three calls: the pool never connects twice.
        let served = tokio::spawn(serve_one(listener, 3));
        let pool = Pool::new(socket.clone());
        assert_eq!(pool.call("echo", None, json!(1)).await.unwrap(), json!(1));
        // A remote error is a complete answer: the connection stays usable.
        let e = pool.call("nope", None, json!(null)).await.unwrap_err();
        assert_eq!(e.code(), Some(link_protocol::ErrorCode::NotFound));
        assert_eq!(pool.call("echo", None, json!(2)).await.unwrap(), json!(2));
        served.await.unwrap();

        // The server closed it: the idle connection is noticed as closed, not used.
        assert_eq!(pool.idle.lock().unwrap().len(), 1);
        assert!(pool.take().is_none());
        std::fs::remove_file(&socket).unwrap();
        assert!(pool.call("echo", None, json!(3)).await.is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
