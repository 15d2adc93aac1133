//! Scheduled turns.

use super::{programs, route, Empty};
use crate::AgentId;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CreateBody {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_unix_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
}

/// The shortest interval of a recurring schedule: a guard against flooding an agent.
pub const MIN_EVERY_MS: u64 = 1000;
/// How far ahead a schedule may be set: ten years.
pub const MAX_AHEAD_MS: u64 = 10 * 365 * 24 * 3600 * 1000;
/// The longest message a schedule keeps.
pub const MAX_MESSAGE: usize = 64 * 1024;

impl CreateBody {
    /// The first time it fires, given `now`; an error says what to fix. The scheduler and
    /// the host's router (which binds the scheduler's turns to the schedules it saw made)
    /// both time a schedule by this and by [`Schedule::mark_fired`].
    pub fn first_due(&self, now: u64) -> Result<u64, String> {
        if self.message.trim().is_empty() {
            return Err("a schedule needs a non-empty message".into());
        }
        if self.message.len() > MAX_MESSAGE {
            return Err(format!(
                "the message is {} bytes; the limit is {MAX_MESSAGE}",
                self.message.len()
            ));
        }
        if let Some(every) = self.every_ms {
            if every < MIN_EVERY_MS {
                return Err(format!(
                    "every_ms {every} is below the minimum of {MIN_EVERY_MS} ms"
                ));
            }
        }
        let due = match (self.at_unix_ms, self.delay_ms, self.every_ms) {
            (Some(_), Some(_), _) => {
                return Err("give either at_unix_ms or delay_ms, not both".into())
            }
            // A time in the past fires at once.
            (Some(at), None, _) => at,
            (None, Some(delay), _) => now.saturating_add(delay),
            // A recurring schedule without a start fires first after one interval.
            (None, None, Some(every)) => now.saturating_add(every),
            (None, None, None) => {
                return Err("give at_unix_ms, delay_ms or every_ms to say when it fires".into())
            }
        };
        if due > now.saturating_add(MAX_AHEAD_MS) {
            return Err(format!(
                "the schedule is more than {} days ahead",
                MAX_AHEAD_MS / 86_400_000
            ));
        }
        Ok(due)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Id {
    pub id: String,
}

/// What the most recent firing's turn gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastResult {
    pub at_unix_ms: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One scheduled turn, as kept and as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub id: String,
    pub agent: AgentId,
    pub message: String,
    /// When it fires next; for a finished one-shot, when it fired.
    pub next_unix_ms: u64,
    pub every_ms: Option<u64>,
    pub fired: u64,
    /// A one-shot that has fired: it never fires again.
    #[serde(default)]
    pub done: bool,
    pub created_unix_ms: u64,
    #[serde(default)]
    pub last_result: Option<LastResult>,
}

impl Schedule {
    /// True when it should fire at `now`.
    pub fn due(&self, now: u64) -> bool {
        !self.done && self.next_unix_ms <= now
    }

    /// Records a firing at `now`: counts it, and either finishes a one-shot or moves a
    /// recurring schedule to its first interval after `now` (missed intervals fire once).
    pub fn mark_fired(&mut self, now: u64) {
        self.fired += 1;
        match self.every_ms {
            None => self.done = true,
            Some(every) => {
                let every = every.max(1);
                if self.next_unix_ms <= now {
                    let missed = (now - self.next_unix_ms) / every + 1;
                    self.next_unix_ms += missed * every;
                }
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Schedules {
    pub schedules: Vec<Schedule>,
}

route!(Create = "schedule.create", owner programs::SCHEDULER, for_agent true, CreateBody => Id);
route!(
    /// The agent's schedules, or every schedule when the call names no agent.
    List = "schedule.list", owner programs::SCHEDULER, for_agent false, Empty => Schedules
);
route!(
    /// Cancels one of the call's agent's schedules; another agent's is refused.
    Cancel = "schedule.cancel", owner programs::SCHEDULER, for_agent true, Id => Empty
);
route!(DeleteAgent = "schedule.delete_agent", owner programs::SCHEDULER, for_agent true, Empty => Empty);
