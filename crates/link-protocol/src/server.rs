//! Serving routes: accept connections, check the peer, answer each request frame.

use crate::frame::{read_message, write_message};
use crate::message::{Outcome, RemoteError, Request, Response};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::{UnixListener, UnixStream};

/// A boxed route handler result.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, RemoteError>> + Send>>;

/// Answers one request.
pub type Handler = Arc<dyn Fn(Request) -> HandlerFuture + Send + Sync>;

/// Which peers may connect, judged by `SO_PEERCRED`.
#[derive(Debug, Clone, Copy)]
pub enum Peers {
    /// Only the process that started us: under full Link that is the host's router.
    Parent,
    /// Any process of our own uid (Mini has no router).
    SameUser,
}

impl Peers {
    fn allows(self, stream: &UnixStream) -> bool {
        let Ok(cred) = stream.peer_cred() else {
            return false;
        };
        match self {
            Peers::Parent => cred.pid() == Some(std::os::unix::process::parent_id() as i32),
            Peers::SameUser => cred.uid() == rustix::process::getuid().as_raw(),
        }
    }
}

/// Serves until the listener fails; each connection gets its own task and may carry many
/// requests, answered in order.
pub async fn serve(listener: UnixListener, peers: Peers, handler: Handler) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        if !peers.allows(&stream) {
            tracing::warn!(
                "refused connection from pid {:?}",
                stream.peer_cred().ok().and_then(|c| c.pid())
            );
            continue;
        }
        let handler = handler.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, handler).await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
}

async fn serve_connection(mut stream: UnixStream, handler: Handler) -> Result<(), crate::Error> {
    while let Some(req) = read_message::<Request, _>(&mut stream).await? {
        let id = req.id;
        let outcome = match handler(req).await {
            Ok(v) => Outcome::Ok(v),
            Err(e) => Outcome::Error(e),
        };
        write_message(&mut stream, &Response { id, outcome }).await?;
    }
    Ok(())
}

/// Wraps an async fn into a [`Handler`].
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, RemoteError>> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

/// Decodes a request body into `T`, as a `bad_request` error when it does not fit.
pub fn body<T: serde::de::DeserializeOwned>(req: &Request) -> Result<T, RemoteError> {
    serde_json::from_value(req.body.clone())
        .map_err(|e| RemoteError::bad_request(format!("{}: {e}", req.route)))
}

/// The agent a request acts for, or a `bad_request` naming the route.
pub fn agent(req: &Request) -> Result<&str, RemoteError> {
    req.agent
        .as_deref()
        .ok_or_else(|| RemoteError::bad_request(format!("{} needs an agent", req.route)))
}
