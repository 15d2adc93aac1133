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
use link_protocol::client::Pool;
use link_protocol::message::Outcome;
use link_protocol::routes::programs::{self, HARNESS};
use link_protocol::routes::{self as r, Route};
use link_protocol::{RemoteError, Request};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::net::UnixStream;

/// The host itself, as a caller (its HTTP endpoint).
pub const HOST: &str = "host";

/// Caller → the routes it may call. Everything not listed is refused.
pub const GRANTS: &[(&str, &[&str])] = &[
    (
        HOST,
        &[
            r::auth::Verify::NAME,
            r::agent::Create::NAME,
            r::agent::Get::NAME,
            r::agent::List::NAME,
            r::agent::Delete::NAME,
            r::agent::Turn::NAME,
            r::store::ConversationRead::NAME,
            r::schedule::List::NAME,
            r::host::MonitorStatus::NAME,
            r::host::MonitorStop::NAME,
            r::host::MonitorSamples::NAME,
        ],
    ),
    (
        HARNESS,
        &[
            r::store::ConversationAppend::NAME,
            r::store::ConversationRead::NAME,
            r::agent::Get::NAME,
            r::tool::Run::NAME,
            r::tool::File::NAME,
            r::tool::Code::NAME,
            r::schedule::Create::NAME,
        ],
    ),
    (
        programs::SCHEDULER,
        &[r::agent::Turn::NAME, r::agent::Get::NAME],
    ),
    (
        programs::AGENT,
        &[
            r::store::AgentCreate::NAME,
            r::store::AgentDelete::NAME,
            r::schedule::DeleteAgent::NAME,
        ],
    ),
    (programs::RUN, &[r::sandbox::Exec::NAME]),
    (
        programs::FILE_TOOL,
        &[
            r::store::FileRead::NAME,
            r::store::FileWrite::NAME,
            r::store::FileList::NAME,
        ],
    ),
    (
        programs::CODE,
        &[
            r::store::FileRead::NAME,
            r::store::FileWrite::NAME,
            r::store::FileList::NAME,
        ],
    ),
];

/// Routes an owner serves that no caller may reach through the router, and why. Only the
/// owner's parent (the host, or a test standing in for it) can call them directly.
pub const UNROUTED: &[(&str, &str)] = &[
    (
        r::auth::Issue::NAME,
        "`link token create` writes the token store itself",
    ),
    (
        r::auth::Revoke::NAME,
        "`link token revoke` writes the token store itself",
    ),
    (
        r::secret::Get::NAME,
        "no plugin reads secrets yet: the remote model key still comes from the environment",
    ),
    (
        r::secret::Put::NAME,
        "secrets are provisioned by the operator",
    ),
    (
        r::secret::Delete::NAME,
        "secrets are provisioned by the operator",
    ),
    (
        r::schedule::Cancel::NAME,
        "not on the HTTP contract yet; schedules end by deleting their agent",
    ),
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

/// Registered plugins, route owners and live leases.
#[derive(Default)]
pub struct Router {
    table: Mutex<Table>,
    pool: Pool,
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
        let lease = (req.route == r::agent::Turn::NAME)
            .then(|| self.lease(req.agent.as_deref().unwrap_or_default().to_owned()));
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
        let resp = self.pool.exchange(socket, req).await.map_err(unreachable)?;
        match resp.outcome {
            Outcome::Ok(v) => Ok(v),
            Outcome::Error(e) => Err(e),
        }
    }

    fn check(&self, caller: &str, req: &Request) -> Result<(), RemoteError> {
        if !allowed(caller, &req.route) {
            let why = UNROUTED
                .iter()
                .find(|(route, _)| *route == req.route)
                .map(|(_, why)| format!(" (no plugin may route it: {why})"))
                .unwrap_or_default();
            return Err(refuse(format!(
                "{caller} has no grant for route {}{why}",
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
    caller: &'static str,
    stream: UnixStream,
) -> Result<(), link_protocol::Error> {
    link_protocol::server::serve_connection(stream, |req| shared.router.call(caller, req)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_exact() {
        assert!(allowed(HARNESS, r::tool::Run::NAME));
        assert!(!allowed(
            programs::FILE_TOOL,
            r::store::ConversationAppend::NAME
        ));
        assert!(!allowed(programs::RUN, r::tool::Run::NAME));
        assert!(!allowed("unknown", r::agent::Get::NAME));
    }

    /// Every grant names a route that exists and that its owner is not the caller of; every
    /// routed route has a caller holding its grant, or is listed in UNROUTED with a reason;
    /// host-socket routes are never routed.
    #[test]
    fn grants_match_the_route_table() {
        for (caller, routes) in GRANTS {
            assert!(
                *caller == HOST || programs::PLUGINS.contains(caller),
                "grant for unknown caller {caller}"
            );
            for route in *routes {
                let info =
                    r::find(route).unwrap_or_else(|| panic!("{caller} granted unknown {route}"));
                assert_ne!(
                    info.owner, *caller,
                    "{caller} granted its own route {route}"
                );
                assert_ne!(info.owner, programs::HOST, "host route {route} granted");
                assert!(
                    !UNROUTED.iter().any(|(u, _)| u == route),
                    "{route} both granted and unrouted"
                );
            }
        }
        for info in r::ALL {
            let granted = GRANTS.iter().any(|(_, routes)| routes.contains(&info.name));
            let unrouted = UNROUTED.iter().any(|(u, _)| *u == info.name);
            let host_socket =
                info.owner == programs::HOST || (info.owner == programs::MEASURE && granted);
            assert!(
                granted || unrouted || host_socket,
                "{} is served by {} but no caller holds its grant: grant it or list it in UNROUTED",
                info.name,
                info.owner
            );
        }
    }
}
