//! Every internal route, defined once: its name, its owner, whether it acts for an agent, and
//! the types of its body and its reply (in the spirit of lsp-types' `Request` trait).
//!
//! Callers use `Client::request` / `Pool::request` (module `client`) with a route type;
//! owners register a handler per route type on a `server::Service`, which also yields the
//! ready line's route list. No body is built or picked apart by hand. Who may call which
//! route is each caller's entry in [`crate::manifest`], checked against [`ALL`] by its tests
//! and enforced by the host's router (`link-cli`).
//!
//! `agent` is [`Request::agent`](crate::Request), never a body field.

pub mod agent;
pub mod auth;
pub mod host;
pub mod sandbox;
pub mod schedule;
pub mod secret;
pub mod store;
pub mod tool;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// One route: the types every caller and its owner share.
pub trait Route: 'static {
    /// The name on the wire.
    const NAME: &'static str;
    /// The plugin program that serves it in full Link ([`programs`]); `link` for the host's
    /// own routes on `run/host.sock`.
    const OWNER: &'static str;
    /// True when a call needs `Request::agent`; the owner's [`Service`](crate::server::Service)
    /// refuses a call without one before the handler runs.
    const FOR_AGENT: bool;
    /// True when a body may hold a secret: a body that does not parse is then refused
    /// without serde's message, which can quote the value.
    const REDACT: bool = false;
    type Body: Serialize + DeserializeOwned + Send + Sync + 'static;
    type Reply: Serialize + DeserializeOwned + Send + Sync + 'static;
}

/// A route's name, owner and agent rule, for tables and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteInfo {
    pub name: &'static str,
    pub owner: &'static str,
    pub for_agent: bool,
}

impl RouteInfo {
    pub const fn of<R: Route>() -> RouteInfo {
        RouteInfo {
            name: R::NAME,
            owner: R::OWNER,
            for_agent: R::FOR_AGENT,
        }
    }
}

/// Declares a route type: `Name = "wire.name", owner OWNER, for_agent BOOL, Body => Reply`.
macro_rules! route {
    ($(#[$doc:meta])* redacted $ty:ident = $($rest:tt)*) => {
        route!(@define true, $(#[$doc])* $ty = $($rest)*);
    };
    ($(#[$doc:meta])* $ty:ident = $($rest:tt)*) => {
        route!(@define false, $(#[$doc])* $ty = $($rest)*);
    };
    (@define $redact:literal, $(#[$doc:meta])* $ty:ident = $name:literal, owner $owner:expr, for_agent $agent:literal, $body:ty => $reply:ty) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $ty {}
        impl $crate::routes::Route for $ty {
            const NAME: &'static str = $name;
            const OWNER: &'static str = $owner;
            const FOR_AGENT: bool = $agent;
            const REDACT: bool = $redact;
            type Body = $body;
            type Reply = $reply;
        }
    };
}
pub(crate) use route;

/// An empty body or reply: `{}` on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Empty {}

/// Every route of both profiles.
/// Time allowed over a route's own limit per level of routing under it: the owner's own
/// work, and the answer's way back. The router's deadlines and the link harness's per-call
/// limit are built from it and the routes' limits ([`tool::RUN_MAX_SECS`],
/// [`agent::TURN_CALL_LIMIT`]).
pub const MARGIN: std::time::Duration = std::time::Duration::from_secs(10);

pub const ALL: &[RouteInfo] = &[
    RouteInfo::of::<agent::Create>(),
    RouteInfo::of::<agent::Get>(),
    RouteInfo::of::<agent::List>(),
    RouteInfo::of::<agent::Delete>(),
    RouteInfo::of::<agent::Turn>(),
    RouteInfo::of::<auth::Issue>(),
    RouteInfo::of::<auth::Verify>(),
    RouteInfo::of::<auth::Revoke>(),
    RouteInfo::of::<secret::Get>(),
    RouteInfo::of::<secret::Put>(),
    RouteInfo::of::<secret::Delete>(),
    RouteInfo::of::<store::AgentCreate>(),
    RouteInfo::of::<store::AgentDelete>(),
    RouteInfo::of::<store::ConversationAppend>(),
    RouteInfo::of::<store::ConversationRead>(),
    RouteInfo::of::<store::FileRead>(),
    RouteInfo::of::<store::FileWrite>(),
    RouteInfo::of::<store::FileList>(),
    RouteInfo::of::<tool::Run>(),
    RouteInfo::of::<tool::File>(),
    RouteInfo::of::<tool::Code>(),
    RouteInfo::of::<sandbox::Exec>(),
    RouteInfo::of::<schedule::Create>(),
    RouteInfo::of::<schedule::List>(),
    RouteInfo::of::<schedule::Cancel>(),
    RouteInfo::of::<schedule::DeleteAgent>(),
    RouteInfo::of::<host::MonitorStatus>(),
    RouteInfo::of::<host::MonitorStop>(),
    RouteInfo::of::<host::MonitorSamples>(),
    RouteInfo::of::<host::Unlock>(),
    RouteInfo::of::<host::Status>(),
    RouteInfo::of::<host::Down>(),
    RouteInfo::of::<host::ModelKeySet>(),
    RouteInfo::of::<host::ModelKeyDelete>(),
    RouteInfo::of::<host::DebugCall>(),
];

/// The route called `name`, if there is one.
pub fn find(name: &str) -> Option<&'static RouteInfo> {
    ALL.iter().find(|r| r.name == name)
}

/// The plugin that owns `name` (for messages; the router decides where calls go).
pub fn owner_of(name: &str) -> &'static str {
    find(name).map_or("the route's owner", |r| r.owner)
}

/// Every program's name, once; what each plugin is and may do is its entry in
/// [`crate::manifest`].
pub mod programs {
    /// The host (package `link-cli`); owner of the `host.*` routes.
    pub const HOST: &str = "link";
    pub const MODEL: &str = "link-plugin-model";
    pub const MEASURE: &str = "link-plugin-measure";
    pub const MINI_HARNESS: &str = "link-mini-harness";
    pub const MINI_CONNECTION: &str = "link-mini-connection";
    pub const AUTH: &str = "link-plugin-auth";
    pub const SECRET: &str = "link-plugin-secret";
    pub const FILE_STORE: &str = "link-plugin-file-store";
    pub const AGENT: &str = "link-plugin-agent";
    pub const SANDBOX: &str = "link-plugin-sandbox";
    pub const RUN: &str = "link-plugin-link-run";
    pub const FILE_TOOL: &str = "link-plugin-file-tool";
    pub const CODE: &str = "link-plugin-link-code";
    pub const SCHEDULER: &str = "link-plugin-link-scheduler";
    pub const HARNESS: &str = "link-plugin-link-harness";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        for (i, r) in ALL.iter().enumerate() {
            assert!(
                ALL[i + 1..].iter().all(|o| o.name != r.name),
                "{} twice",
                r.name
            );
        }
        assert_eq!(owner_of("tool.run"), programs::RUN);
        assert_eq!(owner_of("nope"), "the route's owner");
    }
}
