//! Full Link's connection endpoint: the shared HTTP contract over the router, with token
//! verification delegated to the auth plugin (its answers remembered while the token store
//! is unchanged: [`crate::verified`]).

use crate::router::HOST;
use crate::shared::Shared;
use crate::verified::{Lookup, Verified};
use link_connection_api::{Backend, BackendFuture};
use link_protocol::routes::{agent, auth, schedule, store, Empty, Route};
use link_protocol::{ErrorCode, RemoteError, Request};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

struct Link {
    shared: Arc<Shared>,
    verified: Verified,
}

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
            body,
            ..Default::default()
        };
        let mut stopping = self.shared.stopping.subscribe();
        tokio::select! {
            result = crate::routing::call(&self.shared, HOST, req) => result,
            reason = stopping.wait_for(Option::is_some) => {
                let reason = reason.ok().and_then(|r| r.clone()).unwrap_or_default();
                Err(RemoteError::new(ErrorCode::Unavailable, format!("the runtime is stopping: {reason}")))
            }
        }
    }
}

impl Link {
    /// Calls route `R` through the router as the host.
    async fn request<R: Route>(
        &self,
        agent: Option<&str>,
        body: &R::Body,
    ) -> Result<R::Reply, RemoteError> {
        let body = serde_json::to_value(body).map_err(|e| RemoteError::internal(e.to_string()))?;
        let reply = self.call(R::NAME, agent, body).await?;
        serde_json::from_value(reply).map_err(|e| {
            RemoteError::internal(format!(
                "{} answered {} unexpectedly: {e}",
                R::OWNER,
                R::NAME
            ))
        })
    }

    /// As [`request`](Self::request), the reply as the HTTP contract's JSON.
    async fn json<R: Route>(
        &self,
        agent: Option<&str>,
        body: &R::Body,
    ) -> Result<Value, RemoteError> {
        let reply = self.request::<R>(agent, body).await?;
        serde_json::to_value(reply).map_err(|e| RemoteError::internal(e.to_string()))
    }
}

impl Backend for Link {
    fn verify<'a>(
        &'a self,
        token: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<bool, RemoteError>> + Send + 'a>> {
        Box::pin(async move {
            let generation = match self.verified.lookup(token) {
                Lookup::Valid => return Ok(true),
                Lookup::Ask(generation) => generation,
            };
            let body = auth::TokenBody {
                token: token.to_owned(),
            };
            let valid = self.request::<auth::Verify>(None, &body).await?.valid;
            if valid {
                self.verified.remember(token, generation);
            }
            Ok(valid)
        })
    }
    fn create_agent(&self, body: agent::CreateBody) -> BackendFuture<'_> {
        Box::pin(async move { self.json::<agent::Create>(None, &body).await })
    }
    fn turn<'a>(&'a self, agent: &'a str, body: agent::TurnBody) -> BackendFuture<'a> {
        Box::pin(async move { self.json::<agent::Turn>(Some(agent), &body).await })
    }
    /// The agent, one bounded page of its conversation (the file store pages it), and its
    /// schedules.
    fn get_agent<'a>(&'a self, id: &'a str, page: store::ReadBody) -> BackendFuture<'a> {
        Box::pin(async move {
            let info = self.json::<agent::Get>(Some(id), &page).await?;
            let log = self
                .request::<store::ConversationRead>(Some(id), &page)
                .await?;
            let schedules = self.request::<schedule::List>(Some(id), &Empty {}).await?;
            let mut info = info;
            info["conversation"] = json!(log.entries);
            info["conversation_torn"] = json!(log.torn);
            info["conversation_total"] = json!(log.total);
            info["conversation_start"] = json!(log.start);
            if let Some(next) = log.next {
                info["conversation_next"] = json!(next);
            }
            info["schedules"] = json!(schedules.schedules);
            Ok(info)
        })
    }
    fn list_agents(&self) -> BackendFuture<'_> {
        Box::pin(self.json::<agent::List>(None, &Empty {}))
    }
    fn delete_agent<'a>(&'a self, id: &'a str) -> BackendFuture<'a> {
        Box::pin(self.json::<agent::Delete>(Some(id), &Empty {}))
    }
    /// As `link status` answers it, and Mini's: after the health check ([`crate::health`]).
    fn status(&self) -> BackendFuture<'_> {
        Box::pin(async move {
            crate::health::check(&self.shared).await;
            Ok(self.shared.status_json())
        })
    }
    /// The agent must exist: the scheduler alone would list nothing for a wrong name.
    fn list_schedules<'a>(&'a self, id: &'a str) -> BackendFuture<'a> {
        Box::pin(async move {
            self.request::<agent::Get>(Some(id), &store::ReadBody::default())
                .await?;
            self.json::<schedule::List>(Some(id), &Empty {}).await
        })
    }
    /// The scheduler refuses a schedule of another agent.
    fn cancel_schedule<'a>(&'a self, id: &'a str, sid: &'a str) -> BackendFuture<'a> {
        let body = schedule::Id { id: sid.to_owned() };
        Box::pin(async move { self.json::<schedule::Cancel>(Some(id), &body).await })
    }
}

/// Serves the HTTP contract on `run/connection.sock`; stops watching the token store once the
/// runtime starts to stop ([`Verified::stop_watching`]).
pub async fn serve(shared: Arc<Shared>, listener: tokio::net::UnixListener) {
    let verified = Verified::watching(&shared.layout.tokens_file());
    let link = Arc::new(Link { shared, verified });
    let mut stopping = link.shared.stopping.subscribe();
    let unwatch = link.clone();
    tokio::spawn(async move {
        // An error: the sender is gone, and the runtime with it.
        let _ = stopping.wait_for(Option::is_some).await;
        unwatch.verified.stop_watching();
    });
    if let Err(e) = link_connection_api::serve(listener, link).await {
        link_protocol::errln!("link: connection endpoint failed: {e}");
    }
}
