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
