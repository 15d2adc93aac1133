//! link-plugin-auth: client bearer tokens for full Link.
//!
//! It owns the routes `auth.issue` `{}` → `{token}`, `auth.verify` `{token}` → `{valid}` and
//! `auth.revoke` `{token}` → `{revoked}` over the shared token store
//! (`link_protocol::tokens`, at `<state>/auth/tokens`), where only sha256 hashes are written.
//! A token is returned once by `auth.issue` and never logged. Only its parent (the host's
//! router) may connect.

use link_protocol::routes::auth::{Issue, Revoke, Revoked, TokenBody, Valid, Verify};
use link_protocol::routes::{Empty, Route};
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{tokens, RemoteError};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Tokens are `lnk_` + 64 hex digits; anything much longer is not one of ours.
const MAX_TOKEN: usize = 256;

struct Auth {
    file: PathBuf,
    /// Serialises read-modify-write of the store within this process.
    lock: Mutex<()>,
}

impl Auth {
    async fn issue(self: Arc<Self>, _: Call, _: Empty) -> Result<TokenBody, RemoteError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let token = tokens::create(&self.file).map_err(|e| self.store_error(e))?;
        tracing::info!("issued a token");
        Ok(TokenBody { token })
    }

    async fn verify(self: Arc<Self>, _: Call, body: TokenBody) -> Result<Valid, RemoteError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let token = checked::<Verify>(&body)?;
        let valid = tokens::verify(&self.file, token).map_err(|e| self.store_error(e))?;
        Ok(Valid { valid })
    }

    async fn revoke(self: Arc<Self>, _: Call, body: TokenBody) -> Result<Revoked, RemoteError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let token = checked::<Revoke>(&body)?;
        let revoked = tokens::revoke(&self.file, token).map_err(|e| self.store_error(e))?;
        tracing::info!(revoked, "revoke requested");
        Ok(Revoked { revoked })
    }

    fn store_error(&self, e: std::io::Error) -> RemoteError {
        tracing::error!("token store {}: {e}", self.file.display());
        RemoteError::internal(format!("token store {}: {e}", self.file.display()))
    }
}

/// The token of a body, checked for length; errors never repeat the value.
fn checked<R: Route>(body: &TokenBody) -> Result<&str, RemoteError> {
    let token = body.token.as_str();
    if token.is_empty() || token.len() > MAX_TOKEN {
        return Err(RemoteError::bad_request(format!(
            "{}: `token` must be 1 to {MAX_TOKEN} bytes",
            R::NAME
        )));
    }
    Ok(token)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let auth = Arc::new(Auth {
        file: env.layout().tokens_file(),
        lock: Mutex::new(()),
    });
    tracing::info!("token store at {}", auth.file.display());
    let service = Service::new(auth)
        .on::<Issue, _, _>(Auth::issue)
        .on::<Verify, _, _>(Auth::verify)
        .on::<Revoke, _, _>(Auth::revoke);
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}
