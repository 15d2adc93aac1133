//! Serving routes: accept connections, check the peer, answer each request frame.

use crate::frame::{read_message, write_message};
use crate::message::{NotAfter, Outcome, RemoteError, Request, Response};
use crate::routes::Route;
use crate::AgentId;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
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
    /// The parent, any process of our own uid, or the process the host's pids file of
    /// `state` records as `program`: Mini's harness, whose connection service runs as a uid
    /// of its own when Link runs as root (issue 42, "plugins are not root").
    Recorded {
        state: &'static crate::layout::StateLayout,
        program: &'static str,
    },
}

impl Peers {
    fn allows(self, stream: &UnixStream) -> bool {
        let Ok(cred) = stream.peer_cred() else {
            return false;
        };
        match self {
            Peers::Parent => cred.pid() == Some(std::os::unix::process::parent_id() as i32),
            Peers::SameUser => cred.uid() == rustix::process::getuid().as_raw(),
            Peers::Recorded { state, program } => {
                let parent = std::os::unix::process::parent_id() as i32;
                let recorded = |pid| {
                    let file = crate::pids::PidsFile::read(state).ok().flatten();
                    file.is_some_and(|f| f.plugin_of(pid) == Some(program))
                };
                cred.uid() == rustix::process::getuid().as_raw()
                    || cred.pid() == Some(parent)
                    || cred.pid().is_some_and(recorded)
            }
        }
    }
}

/// The host's health check of a plugin that serves frames (`link status` asks every plugin):
/// answered `{}` by [`serve`] itself, before the plugin's handler, so every plugin answers it
/// alike and without work, and only one whose serving has stopped (SIGSTOP, a wedged runtime)
/// does not. Not a route: no plugin announces or owns it, and only a plugin's own socket
/// answers it (not the router's, nor the host's control socket).
pub const PING: &str = "plugin.ping";

/// Serves until the listener fails; each connection gets its own task and may carry many
/// requests, answered in order. [`PING`] is answered here, never by `handler`.
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
            let answer = |req: Request| -> HandlerFuture {
                if req.route == PING {
                    return Box::pin(async { Ok(Value::Object(Default::default())) });
                }
                handler(req)
            };
            if let Err(e) = serve_connection(stream, answer).await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
}

/// Answers every request on one connection, in order. A frame that is JSON with an `id` but
/// not a valid request (an agent id that breaks the rule, say) is answered `bad_request`;
/// anything else ends the connection. A request read after its [`Request::not_after`] is
/// answered `timeout` without being done: its caller has been told it timed out.
pub async fn serve_connection<F, Fut>(mut stream: UnixStream, answer: F) -> Result<(), crate::Error>
where
    F: Fn(Request) -> Fut,
    Fut: Future<Output = Result<Value, RemoteError>>,
{
    while let Some(frame) = read_message::<Value, _>(&mut stream).await? {
        let (id, outcome) = match Request::deserialize(&frame) {
            Ok(req) if req.not_after.is_some_and(NotAfter::passed) => (
                req.id,
                Outcome::Error(too_late(&req.route, "arrived after")),
            ),
            Ok(req) => {
                let request = Answering {
                    call: req.call,
                    deadline: req.not_after.map(|at| (at, req.route.clone())),
                };
                (req.id, outcome_of(answering(request, answer(req)).await))
            }
            Err(e) => match frame.get("id").and_then(Value::as_u64) {
                Some(id) => (
                    id,
                    Outcome::Error(RemoteError::bad_request(format!("malformed request: {e}"))),
                ),
                None => return Err(crate::Error::Json(e)),
            },
        };
        write_message(&mut stream, &Response { id, outcome }).await?;
    }
    Ok(())
}

/// What a task answering a request knows of it, for the calls it makes meanwhile and for
/// its handler.
#[derive(Debug, Clone, Default)]
pub struct Answering {
    /// The router's number of the call ([`Request::call`]).
    pub call: Option<u64>,
    /// Its deadline ([`Request::not_after`]) and its route.
    pub deadline: Option<(NotAfter, String)>,
}

tokio::task_local! {
    static ANSWERING: Answering;
}

