//! The connections the endpoint holds, and which one it closes when a new client needs room.
//!
//! Only a valid token proves a client may use the endpoint, so a connection that has not yet
//! presented one holds its slot on sufferance: when every slot is taken, a new connection
//! takes the slot of an unauthenticated one, the oldest of the peer (the connecting process,
//! from `SO_PEERCRED`) that holds the most, instead of being refused. A flood from one process
//! therefore closes only its own connections, and a client in another process keeps its slot
//! until its token has been checked. A connection whose token passed keeps its slot until it
//! ends; only when every held connection has passed is a new one refused ([`Full`]).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// Who opened a connection (`SO_PEERCRED`, read at accept): the unit among which the
/// unauthenticated slots are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    Process(i32),
    /// The kernel gave credentials without a pid.
    User(u32),
    /// The credentials could not be read.
    Unknown,
}

impl Peer {
    /// The process that connected `stream`.
    pub fn of(stream: &tokio::net::UnixStream) -> Peer {
        match stream.peer_cred() {
            Ok(cred) => cred.pid().map_or(Peer::User(cred.uid()), Peer::Process),
            Err(_) => Peer::Unknown,
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Process(pid) => write!(f, "process {pid}"),
            Peer::User(uid) => write!(f, "uid {uid}"),
            Peer::Unknown => f.write_str("an unknown peer"),
        }
    }
}

/// Every slot is held by a connection whose token passed: nothing may be closed for a new one.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

/// The endpoint's connection slots.
pub struct Slots {
    cap: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The id the next connection gets: ids grow in accept order, so a lower one is older.
    next: u64,
    held: HashMap<u64, Held>,
    /// The connections of each peer that have not presented a valid token, oldest first.
    unauthenticated: HashMap<Peer, BTreeSet<u64>>,
}

struct Held {
    peer: Peer,
    /// Told when the slot is taken back for another client.
    close: Arc<Notify>,
}

impl Slots {
    /// At most `cap` connections at once.
    pub fn new(cap: usize) -> Arc<Slots> {
        Arc::new(Slots {
            cap,
            inner: Mutex::default(),
        })
    }

    /// A slot for a new connection from `peer`, unauthenticated until its token passes. When
    /// every slot is taken, an unauthenticated connection is closed to make room (the oldest
    /// of the peer holding the most): the slot, and whose connection was closed for it.
    pub fn take(self: &Arc<Self>, peer: Peer) -> Result<(Slot, Option<Peer>), Full> {
        let mut inner = self.lock();
        let mut made_room = None;
        if inner.held.len() >= self.cap {
            let victim = inner.victim().ok_or(Full)?;
            if let Some(held) = inner.remove(victim) {
                // A permit is stored if the connection's task is not waiting yet.
                held.close.notify_one();
                made_room = Some(held.peer);
            }
        }
        let (id, close) = inner.insert(peer);
        let connection = Connection {
            id,
            slots: self.clone(),
        };
        Ok((Slot { connection, close }, made_room))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The registry stays consistent across a panic: every change is one map operation.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn authenticated(&self, id: u64) {
        let mut inner = self.lock();
        let Some(peer) = inner.held.get(&id).map(|h| h.peer) else {
            return;
        };
        inner.forget_unauthenticated(peer, id);
    }
}

impl Inner {
    fn insert(&mut self, peer: Peer) -> (u64, Arc<Notify>) {
        let id = self.next;
        self.next += 1;
        let close = Arc::new(Notify::new());
        let held = Held {
            peer,
            close: close.clone(),
        };
        self.held.insert(id, held);
        self.unauthenticated.entry(peer).or_default().insert(id);
        (id, close)
    }

    fn remove(&mut self, id: u64) -> Option<Held> {
        let held = self.held.remove(&id)?;
        self.forget_unauthenticated(held.peer, id);
        Some(held)
    }

    fn forget_unauthenticated(&mut self, peer: Peer, id: u64) {
        if let Some(ids) = self.unauthenticated.get_mut(&peer) {
            ids.remove(&id);
            if ids.is_empty() {
                self.unauthenticated.remove(&peer);
            }
        }
    }

