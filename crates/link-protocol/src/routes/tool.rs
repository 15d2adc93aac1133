//! The tools the link harness offers the model: `run`, `file` and `code`.

use super::store::{Content, Listing, Written};
use super::{programs, route};
use serde::{Deserialize, Serialize};

/// `tool.run`'s `timeout_secs` when the body gives none, and the largest it accepts
/// (link-plugin-link-run refuses more).
pub const RUN_DEFAULT_SECS: u64 = 60;
pub const RUN_MAX_SECS: u64 = 600;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunBody {
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReply {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    pub duration_ms: u64,
    pub missing_command: bool,
    /// Killed at its timeout, so a kill is not mistaken for a crash.
    pub timed_out: bool,
    /// The limit that ended it (time, CPU time, file size), when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_hit: Option<super::sandbox::LimitHit>,
}

/// `tool.file`: one operation inside the agent's workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FileBody {
    Read {
        path: String,
    },
    Write {
        path: String,
        content: String,
    },
    List {
        #[serde(default)]
        path: String,
    },
}

/// As the store route the operation maps to answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FileReply {
    Listing(Listing),
    Content(Content),
    Written(Written),
}

/// `tool.code`: search the workspace, or replace one exact occurrence in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum CodeBody {
    Search {
        pattern: String,
    },
    Patch {
        path: String,
        old: String,
        new: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Match {
    pub path: String,
    pub line: usize,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Matches {
    pub matches: Vec<Match>,
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CodeReply {
    Matches(Matches),
    Written(Written),
}

route!(
    /// `/bin/sh -c COMMAND` in the agent's sandbox.
    Run = "tool.run", owner programs::RUN, for_agent true, RunBody => RunReply
);
route!(File = "tool.file", owner programs::FILE_TOOL, for_agent true, FileBody => FileReply);
route!(Code = "tool.code", owner programs::CODE, for_agent true, CodeBody => CodeReply);
