//! The one client of the model service (`link-plugin-model`, OpenAI-compatible HTTP on its
//! Unix socket), which both turn engines and full Link's agent registry use: whether a model is
//! served ([`ModelService::check`]) and its chat completions. The model's name is
//! [`crate::model::Model`].
//!
//! Every request has a deadline ([`DEADLINE`]), the same in Mini and full Link: a service
//! that does not answer in time (stopped, wedged) costs that call `timeout` naming it, never
//! a turn that waits without end.

use crate::model::{Model, LOCAL};
use crate::plugin::{test_millis, ENV_TEST_DEADLINE_MS, ENV_TEST_MODEL_TIMEOUT_MS};
use crate::routes::programs;
use crate::{ErrorCode, RemoteError};
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// How long the model service gives a forwarded remote to send the head of its answer
/// (`link-plugin-model`'s `forward.rs`). A remote sends a non-streamed completion's head with
/// the whole answer, once the model has generated it, so this is as long as one generation may
/// take: usually seconds; this bounds a stuck remote.
pub const REMOTE_HEAD_DEADLINE: Duration = Duration::from_secs(300);

/// How long a remote may send nothing once its head is sent: between two parts of a stream,
/// and for the whole of a body that is not a stream (a generated answer comes at once). A
/// working remote streams a token every fraction of a second; its longest silence is before
/// the first token, a long prompt's prefill or a reasoning model thinking while it streams
/// nothing, which takes seconds to a minute or two, so this leaves it room, and a stalled
/// stream is still cut in minutes rather than held open for as long as the client waits.
pub const REMOTE_IDLE_DEADLINE: Duration = Duration::from_secs(120);

/// How long the model service gives a remote to list its models (`GET /v1/models`, head and
/// body). An agent is made on a forwarded model only once the list names it, and that wait is
/// inside `agent.create`'s routed deadline (the router's default, 30 s): this, then
/// [`LIST_DEADLINE`], come before it, so a slow remote is named as such, not the agent plugin
/// waiting for it.
pub const REMOTE_LIST_DEADLINE: Duration = Duration::from_secs(20);

/// How long a caller waits for the service's list of models: past its own deadline for the
/// remote's, before the router's 30 s.
pub const LIST_DEADLINE: Duration = REMOTE_LIST_DEADLINE.saturating_add(Duration::from_secs(5));

/// [`REMOTE_LIST_DEADLINE`], or with test hooks [`ENV_TEST_MODEL_TIMEOUT_MS`].
pub fn remote_list_deadline() -> Duration {
    test_millis(ENV_TEST_MODEL_TIMEOUT_MS).unwrap_or(REMOTE_LIST_DEADLINE)
}

/// The service's own time around a forwarded request: the remote key's read through the
/// router (a routed call, 30 s at most) and the answer's way back.
const SERVICE_MARGIN: Duration = Duration::from_secs(60);

/// How long a caller waits for the model service to answer one request: past the remote's
/// deadlines (its head, then its whole body once the head is sent: the turn engines ask for no
/// stream) and the service's own part, so a slow remote is reported by the service itself (its
/// 504 naming the remote) and only a silent service is blamed here.
pub const DEADLINE: Duration = REMOTE_HEAD_DEADLINE
    .saturating_add(REMOTE_IDLE_DEADLINE)
    .saturating_add(SERVICE_MARGIN);
const _: () =
    assert!(DEADLINE.as_secs() > REMOTE_HEAD_DEADLINE.as_secs() + REMOTE_IDLE_DEADLINE.as_secs());

/// [`REMOTE_HEAD_DEADLINE`], or with test hooks [`ENV_TEST_MODEL_TIMEOUT_MS`].
pub fn remote_head_deadline() -> Duration {
    test_millis(ENV_TEST_MODEL_TIMEOUT_MS).unwrap_or(REMOTE_HEAD_DEADLINE)
}

/// [`REMOTE_IDLE_DEADLINE`], or with test hooks [`ENV_TEST_MODEL_TIMEOUT_MS`] (one knob for
/// both: a test of either waits that long).
pub fn remote_idle_deadline() -> Duration {
    test_millis(ENV_TEST_MODEL_TIMEOUT_MS).unwrap_or(REMOTE_IDLE_DEADLINE)
}

