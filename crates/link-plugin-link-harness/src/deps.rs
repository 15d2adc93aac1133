//! The harness's dependencies: other plugins through the router, and the model over HTTP.
//!
//! Every failure to reach a dependency becomes an `unavailable` error naming the plugin, so
//! a turn that ends because something died says what died.

use link_protocol::client::Pool;
use link_protocol::model::Model;
use link_protocol::model_service::ModelService;
use link_protocol::routes::store::{AppendBody, ConversationAppend};
use link_protocol::routes::{owner_of, programs, schedule, tool, Route};
use link_protocol::{AgentId, ErrorCode, RemoteError};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Duration;

pub const MODEL_PLUGIN: &str = programs::MODEL;

/// How long one routed call may take before the turn gives up on it: past the router's own
/// deadline for any route it calls, so a silent plugin is named by the router. Model calls
/// have their own deadline (`ModelService`).
const CALL_TIMEOUT: Duration = link_protocol::routes::agent::TURN_CALL_LIMIT;

/// Where the harness's calls go.
pub struct Deps {
    pub pool: Pool,
    pub router: PathBuf,
    pub model: ModelService,
    /// Named by a full disk's error.
    pub state_root: PathBuf,
}

fn unavailable(message: String) -> RemoteError {
    RemoteError::new(ErrorCode::Unavailable, message)
}

impl Deps {
    pub fn new(router: PathBuf, model: PathBuf, state_root: PathBuf) -> Deps {
        Deps {
            pool: Pool::new(),
            router,
            model: ModelService::new(model),
            state_root,
        }
    }

    /// Calls route `R` for `agent` through the router.
    pub async fn call<R: Route>(
        &self,
        agent: &AgentId,
        body: &R::Body,
    ) -> Result<R::Reply, RemoteError> {
        let (route, owner) = (R::NAME, R::OWNER);
        let call = self.pool.request::<R>(&self.router, Some(agent), body);
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(link_protocol::Error::Remote(e))) if e.code == ErrorCode::Unavailable => {
                Err(unavailable(format!(
                    "{owner} is unavailable ({route}): {}",
                    e.message
                )))
            }
            Ok(Err(link_protocol::Error::Remote(e))) => Err(e),
            Ok(Err(e)) => Err(unavailable(format!(
                "the router ({}) did not carry {route} to {owner}: {e}; is `link up` still running?",
                self.router.display()
            ))),
            Err(_) => Err(RemoteError::new(
                ErrorCode::Timeout,
                format!("{owner} did not answer {route} within {CALL_TIMEOUT:?}"),
            )),
        }
    }

    /// Calls the tool route `route` with the model's `input`, parsed here into the route's
    /// body; → its reply as the model reads it.
    pub async fn tool(
        &self,
        route: &str,
        agent: &AgentId,
        input: Value,
    ) -> Result<Value, RemoteError> {
        match route {
            tool::Run::NAME => self.tool_as::<tool::Run>(agent, input).await,
            tool::File::NAME => self.tool_as::<tool::File>(agent, input).await,
            tool::Code::NAME => self.tool_as::<tool::Code>(agent, input).await,
            schedule::Create::NAME => self.tool_as::<schedule::Create>(agent, input).await,
            other => Err(RemoteError::internal(format!(
                "{other} (owned by {}) is not a tool route",
                owner_of(other)
            ))),
        }
    }

    async fn tool_as<R: Route>(&self, agent: &AgentId, input: Value) -> Result<Value, RemoteError> {
        let body: R::Body = serde_json::from_value(input)
            .map_err(|e| RemoteError::bad_request(format!("{}: {e}", R::NAME)))?;
        let reply = self.call::<R>(agent, &body).await?;
        serde_json::to_value(reply).map_err(|e| RemoteError::internal(e.to_string()))
    }

    /// Appends entries to the agent's conversation, durable once this returns; → the
    /// number of entries the log holds now. With `expect`, only to an intact log of exactly
    /// that many entries (else `conflict`, and nothing is written).
    pub async fn append(
        &self,
        agent: &AgentId,
        entries: &[Value],
        expect: Option<usize>,
    ) -> Result<usize, RemoteError> {
        let body = AppendBody {
            entries: entries.to_vec(),
            expect_total: expect,
        };
        Ok(self.call::<ConversationAppend>(agent, &body).await?.total)
    }

    /// One chat completion on `model`; returns the whole completion object. Within the model
    /// service's own deadline (`ModelService`), the same as Mini's.
    pub async fn complete(
        &self,
        model: &Model,
        messages: &[Cow<'_, RawValue>],
        tools: &[Value],
    ) -> Result<Value, RemoteError> {
        /// The request's fields in the order of their names, as a JSON object's are written.
        #[derive(Serialize)]
        struct Request<'a> {
            messages: &'a [Cow<'a, RawValue>],
            model: &'a Model,
            tools: &'a [Value],
        }
        let body = Request {
            messages,
            model,
            tools,
        };
        self.model.complete(&body).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use link_protocol::routes::agent;
    use serde_json::json;

    #[tokio::test]
    async fn dead_dependencies_are_named() {
        let dir = std::env::temp_dir().join(format!("lnk-harness-deps-{}", std::process::id()));
        let deps = Deps::new(
            dir.join("router.sock"),
            dir.join("model.sock"),
            dir.to_owned(),
        );
        let a = AgentId::parse("a").unwrap();
        let e = deps
            .call::<agent::Get>(&a, &Default::default())
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(
            e.message.contains("link-plugin-agent") && e.message.contains("router"),
            "{e}"
        );
        let e = deps
            .tool(tool::Run::NAME, &a, json!({"command": "true"}))
            .await
            .unwrap_err();
        assert!(e.message.contains("link-plugin-link-run"), "{e}");
        let e = deps
            .tool(tool::Run::NAME, &a, json!({"cmd": 1}))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
        let e = deps.complete(&Model::local(), &[], &[]).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.message.contains(MODEL_PLUGIN), "{e}");
    }
}
