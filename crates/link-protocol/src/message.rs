//! Requests, responses and typed errors.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::AgentId;

/// One call of a route. `caller` is written by the host's router only; a value sent by a
/// plugin is overwritten with the identity the router confirmed from the socket.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Request {
    pub id: u64,
    pub route: String,
    /// The agent this call acts for, if any: a valid id by construction, since a request
    /// whose `agent` breaks the rule does not parse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    #[serde(default)]
    pub body: Value,
    /// When the caller stops waiting: set by the host's router from the route's deadline. A
    /// request that reaches its owner after it is answered `timeout` and not done
    /// (`server::serve_connection`), so the caller, told it timed out, is not proven wrong
    /// by an effect that comes later (a turn stored after its client got 504).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<NotAfter>,
    /// The router's number for this call, as forwarded to its owner: the calls the owner
    /// makes while answering it carry it as their [`Request::parent`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<u64>,
    /// The router's number of the call its sender was answering when it made this one
    /// (`server::current_call`): so a timeout is blamed along the chain of one request, not
    /// on whatever else the same plugin was waiting for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
}

/// A moment on [`crate::clock::monotonic_ms`], in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NotAfter(pub u64);

#[cfg(feature = "runtime")]
impl NotAfter {
    /// `deadline` from now.
    pub fn within(deadline: std::time::Duration) -> NotAfter {
        let ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
        NotAfter(crate::clock::monotonic_ms().saturating_add(ms))
    }

    /// True once the moment is past.
    pub fn passed(self) -> bool {
        crate::clock::monotonic_ms() > self.0
    }
}

/// The answer to the request with the same `id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    pub id: u64,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Either a result or a typed error.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok(Value),
    Error(RemoteError),
}

/// The error kinds every process agrees on. HTTP statuses follow from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadRequest,
    Unauthorized,
    /// The caller lacks the grant for the route, or acts for an agent it may not.
    Forbidden,
    /// The target is protected (for example a conversation log) whoever asks.
    Protected,
    NotFound,
    Conflict,
    TooLarge,
    /// A dependency is not running or a capability is missing.
    Unavailable,
    Timeout,
    /// The disk (or quota) holding the state root is full: nothing was stored.
    InsufficientStorage,
    Internal,
    /// The remote model a request was forwarded to answered with an error; the message names
    /// the remote, its status and its message.
    Upstream,
    /// The remote model a request was forwarded to refused it for its rate limit or quota
    /// (its `429`), so the client may retry later; the message names the remote and says what
    /// it said. Its own code, not [`ErrorCode::Upstream`]'s 502: a client backs off on a 429.
    RateLimited,
}

impl ErrorCode {
    /// The HTTP status the connection services answer with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden | ErrorCode::Protected => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::Unavailable => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::InsufficientStorage => 507,
            ErrorCode::Internal => 500,
            ErrorCode::Upstream => 502,
            ErrorCode::RateLimited => 429,
        }
    }

    /// The snake_case name used in JSON error bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Protected => "protected",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::InsufficientStorage => "insufficient_storage",
            ErrorCode::Internal => "internal",
            ErrorCode::Upstream => "upstream",
            ErrorCode::RateLimited => "rate_limited",
        }
    }
}

/// True when an I/O error means the disk or the user's quota is full (ENOSPC, EDQUOT).
pub fn is_storage_full(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(e.kind(), ErrorKind::StorageFull | ErrorKind::QuotaExceeded)
        || matches!(e.raw_os_error(), Some(28) | Some(122))
}

/// A typed error travelling over the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct RemoteError {
    pub code: ErrorCode,
    pub message: String,
    /// How many seconds whoever refused asked the client to wait before trying again (a
    /// remote model's `Retry-After` on its 429 or 503), passed on as the client's own
    /// `Retry-After` ([`crate::http::retry_after`], [`crate::http::set_retry_after`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
}

impl RemoteError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RemoteError {
            code,
            message: message.into(),
            retry_after_secs: None,
        }
    }
    /// This error, asking the client to wait `secs` before trying again (when given).
    pub fn retry_after(mut self, secs: Option<u64>) -> Self {
        self.retry_after_secs = secs;
        self
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
    /// A request of an agent whose files cannot be read, in either runtime (Mini's harness,
    /// full Link's registry): `internal`, naming the agent, `why` (which file and what is
    /// wrong with it) and what the user does. The damage is the agent's alone.
    pub fn damaged_agent(id: &str, why: impl std::fmt::Display) -> Self {
        Self::internal(format!(
            "agent {id} is damaged: {why}. Fix or move aside its files and restart, or delete \
             the agent"
        ))
    }
    /// A write the disk (or a quota) refused, naming the state root that holds it and what
    /// the user does about it; `detail` says what could not be written.
    pub fn insufficient_storage(
        state_root: &std::path::Path,
        detail: impl std::fmt::Display,
    ) -> Self {
        Self::storage_full(
            state_root,
            detail,
            "nothing was stored. Free space and send the message again",
        )
    }

    /// As [`RemoteError::insufficient_storage`], for a write refused after others of the
    /// same request were stored: `kept` says what was, and what the user does now.
    pub fn storage_full(
        state_root: &std::path::Path,
        detail: impl std::fmt::Display,
        kept: impl std::fmt::Display,
    ) -> Self {
        Self::new(
            ErrorCode::InsufficientStorage,
            format!(
                "the disk holding {} is full: {detail}; {kept}",
                state_root.display()
            ),
        )
    }

    /// The `{"error": {"code", "message"}}` body of the HTTP contract.
    pub fn to_http_body(&self) -> Value {
        serde_json::json!({"error": {"code": self.code.as_str(), "message": self.message}})
    }
}

impl From<crate::Error> for RemoteError {
    fn from(e: crate::Error) -> Self {
        match e {
            crate::Error::Remote(r) => r,
            other => RemoteError::new(ErrorCode::Unavailable, other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_507_insufficient_storage_naming_the_state_root() {
        let code = ErrorCode::InsufficientStorage;
        assert_eq!(code.http_status(), 507);
        assert_eq!(serde_json::to_value(code).unwrap(), "insufficient_storage");
        assert_eq!(code.as_str(), "insufficient_storage");
        let e = RemoteError::insufficient_storage(std::path::Path::new("/s/state"), "log: ENOSPC");
        assert_eq!(e.code, code);
        assert!(e
            .message
            .starts_with("the disk holding /s/state is full: log: ENOSPC"));
        assert!(is_storage_full(&std::io::Error::from_raw_os_error(28)));
        assert!(is_storage_full(&std::io::Error::from_raw_os_error(122)));
        assert!(is_storage_full(&std::io::ErrorKind::StorageFull.into()));
        assert!(!is_storage_full(&std::io::Error::from_raw_os_error(5)));
    }
}
