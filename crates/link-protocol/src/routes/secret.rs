//! Named secrets (file or keychain backend).

use super::{programs, route, Empty};
use serde::{Deserialize, Serialize};

/// The remote model's bearer key: stored by the host for `link model-key set`, read by the
/// model when it forwards. The router lets no other caller name it (`manifest::Plugin::secrets`).
pub const MODEL_REMOTE_KEY: &str = "model.remote-key";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Name {
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutBody {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SecretValue {
    pub value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: bool,
}

route!(redacted Get = "secret.get", owner programs::SECRET, for_agent false, Name => SecretValue);
route!(redacted Put = "secret.put", owner programs::SECRET, for_agent false, PutBody => Empty);
route!(redacted Delete = "secret.delete", owner programs::SECRET, for_agent false, Name => Deleted);
