//! Full Link's router: the grants, caller identity from `SO_PEERCRED`, agent leases,
//! and forwarding to each route's owner.
//!
//! A plugin calls another by connecting to `run/router.sock`. The router maps the peer's pid
//! to the plugin it started (an unknown pid is refused), checks [`allowed`] (the caller's
//! grants in `link_protocol::manifest`), and forwards the request to the owner with `caller`
//! set to that plugin's name. The harness and the tool plugins (`Plugin::leased`) may act
//! only for an agent whose call the router is currently forwarding to them: a turn to the
//! harness, a tool call to a tool (a lease).
//!
//! Connections to owners are kept open between calls (a few idle ones per owner socket):
//! the owner checked at accept that the peer is its parent, the host, which a kept
//! connection still is. Every call is still checked here before it is sent.
//!
//! Every forwarded call has a deadline ([`deadline`]): an owner that does not answer in
//! time (stopped, wedged) gets `timeout` for that call, its connection is dropped, and it is
//! shown `unresponsive` in the host's status until it answers a later call. An owner that
//! was itself waiting for a call it made through the router is not the silent one: the blame
//! falls on the innermost owner that did not answer ([`Router::innermost_silent`]).
//!
//! What each caller may call (`grants`), how long an owner may take (`deadlines`) and which
//! calls change the schedules' grants (`schedule_change`) have files of their own; this one
//! is the router's table: owners, calls in flight and whom to blame for a silence, leases,
//! and the checks that read them.

use crate::schedule_grant::Ledger;
use link_protocol::client::Pool;
use link_protocol::manifest::{Plugin, UNROUTED};
use link_protocol::message::{NotAfter, Outcome};
use link_protocol::routes::{self as r, Route};
use link_protocol::{RemoteError, Request};
use schedule_change::ScheduleChange;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod deadlines;
mod grants;
mod schedule_change;

pub use deadlines::{deadline, DEFAULT_DEADLINE, MARGIN};
use grants::secret_refused;
pub use grants::{allowed, Grantee, HOST};

/// What a call (or a health check, [`crate::health`]) showed of its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// It answered, with a result or an error.
    Answered,
    /// It did not answer within the deadline (the health check's bound).
    Silent,
}

/// Calls nested deeper than this are not followed for blame: no grant chain is this deep,
/// and a cycle must not hold the router.
const MAX_NESTING: usize = 8;

/// A call the router forwards: who made it, to whom, since when.
#[derive(Debug, Clone)]
struct InFlight {
    id: u64,
    caller: &'static str,
    owner: &'static str,
    route: String,
    since: Instant,
    /// The call its caller was answering when it made this one (`Request::parent`), when
    /// the caller named one it is indeed answering.
    parent: Option<u64>,
}

