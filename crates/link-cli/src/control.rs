//! The host's control socket (`run/host.sock`): status, down, the model key, the monitor,
//! test hooks; every route but status behind the runtime's control key.

use crate::caller::{self, Caller};
use crate::shared::Shared;
use link_protocol::control_key::ControlKey;
use link_protocol::manifest;
use link_protocol::plugin::Profile;
use link_protocol::routes::host::{
    self, DebugCallBody, DebugCallReply, PluginDebugBody, PLUGIN_DEBUG_CALL,
};
use link_protocol::routes::secret::{self, MODEL_REMOTE_KEY};
use link_protocol::routes::{programs, Empty, Route};
use link_protocol::server::{self, Call, Handler, Service};
use link_protocol::{client, RemoteError, Request};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Serves same-uid callers (`link status`, `link down`, the runtime runner). Who connected is
/// decided at accept ([`crate::caller`]); what a connection gets, per call:
/// - a caller the host could not tell: nothing, each call refused with why;
/// - until `host.unlock` with this runtime's control `key`: `host.status` only (Mini's
///   connection service asks for it), so no plugin, nor any process without the key, may stop
///   the runtime or replace the remote model key;
/// - after it: every route. The runtime's own processes are refused `host.unlock` whatever
///   key they send.
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::UnixListener, key: ControlKey) {
    let handlers = Arc::new(Handlers {
        status: Service::new(shared.clone())
            .on::<host::Status, _, _>(answer_status)
            .handler("the host"),
        full: full_handler(shared.clone()),
        key,
        key_file: shared.layout.control_key_file(),
    });
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Another uid's process, or one without credentials: closed unanswered.
        let Some(caller) = caller::identify(&stream) else {
            continue;
        };
        let connection = Arc::new(Connection {
            caller,
            handlers: handlers.clone(),
            unlocked: AtomicBool::new(false),
        });
        tokio::spawn(async move {
            let answer = |req| connection.clone().answer(req);
            let _ = server::serve_connection(stream, answer).await;
        });
    }
}

/// Every route of the control socket, for a connection that presented the key.
fn full_handler(shared: Arc<Shared>) -> Handler {
    let mut service = Service::new(shared)
        .on::<host::Status, _, _>(answer_status)
        .on::<host::Down, _, _>(|shared, _, _| async move {
            shared.stop.notify_one();
            Ok(Empty {})
        })
        .on::<host::MonitorStatus, _, _>(|shared, _, _| forward::<host::MonitorStatus>(shared))
        .on::<host::MonitorStop, _, _>(|shared, _, _| forward::<host::MonitorStop>(shared))
        .on::<host::MonitorSamples, _, _>(|shared, _, _| forward::<host::MonitorSamples>(shared))
        .on::<host::ModelKeySet, _, _>(|shared, _, key| async move {
            if !link_protocol::routes::host::valid_key(&key.value) {
                return Err(RemoteError::bad_request(
                    "the key is not one line of visible ASCII characters; nothing was stored",
                ));
            }
            let body = serde_json::json!({"name": MODEL_REMOTE_KEY, "value": key.value});
            secret_call::<secret::Put>(&shared, body).await?;
            Ok(Empty {})
        })
        .on::<host::ModelKeyDelete, _, _>(|shared, _, _| async move {
            let body = serde_json::json!({"name": MODEL_REMOTE_KEY});
            let reply = secret_call::<secret::Delete>(&shared, body).await?;
            serde_json::from_value(reply).map_err(|e| RemoteError::internal(e.to_string()))
        });
    if crate::test_hooks_on() {
        service = service.on::<host::DebugCall, _, _>(debug_call);
    }
    service.handler("the host")
}

/// What every connection of one runtime shares.
struct Handlers {
    /// `host.status` alone: what a connection gets until it presents the key.
    status: Handler,
    full: Handler,
    key: ControlKey,
    /// Where `link` reads the key, for refusals.
    key_file: PathBuf,
}

/// One accepted connection: who it is, and whether it presented the key.
struct Connection {
    caller: Caller,
    handlers: Arc<Handlers>,
    unlocked: AtomicBool,
}

