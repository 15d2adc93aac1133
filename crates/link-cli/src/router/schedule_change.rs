//! The forwarded calls that change which schedules may run turns, and what they record.
//!
//! Apart from the checks: the ledger ([`crate::schedule_grant`]) learns of a schedule only
//! from the calls the router forwards to the scheduler and their answers.

use crate::schedule_grant::Ledger;
use link_protocol::routes::{self as r, Route};
use link_protocol::{AgentId, RemoteError, Request};
use serde_json::Value;
use std::sync::Mutex;

/// A forwarded call that changes which schedules may run turns.
pub(super) enum ScheduleChange {
    Made(AgentId, r::schedule::CreateBody),
    /// Made, recorded under this name before it was forwarded (or refused by the rules).
    Asked(Option<String>),
    Cancelled(AgentId, String),
    AgentDeleted(AgentId),
}

impl ScheduleChange {
    pub(super) fn of(req: &Request) -> Option<ScheduleChange> {
        let agent = req.agent.clone()?;
        let body = || req.body.clone();
        match req.route.as_str() {
            r::schedule::Create::NAME => serde_json::from_value(body())
                .ok()
                .map(|b| ScheduleChange::Made(agent, b)),
            r::schedule::Cancel::NAME => serde_json::from_value::<r::schedule::Id>(body())
                .ok()
                .map(|id| ScheduleChange::Cancelled(agent, id.id)),
            r::schedule::DeleteAgent::NAME => Some(ScheduleChange::AgentDeleted(agent)),
            _ => None,
        }
    }

    /// Before forwarding: a schedule is recorded now, since the scheduler may fire one due
    /// at once before the router has read its answer.
    pub(super) fn ask(self, ledger: &Mutex<Ledger>) -> ScheduleChange {
        match self {
            ScheduleChange::Made(agent, body) => {
                let now = link_protocol::clock::unix_ms();
                ScheduleChange::Asked(ledger.lock().expect("lock").asked(&agent, &body, now))
            }
            other => other,
        }
    }

    /// Records what the owner's answer confirmed. A schedule whose answer never came (a
    /// timeout, an owner gone) may have been made: it keeps its grant.
    pub(super) fn answered(self, ledger: &mut Ledger, result: &Result<Value, RemoteError>) {
        use link_protocol::ErrorCode::{Timeout, Unavailable};
        match (self, result) {
            (ScheduleChange::Asked(Some(pending)), Ok(reply)) => {
                match serde_json::from_value::<r::schedule::Id>(reply.clone()) {
                    Ok(id) => ledger.made(&pending, id.id),
                    Err(_) => ledger.refused(&pending),
                }
            }
            (ScheduleChange::Asked(Some(pending)), Err(e))
                if !matches!(e.code, Timeout | Unavailable) =>
            {
                ledger.refused(&pending)
            }
            (ScheduleChange::Cancelled(agent, id), Ok(_)) => ledger.cancelled(&agent, &id),
            (ScheduleChange::AgentDeleted(agent), Ok(_)) => ledger.agent_deleted(&agent),
            _ => {}
        }
    }
}