#[derive(Default)]
struct Table {
    by_pid: HashMap<i32, &'static Plugin>,
    owners: HashMap<String, (&'static Plugin, PathBuf)>,
    /// (holder, agent) → calls in flight that lease that agent to that plugin.
    leases: HashMap<(&'static str, String), usize>,
    /// Calls being forwarded, by a number of their own.
    in_flight: HashMap<u64, InFlight>,
    next_call: u64,
    /// Each caller's last call that missed its deadline: the owner of a call that missed
    /// its own deadline at about the same time may have been waiting for it.
    silenced: HashMap<&'static str, InFlight>,
}

/// Registered plugins, route owners and live leases.
pub struct Router {
    table: Mutex<Table>,
    /// The schedules seen made, which the scheduler's turns must be firings of.
    schedules: Mutex<Ledger>,
    pool: Pool,
    /// True while the host is starting plugins; every registration and the end of start-up
    /// wake the calls [`Router::owner`] holds.
    starting: tokio::sync::watch::Sender<bool>,
}

impl Default for Router {
    fn default() -> Self {
        Router {
            table: Mutex::default(),
            schedules: Mutex::default(),
            pool: Pool::default(),
            starting: tokio::sync::watch::Sender::new(true),
        }
    }
}

impl Router {
    /// Keeps the schedules' grants in `ledger` (its file loaded), for the runtime's life.
    pub fn keep_schedules(&self, ledger: Ledger) {
        *self.schedules.lock().expect("lock") = ledger;
    }

    /// Records the routes the ready line of a plugin (already [`admit`](Self::admit)ted as
    /// `pid`) claimed. A claim of a route the route table gives another owner (or of no known
    /// route) is refused, so a plugin cannot take over, say, `auth.verify`.
    pub fn register(
        &self,
        plugin: &'static Plugin,
        pid: i32,
        routes: &[String],
        socket: PathBuf,
    ) -> Result<(), String> {
        check_claims(plugin.program, routes)?;
        // Only the process the host started may answer for these routes.
        self.pool.expect_peer(&socket, pid);
        let mut t = self.table.lock().expect("lock");
        for route in routes {
            t.owners.insert(route.clone(), (plugin, socket.clone()));
        }
        drop(t);
        self.starting.send_modify(|_| {});
        Ok(())
    }

    /// Start-up is over (every plugin ready, or it failed): a route without an owner now
    /// has none to wait for.
    pub fn started(&self) {
        self.starting.send_replace(false);
    }

    /// The owner of `route`. While plugins start, a call for a route whose owner is not
    /// ready yet waits for it (the scheduler fires overdue schedules as soon as it is ready,
    /// maybe before the harness), so plugins need no start order among themselves.
    async fn owner(&self, route: &str) -> Option<(&'static Plugin, PathBuf)> {
        let mut starting = self.starting.subscribe();
        loop {
            // Read before the table: a registration after this read wakes `changed()`.
            let still_starting = *starting.borrow_and_update();
            if let Some(owner) = self.table.lock().expect("lock").owners.get(route) {
                return Some(owner.clone());
            }
            if !still_starting || starting.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Records a plugin the host has just started, before its ready line: from now on its
    /// pid may call (a plugin may call as soon as it is ready, before the host has read that
    /// line).
    pub fn admit(&self, plugin: &'static Plugin, pid: i32) {
        self.table.lock().expect("lock").by_pid.insert(pid, plugin);
    }

    pub fn caller_of(&self, pid: Option<i32>) -> Option<Grantee> {
        let table = self.table.lock().expect("lock");
        pid.and_then(|p| table.by_pid.get(&p).map(|plugin| Grantee::Plugin(plugin)))
    }

    /// Checks and forwards one call made by `caller`; → the result, and the owner if the
    /// call reached it, with whether it answered.
    pub async fn call(
        &self,
        caller: Grantee,
        mut req: Request,
    ) -> (Result<Value, RemoteError>, Option<(&'static str, Heard)>) {
        if let Err(e) = self.check(caller, &req) {
            return (Err(e), None);
        }
        let Some(owner) = self.owner(&req.route).await else {
            let message = format!("no running plugin owns {}", req.route);
            return (
                Err(RemoteError::new(
                    link_protocol::ErrorCode::Unavailable,
                    message,
                )),
                None,
            );
        };
        req.caller = Some(caller.name().to_owned());
        let lease = match &req.agent {
            Some(agent) if owner.0.leased => Some(self.lease(owner.0.program, agent.to_string())),
            _ => None,
        };
        let change = ScheduleChange::of(&req).map(|c| c.ask(&self.schedules));
        let result = self.forward(caller.name(), &owner, req).await;
        drop(lease);
        if let Some(change) = change {
            change.answered(&mut self.schedules.lock().expect("lock"), &result.0);
        }
        result
    }

    /// Records a call being forwarded, until the returned guard drops. A `parent` is kept
    /// only when it is a call in flight to `caller`: a plugin cannot shift blame onto a
    /// request it is not answering.
    fn track(
        &self,
        caller: &'static str,
        owner: &'static str,
        route: &str,
        parent: Option<u64>,
    ) -> Tracked<'_> {
        let mut t = self.table.lock().expect("lock");
        let id = t.next_call;
        t.next_call += 1;
        let parent = parent.filter(|p| t.in_flight.get(p).is_some_and(|c| c.owner == caller));
        let call = InFlight {
            id,
            caller,
            owner,
            route: route.to_owned(),
            since: Instant::now(),
            parent,
        };
        t.in_flight.insert(id, call.clone());
        Tracked { router: self, call }
    }

    /// The innermost call that the owner of `call`, silent on it, was waiting for: the
    /// oldest call it made for it that is still unanswered (or that missed its own deadline),
    /// then the one that call's owner made, and so on. A call made for it is one naming it as
    /// its parent; one naming no parent (made from a task of its own) counts when it was made
    /// since. `None` when the owner was waiting for nobody, so it is the silent one.
    fn innermost_silent(&self, call: &InFlight) -> Option<InFlight> {
        let t = self.table.lock().expect("lock");
        let mut found: Option<InFlight> = None;
        let mut outer = call.clone();
        for _ in 0..MAX_NESTING {
            let made_for = |c: &&InFlight| match c.parent {
                Some(parent) => parent == outer.id,
                None => c.since >= outer.since,
            };
            let waited_for = t
                .in_flight
                .values()
                .chain(t.silenced.get(outer.owner))
                .filter(|c| c.caller == outer.owner)
                .filter(made_for)
                .min_by_key(|c| c.since)
                .cloned();
            let Some(inner) = waited_for else { break };
            outer = inner.clone();
            found = Some(inner);
        }
        found
    }

    /// Sends `req` to its owner within the route's [`deadline`]; a failure to reach it, or
    /// a missed deadline, names the owner. The request is sent once, never retried (it may
    /// have taken effect); a connection goes back to the pool only after a complete answer,
    /// so a cancelled, failed or timed-out call drops its own.
    async fn forward(
        &self,
        caller: &'static str,
        (plugin, socket): &(&'static Plugin, PathBuf),
        mut req: Request,
    ) -> (Result<Value, RemoteError>, Option<(&'static str, Heard)>) {
        let name = plugin.program;
        let deadline = deadline(&req.route, &req.body);
        // The owner does not start what arrives after the router has given up on it.
        req.not_after = Some(NotAfter::within(deadline));
        let tracked = self.track(caller, name, &req.route, req.parent);
        req.call = Some(tracked.call.id);
        let req = &req;
        let resp = match tokio::time::timeout(deadline, self.pool.exchange(socket, req)).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => {
                let message = format!("{name} (owner of {}) is unavailable: {e}", req.route);
                return (
                    Err(RemoteError::new(
                        link_protocol::ErrorCode::Unavailable,
                        message,
                    )),
                    None,
                );
            }
            Err(_) => {
                let (message, silent) = self.silence(tracked, deadline);
                link_protocol::errln!("link: {message}");
                return (
                    Err(RemoteError::new(link_protocol::ErrorCode::Timeout, message)),
                    Some((silent, Heard::Silent)),
                );
            }
        };
        let result = match resp.outcome {
            Outcome::Ok(v) => Ok(v),
            Outcome::Error(e) => Err(e),
        };
        (result, Some((name, Heard::Answered)))
    }

    /// A call that missed its `deadline`: → its error message and the plugin to mark
    /// unresponsive, the innermost owner that did not answer (the call's own owner unless it
    /// was waiting for another's answer). The call is remembered as its caller's last silent
    /// one.
    fn silence(&self, tracked: Tracked<'_>, deadline: Duration) -> (String, &'static str) {
        let call = tracked.call.clone();
        drop(tracked);
        let within = link_protocol::text::duration(deadline);
        let (name, route) = (call.owner, &call.route);
        let blamed = self.innermost_silent(&call);
        self.table
            .lock()
            .expect("lock")
            .silenced
            .insert(call.caller, call.clone());
        match blamed {
            None => (
                format!("{name} did not answer {route} within {within}; it is marked unresponsive"),
                name,
            ),
            Some(inner) => (
                format!(
                    "{name} did not answer {route} within {within}: it was waiting for {}, \
                     which did not answer {}; {} is marked unresponsive",
                    inner.owner, inner.route, inner.owner
                ),
                inner.owner,
            ),
        }
    }

    fn check(&self, caller: Grantee, req: &Request) -> Result<(), RemoteError> {
        let name = caller.name();
        if !allowed(caller, &req.route) {
            let why = UNROUTED
                .iter()
                .find(|(route, _)| route.name == req.route)
                .map(|(_, why)| format!(" (no plugin may route it: {why})"))
                .unwrap_or_default();
            return Err(refuse(format!(
                "{name} has no grant for route {}{why}",
                req.route
            )));
        }
        if secret_refused(caller, &req.route, &req.body) {
            // The name is not echoed: a caller may have put a secret in the wrong field.
            return Err(refuse(format!(
                "{name} may not name that secret in {}",
                req.route
            )));
        }
        if caller.scheduled() && req.route == r::agent::Turn::NAME {
            self.check_firing(name, req)?;
        }
        if caller.leased() {
            let agent = req.agent.as_deref().unwrap_or_default();
            let key = (name, agent.to_owned());
            let leased = self.table.lock().expect("lock").leases.get(&key).copied() > Some(0);
            if !leased {
                return Err(refuse(format!(
                    "{name} may call {} only for an agent whose call it is serving (a turn \
                     for the harness, a tool call for a tool), not {agent:?}",
                    req.route
                )));
            }
        }
        Ok(())
    }

    /// A turn the scheduler asks for passes only as a due firing of a schedule it serves
    /// (`schedule_grant`), which this records.
    fn check_firing(&self, name: &str, req: &Request) -> Result<(), RemoteError> {
        let agent = req
            .agent
            .as_ref()
            .ok_or_else(|| refuse(format!("{name}: turn.run needs an agent")))?;
        let body = serde_json::from_value::<r::agent::TurnBody>(req.body.clone())
            .map_err(|e| refuse(format!("{name}: turn.run: {e}")))?;
        let now = link_protocol::clock::unix_ms();
        let mut ledger = self.schedules.lock().expect("lock");
        ledger.fire(agent, &body.message, now).map_err(|why| {
            refuse(format!(
                "{name} may run a turn only as a due firing of a schedule made for that agent \
                 and message: {why}"
            ))
        })
    }

    fn lease(&self, holder: &'static str, agent: String) -> Lease<'_> {
        let key = (holder, agent);
        *self
            .table
            .lock()
            .expect("lock")
            .leases
            .entry(key.clone())
            .or_default() += 1;
        Lease { router: self, key }
    }
}

/// A call in flight ([`Router::track`]); dropping it ends the record.
struct Tracked<'a> {
    router: &'a Router,
    call: InFlight,
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        let mut t = self.router.table.lock().expect("lock");
        t.in_flight.remove(&self.call.id);
    }
}

/// A call for an agent in flight at a leased plugin (`Plugin::leased`); dropping it ends
/// the lease.
struct Lease<'a> {
    router: &'a Router,
    key: (&'static str, String),
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut t = self.router.table.lock().expect("lock");
        if let Some(n) = t.leases.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                t.leases.remove(&self.key);
            }
        }
    }
}

fn refuse(message: String) -> RemoteError {
    link_protocol::errln!("link: router refused: {message}");
    RemoteError::forbidden(message)
}

/// Every route `plugin` claims is one the route table gives it.
fn check_claims(plugin: &str, routes: &[String]) -> Result<(), String> {
    for route in routes {
        match r::find(route) {
            Some(info) if info.owner == plugin => {}
            Some(info) => {
                return Err(format!(
                    "{plugin} claimed route {route}, which belongs to {}",
                    info.owner
                ))
            }
            None => {
                return Err(format!(
                    "{plugin} claimed {route}, which is no route of Link"
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use link_protocol::manifest;
    use link_protocol::routes::programs;

    /// The host's call to the agent plugin times out while the agent plugin waits for the
    /// file store: the file store is blamed, whether its call is still unanswered or missed
    /// its own deadline a moment before; a call the agent made before is nobody's excuse.
    /// (Calls naming no parent, as from a task of the agent's own: matched by time.)
    #[test]
    fn a_timeout_blames_the_innermost_silent_owner() {
        let (agent, store) = (programs::AGENT, programs::FILE_STORE);
        let router = Router::default();
        let earlier = router.track(agent, store, r::store::FileRead::NAME, None);
        // Instants taken apart, whatever the clock's resolution.
        std::thread::sleep(Duration::from_millis(2));
        let outer = router.track(HOST.name(), agent, r::agent::Create::NAME, None);
        assert!(router.innermost_silent(&outer.call).is_none());
        drop(earlier);
        let inner = router.track(agent, store, r::store::AgentCreate::NAME, None);
        let blamed = router.innermost_silent(&outer.call).unwrap();
        assert_eq!(
            (blamed.owner, blamed.route.as_str()),
            (store, r::store::AgentCreate::NAME)
        );
        // The inner call missed its deadline first: still the store.
        let (message, silent) = router.silence(inner, DEFAULT_DEADLINE);
        assert_eq!(silent, store, "{message}");
        let (message, silent) = router.silence(outer, DEFAULT_DEADLINE);
        assert_eq!(silent, store, "{message}");
        assert!(
            message.contains(&format!("{agent} did not answer agent.create"))
                && message.contains(&format!("waiting for {store}")),
            "{message}"
        );
        // A later call to the agent that times out, waiting for nobody: the agent.
        std::thread::sleep(Duration::from_millis(2));
        let alone = router.track(HOST.name(), agent, r::agent::List::NAME, None);
        assert_eq!(router.silence(alone, DEFAULT_DEADLINE).1, agent);
    }

    /// The agent plugin answers two requests at once; the file store is silent on the call
    /// it made for the second. When the first times out, the agent is blamed (it was waiting
    /// for nobody on that request's behalf); when the second does, the store. A parent the
    /// caller is not answering counts for nothing.
    #[test]
    fn blame_follows_the_request_not_whatever_else_its_owner_waits_for() {
        let (agent, store) = (programs::AGENT, programs::FILE_STORE);
        let router = Router::default();
        let first = router.track(HOST.name(), agent, r::agent::List::NAME, None);
        let second = router.track(HOST.name(), agent, r::agent::Create::NAME, None);
        let for_second = Some(second.call.id);
        let inner = router.track(agent, store, r::store::AgentCreate::NAME, for_second);
        assert_eq!(inner.call.parent, for_second);
        assert!(router.innermost_silent(&first.call).is_none());
        let blamed = router.innermost_silent(&second.call).unwrap();
        assert_eq!(blamed.owner, store);
        assert_eq!(router.silence(first, DEFAULT_DEADLINE).1, agent);
        // A plugin naming a call it is not answering: not kept.
        let forged = router.track(store, agent, r::agent::Get::NAME, for_second);
        assert_eq!(forged.call.parent, None);
        drop((inner, forged));
        assert_eq!(router.silence(second, DEFAULT_DEADLINE).1, agent);
    }

    #[test]
    fn claims_of_other_owners_routes_are_refused() {
        let own = vec![r::auth::Verify::NAME.to_owned()];
        assert!(check_claims(programs::AUTH, &own).is_ok());
        let e = check_claims(programs::FILE_TOOL, &own).unwrap_err();
        assert!(e.contains("belongs to link-plugin-auth"), "{e}");
        let e = check_claims(programs::AUTH, &["auth.everything".to_owned()]).unwrap_err();
        assert!(e.contains("no route"), "{e}");
        let router = Router::default();
        let socket = PathBuf::from("/nonexistent.sock");
        assert!(router
            .register(&manifest::FILE_TOOL, 7, &own, socket)
            .is_err());
        assert!(
            router.table.lock().unwrap().owners.is_empty(),
            "nothing registered"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_call_waits_for_an_owner_still_starting_but_not_once_start_up_is_over() {
        let router = Router::default();
        let route = r::schedule::List::NAME;
        let register = async {
            tokio::task::yield_now().await;
            let routes = [route.to_owned()];
            router
                .register(&manifest::SCHEDULER, 42, &routes, "/nowhere".into())
                .unwrap();
        };
        let (owner, ()) = tokio::join!(router.owner(route), register);
        assert_eq!(owner.map(|(p, _)| p.program), Some(programs::SCHEDULER));
        router.started();
        assert!(router.owner(r::agent::Turn::NAME).await.is_none());
    }
}
