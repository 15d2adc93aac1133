//! The harness's dependencies: other plugins through the router, and the model over HTTP.
//!
//! Every failure to reach a dependency becomes an `unavailable` error naming the plugin, so
//! a turn that ends because something died says what died.

use crate::pool::Pool;
use link_protocol::{routes, ErrorCode, RemoteError};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

pub const MODEL_PLUGIN: &str = "link-plugin-model";

/// How long one call may take before the turn gives up on it. Generous: the run tool has
/// its own, shorter timeout, and a remote model may be slow.
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// Where the harness's calls go.
pub struct Deps {
    pub router: Pool,
    pub model: PathBuf,
}

/// The plugin that owns `route` (for error messages; the router decides where calls go).
pub fn owner(route: &str) -> &'static str {
    match route.split('.').next().unwrap_or_default() {
        "agent" => "link-plugin-agent",
        "store" => "link-plugin-file-store",
        "schedule" => "link-plugin-link-scheduler",
        _ => match route {
            routes::TOOL_RUN => "link-plugin-link-run",
            routes::TOOL_FILE => "link-plugin-file-tool",
            routes::TOOL_CODE => "link-plugin-link-code",
            _ => "the route's owner",
        },
    }
}

fn unavailable(message: String) -> RemoteError {
    RemoteError::new(ErrorCode::Unavailable, message)
}

impl Deps {
    /// Calls `route` for `agent` through the router.
    pub async fn call(&self, route: &str, agent: &str, body: Value) -> Result<Value, RemoteError> {
        let owner = owner(route);
        let call = self.router.call(route, Some(agent), body);
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
                self.router.socket().display()
            ))),
            Err(_) => Err(RemoteError::new(
                ErrorCode::Timeout,
                format!("{owner} did not answer {route} within {CALL_TIMEOUT:?}"),
            )),
        }
    }

    /// Appends entries to the agent's conversation, durable once this returns; → the
    /// number of entries the log holds now. With `expect`, only to an intact log of exactly
    /// that many entries (else `conflict`, and nothing is written).
    pub async fn append(
        &self,
        agent: &str,
        entries: &[Value],
        expect: Option<usize>,
    ) -> Result<usize, RemoteError> {
        let mut body = json!({ "entries": entries });
        if let Some(n) = expect {
            body["expect_total"] = json!(n);
        }
        let done = self
            .call(routes::STORE_CONVERSATION_APPEND, agent, body)
            .await?;
        done["total"].as_u64().map(|n| n as usize).ok_or_else(|| {
            RemoteError::internal(format!(
                "link-plugin-file-store answered an append without its total: {done}"
            ))
        })
    }

    /// One chat completion; returns the whole completion object.
    pub async fn complete(
        &self,
        messages: &[Value],
        tools: &[Value],
    ) -> Result<Value, RemoteError> {
        let body = json!({"model": "link-local", "messages": messages, "tools": tools});
        let request = link_protocol::http::json(
            &self.model,
            "POST",
            "/v1/chat/completions",
            None,
            Some(&body),
        );
        let resp = match tokio::time::timeout(CALL_TIMEOUT, request).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => {
                return Err(unavailable(format!(
                    "{MODEL_PLUGIN} is unavailable at {}: {e}",
                    self.model.display()
                )))
            }
            Err(_) => {
                return Err(RemoteError::new(
                    ErrorCode::Timeout,
                    format!("{MODEL_PLUGIN} did not answer within {CALL_TIMEOUT:?}"),
                ))
            }
        };
        let json = resp.json();
        match resp.status {
            200 => Ok(json),
            status => {
                let detail = json["error"]["message"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| String::from_utf8_lossy(&resp.body).into_owned());
                let code = if status >= 500 {
                    ErrorCode::Unavailable
                } else {
                    ErrorCode::Internal
                };
                Err(RemoteError::new(
                    code,
                    format!("{MODEL_PLUGIN} answered HTTP {status}: {detail}"),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_follow_the_route_table() {
        assert_eq!(owner(routes::AGENT_GET), "link-plugin-agent");
        assert_eq!(
            owner(routes::STORE_CONVERSATION_APPEND),
            "link-plugin-file-store"
        );
        assert_eq!(owner(routes::TOOL_RUN), "link-plugin-link-run");
        assert_eq!(owner(routes::TOOL_FILE), "link-plugin-file-tool");
        assert_eq!(owner(routes::TOOL_CODE), "link-plugin-link-code");
        assert_eq!(owner(routes::SCHEDULE_CREATE), "link-plugin-link-scheduler");
    }

    #[tokio::test]
    async fn dead_dependencies_are_named() {
        let dir = std::env::temp_dir().join(format!("lnk-harness-deps-{}", std::process::id()));
        let deps = Deps {
            router: Pool::new(dir.join("router.sock")),
            model: dir.join("model.sock"),
        };
        let e = deps
            .call(routes::AGENT_GET, "a", json!({}))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(
            e.message.contains("link-plugin-agent") && e.message.contains("router"),
            "{e}"
        );
        let e = deps.complete(&[], &[]).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.message.contains(MODEL_PLUGIN), "{e}");
    }
}