/// [`DEADLINE`], or with test hooks the runtime's shortened default deadline
/// ([`ENV_TEST_DEADLINE_MS`]); a test that sets it and forwards must give the remote a
/// shorter one still.
fn deadline() -> Duration {
    test_millis(ENV_TEST_DEADLINE_MS).unwrap_or(DEADLINE)
}

/// The model service on its socket, as a granted caller reaches it.
#[derive(Debug, Clone)]
pub struct ModelService {
    socket: PathBuf,
    /// How long one request may take ([`deadline`]).
    deadline: Duration,
}

impl ModelService {
    pub fn new(socket: PathBuf) -> ModelService {
        ModelService {
            socket,
            deadline: deadline(),
        }
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// One chat completion → the whole completion object. A refusal keeps the service's
    /// code where it says what happened beyond the request (the remote's error, its
    /// deadline, a service that is down); anything else is this caller's fault, so
    /// `internal`.
    pub async fn complete(&self, body: &impl Serialize) -> Result<Value, RemoteError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| RemoteError::internal(format!("a chat request that is not JSON: {e}")))?;
        let resp = self
            .call("POST", "/v1/chat/completions", Some(body))
            .await?;
        let json = resp.json();
        if resp.status == 200 {
            return Ok(json);
        }
        Err(refusal(&resp, &json))
    }

    /// The models the service answers: [`LOCAL`], then the remote's, when it forwards.
    pub async fn served(&self) -> Result<Vec<String>, RemoteError> {
        let within = self.deadline.min(LIST_DEADLINE);
        let resp = self.call_within("GET", "/v1/models", None, within).await?;
        let json = resp.json();
        if resp.status != 200 {
            return Err(refusal(&resp, &json));
        }
        let ids = json["data"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter_map(|m| m["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        Ok(ids)
    }

    /// `Ok` when the service serves `model`; else `bad_request` listing the models it
    /// does. [`LOCAL`] is always served and costs no request.
    pub async fn check(&self, model: &Model) -> Result<(), RemoteError> {
        if model.is_local() {
            return Ok(());
        }
        let served = self.served().await?;
        if served.iter().any(|m| m == model.as_str()) {
            return Ok(());
        }
        let forwarding = if served.len() > 1 {
            "".to_owned()
        } else {
            format!(
                " (models other than {LOCAL} are forwarded when `link up` runs with {}=http://host[:port])",
                crate::plugin::ENV_MODEL_REMOTE_URL
            )
        };
        Err(RemoteError::bad_request(format!(
            "unknown model `{model}`: this runtime serves {}{forwarding}",
            served
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    /// One request within the deadline. Unreachable is `unavailable`; no answer in time is
    /// `timeout` naming the service, which was the silent one: a remote it forwards to
    /// has a shorter deadline, which the service reports itself.
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<crate::http::HttpResponse, RemoteError> {
        self.call_within(method, path, body, self.deadline).await
    }

    /// [`call`](Self::call) within `deadline`.
    async fn call_within(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        deadline: Duration,
    ) -> Result<crate::http::HttpResponse, RemoteError> {
        let request = crate::http::request(&self.socket, method, path, None, body);
        match tokio::time::timeout(deadline, request).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(RemoteError::new(
                ErrorCode::Unavailable,
                format!(
                    "{} is unavailable at {}: {e}",
                    programs::MODEL,
                    self.socket.display()
                ),
            )),
            Err(_) => Err(RemoteError::new(
                ErrorCode::Timeout,
                format!(
                    "{} (the model service at {}) did not answer {method} {path} within {}",
                    programs::MODEL,
                    self.socket.display(),
                    crate::text::duration(deadline)
                ),
            )),
        }
    }
}

/// The error of a refused request. Its code is the service's
/// ([`crate::model::ERROR_CODE_HEADER`], else its body's `code`) where it says what happened
/// beyond the request: the remote's refusal (`upstream`, `rate_limited` for its 429, `timeout`
/// and `unavailable` for its 504 and 503), a deadline, a service that is down; so a turn's
/// client gets the remote's 429 as a 429 and its other refusals as a 502, the request being
/// Link's, not the client's. Anything else is this caller's fault, so `internal`.
fn refusal(resp: &crate::http::HttpResponse, json: &Value) -> RemoteError {
    let (status, raw) = (resp.status, &resp.body);
    let detail = json["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(raw).into_owned());
    let named = resp
        .headers
        .get(crate::model::ERROR_CODE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|c| Value::String(c.to_owned()))
        .unwrap_or_else(|| json["error"]["code"].clone());
    let said: Option<ErrorCode> = serde_json::from_value(named).ok();
    let code = match said {
        Some(
            c @ (ErrorCode::Upstream
            | ErrorCode::RateLimited
            | ErrorCode::Timeout
            | ErrorCode::Unavailable),
        ) => c,
        _ if status >= 500 => ErrorCode::Unavailable,
        _ => ErrorCode::Internal,
    };
    RemoteError::new(
        code,
        format!("{} answered HTTP {status}: {detail}", programs::MODEL),
    )
    .retry_after(crate::http::retry_after(&resp.headers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A service that accepts and never answers, as a stopped one (SIGSTOP) does: the
    /// kernel still queues connections on its socket.
    #[tokio::test]
    async fn a_silent_service_is_a_timeout_naming_it_and_its_deadline() {
        let dir = std::env::temp_dir().join(format!("lnk-model-silent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("model.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let service = ModelService {
            deadline: Duration::from_millis(300),
            ..ModelService::new(socket)
        };
        let e = service
            .complete(&json!({"model": LOCAL, "messages": []}))
            .await
            .unwrap_err();
        drop(listener);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(e.code, ErrorCode::Timeout, "{e}");
        assert!(
            e.message.contains(programs::MODEL) && e.message.contains("300 ms"),
            "{e}"
        );
    }

    /// An answer of the service: `status`, `code` in the header when given, `body`.
    fn answered(status: u16, code: Option<&str>, body: &[u8]) -> RemoteError {
        let mut headers = hyper::HeaderMap::new();
        if let Some(code) = code {
            headers.insert(crate::model::ERROR_CODE_HEADER, code.parse().unwrap());
        }
        let resp = crate::http::HttpResponse {
            status,
            headers,
            body: body.to_vec(),
        };
        refusal(&resp, &resp.json())
    }

    #[test]
    fn the_remotes_refusals_keep_their_code_and_others_are_internal() {
        let upstream = answered(
            502,
            None,
            br#"{"error": {"code": "upstream", "message": "remote said no"}}"#,
        );
        assert_eq!(upstream.code, ErrorCode::Upstream);
        assert!(
            upstream.message.contains("HTTP 502: remote said no"),
            "{upstream}"
        );
        let late = answered(
            504,
            None,
            br#"{"error": {"code": "timeout", "message": "m"}}"#,
        );
        assert_eq!(late.code, ErrorCode::Timeout);
        let ours = answered(
            400,
            None,
            br#"{"error": {"code": "bad_request", "message": "m"}}"#,
        );
        assert_eq!(ours.code, ErrorCode::Internal);
        let raw = answered(500, None, b"oops");
        assert_eq!(raw.code, ErrorCode::Unavailable);
        assert!(raw.message.ends_with("oops"), "{raw}");
        // A remote's refusal keeps the remote's own `code` in the body; the header is Link's.
        let theirs = br#"{"error": {"code": "rate_limit_exceeded", "message": "slow down"}}"#;
        let limited = answered(429, Some("rate_limited"), theirs);
        assert_eq!(limited.code, ErrorCode::RateLimited);
        assert_eq!(limited.code.http_status(), 429);
        let theirs = br#"{"error": {"code": "bad_request", "message": "context too long"}}"#;
        let refused = answered(400, Some("upstream"), theirs);
        assert_eq!(refused.code, ErrorCode::Upstream, "the remote's, not ours");
    }
}
