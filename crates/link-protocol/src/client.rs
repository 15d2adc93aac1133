//! Calling routes: one request/response [`exchange`], a single [`Client`] connection, and a
//! [`Pool`] of kept connections (the router's and the harness's).

use crate::frame::{read_message, write_message};
use crate::message::{Outcome, Request, Response};
use crate::routes::Route;
use crate::{AgentId, Error};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::net::UnixStream;

/// Writes `req` and reads its response on `stream`; the ids must match.
pub async fn exchange(stream: &mut UnixStream, req: &Request) -> Result<Response, Error> {
    write_message(stream, req).await?;
    let resp: Response = read_message(stream).await?.ok_or(Error::Closed)?;
    if resp.id != req.id {
        return Err(Error::IdMismatch {
            want: req.id,
            got: resp.id,
        });
    }
    Ok(resp)
}

fn into_result(resp: Response) -> Result<Value, Error> {
    match resp.outcome {
        Outcome::Ok(v) => Ok(v),
        Outcome::Error(e) => Err(Error::Remote(e)),
    }
}

/// The typed reply of `R`, or a malformed-message error naming the route.
fn typed_reply<R: Route>(v: Value) -> Result<R::Reply, Error> {
    serde_json::from_value(v).map_err(Error::Json)
}

fn request_for<R: Route>(
    id: u64,
    agent: Option<&AgentId>,
    body: &R::Body,
) -> Result<Request, Error> {
    Ok(Request {
        id,
        route: R::NAME.to_owned(),
        agent: agent.cloned(),
        caller: None,
        not_after: None,
        call: None,
        parent: crate::server::current_call(),
        body: serde_json::to_value(body)?,
    })
}

/// Who must be serving a socket, checked once per new connection from its credentials
/// (SO_PEERCRED): a socket path can be replaced, the process behind a connection cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Whoever serves the path (a client with nothing to check it against).
    Any,
    /// Only this process.
    Pid(i32),
}

/// Who must serve `run/connection.sock` of the runtime on `layout`, from its pids file (the
/// host for full Link, Mini's connection plugin); `Any` when no runtime recorded one.
pub fn connection_peer(layout: &crate::layout::StateLayout) -> Peer {
    match crate::pids::PidsFile::read(layout) {
        Ok(Some(file)) => Peer::Pid(file.connection_server()),
        _ => Peer::Any,
    }
}

/// Who must serve `run/host.sock` of the runtime on `layout`: the host its pids file names;
/// `None` when no runtime recorded one.
pub fn host_peer(layout: &crate::layout::StateLayout) -> Option<Peer> {
    match crate::pids::PidsFile::read(layout) {
        Ok(Some(file)) => Some(Peer::Pid(file.host as i32)),
        _ => None,
    }
}

/// Connects to `socket` and checks that `peer` serves it; nothing is sent otherwise.
pub async fn connect(socket: &Path, peer: Peer) -> Result<UnixStream, Error> {
    let stream = UnixStream::connect(socket).await?;
    if let Peer::Pid(want) = peer {
        let got = stream.peer_cred()?.pid();
        if got != Some(want) {
            return Err(Error::WrongPeer {
                socket: socket.to_owned(),
                want,
                got,
            });
        }
    }
    Ok(stream)
}

/// One connection; calls are answered in order, one at a time.
pub struct Client {
    stream: UnixStream,
    next_id: u64,
}

impl Client {
    pub async fn connect(path: &Path) -> Result<Client, Error> {
        Client::connect_to(path, Peer::Any).await
    }

    /// Connects to `path` served by `peer` ([`connect`]).
    pub async fn connect_to(path: &Path, peer: Peer) -> Result<Client, Error> {
        Ok(Client {
            stream: connect(path, peer).await?,
            next_id: 1,
        })
    }

