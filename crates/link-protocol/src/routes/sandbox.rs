//! One confined command.

use super::{programs, route};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `sandbox.exec`'s `timeout_ms` when the body gives none, and the largest it accepts (the
/// sandbox plugin refuses more; the host's router waits that long, and a margin, for it).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// `sandbox.exec`'s `output_cap` when the body gives none, and the largest it accepts.
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;
/// Per stream: two capped streams, JSON-escaped, must fit a 4 MiB frame.
pub const MAX_OUTPUT_CAP: usize = 256 * 1024;

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
    /// Per-command limits; each `None` takes the sandbox's documented default.
    #[serde(default)]
    pub limits: ExecLimits,
}

/// Requested limits of one command (the sandbox refuses values above its maxima).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecLimits {
    /// Processes and threads the command may have at once.
    #[serde(default)]
    pub processes: Option<u64>,
    /// Address space of each process (RLIMIT_AS).
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// CPU time of each process (RLIMIT_CPU).
    #[serde(default)]
    pub cpu_seconds: Option<u64>,
    /// Largest file a process may write (RLIMIT_FSIZE).
    #[serde(default)]
    pub file_size_bytes: Option<u64>,
    /// Size of the private `/tmp` (and of `/dev/shm`, and of the home when it is a tmpfs).
    #[serde(default)]
    pub tmp_bytes: Option<u64>,
    /// Disk space the workspace and the agent's home may use together: what is left of it
    /// bounds every file the command writes, and a command that passes it is stopped.
    #[serde(default)]
    pub workspace_bytes: Option<u64>,
    /// Entries (files, directories, links: each name counts) the workspace and the home may
    /// hold together; a command that passes it is stopped.
    #[serde(default)]
    pub workspace_entries: Option<u64>,
}

/// The limit that ended a command (the kernel's signal names it, or the sandbox stopped it),
/// or, [`LimitHit::WorkspaceFull`], the one it ran restricted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "limit")]
pub enum LimitHit {
    /// The wall-clock time limit: the whole process tree was killed.
    Time { ms: u64 },
    /// A process used up its CPU time (SIGXCPU).
    CpuTime { seconds: u64 },
    /// A process wrote past the file size limit (SIGXFSZ).
    FileSize { bytes: u64 },
    /// The command's processes together passed the memory limit, and the kernel killed one
    /// (as root where the agent has a memory cgroup: `link_confine::cgroup`).
    Memory { bytes: u64 },
    /// A process wrote past what was left of the workspace quota (SIGXFSZ), or the files of
    /// the workspace and home together passed it while the command ran (the sandbox stopped
    /// the whole command).
    WorkspaceQuota { bytes: u64 },
    /// The workspace and home together passed their quota of entries while the command ran
    /// (the sandbox stopped the whole command).
    WorkspaceEntries { entries: u64 },
    /// The workspace and home were full when the command began (bytes or entries at their
    /// quota), so it could remove files and write within existing ones, but make nothing.
    /// `used_*` is what they held then, `bytes` and `entries` the quota.
    WorkspaceFull {
        used_bytes: u64,
        bytes: u64,
        used_entries: u64,
        entries: u64,
    },
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitHit::Time { ms } => write!(f, "killed: time limit {}", seconds(*ms)),
            LimitHit::CpuTime { seconds } => write!(f, "killed: CPU time limit {seconds} s"),
            LimitHit::FileSize { bytes } => write!(f, "killed: file size limit {}", size(*bytes)),
            LimitHit::Memory { bytes } => write!(
                f,
                "killed: memory limit {} of all the command's processes together",
                size(*bytes)
            ),
            LimitHit::WorkspaceQuota { bytes } => {
                write!(f, "killed: workspace quota {}", size(*bytes))
            }
            LimitHit::WorkspaceEntries { entries } => {
                write!(f, "killed: workspace quota {entries} entries")
            }
            LimitHit::WorkspaceFull {
                used_bytes,
                bytes,
                used_entries,
                entries,
            } => {
                let (bytes_used, quota) = (about(*used_bytes), size(*bytes));
                match used_bytes >= bytes {
                    true => write!(
                        f,
                        "workspace full: {bytes_used} used of its {quota} quota \
                         ({used_entries} of {entries} entries)"
                    )?,
                    false => write!(
                        f,
                        "workspace full: {used_entries} entries of its quota of {entries} \
                         ({bytes_used} of {quota})"
                    )?,
                }
                write!(f, "; files could be removed, none made")
            }
        }
    }
}

fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// Bytes in the largest binary unit that divides them (`1 GiB`, `64 MiB`, `1000 B`).
pub fn size(bytes: u64) -> String {
    for (unit, name) in [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} B")
}

/// Bytes in the largest binary unit they reach, to one decimal (`3.2 GiB`, `512 B`).
fn about(bytes: u64) -> String {
    for (unit, name) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if bytes >= unit {
            return format!("{:.1} {name}", bytes as f64 / unit as f64);
        }
    }
    format!("{bytes} B")
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
    /// The limit that ended it, when one did; its `Display` is the line to show.
    #[serde(default)]
    pub limit_hit: Option<LimitHit>,
}

route!(Exec = "sandbox.exec", owner programs::SANDBOX, for_agent true, ExecBody => ExecReply);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_a_person_would_say_them() {
        assert_eq!(
            LimitHit::FileSize { bytes: 1 << 30 }.to_string(),
            "killed: file size limit 1 GiB"
        );
        assert_eq!(
            LimitHit::Time { ms: 1500 }.to_string(),
            "killed: time limit 1500 ms"
        );
        assert_eq!(
            LimitHit::CpuTime { seconds: 5 }.to_string(),
            "killed: CPU time limit 5 s"
        );
        assert_eq!(size(1000), "1000 B");
        // Which bound is reached, and how much is used of each.
        assert_eq!(
            LimitHit::WorkspaceFull {
                used_bytes: 4 << 30,
                bytes: 4 << 30,
                used_entries: 31,
                entries: 250_000
            }
            .to_string(),
            "workspace full: 4.0 GiB used of its 4 GiB quota (31 of 250000 entries); \
             files could be removed, none made"
        );
        assert_eq!(
            LimitHit::WorkspaceFull {
                used_bytes: 1536,
                bytes: 4 << 30,
                used_entries: 250_000,
                entries: 250_000
            }
            .to_string(),
            "workspace full: 250000 entries of its quota of 250000 (1.5 KiB of 4 GiB); \
             files could be removed, none made"
        );
        let unknown = serde_json::from_str::<ExecLimits>(r#"{"cpu": 1}"#);
        assert!(unknown.is_err(), "a misspelt limit is refused, not ignored");
    }
}