/// Runs `answer` as the answer to `request` ([`current_call`], [`until_deadline`]).
pub async fn answering<F: Future>(request: Answering, answer: F) -> F::Output {
    ANSWERING.scope(request, answer).await
}

/// The router's number of the call this task is answering, if it answers one: what the
/// client stamps on the calls it makes meanwhile ([`Request::parent`]). A task spawned by a
/// handler does not inherit it (its calls carry none, and the router falls back to timing).
pub fn current_call() -> Option<u64> {
    ANSWERING.try_with(|a| a.call).ok().flatten()
}

/// `wait` (for a lock, a free resource) by a handler before it changes anything, given up at
/// the deadline of the request this task answers: `timeout` then, and nothing done, so a
/// caller told it timed out never finds it done, and the handler holds no place in the queue
/// past that moment. Waits as long as `wait` does outside a request or without a deadline.
pub async fn until_deadline<T>(wait: impl Future<Output = T>) -> Result<T, RemoteError> {
    let deadline = ANSWERING.try_with(|a| a.deadline.clone()).ok().flatten();
    let Some((at, route)) = deadline else {
        return Ok(wait.await);
    };
    let left = at.0.saturating_sub(crate::clock::monotonic_ms());
    let done = tokio::time::timeout(std::time::Duration::from_millis(left), wait).await;
    // The timer fires only after the wait is polled: a wait that ended in the same tick as
    // the deadline, after it, is late too (what it got is let go here).
    match done {
        Ok(got) if !at.passed() => Ok(got),
        _ => Err(too_late(&route, "waited past")),
    }
}

/// The answer to a request read after its deadline.
fn too_late(route: &str, how: &str) -> RemoteError {
    tracing::warn!("{route} {how} its deadline; not done (its caller was told it timed out)");
    RemoteError::new(
        crate::ErrorCode::Timeout,
        format!(
            "{route} {how} its deadline and was not done: its caller had been told it timed \
             out"
        ),
    )
}

fn outcome_of(result: Result<Value, RemoteError>) -> Outcome {
    match result {
        Ok(v) => Outcome::Ok(v),
        Err(e) => Outcome::Error(e),
    }
}

/// Wraps an async fn into a [`Handler`].
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, RemoteError>> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

/// What a handler learns about a call besides its body.
#[derive(Debug, Clone)]
pub struct Call {
    /// The agent it acts for; always `Some` for a route with `FOR_AGENT`.
    pub agent: Option<AgentId>,
    /// The caller the router confirmed (full Link); `None` from a direct peer.
    pub caller: Option<String>,
}

impl Call {
    /// The agent; for a `FOR_AGENT` route the [`Service`] has already checked there is one.
    pub fn agent(&self) -> Result<&AgentId, RemoteError> {
        self.agent
            .as_ref()
            .ok_or_else(|| RemoteError::bad_request("this route needs an agent"))
    }
}

type Typed<S> = Arc<dyn Fn(Arc<S>, Request) -> HandlerFuture + Send + Sync>;

/// An owner's routes: one typed handler per [`Route`], dispatched by name. The ready line's
/// route list comes from here too, so a plugin cannot serve a route it does not announce.
pub struct Service<S> {
    state: Arc<S>,
    table: HashMap<&'static str, Typed<S>>,
    names: Vec<&'static str>,
}

