//! Full Link's router: the grant table, caller identity from `SO_PEERCRED`, agent leases,
//! and forwarding to each route's owner.
//!
//! A plugin calls another by connecting to `run/router.sock`. The router maps the peer's pid
//! to the plugin it started (an unknown pid is refused), checks [`allowed`], and forwards the
//! request to the owner with `caller` set to that plugin's name. The link harness may act only
//! for an agent whose turn the router is currently forwarding to it (a lease).
//!
//! Connections to owners are kept open between calls (a few idle ones per owner socket):
//! the owner checked at accept that the peer is its parent, the host, which a kept
//! connection still is. Every call is still checked here before it is sent.

use crate::host::Shared;
use link_protocol::frame::{read_message, write_message};
use link_protocol::message::{Outcome, Response};
use link_protocol::{routes as r, RemoteError, Request};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::net::UnixStream;

/// The host itself, as a caller (its HTTP endpoint).
pub const HOST: &str = "host";
const HARNESS: &str = "link-plugin-link-harness";

/// Caller → the routes it may call. Everything not listed is refused.
pub const GRANTS: &[(&str, &[&str])] = &[
    (
        HOST,
        &[
            r::AUTH_VERIFY,
            r::AGENT_CREATE,
            r::AGENT_GET,
            r::AGENT_LIST,
            r::AGENT_DELETE,
            r::TURN_RUN,
            r::STORE_CONVERSATION_READ,
            r::SCHEDULE_LIST,
            r::MONITOR_STATUS,
            r::MONITOR_STOP,
            r::MONITOR_SAMPLES,
        ],
    ),
    (
        HARNESS,
        &[
            r::STORE_CONVERSATION_APPEND,
            r::STORE_CONVERSATION_READ,
            r::AGENT_GET,
            r::TOOL_RUN,
            r::TOOL_FILE,
            r::TOOL_CODE,
            r::SCHEDULE_CREATE,
        ],
    ),
    ("link-plugin-link-scheduler", &[r::TURN_RUN, r::AGENT_GET]),
    (
        "link-plugin-agent",
        &[
            r::STORE_AGENT_CREATE,
            r::STORE_AGENT_DELETE,
            r::SCHEDULE_DELETE_AGENT,
        ],
    ),
    ("link-plugin-link-run", &[r::SANDBOX_EXEC]),
    (
        "link-plugin-file-tool",
        &[r::STORE_FILE_READ, r::STORE_FILE_WRITE, r::STORE_FILE_LIST],
    ),
    (
        "link-plugin-link-code",
        &[r::STORE_FILE_READ, r::STORE_FILE_WRITE, r::STORE_FILE_LIST],
    ),
    ("link-plugin-model", &[r::SECRET_GET]),
];

/// True when `caller` holds the grant for `route`.
pub fn allowed(caller: &str, route: &str) -> bool {
    GRANTS
        .iter()
        .any(|(c, routes)| *c == caller && routes.contains(&route))
}

#[derive(Default)]
struct Table {
    by_pid: HashMap<i32, &'static str>,
    owners: HashMap<String, (&'static str, PathBuf)>,
    leases: HashMap<String, usize>,
}

/// Idle connections kept per owner socket; more concurrent calls simply open more.
const MAX_IDLE: usize = 8;

/// Registered plugins, route owners and live leases.
#[derive(Default)]
pub struct Router {
    table: Mutex<Table>,
    idle: Mutex<HashMap<PathBuf, Vec<UnixStream>>>,
}

impl Router {
    /// Records a started plugin and the routes its ready line claimed.
    pub fn register(&self, name: &'static str, pid: i32, routes: &[String], socket: PathBuf) {
        let mut t = self.table.lock().expect("lock");
        t.by_pid.insert(pid, name);
        for route in routes {
            t.owners.insert(route.clone(), (name, socket.clone()));
        }
    }

    fn caller_of(&self, pid: Option<i32>) -> Option<&'static str> {
        pid.and_then(|p| self.table.lock().expect("lock").by_pid.get(&p).copied())
    }

    /// Checks and forwards one call made by `caller`.
    pub async fn call(&self, caller: &str, mut req: Request) -> Result<Value, RemoteError> {
        self.check(caller, &req)?;
        let owner = self
            .table
            .lock()
            .expect("lock")
            .owners
            .get(&req.route)
            .cloned();
        let owner = owner.ok_or_else(|| {
            RemoteError::new(
                link_protocol::ErrorCode::Unavailable,
                format!("no running plugin owns {}", req.route),
            )
        })?;
        req.caller = Some(caller.to_owned());
        let lease =
            (req.route == r::TURN_RUN).then(|| self.lease(req.agent.as_deref().unwrap_or_default().to_owned()));
        let result = self.forward(&owner, &req).await;
        drop(lease);
        result
    }

