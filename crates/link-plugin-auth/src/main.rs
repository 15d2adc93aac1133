//! link-plugin-auth: client bearer tokens for full Link.
//!
//! It owns the routes `auth.issue` `{}` → `{token}`, `auth.verify` `{token}` → `{valid}` and
//! `auth.revoke` `{token}` → `{revoked}` over the shared token store
//! (`link_protocol::tokens`, at `<state>/auth/tokens`), where only sha256 hashes are written.
//! A token is returned once by `auth.issue` and never logged. Only its parent (the host's
//! router) may connect.

use link_protocol::plugin::PluginEnv;
use link_protocol::server::Peers;
use link_protocol::{routes, tokens, RemoteError, Request};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Mutex;

/// Tokens are `lnk_` + 64 hex digits; anything much longer is not one of ours.
const MAX_TOKEN: usize = 256;

struct Auth {
    file: PathBuf,
    /// Serialises read-modify-write of the store within this process.
    lock: Mutex<()>,
}

impl Auth {
    fn handle(&self, req: &Request) -> Result<Value, RemoteError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        match req.route.as_str() {
            routes::AUTH_ISSUE => {
                let token = tokens::create(&self.file).map_err(|e| self.store_error(e))?;
                tracing::info!("issued a token");
                Ok(json!({ "token": token }))
            }
            routes::AUTH_VERIFY => {
                let valid =
                    tokens::verify(&self.file, token(req)?).map_err(|e| self.store_error(e))?;
                Ok(json!({ "valid": valid }))
            }
            routes::AUTH_REVOKE => {
                let revoked =
                    tokens::revoke(&self.file, token(req)?).map_err(|e| self.store_error(e))?;
                tracing::info!(revoked, "revoke requested");
                Ok(json!({ "revoked": revoked }))
            }
            other => Err(RemoteError::not_found(format!(
                "route {other} is not served by link-plugin-auth"
            ))),
        }
    }

    fn store_error(&self, e: std::io::Error) -> RemoteError {
        tracing::error!("token store {}: {e}", self.file.display());
        RemoteError::internal(format!("token store {}: {e}", self.file.display()))
    }
}

/// The `token` field; errors never repeat the value.
fn token(req: &Request) -> Result<&str, RemoteError> {
    let token = req.body["token"].as_str().ok_or_else(|| {
        RemoteError::bad_request(format!("{} needs `token` (a string)", req.route))
    })?;
    if token.is_empty() || token.len() > MAX_TOKEN {
        return Err(RemoteError::bad_request(format!(
            "{}: `token` must be 1 to {MAX_TOKEN} bytes",
            req.route
        )));
    }
    Ok(token)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let auth = std::sync::Arc::new(Auth {
        file: env.layout().tokens_file(),
        lock: Mutex::new(()),
    });
    tracing::info!("token store at {}", auth.file.display());
    let handler = link_protocol::server::handler(move |req| {
        let auth = auth.clone();
        async move { auth.handle(&req) }
    });
    let routes = [routes::AUTH_ISSUE, routes::AUTH_VERIFY, routes::AUTH_REVOKE];
    link_protocol::plugin::serve_plugin(&env, &routes, Peers::Parent, handler).await?;
    Ok(())
}