impl<S: Send + Sync + 'static> Service<S> {
    pub fn new(state: Arc<S>) -> Self {
        Service {
            state,
            table: HashMap::new(),
            names: Vec::new(),
        }
    }

    /// Serves route `R` with `f(state, call, body)`.
    pub fn on<R, F, Fut>(mut self, f: F) -> Self
    where
        R: Route,
        F: Fn(Arc<S>, Call, R::Body) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R::Reply, RemoteError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let typed: Typed<S> = Arc::new(move |state, req| {
            let f = f.clone();
            Box::pin(async move {
                // An absent body is an empty one.
                let raw = match req.body {
                    Value::Null => Value::Object(Default::default()),
                    raw => raw,
                };
                let body: R::Body = serde_json::from_value(raw).map_err(|e| {
                    let why = if R::REDACT {
                        "the body's fields are missing or not strings".to_owned()
                    } else {
                        e.to_string()
                    };
                    RemoteError::bad_request(format!("{}: {why}", R::NAME))
                })?;
                if R::FOR_AGENT && req.agent.is_none() {
                    return Err(RemoteError::bad_request(format!(
                        "{} needs an agent",
                        R::NAME
                    )));
                }
                let call = Call {
                    agent: req.agent,
                    caller: req.caller,
                };
                let reply = f(state, call, body).await?;
                serde_json::to_value(reply).map_err(|e| RemoteError::internal(e.to_string()))
            })
        });
        assert!(
            self.table.insert(R::NAME, typed).is_none(),
            "route {} registered twice",
            R::NAME
        );
        self.names.push(R::NAME);
        self
    }

    /// The routes served, in registration order.
    pub fn routes(&self) -> &[&'static str] {
        &self.names
    }

    /// The dispatching handler; an unknown route is `not_found` naming it.
    pub fn handler(self, owner: &str) -> Handler {
        let Service { state, table, .. } = self;
        let owner: Arc<str> = owner.into();
        handler(move |req: Request| {
            let entry = table.get(req.route.as_str()).cloned();
            let state = state.clone();
            let owner = owner.clone();
            async move {
                match entry {
                    Some(f) => f(state, req).await,
                    None => Err(RemoteError::not_found(format!(
                        "{owner} does not serve route {}",
                        req.route
                    ))),
                }
            }
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{read_message, write_message};
    use crate::routes::agent;
    use serde_json::json;

    struct Count(std::sync::atomic::AtomicUsize);

    /// A typed service over a real socket pair: a valid call reaches the handler, a bad agent
    /// id, a missing agent and an unknown route are refused before it, each with the reason.
    #[tokio::test]
    async fn refusals_happen_before_the_handler() {
        let state = Arc::new(Count(0.into()));
        let service =
            Service::new(state.clone()).on::<agent::Get, _, _>(|s, call: Call, _| async move {
                s.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(agent::AgentInfo::new(call.agent()?.clone(), "n".into()))
            });
        assert_eq!(service.routes(), ["agent.get"]);
        let handler = service.handler("test-owner");
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        tokio::spawn(serve_connection(theirs, move |req| handler(req)));
        async fn ask(stream: &mut UnixStream, v: Value) -> Response {
            write_message(stream, &v).await.unwrap();
            read_message(stream).await.unwrap().unwrap()
        }
        let ok = ask(
            &mut ours,
            json!({"id": 1, "route": "agent.get", "agent": "a-1", "body": {}}),
        )
        .await;
        assert!(
            matches!(ok.outcome, Outcome::Ok(ref v) if v["id"] == "a-1"),
            "{ok:?}"
        );
        for (id, frame, want) in [
            (
                2,
                json!({"id": 2, "route": "agent.get", "agent": "../x", "body": {}}),
                "invalid agent id",
            ),
            (
                3,
                json!({"id": 3, "route": "agent.get", "body": {}}),
                "needs an agent",
            ),
            (
                4,
                json!({"id": 4, "route": "agent.nope", "agent": "a", "body": {}}),
                "does not serve route agent.nope",
            ),
        ] {
            let resp = ask(&mut ours, frame).await;
            assert_eq!(resp.id, id);
            match resp.outcome {
                Outcome::Error(e) => {
                    let code = if id == 4 {
                        crate::ErrorCode::NotFound
                    } else {
                        crate::ErrorCode::BadRequest
                    };
                    assert_eq!(e.code, code);
                    assert!(e.message.contains(want), "{e}");
                }
                other => panic!("{id}: {other:?}"),
            }
        }
        assert_eq!(state.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A handler waiting for a lock gives up at its request's deadline
    /// ([`until_deadline`]): answered `timeout` while the lock is still held, so it kept no
    /// place in the queue. The twin, a far deadline, gets the lock once it is let go.
    #[tokio::test]
    async fn a_wait_is_given_up_at_the_deadline_not_when_it_ends() {
        let lock = std::sync::Arc::new(tokio::sync::Mutex::new(()));
        let held = lock.clone().lock_owned().await;
        let waiting = handler(move |_req: Request| {
            let lock = lock.clone();
            async move {
                let _got = until_deadline(lock.lock_owned()).await?;
                Ok(json!("done"))
            }
        });
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        tokio::spawn(serve_connection(theirs, move |req| waiting(req)));
        let ask = |id: u64, within_ms: u64| {
            let not_after = crate::clock::monotonic_ms() + within_ms;
            json!({"id": id, "route": "sandbox.x", "not_after": not_after, "body": {}})
        };
        write_message(&mut ours, &ask(1, 30)).await.unwrap();
        // Bounded, so a wait that is not given up fails the test rather than hangs it.
        let answer =
            tokio::time::timeout(std::time::Duration::from_secs(60), read_message(&mut ours));
        let resp: Response = answer.await.expect("no answer").unwrap().unwrap();
        match resp.outcome {
            Outcome::Error(e) => {
                assert_eq!(e.code, crate::ErrorCode::Timeout);
                assert!(e.message.contains("sandbox.x waited past"), "{e}");
            }
            other => panic!("answered while the lock was held: {other:?}"),
        }
        write_message(&mut ours, &ask(2, 60_000)).await.unwrap();
        drop(held);
        let resp: Response = read_message(&mut ours).await.unwrap().unwrap();
        assert!(
            matches!(resp.outcome, Outcome::Ok(ref v) if v == "done"),
            "{resp:?}"
        );
        assert_eq!(
            until_deadline(async { 7 }).await.unwrap(),
            7,
            "outside a request"
        );
    }

    /// A plugin's socket answers [`PING`] before its handler, whatever routes it serves;
    /// the twin: its own route on the same connection still reaches the handler.
    #[tokio::test]
    async fn the_ping_is_answered_before_the_handler() {
        let dir = std::env::temp_dir().join(format!("lnk-ping-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("p.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).unwrap();
        let state = Arc::new(Count(0.into()));
        let service =
            Service::new(state.clone()).on::<agent::Get, _, _>(|s, call: Call, _| async move {
                s.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(agent::AgentInfo::new(call.agent()?.clone(), "n".into()))
            });
        let served = tokio::spawn(serve(
            listener,
            Peers::SameUser,
            service.handler("test-owner"),
        ));
        let mut client = crate::client::Client::connect(&socket).await.unwrap();
        let pong = client.call(PING, None, json!({})).await.unwrap();
        assert_eq!(pong, json!({}));
        assert_eq!(state.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        let got = client.call("agent.get", Some("a-1"), json!({})).await;
        assert_eq!(got.unwrap()["id"], "a-1");
        assert_eq!(state.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        served.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A call made while answering one the router numbered carries that number as its
    /// parent; the twin, a call made while answering an unnumbered one, carries none.
    #[tokio::test]
    async fn a_call_made_while_answering_names_the_call_it_answers() {
        let dir = std::env::temp_dir().join(format!("lnk-parent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (outer, inner) = (dir.join("outer.sock"), dir.join("inner.sock"));
        let bind = |p: &std::path::Path| {
            let _ = std::fs::remove_file(p);
            UnixListener::bind(p).unwrap()
        };
        let echo = handler(|req: Request| async move { Ok(json!({ "parent": req.parent })) });
        let inner_served = tokio::spawn(serve(bind(&inner), Peers::SameUser, echo));
        let to_inner = inner.clone();
        let relay = handler(move |_req: Request| {
            let to_inner = to_inner.clone();
            async move {
                let mut c = crate::client::Client::connect(&to_inner).await.unwrap();
                Ok(c.call("echo", None, json!({})).await.unwrap())
            }
        });
        let outer_served = tokio::spawn(serve(bind(&outer), Peers::SameUser, relay));
        let mut client = crate::client::Client::connect(&outer).await.unwrap();
        for (call, parent) in [(Some(42), json!(42)), (None, Value::Null)] {
            let req = Request {
                id: 1,
                route: "relay".into(),
                call,
                ..Default::default()
            };
            assert_eq!(client.send(&req).await.unwrap()["parent"], parent);
        }
        assert_eq!(current_call(), None, "outside any answer");
        inner_served.abort();
        outer_served.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