    /// Sends `req` to its owner; a failure to reach it names the owner. The request is
    /// sent once, never retried (it may have taken effect); a connection goes back to the
    /// pool only after a complete answer, so a cancelled or failed call drops its own.
    async fn forward(
        &self,
        (name, socket): &(&'static str, PathBuf),
        req: &Request,
    ) -> Result<Value, RemoteError> {
        let unreachable = |e: link_protocol::Error| {
            RemoteError::new(
                link_protocol::ErrorCode::Unavailable,
                format!("{name} (owner of {}) is unavailable: {e}", req.route),
            )
        };
        let mut stream = match self.take(socket) {
            Some(stream) => stream,
            None => UnixStream::connect(socket)
                .await
                .map_err(|e| unreachable(e.into()))?,
        };
        let resp = exchange(&mut stream, req).await.map_err(unreachable)?;
        self.put(socket, stream);
        match resp.outcome {
            Outcome::Ok(v) => Ok(v),
            Outcome::Error(e) => Err(e),
        }
    }

    /// An idle connection to `socket` that its owner has not closed, if there is one.
    fn take(&self, socket: &Path) -> Option<UnixStream> {
        let mut idle = self.idle.lock().expect("lock");
        let kept = idle.get_mut(socket)?;
        while let Some(stream) = kept.pop() {
            if still_open(&stream) {
                return Some(stream);
            }
        }
        None
    }

    fn put(&self, socket: &Path, stream: UnixStream) {
        let mut idle = self.idle.lock().expect("lock");
        match idle.get_mut(socket) {
            Some(kept) if kept.len() >= MAX_IDLE => {}
            Some(kept) => kept.push(stream),
            None => {
                idle.insert(socket.to_owned(), vec![stream]);
            }
        }
    }

    fn check(&self, caller: &str, req: &Request) -> Result<(), RemoteError> {
        if !allowed(caller, &req.route) {
            return Err(refuse(format!(
                "{caller} has no grant for route {}",
                req.route
            )));
        }
        if caller == HARNESS {
            let agent = req.agent.as_deref().unwrap_or_default();
            let leased = self
                .table
                .lock()
                .expect("lock")
                .leases
                .get(agent)
                .copied()
                .unwrap_or(0)
                > 0;
            if !leased {
                return Err(refuse(format!(
                    "{caller} may call {} only for an agent whose turn it is running, not {agent:?}",
                    req.route
                )));
            }
        }
        Ok(())
    }

    fn lease(&self, agent: String) -> Lease<'_> {
        *self
            .table
            .lock()
            .expect("lock")
            .leases
            .entry(agent.clone())
            .or_default() += 1;
        Lease {
            router: self,
            agent,
        }
    }
}

/// An agent's turn in flight at the harness; dropping it ends the lease.
struct Lease<'a> {
    router: &'a Router,
    agent: String,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut t = self.router.table.lock().expect("lock");
        if let Some(n) = t.leases.get_mut(&self.agent) {
            *n -= 1;
            if *n == 0 {
                t.leases.remove(&self.agent);
            }
        }
    }
}

fn refuse(message: String) -> RemoteError {
    eprintln!("link: router refused: {message}");
    RemoteError::forbidden(message)
}

/// One request and its response on `stream`.
async fn exchange(
    stream: &mut UnixStream,
    req: &Request,
) -> Result<Response, link_protocol::Error> {
    write_message(stream, req).await?;
    let resp: Response = read_message(stream)
        .await?
        .ok_or(link_protocol::Error::Closed)?;
    if resp.id != req.id {
        return Err(link_protocol::Error::IdMismatch {
            want: req.id,
            got: resp.id,
        });
    }
    Ok(resp)
}

/// True when an idle connection has neither been closed by its owner nor received anything
/// unasked (a peek that would block).
fn still_open(stream: &UnixStream) -> bool {
    use rustix::net::RecvFlags;
    let mut byte = [0u8; 1];
    matches!(
        rustix::net::recv(stream, &mut byte[..], RecvFlags::PEEK | RecvFlags::DONTWAIT),
        Err(rustix::io::Errno::AGAIN)
    )
}

/// Accepts plugin connections on `run/router.sock`.
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::UnixListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let pid = stream.peer_cred().ok().and_then(|c| c.pid());
        let Some(caller) = shared.router.caller_of(pid) else {
            eprintln!(
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
    caller: &str,
    mut stream: UnixStream,
) -> Result<(), link_protocol::Error> {
    while let Some(req) = read_message::<Request, _>(&mut stream).await? {
        let id = req.id;
        let outcome = match shared.router.call(caller, req).await {
            Ok(v) => Outcome::Ok(v),
            Err(e) => Outcome::Error(e),
        };
        write_message(&mut stream, &Response { id, outcome }).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_exact() {
        assert!(allowed(HARNESS, r::TOOL_RUN));
        assert!(!allowed(
            "link-plugin-file-tool",
            r::STORE_CONVERSATION_APPEND
        ));
        assert!(!allowed("link-plugin-link-run", r::TOOL_RUN));
        assert!(!allowed("unknown", r::AGENT_GET));
    }
}
