//! The one client of the model service (`link-plugin-model`, OpenAI-compatible HTTP on its
//! Unix socket), which both turn engines and full Link's agent registry use: whether a model is
//! served ([`ModelService::check`]) and its chat completions. The model's name is
//! [`crate::model::Model`].

use crate::model::{Model, LOCAL};
use crate::routes::programs;
use crate::{ErrorCode, RemoteError};
use serde_json::Value;
use std::path::PathBuf;

/// The model service on its socket, as a granted caller reaches it.
#[derive(Debug, Clone)]
pub struct ModelService {
    socket: PathBuf,
}

impl ModelService {
    pub fn new(socket: PathBuf) -> ModelService {
        ModelService { socket }
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// One chat completion → the whole completion object. A refusal keeps the service's
    /// code where it says what happened beyond the request (the remote's error, its
    /// deadline, a service that is down); anything else is this caller's fault, so
    /// `internal`.
    pub async fn complete(&self, body: &Value) -> Result<Value, RemoteError> {
        let resp = self
            .call("POST", "/v1/chat/completions", Some(body))
            .await?;
        let json = resp.json();
        if resp.status == 200 {
            return Ok(json);
        }
        Err(refusal(resp.status, &json, &resp.body))
    }

    /// The models the service answers: [`LOCAL`], then the remote's, when it forwards.
    pub async fn served(&self) -> Result<Vec<String>, RemoteError> {
        let resp = self.call("GET", "/v1/models", None).await?;
        let json = resp.json();
        if resp.status != 200 {
            return Err(refusal(resp.status, &json, &resp.body));
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

    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<crate::http::HttpResponse, RemoteError> {
        crate::http::json(&self.socket, method, path, None, body)
            .await
            .map_err(|e| {
                RemoteError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "{} is unavailable at {}: {e}",
                        programs::MODEL,
                        self.socket.display()
                    ),
                )
            })
    }
}

/// The error of a refused request, from the service's error body.
fn refusal(status: u16, json: &Value, raw: &[u8]) -> RemoteError {
    let detail = json["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(raw).into_owned());
    let said: Option<ErrorCode> = serde_json::from_value(json["error"]["code"].clone()).ok();
    let code = match said {
        Some(c @ (ErrorCode::Upstream | ErrorCode::Timeout | ErrorCode::Unavailable)) => c,
        _ if status >= 500 => ErrorCode::Unavailable,
        _ => ErrorCode::Internal,
    };
    RemoteError::new(
        code,
        format!("{} answered HTTP {status}: {detail}", programs::MODEL),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_remotes_refusals_keep_their_code_and_others_are_internal() {
        let upstream = refusal(
            401,
            &json!({"error": {"code": "upstream", "message": "remote said no"}}),
            b"",
        );
        assert_eq!(upstream.code, ErrorCode::Upstream);
        assert!(
            upstream.message.contains("HTTP 401: remote said no"),
            "{upstream}"
        );
        let late = refusal(
            504,
            &json!({"error": {"code": "timeout", "message": "m"}}),
            b"",
        );
        assert_eq!(late.code, ErrorCode::Timeout);
        let ours = refusal(
            400,
            &json!({"error": {"code": "bad_request", "message": "m"}}),
            b"",
        );
        assert_eq!(ours.code, ErrorCode::Internal);
        let raw = refusal(500, &Value::Null, b"oops");
        assert_eq!(raw.code, ErrorCode::Unavailable);
        assert!(raw.message.ends_with("oops"), "{raw}");
    }
}
