//! The agent id: validated once, where it enters a process, and trusted everywhere after.
//!
//! An id becomes a directory name under the state root (`data/file-store/agents/<id>`,
//! `data/agent/homes/<id>`), so the rule is strict: `[a-z0-9][a-z0-9_-]{0,31}`. That refuses
//! `.` and `..`, `/`, the empty string, upper case (case-insensitive file systems), and
//! anything long enough to push a socket path past its limit.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest id, in bytes.
pub const MAX_LEN: usize = 32;

/// A valid agent id. Deserializing checks the rule, so a `Request` that parsed holds one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentId(String);

/// Why a string is not an agent id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid agent id {id:?}: {why}; an id is 1 to {MAX_LEN} characters of a-z, 0-9, `-` and `_`, starting with a letter or digit")]
pub struct InvalidAgentId {
    pub id: String,
    pub why: &'static str,
}

impl AgentId {
    /// Checks `id` against the rule.
    pub fn parse(id: impl Into<String>) -> Result<AgentId, InvalidAgentId> {
        let id = id.into();
        match problem(&id) {
            None => Ok(AgentId(id)),
            Some(why) => Err(InvalidAgentId { id, why }),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn problem(id: &str) -> Option<&'static str> {
    let b = id.as_bytes();
    let allowed = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_');
    if b.is_empty() {
        Some("it is empty")
    } else if b.len() > MAX_LEN {
        Some("it is too long")
    } else if !(b[0].is_ascii_lowercase() || b[0].is_ascii_digit()) {
        Some("it must start with a letter or digit")
    } else if !b.iter().all(allowed) {
        Some("it holds a character outside a-z, 0-9, `-` and `_`")
    } else {
        None
    }
}

impl TryFrom<String> for AgentId {
    type Error = InvalidAgentId;
    fn try_from(id: String) -> Result<Self, Self::Error> {
        AgentId::parse(id)
    }
}

impl std::str::FromStr for AgentId {
    type Err = InvalidAgentId;
    fn from_str(id: &str) -> Result<Self, Self::Err> {
        AgentId::parse(id)
    }
}

impl From<AgentId> for String {
    fn from(id: AgentId) -> String {
        id.0
    }
}

impl std::ops::Deref for AgentId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

// Sound: the derived Eq, Ord and Hash are those of the inner string.
impl std::borrow::Borrow<str> for AgentId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for AgentId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::path::Path> for AgentId {
    fn as_ref(&self) -> &std::path::Path {
        self.0.as_ref()
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<InvalidAgentId> for crate::RemoteError {
    fn from(e: InvalidAgentId) -> Self {
        crate::RemoteError::bad_request(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_rule() {
        for id in ["a", "0", "agent-1", "a_b", &"x".repeat(MAX_LEN)] {
            assert_eq!(AgentId::parse(id).unwrap().as_str(), id);
        }
    }

    #[test]
    fn refuses_everything_else() {
        let long = "x".repeat(MAX_LEN + 1);
        let cases = [
            ("", "empty"),
            ("..", "start"),
            (".", "start"),
            (".hidden", "start"),
            ("a/b", "character"),
            ("../etc", "start"),
            ("-a", "start"),
            ("_a", "start"),
            ("Agent", "start"),
            ("aB", "character"),
            ("a.b", "character"),
            ("a b", "character"),
            ("é", "start"),
            ("a\0", "character"),
            (long.as_str(), "too long"),
        ];
        for (id, why) in cases {
            let e = AgentId::parse(id).unwrap_err();
            assert!(e.why.contains(why), "{id:?}: {e}");
            assert!(e.to_string().contains("a-z, 0-9"), "{e}");
        }
    }

    #[test]
    fn serde_checks_the_rule() {
        let id: AgentId = serde_json::from_str("\"ok-1\"").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"ok-1\"");
        let e = serde_json::from_str::<AgentId>("\"../x\"").unwrap_err();
        assert!(e.to_string().contains("invalid agent id"), "{e}");
    }
}
