//! The host's health check of its plugins, run for every `host.status` (`link status`): each
//! running plugin is asked at once, with [`BOUND`] to answer, and one that does not is shown
//! `unresponsive`, `ready` again once it answers ([`Shared::heard`], the router's findings'
//! owner too). Without it a plugin no routed call reaches (the model service: the turn
//! engines call it directly, over HTTP) or that no call happened to need would show `ready`
//! however long it had been stopped.

use crate::router::Heard;
use crate::shared::{PluginState, Shared};
use link_protocol::client::{self, Peer};
use link_protocol::manifest::{self, Serves};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a plugin has to answer its health check. It answers from its serving loop
/// without work (below), so a running one is far inside it, even on a loaded machine; and
/// the checks run at once, so a status waits this at most, well inside `link status`'s own
/// limit for the host's answer.
pub const BOUND: Duration = Duration::from_secs(1);

/// What an HTTP plugin (`Serves::Http`) is asked: `GET` of a path none serves, so the model
/// service answers from its fallback and the connection service from its token check, without
/// work and without reaching a remote model. Whatever the status, an answer is an answer: the
/// check asks whether the plugin serves, not what.
const HTTP_PATH: &str = "/";

/// Asks every plugin that runs (`ready` or `unresponsive`), all at once, and records what
/// each check heard; returns when all have answered or run out of [`BOUND`].
pub async fn check(shared: &Arc<Shared>) {
    let running: Vec<(String, i32)> = shared
        .plugins
        .lock()
        .expect("lock")
        .iter()
        .filter(|p| matches!(p.state, PluginState::Ready | PluginState::Unresponsive))
        .map(|p| (p.name.clone(), p.pid))
        .collect();
    let mut checks = tokio::task::JoinSet::new();
    for (name, pid) in running {
        let Some(plugin) = manifest::find(&name) else {
            continue;
        };
        let socket = shared.layout.plugin_socket(&name);
        let shared = shared.clone();
        checks.spawn(async move {
            let heard = match tokio::time::timeout(BOUND, ask(plugin.serves, socket, pid)).await {
                Ok(true) => Heard::Answered,
                Ok(false) | Err(_) => Heard::Silent,
            };
            shared.heard(&name, heard);
        });
    }
    while checks.join_next().await.is_some() {}
}

/// Whether the plugin `pid` answers on `socket`, however it serves. Only `pid` may answer
/// (`Peer::Pid`): whatever else holds the path now is no answer from the plugin.
async fn ask(serves: Serves, socket: PathBuf, pid: i32) -> bool {
    let peer = Peer::Pid(pid);
    match serves {
        Serves::Frames => {
            let body = serde_json::json!({});
            let asked =
                client::call_once_to(&socket, peer, link_protocol::server::PING, None, body);
            // An error answer is still an answer (a plugin of another release that does not
            // know the ping says `not_found`).
            matches!(asked.await, Ok(_) | Err(link_protocol::Error::Remote(_)))
        }
        Serves::Http => {
            link_protocol::http::request_to(&socket, peer, "GET", HTTP_PATH, None, None)
                .await
                .is_ok()
        }
    }
}
