//! Agents and their turns. Full Link: the agent registry owns `agent.*`, the link harness
//! `turn.run`. Mini's harness serves all five itself (no router).

pub use super::store::ReadBody;
use super::{programs, route, Empty};
use crate::model::Model;
use crate::AgentId;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The model steps one turn of the link harness may take.
pub const TURN_MAX_STEPS: u32 = 8;

/// How long the link harness waits for one call it routes: past the router's deadline for the
/// longest of them (a `tool.run` at [`super::tool::RUN_MAX_SECS`], which the router gives
/// two [`super::MARGIN`]s over), so the router, which knows who was silent, answers first.
pub const TURN_CALL_LIMIT: Duration =
    Duration::from_secs(super::tool::RUN_MAX_SECS).saturating_add(super::MARGIN.saturating_mul(3));

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateBody {
    pub name: String,
    /// The model its turns use; none: the runtime's default (`link up --model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Model>,
}

/// One agent as the registry describes it. Mini has no workspace or home, and `agent.get`
/// there carries the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub id: AgentId,
    pub name: String,
    /// The model every turn of the agent uses (none only for a damaged agent, whose record
    /// cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Model>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Vec<Value>>,
    /// Mini: why the conversation log's tail is damaged, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_torn: Option<String>,
    /// Mini: entries in the whole conversation; `conversation` is one page of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_total: Option<usize>,
    /// Mini: how many entries come before the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_start: Option<usize>,
    /// Mini: the `after` of the next page, when entries are left after this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_next: Option<usize>,
}

impl AgentInfo {
    /// An agent with only its id and name; the other fields are filled where they exist.
    pub fn new(id: AgentId, name: String) -> AgentInfo {
        AgentInfo {
            id,
            name,
            model: None,
            workspace: None,
            home: None,
            conversation: None,
            conversation_torn: None,
            conversation_total: None,
            conversation_start: None,
            conversation_next: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentList {
    pub agents: Vec<AgentInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnBody {
    pub message: String,
    /// The client's `Idempotency-Key`: a turn sent again with the key of one already stored
    /// is answered from what was stored, not run again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
}

/// A client's name for one turn (the `Idempotency-Key` header): 1 to
/// [`IdempotencyKey::MAX_LEN`] printable ASCII characters. Parsed where it enters, so every
/// stored one keeps the rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    /// Checks `key` against the rule; the error names the rule.
    pub fn parse(key: impl Into<String>) -> Result<IdempotencyKey, String> {
        let key = key.into();
        let printable = key.bytes().all(|b| (0x20..0x7f).contains(&b));
        if key.is_empty() || key.len() > Self::MAX_LEN || !printable {
            return Err(format!(
                "an Idempotency-Key is 1 to {} printable ASCII characters (a UUID, say); \
                 this one is {} bytes{}",
                Self::MAX_LEN,
                key.len(),
                if printable {
                    ""
                } else {
                    " with other characters"
                }
            ));
        }
        Ok(IdempotencyKey(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = String;
    fn try_from(key: String) -> Result<Self, String> {
        IdempotencyKey::parse(key)
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> String {
        key.0
    }
}

impl std::fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What one tool call of a turn did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallReport {
    pub tool: String,
    pub input: Value,
    pub ok: bool,
    pub output: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnReply {
    pub reply: String,
    pub tool_calls: Vec<ToolCallReport>,
}

route!(
    /// Registers an agent named `name` (the name is its id) on `model`, which the model
    /// service must serve (else `bad_request` listing the models it does).
    Create = "agent.create", owner programs::AGENT, for_agent false, CreateBody => AgentInfo
);
route!(
    /// The agent. Mini also answers one page of its conversation, as `store.conversation.read`
    /// pages (the body; the registry of full Link ignores it).
    Get = "agent.get", owner programs::AGENT, for_agent true, ReadBody => AgentInfo
);
route!(List = "agent.list", owner programs::AGENT, for_agent false, Empty => AgentList);
route!(
    /// Removes the agent, its files and its schedules.
    Delete = "agent.delete", owner programs::AGENT, for_agent true, Empty => Empty
);
route!(
    /// Runs one turn for the agent.
    Turn = "turn.run", owner programs::HARNESS, for_agent true, TurnBody => TurnReply
);
