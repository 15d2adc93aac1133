//! One confined command.

use super::{programs, route};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecBody {
    pub argv: Vec<String>,
    pub workspace: PathBuf,
    /// `None`: an empty tmpfs.
    #[serde(default)]
    pub home: Option<PathBuf>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Per stream.
    #[serde(default)]
    pub output_cap: Option<usize>,
    /// Only the names the sandbox policy allows; any other is a `bad_request`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecReply {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
    /// The command was not found (exit 127 from the shell's or exec's search).
    pub missing_command: bool,
    pub timed_out: bool,
}

route!(Exec = "sandbox.exec", owner programs::SANDBOX, for_agent true, ExecBody => ExecReply);
