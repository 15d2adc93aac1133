//! Every error this service answers with: an HTTP status, OpenAI's error body for OpenAI
//! clients, and Link's [`ErrorCode`] in [`ERROR_CODE_HEADER`] for Link's own callers
//! (`link_protocol::model_service`). The three usually agree; a remote's refusal is where
//! they part: its status passes through when a client can act on it, its body keeps the
//! remote's own `type`, `param` and `code`, and the header says what it is to Link
//! ([`crate::forward::Remote::refusal`]).

use axum::http::{header::HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use link_protocol::model::{openai_error_body, ERROR_CODE_HEADER};
use link_protocol::{ErrorCode, RemoteError};
use serde_json::Value;

/// One error answer.
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    /// What the error is to Link's own callers.
    pub code: ErrorCode,
    /// `{"error": {"message", "type", "param", "code"}}`.
    pub body: Value,
    /// The `Retry-After` (seconds) to answer with: the remote's, passed on.
    pub retry_after_secs: Option<u64>,
}

impl Refusal {
    /// `e`, naming the request parameter at fault (OpenAI's `param`).
    pub fn with_param(e: &RemoteError, param: &str) -> Refusal {
        Refusal {
            status: status_of(e.code),
            code: e.code,
            body: openai_error_body(e, Some(param)),
            retry_after_secs: e.retry_after_secs,
        }
    }
}

fn status_of(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The service's own errors: the code's status, and the code as the body's.
impl From<RemoteError> for Refusal {
    fn from(e: RemoteError) -> Refusal {
        Refusal {
            status: status_of(e.code),
            code: e.code,
            body: openai_error_body(&e, None),
            retry_after_secs: e.retry_after_secs,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let code = HeaderValue::from_static(self.code.as_str());
        let mut response =
            (self.status, [(ERROR_CODE_HEADER, code)], Json(self.body)).into_response();
        link_protocol::http::set_retry_after(response.headers_mut(), self.retry_after_secs);
        response
    }
}
