//! The host's control socket (`run/host.sock`): status, down, the monitor, test hooks.

use crate::host::Shared;
use link_protocol::plugin::Profile;
use link_protocol::routes::host::{
    self, DebugCallBody, DebugCallReply, PluginDebugBody, PLUGIN_DEBUG_CALL,
};
use link_protocol::routes::secret::{self, MODEL_REMOTE_KEY};
use link_protocol::routes::{programs, Empty, Route};
use link_protocol::server::{self, Call, Service};
use link_protocol::{client, RemoteError};
use std::sync::Arc;

/// Serves same-uid callers (`link status`, `link down`, the runtime runner). The runtime's own
/// processes (plugins run as the host's uid and may connect to a socket path) get
/// `host.status` only, which Mini's connection service asks for: none may stop the runtime or
/// replace the remote model key.
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::UnixListener) {
    let status = Service::new(shared.clone())
        .on::<host::Status, _, _>(answer_status)
        .handler("the host, to its own plugins");
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
            if !crate::commands::valid_key(&key.value) {
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
    let full = service.handler("the host");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let handler = match caller(&stream) {
            Caller::Outside => full.clone(),
            Caller::Runtime => status.clone(),
            Caller::Refused => continue,
        };
        tokio::spawn(async move {
            let _ = server::serve_connection(stream, |req| handler(req)).await;
        });
    }
}

async fn answer_status(
    shared: Arc<Shared>,
    _: Call,
    _: Empty,
) -> Result<host::HostStatus, RemoteError> {
    Ok(shared.status())
}

/// Who connected to the control socket.
enum Caller {
    /// A process of this uid that the host did not start, directly or through a plugin.
    Outside,
    /// A plugin, or anything a plugin started.
    Runtime,
    /// Another uid.
    Refused,
}

fn caller(stream: &tokio::net::UnixStream) -> Caller {
    let Ok(cred) = stream.peer_cred() else {
        return Caller::Refused;
    };
    if cred.uid() != rustix::process::getuid().as_raw() {
        return Caller::Refused;
    }
    let pid = cred.pid().unwrap_or(0);
    if descends_from(pid, std::process::id() as i32) {
        Caller::Runtime
    } else {
        Caller::Outside
    }
}

/// True when `ancestor` is `pid`'s parent, or its parent's, and so on (orphans of plugins are
/// re-parented to the host, its subreaper, so they still count).
fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut pid = pid;
    while pid > 1 {
        let Ok(stat) = procfs::process::Process::new(pid).and_then(|p| p.stat()) else {
            return false;
        };
        if stat.ppid == ancestor {
            return true;
        }
        pid = stat.ppid;
    }
    false
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
        agent: None,
        caller: None,
        body,
    };
    crate::router::call(shared, crate::router::HOST, req).await
}

/// Plugins that serve HTTP on their socket instead of link-protocol routes.
const HTTP_PLUGINS: &[&str] = &["link-plugin-model", "link-mini-connection"];

/// Makes a plugin call a route through the router as itself, so tests can check grants
/// with real callers.
async fn debug_call(
    shared: Arc<Shared>,
    _: Call,
    req: DebugCallBody,
) -> Result<DebugCallReply, RemoteError> {
    let plugin = req.plugin.as_str();
    if !shared
        .plugins
        .lock()
        .expect("lock")
        .iter()
        .any(|p| p.name == plugin)
    {
        return Err(RemoteError::not_found(format!(
            "no plugin {plugin:?} is running"
        )));
    }
    if HTTP_PLUGINS.contains(&plugin) {
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
