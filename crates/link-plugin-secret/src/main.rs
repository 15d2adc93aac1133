//! link-plugin-secret: named secrets for full Link.
//!
//! It owns the routes `secret.get` `{name}` → `{value}`, `secret.put` `{name, value}` → `{}`
//! and `secret.delete` `{name}` → `{deleted}`, over one of two backends chosen at start:
//! - `keychain` ([`keychain`]): the desktop Secret Service, only where `secret-tool` is
//!   installed, a session bus is set and a lookup answers within 2 s;
//! - `file` ([`file`](mod@file)): one 0600 file per secret under `<data>/secrets/`, written atomically.
//!
//! `LNK_KEYCHAIN=off` forces `file` (tests and the runtime runner set it). The backend in use
//! is named in the start-up log line. Secret values never appear in logs or error messages.
//! Only its parent (the host's router) may connect.

mod file;
mod keychain;

use file::FileStore;
use keychain::Keychain;
use link_protocol::plugin::PluginEnv;
use link_protocol::routes::secret::{Delete, Deleted, Get, Name, Put, PutBody, SecretValue};
use link_protocol::routes::{Empty, Route};
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{ErrorCode, RemoteError};
use std::sync::Arc;

/// Largest value accepted by the file backend.
const MAX_VALUE: usize = 64 * 1024;
const MAX_NAME: usize = 64;

enum Backend {
    File(FileStore),
    Keychain(Keychain),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::File(_) => "file",
            Backend::Keychain(_) => "keychain",
        }
    }

    fn max_value(&self) -> usize {
        match self {
            Backend::File(_) => MAX_VALUE,
            Backend::Keychain(_) => keychain::MAX_VALUE,
        }
    }

    async fn serve_get(self: Arc<Self>, _: Call, body: Name) -> Result<SecretValue, RemoteError> {
        let name = name::<Get>(&body.name)?;
        match self.get(name).await? {
            Some(value) => Ok(SecretValue { value }),
            None => Err(RemoteError::not_found(format!("no secret named `{name}`"))),
        }
    }

    async fn serve_put(self: Arc<Self>, _: Call, body: PutBody) -> Result<Empty, RemoteError> {
        let name = name::<Put>(&body.name)?;
        let value = value(&body.value, self.max_value())?;
        self.put(name, value).await?;
        tracing::debug!("stored secret `{name}`");
        Ok(Empty {})
    }

    async fn serve_delete(self: Arc<Self>, _: Call, body: Name) -> Result<Deleted, RemoteError> {
        let name = name::<Delete>(&body.name)?;
        let deleted = self.delete(name).await?;
        tracing::debug!(deleted, "deleted secret `{name}`");
        Ok(Deleted { deleted })
    }

    async fn get(&self, name: &str) -> Result<Option<String>, RemoteError> {
        match self {
            Backend::File(f) => f.get(name).map_err(|e| failed("read", name, e)),
            Backend::Keychain(k) => k.get(name).await.map_err(|e| failed("read", name, e)),
        }
    }

    async fn put(&self, name: &str, value: &str) -> Result<(), RemoteError> {
        match self {
            Backend::File(f) => f.put(name, value).map_err(|e| failed("write", name, e)),
            Backend::Keychain(k) => k
                .put(name, value)
                .await
                .map_err(|e| failed("write", name, e)),
        }
    }

    async fn delete(&self, name: &str) -> Result<bool, RemoteError> {
        match self {
            Backend::File(f) => f.delete(name).map_err(|e| failed("delete", name, e)),
            Backend::Keychain(k) => k.delete(name).await.map_err(|e| failed("delete", name, e)),
        }
    }
}

/// A backend failure; `why` comes from the OS or secret-tool and never holds the value.
fn failed(what: &str, name: &str, why: impl std::fmt::Display) -> RemoteError {
    tracing::error!("cannot {what} secret `{name}`: {why}");
    RemoteError::internal(format!("cannot {what} secret `{name}`: {why}"))
}

/// The validated `name` field: `[A-Za-z0-9._-]{1,64}`, and not `.` or `..`.
fn name<R: Route>(name: &str) -> Result<&str, RemoteError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    let ok = (1..=MAX_NAME).contains(&name.len())
        && name.bytes().all(allowed)
        && name != "."
        && name != "..";
    if ok {
        Ok(name)
    } else {
        // The refused name is not echoed: a caller may have put a secret in the wrong field.
        Err(RemoteError::bad_request(format!(
            "{}: invalid secret name; use 1-{MAX_NAME} of A-Z, a-z, 0-9, '.', '_', '-' \
             (not `.` or `..`)",
            R::NAME
        )))
    }
}

/// The `value` field of `secret.put`; errors never repeat it.
fn value(value: &str, max: usize) -> Result<&str, RemoteError> {
    if value.len() > max {
        return Err(RemoteError::new(
            ErrorCode::TooLarge,
            format!("secret.put: value is over the {max} byte limit of this backend"),
        ));
    }
    Ok(value)
}

/// Picks the backend and says why, for the start-up log line.
async fn choose(env: &PluginEnv) -> anyhow::Result<(Backend, String)> {
    use link_protocol::manifest::{ENV_KEYCHAIN, KEYCHAIN_OFF};
    let why_file = if std::env::var(ENV_KEYCHAIN).is_ok_and(|v| v == KEYCHAIN_OFF) {
        format!("{ENV_KEYCHAIN}={KEYCHAIN_OFF}")
    } else {
        match Keychain::probe(&env.state).await {
            Ok(k) => return Ok((Backend::Keychain(k), "the Secret Service answered".into())),
            Err(why) => format!("no keychain: {why}"),
        }
    };
    let dir = env.data.join("secrets");
    let store = FileStore::open(dir.clone())
        .map_err(|e| anyhow::anyhow!("cannot prepare {}: {e}", dir.display()))?;
    Ok((Backend::File(store), why_file))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let (backend, why) = choose(&env).await?;
    match &backend {
        Backend::File(f) => tracing::info!(
            backend = backend.name(),
            "ready: secrets in {} ({why})",
            f.dir().display()
        ),
        Backend::Keychain(_) => tracing::info!(backend = backend.name(), "ready: {why}"),
    }
    let backend = Arc::new(backend);
    let service = Service::new(backend)
        .on::<Get, _, _>(Backend::serve_get)
        .on::<Put, _, _>(Backend::serve_put)
        .on::<Delete, _, _>(Backend::serve_delete);
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}
