//! Clients of a running runtime: the HTTP connection service and the host's control socket.

use link_protocol::client::Peer;
use link_protocol::http::{self, HttpResponse};
use link_protocol::layout::StateLayout;
use link_protocol::routes::{Empty, Route};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;

/// What went wrong talking to the runtime.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{what}: {source}")]
    Transport {
        what: String,
        source: link_protocol::Error,
    },
    #[error("{what}: HTTP {status}: {body}")]
    Status {
        what: String,
        status: u16,
        body: String,
    },
    #[error("{what}: unexpected answer {body}: {problem}")]
    Decode {
        what: String,
        body: String,
        problem: String,
    },
}

/// One tool call a turn made.
#[derive(Debug, Clone, Deserialize)]
pub struct ToolCall {
    #[serde(default)]
    pub tool: String,
    #[serde(default)]
    pub input: Value,
    #[serde(default)]
    pub ok: bool,
    #[serde(default)]
    pub output: Value,
}

impl ToolCall {
    /// The output as text (strings as they are, anything else as JSON).
    pub fn output_text(&self) -> String {
        text(&self.output)
    }

    /// A short human reading: `exit 0, stdout "hi"` for run results, the text otherwise.
    pub fn summary(&self) -> String {
        let Some(code) = self.output.get("exit_code") else {
            return self.output_text();
        };
        let mut parts = vec![format!("exit {}", text(code))];
        for stream in ["stdout", "stderr"] {
            let s = self.output.get(stream).map(text).unwrap_or_default();
            if !s.trim().is_empty() {
                parts.push(format!("{stream} {:?}", s.trim()));
            }
        }
        parts.join(", ")
    }

    /// The exit code when the output is a run result.
    pub fn exit_code(&self) -> Option<i64> {
        self.output.get("exit_code").and_then(Value::as_i64)
    }
}

/// The answer to a turn.
#[derive(Debug, Clone, Deserialize)]
pub struct TurnReply {
    pub reply: String,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
}

/// One conversation entry.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    pub role: String,
    #[serde(default)]
    pub content: Value,
}

impl Entry {
    pub fn text(&self) -> String {
        text(&self.content)
    }
}

/// `GET /v1/agents/{id}`.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentView {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub conversation: Vec<Entry>,
}

/// A value as text: strings unquoted, `null` empty, anything else as JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The authenticated HTTP connection service of one runtime.
#[derive(Debug, Clone)]
pub struct Connection {
    pub socket: PathBuf,
    pub token: String,
    /// Who must serve the socket (read once, so timed requests do not read it each time).
    pub peer: Peer,
}

impl Connection {
    pub fn new(socket: impl Into<PathBuf>, token: impl Into<String>) -> Self {
        Connection {
            socket: socket.into(),
            token: token.into(),
            peer: Peer::Any,
        }
    }

    /// Only `peer` may answer: the runtime's server ([`link_protocol::client::connection_peer`]).
    pub fn served_by(self, peer: Peer) -> Self {
        Connection { peer, ..self }
    }

    /// Any request, with the given token (or none); the status is not judged.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<HttpResponse, ClientError> {
        http::json_to(&self.socket, self.peer, method, path, token, body)
            .await
            .map_err(|source| ClientError::Transport {
                what: format!("{method} {path}"),
                source,
            })
    }

    async fn call<T: for<'de> Deserialize<'de>>(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Result<T, ClientError> {
        let what = format!("{method} {path}");
        let resp = self.raw(method, path, Some(&self.token), body).await?;
        let body = String::from_utf8_lossy(&resp.body).into_owned();
        if resp.status != want {
            return Err(ClientError::Status {
                what,
                status: resp.status,
                body,
            });
        }
        serde_json::from_slice(&resp.body).map_err(|e| ClientError::Decode {
            what,
            body,
            problem: e.to_string(),
        })
    }

    /// `POST /v1/agents` → the new agent's id.
    pub async fn create_agent(&self, name: &str) -> Result<String, ClientError> {
        #[derive(Deserialize)]
        struct Created {
            id: String,
        }
        let c: Created = self
            .call("POST", "/v1/agents", Some(&json!({"name": name})), 201)
            .await?;
        Ok(c.id)
    }

    /// `POST /v1/agents/{id}/turns`.
    pub async fn turn(&self, agent: &str, message: &str) -> Result<TurnReply, ClientError> {
        let path = format!("/v1/agents/{agent}/turns");
        self.call("POST", &path, Some(&json!({"message": message})), 200)
            .await
    }

    /// `GET /v1/agents/{id}`.
    pub async fn agent(&self, agent: &str) -> Result<AgentView, ClientError> {
        self.call("GET", &format!("/v1/agents/{agent}"), None, 200)
            .await
    }

    /// `GET /v1/status`, returning the raw response (the status series times it).
    pub async fn status(&self) -> Result<HttpResponse, ClientError> {
        self.raw("GET", "/v1/status", Some(&self.token), None).await
    }
}

/// Calls a route on the host's control socket (`host.status`, `host.down`, `monitor.*`), on a
/// connection that presented the runtime's control key.
pub async fn host_call<R: Route<Body = Empty>>(
    layout: &StateLayout,
) -> Result<R::Reply, ClientError> {
    let socket = layout.host_socket();
    let peer = link_protocol::client::Peer::Any;
    link_protocol::client::control_once::<R>(layout, peer, &Empty {})
        .await
        .map_err(|source| ClientError::Transport {
            what: format!("{} on {}", R::NAME, socket.display()),
            source,
        })
}
