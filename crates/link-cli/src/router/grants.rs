//! What each caller may call: its grants and the secrets it may name, from the manifest.
//!
//! Apart from the router's table: which routes a holder may call is fixed by the manifest
//! when Link is built, whatever is running.

use link_protocol::manifest::{self, Plugin};
use link_protocol::routes::{self as r, Route, RouteInfo};
use serde_json::Value;

/// Who calls through the router, as a holder of grants: the host itself (its HTTP endpoint,
/// the model key) or a plugin it started. What each may call is its manifest entry's
/// (`manifest::HOST`, a [`Plugin`]). Not `crate::caller::Caller`, who connected to the
/// control socket.
#[derive(Debug, Clone, Copy)]
pub enum Grantee {
    Host,
    Plugin(&'static Plugin),
}

/// The host itself, as a caller (its HTTP endpoint).
pub const HOST: Grantee = Grantee::Host;

impl Grantee {
    /// Its name in the requests it makes (`Request::caller`).
    pub fn name(self) -> &'static str {
        match self {
            Grantee::Host => manifest::HOST.caller,
            Grantee::Plugin(p) => p.program,
        }
    }

    fn grants(self) -> &'static [RouteInfo] {
        match self {
            Grantee::Host => manifest::HOST.grants,
            Grantee::Plugin(p) => p.grants,
        }
    }

    fn secrets(self) -> &'static [&'static str] {
        match self {
            Grantee::Host => manifest::HOST.secrets,
            Grantee::Plugin(p) => p.secrets,
        }
    }

    /// Whether it acts only for the agent of a call in flight to it (`Plugin::leased`).
    pub(super) fn leased(self) -> bool {
        matches!(self, Grantee::Plugin(p) if p.leased)
    }

    /// Whether its turns must be due firings of its schedules (`Plugin::scheduled`).
    pub(super) fn scheduled(self) -> bool {
        matches!(self, Grantee::Plugin(p) if p.scheduled)
    }
}

/// True when `route` is a `secret.*` route and `caller` may not name the secret in `body`:
/// only the names its manifest entry lists are reachable.
pub(super) fn secret_refused(caller: Grantee, route: &str, body: &Value) -> bool {
    let secret_routes = [
        r::secret::Get::NAME,
        r::secret::Put::NAME,
        r::secret::Delete::NAME,
    ];
    if !secret_routes.contains(&route) {
        return false;
    }
    let name = body.get("name").and_then(Value::as_str).unwrap_or_default();
    !caller.secrets().contains(&name)
}

/// True when `caller` holds the grant for `route`. Everything not granted is refused.
pub fn allowed(caller: Grantee, route: &str) -> bool {
    caller.grants().iter().any(|g| g.name == route)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(p: &'static Plugin) -> Grantee {
        Grantee::Plugin(p)
    }

    #[test]
    fn grants_are_exact() {
        assert!(allowed(plugin(&manifest::HARNESS), r::tool::Run::NAME));
        assert!(!allowed(
            plugin(&manifest::FILE_TOOL),
            r::store::ConversationAppend::NAME
        ));
        assert!(!allowed(plugin(&manifest::RUN), r::tool::Run::NAME));
        assert!(!allowed(plugin(&manifest::AUTH), r::agent::Get::NAME));
    }

    #[test]
    fn each_secret_is_reachable_only_by_its_holders() {
        use serde_json::json;
        let key = json!({"name": r::secret::MODEL_REMOTE_KEY});
        let other = json!({"name": "other"});
        let (model, harness) = (plugin(&manifest::MODEL), plugin(&manifest::HARNESS));
        assert!(!secret_refused(model, r::secret::Get::NAME, &key));
        assert!(secret_refused(model, r::secret::Get::NAME, &other));
        assert!(secret_refused(model, r::secret::Get::NAME, &json!({})));
        assert!(!secret_refused(HOST, r::secret::Put::NAME, &key));
        assert!(secret_refused(harness, r::secret::Get::NAME, &key));
        assert!(!secret_refused(harness, r::agent::Get::NAME, &other));
        // Only the model reads, only the host writes.
        assert!(allowed(model, r::secret::Get::NAME));
        assert!(!allowed(model, r::secret::Put::NAME));
        assert!(!allowed(HOST, r::secret::Get::NAME));
    }
}
