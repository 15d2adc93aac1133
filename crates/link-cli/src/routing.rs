//! The router's socket, `run/router.sock`: accepts the connections of the plugins the host
//! started, sends each call through the [`Router`](crate::router::Router)'s checks, and records
//! in the shared status whether the owner answered.

use crate::router::Grantee;
use crate::shared::Shared;
use link_protocol::{RemoteError, Request};
use std::sync::Arc;
use tokio::net::UnixStream;

/// Accepts plugin connections on `run/router.sock`.
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::UnixListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let pid = stream.peer_cred().ok().and_then(|c| c.pid());
        let Some(caller) = shared.router.caller_of(pid) else {
            link_protocol::errln!(
                "link: router refused a connection from pid {pid:?}, which the host did not start"
            );
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = serve_caller(&shared, caller, stream).await;
        });
    }
}

async fn serve_caller(
    shared: &Shared,
    caller: Grantee,
    stream: UnixStream,
) -> Result<(), link_protocol::Error> {
    link_protocol::server::serve_connection(stream, |req| call(shared, caller, req)).await
}

/// Checks and forwards one call made by `caller`, and records in the host's plugin status
/// whether the owner answered: `ready` again after an answer; after a missed deadline,
/// `unresponsive` for the plugin the router found silent (the owner, or the innermost owner
/// it was waiting for). States other than these two (`exited`, `stopping`) are left alone.
pub async fn call(
    shared: &Shared,
    caller: Grantee,
    req: Request,
) -> Result<serde_json::Value, RemoteError> {
    let (result, heard) = shared.router.call(caller, req).await;
    if let Some((plugin, heard)) = heard {
        shared.heard(plugin, heard);
    }
    result
}