    /// The oldest unauthenticated connection of the peer holding the most (between peers
    /// holding as many, the older connection).
    fn victim(&self) -> Option<u64> {
        self.unauthenticated
            .values()
            .filter_map(|ids| Some((ids.len(), *ids.first()?)))
            .max_by_key(|&(count, oldest)| (count, Reverse(oldest)))
            .map(|(_, oldest)| oldest)
    }
}

/// A held connection's slot, owned by the task serving it; given back when dropped.
pub struct Slot {
    connection: Connection,
    close: Arc<Notify>,
}

impl Slot {
    /// The connection, as its requests carry it.
    pub fn connection(&self) -> Connection {
        self.connection.clone()
    }

    /// Resolves once the slot has been taken back for another client: the connection must
    /// then be closed.
    pub async fn taken_back(&self) {
        self.close.notified().await
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Already gone when it was taken back.
        self.connection.slots.lock().remove(self.connection.id);
    }
}

/// A held connection as a request extension: the token check marks it authenticated.
#[derive(Clone)]
pub struct Connection {
    id: u64,
    slots: Arc<Slots>,
}

impl Connection {
    /// Its token passed: the connection keeps its slot until it ends.
    pub fn authenticated(&self) {
        self.slots.authenticated(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOD: Peer = Peer::Process(100);
    const CLIENT: Peer = Peer::Process(200);

    fn holds(slots: &Slots, slot: &Slot) -> bool {
        slots.lock().held.contains_key(&slot.connection.id)
    }

    #[tokio::test]
    async fn a_full_endpoint_closes_the_busiest_peers_oldest_unauthenticated_connection() {
        let slots = Slots::new(3);
        let (flood_a, _) = slots.take(FLOOD).unwrap();
        let (client, _) = slots.take(CLIENT).unwrap();
        let (flood_b, none) = slots.take(FLOOD).unwrap();
        assert_eq!(none, None, "room was left");
        let (flood_c, made_room) = slots.take(FLOOD).unwrap();
        assert_eq!(made_room, Some(FLOOD));
        assert!(!holds(&slots, &flood_a), "the flood's oldest is closed");
        tokio::time::timeout(std::time::Duration::from_secs(5), flood_a.taken_back())
            .await
            .expect("the closed connection's task is told");
        // The client is older than the flood's newer connections, and still never chosen.
        let (_other, made_room) = slots.take(Peer::Process(300)).unwrap();
        assert_eq!(made_room, Some(FLOOD));
        assert!(!holds(&slots, &flood_b) && holds(&slots, &flood_c));
        assert!(holds(&slots, &client));
    }

    #[test]
    fn between_peers_holding_as_many_the_older_connection_is_closed() {
        let slots = Slots::new(2);
        let (older, _) = slots.take(FLOOD).unwrap();
        let (newer, _) = slots.take(CLIENT).unwrap();
        let (_unknown, made_room) = slots.take(Peer::Unknown).unwrap();
        assert_eq!(made_room, Some(FLOOD));
        assert!(!holds(&slots, &older) && holds(&slots, &newer));
    }

    #[test]
    fn authenticated_connections_are_never_closed_to_make_room() {
        let slots = Slots::new(2);
        let (first, _) = slots.take(FLOOD).unwrap();
        let (second, _) = slots.take(FLOOD).unwrap();
        first.connection().authenticated();
        second.connection().authenticated();
        assert_eq!(slots.take(CLIENT).err(), Some(Full));
        assert!(holds(&slots, &first) && holds(&slots, &second));
        drop(first);
        let (_client, made_room) = slots.take(CLIENT).expect("the ended connection's slot");
        assert_eq!(made_room, None);
        // The unauthenticated one is closed before the authenticated one.
        let (_flood, made_room) = slots.take(FLOOD).unwrap();
        assert_eq!(made_room, Some(CLIENT));
        assert!(holds(&slots, &second));
    }
}
