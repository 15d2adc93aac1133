//! link-mini-connection: Mini's connection service.
//!
//! Serves the HTTP contract (the `link-connection-api` library, `link_connection_api`) on
//! `<state>/run/connection.sock`, checks bearer tokens against the stored sha256 hashes, and
//! forwards agents and turns to the Mini harness over link-protocol. It holds no state.

use link_connection_api::{Backend, BackendFuture};
use link_protocol::routes::{agent, host, programs, Empty, Route};
use link_protocol::{client, tokens, AgentId, RemoteError};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

struct Mini {
    tokens: PathBuf,
    harness: PathBuf,
    host: PathBuf,
}

impl Mini {
    /// Calls route `R` of the Mini harness; the reply as the HTTP contract's JSON.
    fn call<'a, R: Route>(&'a self, agent: Option<&'a str>, body: R::Body) -> BackendFuture<'a> {
        Box::pin(async move {
            let agent = agent.map(AgentId::parse).transpose()?;
            let reply = client::request_once::<R>(&self.harness, agent.as_ref(), &body).await?;
            serde_json::to_value(reply).map_err(|e| RemoteError::internal(e.to_string()))
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
    fn create_agent(&self, body: agent::CreateBody) -> BackendFuture<'_> {
        self.call::<agent::Create>(None, body)
    }
    fn turn<'a>(&'a self, id: &'a str, body: agent::TurnBody) -> BackendFuture<'a> {
        self.call::<agent::Turn>(Some(id), body)
    }
    fn get_agent<'a>(&'a self, id: &'a str, page: agent::ReadBody) -> BackendFuture<'a> {
        self.call::<agent::Get>(Some(id), page)
    }
    fn list_agents(&self) -> BackendFuture<'_> {
        self.call::<agent::List>(None, Empty {})
    }
    fn delete_agent<'a>(&'a self, id: &'a str) -> BackendFuture<'a> {
        self.call::<agent::Delete>(Some(id), Empty {})
    }
    fn list_schedules<'a>(&'a self, _: &'a str) -> BackendFuture<'a> {
        Box::pin(async { Err(no_scheduler()) })
    }
    fn cancel_schedule<'a>(&'a self, _: &'a str, _: &'a str) -> BackendFuture<'a> {
        Box::pin(async { Err(no_scheduler()) })
    }
    fn status(&self) -> BackendFuture<'_> {
        Box::pin(async move {
            let status = client::request_once::<host::Status>(&self.host, None, &Empty {}).await?;
            serde_json::to_value(status).map_err(|e| RemoteError::internal(e.to_string()))
        })
    }
}

/// Mini has no scheduler, so no schedules to list or cancel.
fn no_scheduler() -> RemoteError {
    RemoteError::not_found(
        "Mini has no scheduler, so no schedules: schedules are full Link's \
         (`link up --profile link`)",
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let layout = env.layout();
    let backend = Arc::new(Mini {
        tokens: layout.tokens_file(),
        harness: layout.plugin_socket(programs::MINI_HARNESS),
        host: layout.host_socket(),
    });
    // In its own directory; the host links `run/connection.sock` to it once it is ready.
    let socket = env.socket.clone();
    let listener = link_protocol::plugin::bind(&socket)?;
    link_protocol::plugin::run_until_stopped(
        &socket,
        &[],
        link_connection_api::serve(listener, backend),
    )
    .await?;
    Ok(())
}
