//! Full Link's connection endpoint: the shared HTTP contract over the router, with token
//! verification delegated to the auth plugin.

use crate::host::Shared;
use crate::router::HOST;
use link_connection_api::{Backend, BackendFuture};
use link_protocol::{routes, ErrorCode, RemoteError, Request};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

struct Link(Arc<Shared>);

impl Link {
    /// Calls through the router; a call still in flight when the runtime starts stopping
    /// ends with `unavailable` and the reason, instead of a dropped connection.
    async fn call(
        &self,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> Result<Value, RemoteError> {
        let req = Request {
            id: 0,
            route: route.into(),
            agent: agent.map(link_protocol::AgentId::parse).transpose()?,
            caller: None,
            body,
        };
        let mut stopping = self.0.stopping.subscribe();
        tokio::select! {
            result = self.0.router.call(HOST, req) => result,
            reason = stopping.wait_for(Option::is_some) => {
                let reason = reason.ok().and_then(|r| r.clone()).unwrap_or_default();
                Err(RemoteError::new(ErrorCode::Unavailable, format!("the runtime is stopping: {reason}")))
            }
        }
    }
}

impl Backend for Link {
    fn verify<'a>(
        &'a self,
        token: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<bool, RemoteError>> + Send + 'a>> {
        Box::pin(async move {
            let v = self
                .call(routes::AUTH_VERIFY, None, json!({ "token": token }))
                .await?;
            Ok(v["valid"].as_bool().unwrap_or(false))
        })
    }
    fn create_agent<'a>(&'a self, name: &'a str) -> BackendFuture<'a> {
        Box::pin(self.call(routes::AGENT_CREATE, None, json!({ "name": name })))
    }
    fn turn<'a>(&'a self, agent: &'a str, message: &'a str) -> BackendFuture<'a> {
        Box::pin(self.call(routes::TURN_RUN, Some(agent), json!({ "message": message })))
    }
    fn get_agent<'a>(&'a self, agent: &'a str) -> BackendFuture<'a> {
        Box::pin(async move {
            let mut info = self.call(routes::AGENT_GET, Some(agent), json!({})).await?;
            let log = self
                .call(routes::STORE_CONVERSATION_READ, Some(agent), json!({}))
                .await?;
            info["conversation"] = log["entries"].clone();
            info["conversation_torn"] = log["torn"].clone();
            let schedules = self
                .call(routes::SCHEDULE_LIST, Some(agent), json!({}))
                .await?;
            info["schedules"] = schedules["schedules"].clone();
            Ok(info)
        })
    }
    fn list_agents(&self) -> BackendFuture<'_> {
        Box::pin(self.call(routes::AGENT_LIST, None, json!({})))
    }
    fn delete_agent<'a>(&'a self, agent: &'a str) -> BackendFuture<'a> {
        Box::pin(self.call(routes::AGENT_DELETE, Some(agent), json!({})))
    }
    fn status(&self) -> BackendFuture<'_> {
        Box::pin(async move { Ok(self.0.status_json()) })
    }
}

/// Serves the HTTP contract on `run/connection.sock`.
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::UnixListener) {
    if let Err(e) = link_connection_api::serve(listener, Arc::new(Link(shared))).await {
        eprintln!("link: connection endpoint failed: {e}");
    }
}