    /// A client on a connection made elsewhere (a test's, connected by a process that is
    /// gone by now); nobody checked who serves it.
    pub fn over(stream: UnixStream) -> Client {
        Client { stream, next_id: 1 }
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Calls route `R` for `agent` with `body`.
    pub async fn request<R: Route>(
        &mut self,
        agent: Option<&AgentId>,
        body: &R::Body,
    ) -> Result<R::Reply, Error> {
        let req = request_for::<R>(self.next_id(), agent, body)?;
        typed_reply::<R>(self.send(&req).await?)
    }

    /// Calls a route known only by name (test hooks, forwarding); `agent` is checked here.
    pub async fn call(
        &mut self,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> Result<Value, Error> {
        let req = Request {
            id: self.next_id(),
            route: route.to_owned(),
            agent: agent.map(AgentId::parse).transpose()?,
            caller: None,
            not_after: None,
            call: None,
            parent: crate::server::current_call(),
            body,
        };
        self.send(&req).await
    }

    /// Sends a prepared request (the router uses this to forward with `caller` set).
    pub async fn send(&mut self, req: &Request) -> Result<Value, Error> {
        into_result(exchange(&mut self.stream, req).await?)
    }
}

/// Connects, makes one call of `R`, and closes: for callers that make calls rarely.
pub async fn request_once<R: Route>(
    socket: &Path,
    agent: Option<&AgentId>,
    body: &R::Body,
) -> Result<R::Reply, Error> {
    request_once_to::<R>(socket, Peer::Any, agent, body).await
}

/// [`request_once`] to a socket `peer` must serve.
pub async fn request_once_to<R: Route>(
    socket: &Path,
    peer: Peer,
    agent: Option<&AgentId>,
    body: &R::Body,
) -> Result<R::Reply, Error> {
    Client::connect_to(socket, peer)
        .await?
        .request::<R>(agent, body)
        .await
}

/// A connection to the control socket of the runtime on `layout`, served by `peer`, that has
/// presented the runtime's control key (`host.unlock`): every call on it gets the host's full
/// control handler. The one way `link` and the testing kit reach `host.down`,
/// `host.model_key.*`, `monitor.*` and the test hooks; without it the host answers
/// `host.status` only.
pub async fn control(layout: &crate::layout::StateLayout, peer: Peer) -> Result<Client, Error> {
    let key = crate::control_key::ControlKey::read(&layout.control_key_file())?;
    let mut client = Client::connect_to(&layout.host_socket(), peer).await?;
    client
        .request::<crate::routes::host::Unlock>(None, &key)
        .await?;
    Ok(client)
}

/// Opens a [`control`] connection, makes one call of `R`, and closes.
pub async fn control_once<R: Route>(
    layout: &crate::layout::StateLayout,
    peer: Peer,
    body: &R::Body,
) -> Result<R::Reply, Error> {
    control(layout, peer).await?.request::<R>(None, body).await
}

/// Opens a [`control`] connection, makes one call by name, and closes.
pub async fn control_call_once(
    layout: &crate::layout::StateLayout,
    peer: Peer,
    route: &str,
    body: Value,
) -> Result<Value, Error> {
    control(layout, peer).await?.call(route, None, body).await
}

/// Connects, makes one call by name, and closes.
pub async fn call_once(
    socket: &Path,
    route: &str,
    agent: Option<&str>,
    body: Value,
) -> Result<Value, Error> {
    call_once_to(socket, Peer::Any, route, agent, body).await
}

/// [`call_once`] to a socket `peer` must serve.
pub async fn call_once_to(
    socket: &Path,
    peer: Peer,
    route: &str,
    agent: Option<&str>,
    body: Value,
) -> Result<Value, Error> {
    Client::connect_to(socket, peer)
        .await?
        .call(route, agent, body)
        .await
}

/// Idle connections kept per socket; more concurrent calls simply open more.
const MAX_IDLE: usize = 8;

/// Connections kept open between calls, per socket.
///
/// A connection goes back to the pool only after a complete answer; one that failed, or
/// whose call was cancelled, is dropped with its state. A request is sent once and never
/// retried, since it may have taken effect. The peer identifies the caller once, at accept,
/// from the connection's credentials, so a kept connection carries the same identity.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<PathBuf, Vec<UnixStream>>>,
    /// The process that must serve a socket, where the pool's owner knows it.
    peers: Mutex<HashMap<PathBuf, i32>>,
    next_id: AtomicU64,
}

impl Pool {
    pub fn new() -> Pool {
        Pool::default()
    }

    /// From now on, only `pid` may serve `socket`: every new connection is checked
    /// ([`connect`]), and kept ones were made to whoever served it before are dropped.
    pub fn expect_peer(&self, socket: &Path, pid: i32) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.insert(socket.to_owned(), pid);
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.remove(socket);
    }

    fn peer_of(&self, socket: &Path) -> Peer {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.get(socket).map_or(Peer::Any, |pid| Peer::Pid(*pid))
    }

    /// Sends `req` (its id as given) to `socket` and returns the response.
    pub async fn exchange(&self, socket: &Path, req: &Request) -> Result<Response, Error> {
        let mut stream = match self.take(socket) {
            Some(stream) => stream,
            None => connect(socket, self.peer_of(socket)).await?,
        };
        let resp = exchange(&mut stream, req).await?;
        self.put(socket, stream);
        Ok(resp)
    }

