//! The model an agent runs on. The one client of the model service (`link-plugin-model`,
//! OpenAI-compatible HTTP on its Unix socket) that both turn engines and full Link's agent
//! registry use is [`crate::model_service`].
//!
//! An agent's model is chosen when it is created (`POST /v1/agents {"name", "model"}`), else
//! the runtime's default (`link up --model`, else [`LOCAL`]), and every turn of the agent asks
//! the model service for it. The service answers [`LOCAL`] itself and forwards any other model
//! to the remote (`LNK_MODEL_REMOTE_URL`), so a model is served when it is [`LOCAL`] or in the
//! remote's `/v1/models` (`model_service::ModelService::check`).

use crate::{ErrorCode, RemoteError};
use serde::{Deserialize, Serialize};

/// The built-in deterministic model (DESIGN.md §5), always served.
pub const LOCAL: &str = "link-local";

/// Longest model name accepted; real ones ("meta-llama/Llama-3.1-8B-Instruct") are far shorter.
pub const MAX_NAME: usize = 256;

/// A model's name as the model service knows it: [`LOCAL`] or a remote's model id. Printable
/// ASCII without spaces, at most [`MAX_NAME`] bytes; checked once, where a name enters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Model(String);

/// Why a string is not a [`Model`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a model name: use 1 to {MAX_NAME} printable ASCII characters without spaces (for example `link-local`)")]
pub struct InvalidModel(pub String);

impl Model {
    /// [`LOCAL`].
    pub fn local() -> Model {
        Model(LOCAL.to_owned())
    }

    pub fn parse(name: impl Into<String>) -> Result<Model, InvalidModel> {
        let name = name.into();
        let ok = !name.is_empty()
            && name.len() <= MAX_NAME
            && name.bytes().all(|b| b.is_ascii_graphic());
        if ok {
            Ok(Model(name))
        } else {
            Err(InvalidModel(name))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the model service answers this model itself (no remote involved).
    pub fn is_local(&self) -> bool {
        self.0 == LOCAL
    }
}

impl Default for Model {
    fn default() -> Model {
        Model::local()
    }
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Model {
    type Err = InvalidModel;
    fn from_str(s: &str) -> Result<Model, InvalidModel> {
        Model::parse(s)
    }
}

impl TryFrom<String> for Model {
    type Error = InvalidModel;
    fn try_from(s: String) -> Result<Model, InvalidModel> {
        Model::parse(s)
    }
}

impl From<Model> for String {
    fn from(m: Model) -> String {
        m.0
    }
}

impl From<InvalidModel> for RemoteError {
    fn from(e: InvalidModel) -> RemoteError {
        RemoteError::bad_request(e.to_string())
    }
}

/// OpenAI's error `type` for a code, so an OpenAI client reads the model service's errors as
/// it reads OpenAI's.
pub fn openai_error_type(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::BadRequest | ErrorCode::NotFound | ErrorCode::TooLarge => {
            "invalid_request_error"
        }
        ErrorCode::Unauthorized => "authentication_error",
        ErrorCode::Forbidden | ErrorCode::Protected => "permission_error",
        ErrorCode::Conflict => "conflict_error",
        ErrorCode::Timeout => "timeout_error",
        ErrorCode::Upstream => "upstream_error",
        ErrorCode::RateLimited => "rate_limit_error",
        ErrorCode::Unavailable | ErrorCode::InsufficientStorage | ErrorCode::Internal => {
            "server_error"
        }
    }
}

/// The header on every error answer of the model service naming its [`ErrorCode`], for
/// Link's own callers (`model_service::ModelService`). The body is for OpenAI clients: it
/// keeps a remote's own `type`, `param` and `code` when the error is the remote's, so its
/// `code` is not always Link's; this header always is, and tells the service's own refusals
/// (the caller's fault) from a remote's.
pub const ERROR_CODE_HEADER: &str = "link-error-code";

/// The model service's error body, in OpenAI's shape: `{"error": {"message", "type",
/// "param", "code"}}`, `code` being Link's [`ErrorCode`] and `param` the request field at
/// fault, if one is.
pub fn openai_error_body(e: &RemoteError, param: Option<&str>) -> serde_json::Value {
    serde_json::json!({"error": {
        "message": e.message,
        "type": openai_error_type(e.code),
        "param": param,
        "code": e.code.as_str(),
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_are_checked_once() {
        assert!(Model::parse(LOCAL).unwrap().is_local());
        for good in ["gpt-4o", "meta-llama/Llama-3.1-8B", "llama3:8b"] {
            assert_eq!(Model::parse(good).unwrap().as_str(), good);
        }
        for bad in ["", "two words", "tab\t", "é", &"m".repeat(MAX_NAME + 1)] {
            assert!(Model::parse(bad).is_err(), "{bad:?}");
        }
        let m: Result<Model, _> = serde_json::from_str("\"a b\"");
        assert!(m.unwrap_err().to_string().contains("not a model name"));
        assert_eq!(
            serde_json::to_string(&Model::local()).unwrap(),
            "\"link-local\""
        );
    }

    #[test]
    fn errors_read_as_openai_errors() {
        let e = RemoteError::bad_request("`n` is not supported");
        let body = openai_error_body(&e, Some("n"));
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["param"], "n");
        assert_eq!(body["error"]["code"], "bad_request");
        assert_eq!(body["error"]["message"], "`n` is not supported");
    }
}