impl Connection {
    async fn answer(self: Arc<Self>, req: Request) -> Result<Value, RemoteError> {
        if let Caller::Undetermined(why) = self.caller {
            return Err(RemoteError::forbidden(format!(
                "{} refused: {}; nothing was done",
                req.route,
                why.reason()
            )));
        }
        if req.route == host::Unlock::NAME {
            return self.unlock(req);
        }
        if self.unlocked.load(Ordering::SeqCst) {
            return (self.handlers.full)(req).await;
        }
        if req.route == host::Status::NAME {
            return (self.handlers.status)(req).await;
        }
        Err(self.locked(&req.route))
    }

    /// `host.unlock`: the key opens this connection to every route, for an outside caller.
    fn unlock(&self, req: Request) -> Result<Value, RemoteError> {
        if self.caller == Caller::Runtime {
            return Err(RemoteError::forbidden(format!(
                "{RUNTIME_REFUSED}; host.unlock is refused to them whatever key they send"
            )));
        }
        // Parsed by hand so no serde message can quote what was sent.
        let claimed: ControlKey = serde_json::from_value(req.body).map_err(|_| {
            RemoteError::bad_request(r#"host.unlock takes {"key": "<the control key>"}"#)
        })?;
        if !self.handlers.key.matches(&claimed) {
            return Err(RemoteError::forbidden(format!(
                "host.unlock: that is not this runtime's control key (`link` reads it from \
                 {}, which a runtime writes anew each time it starts)",
                self.handlers.key_file.display()
            )));
        }
        self.unlocked.store(true, Ordering::SeqCst);
        Ok(serde_json::json!({}))
    }

    /// The refusal of `route` on a connection that has not presented the key.
    fn locked(&self, route: &str) -> RemoteError {
        if self.caller == Caller::Runtime {
            return RemoteError::forbidden(format!("{route} refused: {RUNTIME_REFUSED}"));
        }
        RemoteError::forbidden(format!(
            "{route} needs this runtime's control key: send host.unlock with the key in {} \
             first (`link` does, run as the user who started the runtime); without it only \
             host.status is answered",
            self.handlers.key_file.display()
        ))
    }
}

/// Why the runtime's own processes get `host.status` only.
const RUNTIME_REFUSED: &str = "the runtime's own processes (a plugin, or anything one started) \
     get host.status only on the control socket";

/// The host's status, after health-checking every running plugin ([`crate::health`]), so a
/// plugin that no longer answers shows `unresponsive`; takes [`crate::health::BOUND`] at most.
async fn answer_status(
    shared: Arc<Shared>,
    _: Call,
    _: Empty,
) -> Result<host::HostStatus, RemoteError> {
    crate::health::check(&shared).await;
    Ok(shared.status())
}

/// `monitor.*` on the host socket go to the measure plugin, which owns them.
async fn forward<R: Route<Body = Empty>>(shared: Arc<Shared>) -> Result<R::Reply, RemoteError> {
    let socket = shared.layout.plugin_socket(programs::MEASURE);
    let peer = shared.peer_of(programs::MEASURE);
    Ok(client::request_once_to::<R>(&socket, peer, None, &Empty {}).await?)
}

/// A `secret.*` call as the host, through the router, so the grant and secret tables apply to
/// the host like to any caller. Mini has no secret plugin.
async fn secret_call<R: Route>(
    shared: &Shared,
    body: serde_json::Value,
) -> Result<serde_json::Value, RemoteError> {
    if shared.profile != Profile::Link {
        return Err(RemoteError::not_found(
            "Mini has no secret plugin, so it keeps no remote model key: run full Link \
             (`link up --profile link`) to forward to a remote model with a key",
        ));
    }
    let req = link_protocol::Request {
        id: 0,
        route: R::NAME.to_owned(),
        body,
        ..Default::default()
    };
    crate::routing::call(shared, crate::router::HOST, req).await
}

/// Makes a plugin call a route through the router as itself, so tests can check grants
/// with real callers.
async fn debug_call(
    shared: Arc<Shared>,
    _: Call,
    req: DebugCallBody,
) -> Result<DebugCallReply, RemoteError> {
    let plugin = req.plugin.as_str();
    let running = shared
        .plugins
        .lock()
        .expect("lock")
        .iter()
        .any(|p| p.name == plugin);
    // The name comes from the caller; the entry says what it serves.
    let Some(spec) = manifest::find(plugin).filter(|_| running) else {
        return Err(RemoteError::not_found(format!(
            "no plugin {plugin:?} is running"
        )));
    };
    if spec.serves == manifest::Serves::Http {
        return Err(RemoteError::bad_request(format!(
            "{plugin} serves HTTP, not routes; it has no debug hook"
        )));
    }
    let body = PluginDebugBody {
        route: req.route,
        body: req.body,
    };
    let body = serde_json::to_value(body).map_err(|e| RemoteError::internal(e.to_string()))?;
    let socket = shared.layout.plugin_socket(plugin);
    let peer = shared.peer_of(plugin);
    let agent = req.agent.as_deref();
    let reply = client::call_once_to(&socket, peer, PLUGIN_DEBUG_CALL, agent, body).await?;
    serde_json::from_value(reply)
        .map_err(|e| RemoteError::internal(format!("{plugin}'s debug.call answer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::Undetermined;
    use link_protocol::ErrorCode;

    /// A connection of `caller` whose handlers answer which of them was reached.
    fn connection(caller: Caller, key: &ControlKey) -> Arc<Connection> {
        let named = |name: &'static str| server::handler(move |_| async move { Ok(name.into()) });
        let handlers = Arc::new(Handlers {
            status: named("status"),
            full: named("full"),
            key: key.clone(),
            key_file: PathBuf::from("/state/control/key"),
        });
        Arc::new(Connection {
            caller,
            handlers,
            unlocked: AtomicBool::new(false),
        })
    }

    fn request(route: &str, body: Value) -> Request {
        Request {
            id: 1,
            route: route.to_owned(),
            body,
            ..Default::default()
        }
    }

    async fn ask(
        conn: &Arc<Connection>,
        route: &str,
        key: &ControlKey,
    ) -> Result<Value, RemoteError> {
        let body = match route {
            "host.unlock" => serde_json::to_value(key).unwrap(),
            _ => Value::Null,
        };
        conn.clone().answer(request(route, body)).await
    }

    fn refused(got: Result<Value, RemoteError>, part: &str) {
        match got {
            Err(e) if e.code == ErrorCode::Forbidden => assert!(e.message.contains(part), "{e}"),
            other => panic!("not refused ({part}): {other:?}"),
        }
    }

    /// The policy, caller by caller: the outside caller reaches the full handler only after
    /// the right key; the runtime's own processes get the status whatever key they send; an
    /// undetermined caller gets nothing, not even the status.
    #[tokio::test]
    async fn only_an_outside_caller_with_the_key_reaches_the_full_handler() {
        let key = ControlKey::generate().unwrap();
        let wrong = ControlKey::generate().unwrap();
        let (down, status, unlock) = (host::Down::NAME, host::Status::NAME, host::Unlock::NAME);

        let outside = connection(Caller::Outside, &key);
        assert_eq!(ask(&outside, status, &key).await.unwrap(), "status");
        refused(
            ask(&outside, down, &key).await,
            "needs this runtime's control key",
        );
        refused(
            ask(&outside, unlock, &wrong).await,
            "not this runtime's control key",
        );
        refused(
            ask(&outside, down, &key).await,
            "needs this runtime's control key",
        );
        ask(&outside, unlock, &key).await.unwrap();
        assert_eq!(ask(&outside, down, &key).await.unwrap(), "full");

        let runtime = connection(Caller::Runtime, &key);
        assert_eq!(ask(&runtime, status, &key).await.unwrap(), "status");
        refused(ask(&runtime, unlock, &key).await, "whatever key they send");
        refused(
            ask(&runtime, down, &key).await,
            "the runtime's own processes",
        );

        let unknown = connection(Caller::Undetermined(Undetermined::Exited), &key);
        for route in [status, unlock, down] {
            refused(ask(&unknown, route, &key).await, "had exited");
        }
        let malformed = outside.clone().answer(request(unlock, Value::Null)).await;
        assert_eq!(malformed.unwrap_err().code, ErrorCode::BadRequest);
    }
}
