//! The host's control socket (`run/host.sock`): status, down, the monitor, test hooks.

use crate::host::Shared;
use link_protocol::server::{self, Peers};
use link_protocol::{client, routes, RemoteError, Request};
use serde_json::{json, Value};
use std::sync::Arc;

/// Serves same-uid callers (`link status`, `link down`, the runtime runner).
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::UnixListener) {
    let handler = server::handler(move |req| {
        let shared = shared.clone();
        async move { handle(&shared, req).await }
    });
    server::serve(listener, Peers::SameUser, handler).await;
}

async fn handle(shared: &Shared, req: Request) -> Result<Value, RemoteError> {
    match req.route.as_str() {
        routes::HOST_STATUS => Ok(shared.status_json()),
        routes::HOST_DOWN => {
            shared.stop.notify_one();
            Ok(json!({}))
        }
        routes::MONITOR_STATUS | routes::MONITOR_STOP | routes::MONITOR_SAMPLES => {
            let socket = shared.layout.plugin_socket("link-plugin-measure");
            Ok(client::call_once(&socket, &req.route, None, req.body).await?)
        }
        routes::HOST_DEBUG_CALL if test_hooks() => debug_call(shared, req).await,
        other => Err(RemoteError::not_found(format!(
            "the host does not serve {other}"
        ))),
    }
}

/// Plugins that serve HTTP on their socket instead of link-protocol routes.
const HTTP_PLUGINS: &[&str] = &["link-plugin-model", "link-mini-connection"];

fn test_hooks() -> bool {
    std::env::var(link_protocol::plugin::ENV_TEST_HOOKS).is_ok_and(|v| v == "1")
}

/// Makes a plugin call a route through the router as itself, so tests can check grants
/// with real callers.
async fn debug_call(shared: &Shared, req: Request) -> Result<Value, RemoteError> {
    let plugin = req.body["plugin"].as_str().unwrap_or_default();
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
    let agent = req.body["agent"].as_str();
    let body = json!({ "route": req.body["route"], "body": req.body.get("body").cloned().unwrap_or(json!({})) });
    let socket = shared.layout.plugin_socket(plugin);
    Ok(client::call_once(&socket, link_protocol::plugin::DEBUG_CALL, agent, body).await?)
}
