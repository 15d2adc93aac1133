//! The file store: each agent's conversation log and workspace files. It is the only plugin
//! that touches agent files.

use super::{programs, route, Empty};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Workspace {
    pub workspace: PathBuf,
}

/// Entries are JSON objects with at least `role` and `content`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AppendBody {
    pub entries: Vec<serde_json::Value>,
    /// Append only to an intact log of exactly this many entries, else `conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_total: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    pub count: usize,
    pub total: usize,
    /// Why a torn tail was cut (and recorded) before this append, if one was.
    pub repaired: Option<String>,
}

/// Which page of a conversation to read; an absent or empty body is the first page. The
/// owner bounds every page (by default 200 entries, at most 1000, and about 1 MiB of them:
/// `link_conversation::page`), so no read outgrows a frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadBody {
    /// How many entries come before the page: a previous page's `next`. 0 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<usize>,
    /// The most entries wanted (the owner's default when absent; 0 answers only `total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The last page instead: it ends with the log's last entry (`after` is ignored).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tail: bool,
}

/// One page of a conversation: entries `start..start + entries.len()` of `total`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Conversation {
    pub entries: Vec<serde_json::Value>,
    /// Why the log's tail is damaged, when it is.
    pub torn: Option<String>,
    /// Intact entries in the log.
    #[serde(default)]
    pub total: usize,
    /// How many entries come before this page.
    #[serde(default)]
    pub start: usize,
    /// The `after` of the next page, when entries are left after this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathBody {
    #[serde(default)]
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteBody {
    pub path: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content {
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListEntry {
    pub name: String,
    pub kind: String,
    #[serde(default)]
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub entries: Vec<ListEntry>,
    pub truncated: bool,
}

route!(AgentCreate = "store.agent.create", owner programs::FILE_STORE, for_agent true, Empty => Workspace);
route!(AgentDelete = "store.agent.delete", owner programs::FILE_STORE, for_agent true, Empty => Empty);
route!(
    /// Durable once answered; a torn tail is cut and recorded first.
    ConversationAppend = "store.conversation.append", owner programs::FILE_STORE, for_agent true, AppendBody => Appended
);
route!(
    /// One bounded page of the log (the first one for an empty body).
    ConversationRead = "store.conversation.read", owner programs::FILE_STORE, for_agent true, ReadBody => Conversation
);
route!(FileRead = "store.file.read", owner programs::FILE_STORE, for_agent true, PathBody => Content);
route!(FileWrite = "store.file.write", owner programs::FILE_STORE, for_agent true, WriteBody => Written);
route!(FileList = "store.file.list", owner programs::FILE_STORE, for_agent true, PathBody => Listing);