    /// Calls route `R` on `socket` for `agent`.
    pub async fn request<R: Route>(
        &self,
        socket: &Path,
        agent: Option<&AgentId>,
        body: &R::Body,
    ) -> Result<R::Reply, Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let req = request_for::<R>(id, agent, body)?;
        let v = into_result(self.exchange(socket, &req).await?)?;
        typed_reply::<R>(v)
    }

    /// An idle connection to `socket` that its peer has not closed, if there is one.
    fn take(&self, socket: &Path) -> Option<UnixStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let kept = idle.get_mut(socket)?;
        while let Some(stream) = kept.pop() {
            if still_open(&stream) {
                return Some(stream);
            }
        }
        None
    }

    fn put(&self, socket: &Path, stream: UnixStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let kept = idle.entry(socket.to_owned()).or_default();
        if kept.len() < MAX_IDLE {
            kept.push(stream);
        }
    }

    #[cfg(test)]
    fn idle_count(&self, socket: &Path) -> usize {
        self.idle.lock().unwrap().get(socket).map_or(0, Vec::len)
    }
}

/// True when an idle connection has neither been closed by the peer nor received anything
/// unasked (a peek that would block).
fn still_open(stream: &UnixStream) -> bool {
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
    use crate::routes::{self, Empty};
    use crate::RemoteError;

    /// Answers `answers` requests on one connection (agent.list gets an empty list, any other
    /// route not_found), then closes it.
    async fn serve_one(listener: tokio::net::UnixListener, answers: usize) {
        let (mut stream, _) = listener.accept().await.unwrap();
        for _ in 0..answers {
            let req: Request = read_message(&mut stream).await.unwrap().unwrap();
            let outcome = match req.route.as_str() {
                "agent.list" => Outcome::Ok(serde_json::json!({"agents": []})),
                _ => Outcome::Error(RemoteError::not_found("no such route")),
            };
            let resp = Response {
                id: req.id,
                outcome,
            };
            write_message(&mut stream, &resp).await.unwrap();
        }
    }

    #[tokio::test]
    async fn connections_are_reused_and_closed_ones_dropped() {
        let dir = PathBuf::from(std::env::var("HOME").unwrap())
            .join(format!(".cache/lnk-t/protocol-pool-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        // One connection serves all three calls: the pool never connects twice.
        let served = tokio::spawn(serve_one(listener, 3));
        let pool = Pool::new();
        let list = pool.request::<routes::agent::List>(&socket, None, &Empty {});
        assert!(list.await.unwrap().agents.is_empty());
        // A remote error is a complete answer: the connection stays usable.
        let get = pool.request::<routes::auth::Issue>(&socket, None, &Empty {});
        assert_eq!(
            get.await.unwrap_err().code(),
            Some(crate::ErrorCode::NotFound)
        );
        let list = pool.request::<routes::agent::List>(&socket, None, &Empty {});
        assert!(list.await.is_ok());
        served.await.unwrap();

        // The server closed it: the idle connection is noticed as closed, not used. A process
        // another test forks at that moment holds a copy of the server's end until it execs,
        // so the close may show a little later: until it does, the connection is still open
        // and goes back.
        assert_eq!(pool.idle_count(&socket), 1);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while let Some(open) = pool.take(&socket) {
            assert!(
                std::time::Instant::now() < deadline,
                "the close never showed"
            );
            pool.put(&socket, open);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(pool.idle_count(&socket), 0);
        std::fs::remove_file(&socket).unwrap();
        let list = pool.request::<routes::agent::List>(&socket, None, &Empty {});
        assert!(list.await.is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_socket_served_by_another_process_than_expected_gets_nothing() {
        let dir = std::env::temp_dir().join(format!("lnk-peer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let served = tokio::spawn(async move {
            // The refused connection: it closes without a byte.
            let (mut first, _) = listener.accept().await.unwrap();
            let sent: Option<Request> = read_message(&mut first).await.unwrap();
            assert!(
                sent.is_none(),
                "a request reached a server not expected: {sent:?}"
            );
            serve_one(listener, 1).await;
        });
        let pool = Pool::new();
        // This process serves the socket; pid 1 is expected, so nothing may be sent.
        pool.expect_peer(&socket, 1);
        let refused = pool.request::<routes::agent::List>(&socket, None, &Empty {});
        match refused.await {
            Err(Error::WrongPeer { want: 1, got, .. }) => {
                assert_eq!(got, Some(std::process::id() as i32));
            }
            other => panic!("a wrong peer was used: {:?}", other.map(|_| ())),
        }
        // The allowed twin: the real server's pid.
        pool.expect_peer(&socket, std::process::id() as i32);
        let list = pool.request::<routes::agent::List>(&socket, None, &Empty {});
        assert!(list.await.unwrap().agents.is_empty());
        served.await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
