//! link-mini-connection: Mini's connection service.
//!
//! Serves the HTTP contract (see the `link_connection_api` library in this package) on
//! `<state>/run/connection.sock`, checks bearer tokens against the stored sha256 hashes, and
//! forwards agents and turns to the Mini harness over link-protocol. It holds no state.

use link_connection_api::{Backend, BackendFuture};
use link_protocol::plugin::PluginEnv;
use link_protocol::{client, routes, tokens, RemoteError};
use serde_json::json;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

struct Mini {
    tokens: PathBuf,
    harness: PathBuf,
    host: PathBuf,
}

impl Mini {
    fn call<'a>(
        &'a self,
        route: &'a str,
        agent: Option<&'a str>,
        body: serde_json::Value,
    ) -> BackendFuture<'a> {
        Box::pin(async move {
            client::call_once(&self.harness, route, agent, body)
                .await
                .map_err(RemoteError::from)
        })
    }
}

impl Backend for Mini {
    fn verify<'a>(
        &'a self,
        token: &'a str,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<bool, RemoteError>> + Send + 'a>> {
        Box::pin(async move {
            tokens::verify(&self.tokens, token)
                .map_err(|e| RemoteError::internal(format!("token store unreadable: {e}")))
        })
    }
    fn create_agent<'a>(&'a self, name: &'a str) -> BackendFuture<'a> {
        self.call(routes::AGENT_CREATE, None, json!({ "name": name }))
    }
    fn turn<'a>(&'a self, agent: &'a str, message: &'a str) -> BackendFuture<'a> {
        self.call(routes::TURN_RUN, Some(agent), json!({ "message": message }))
    }
    fn get_agent<'a>(&'a self, agent: &'a str) -> BackendFuture<'a> {
        self.call(routes::AGENT_GET, Some(agent), json!({}))
    }
    fn list_agents(&self) -> BackendFuture<'_> {
        self.call(routes::AGENT_LIST, None, json!({}))
    }
    fn delete_agent<'a>(&'a self, agent: &'a str) -> BackendFuture<'a> {
        self.call(routes::AGENT_DELETE, Some(agent), json!({}))
    }
    fn status(&self) -> BackendFuture<'_> {
        Box::pin(async move {
            client::call_once(&self.host, routes::HOST_STATUS, None, json!({}))
                .await
                .map_err(RemoteError::from)
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let layout = env.layout();
    let backend = Arc::new(Mini {
        tokens: layout.tokens_file(),
        harness: layout.plugin_socket("link-mini-harness"),
        host: layout.host_socket(),
    });
    let socket = layout.connection_socket();
    let listener = link_protocol::plugin::bind(&socket)?;
    link_protocol::plugin::run_until_stopped(
        &socket,
        &[],
        link_connection_api::serve(listener, backend),
    )
    .await?;
    Ok(())
}
