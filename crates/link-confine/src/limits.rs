//! Resource limits of one confined command: defaults, maxima, the request's values, and how
//! the helper is told them.
//!
//! Processes, memory, CPU time and file size are rlimits the helper sets inside the sandbox
//! just before the command, hard and soft alike (CPU's hard one a second later), so the
//! command cannot raise them. The
//! process count is per user namespace and uid (Linux counts `RLIMIT_NPROC` per namespace
//! since 5.14): each sandbox of an ordinary user has its own namespace, and as root each
//! agent has its own uid ([`crate::identity`]), so one agent's fork bomb never starves
//! another's commands. The tmpfs sizes are bwrap's `--size`.
//!
//! The workspace quota covers the workspace and the agent's home together, in bytes (allocated
//! blocks) and in entries (each name counts, so empty files are not free). It holds between
//! commands and while one runs ([`crate::run`]): the walk before a command measures what is
//! used, and what is left of the bytes becomes the command's file size limit (one file cannot
//! pass it); a command that begins with either at its quota may remove files and write
//! within existing ones but make nothing (the helper's `--shrink`); while it runs the two
//! directories are measured again every [`QUOTA_CHECK`] or so, and a command whose files pass
//! the quota is stopped, so several files together pass it by at most what one interval
//! lets a command write. `fallocate`, which the file size limit does not bound, is refused
//! (`seccomp_rules::PREALLOCATE`). What a walk cannot see (files unlinked while
//! open or made unnamed, a directory an ordinary user's command made unreadable) is bounded
//! only by the time limit.

use link_protocol::routes::sandbox::{ExecLimits, LimitHit, DEFAULT_TIMEOUT_MS};
use link_report::probe::{Bound, Bounded, Scope};
use serde::{Deserialize, Serialize};

/// The limits a command runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub processes: u64,
    pub memory_bytes: u64,
    pub cpu_seconds: u64,
    pub file_size_bytes: u64,
    pub tmp_bytes: u64,
    pub workspace_bytes: u64,
    pub workspace_entries: u64,
}

/// How often, at least, a running command's workspace and home are measured against the
/// quota; a larger tree is measured less often, so its walks take at most a tenth of the time.
pub const QUOTA_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

impl Limits {
    /// What a command gets when the request names no limit.
    pub const DEFAULT: Limits = Limits {
        processes: 256,
        memory_bytes: 4 * GIB,
        cpu_seconds: 600,
        file_size_bytes: GIB,
        tmp_bytes: 256 * MIB,
        workspace_bytes: 4 * GIB,
        workspace_entries: 250_000,
    };
    /// The most a request may ask for.
    pub const MAX: Limits = Limits {
        processes: 4096,
        memory_bytes: 64 * GIB,
        cpu_seconds: 24 * 3600,
        file_size_bytes: 64 * GIB,
        tmp_bytes: 8 * GIB,
        workspace_bytes: 1024 * GIB,
        workspace_entries: 100_000_000,
    };

    /// The defaults with the request's values, each checked against [`Limits::MAX`].
    pub fn with(requested: &ExecLimits) -> Result<Limits, String> {
        let d = Limits::DEFAULT;
        let m = Limits::MAX;
        Ok(Limits {
            processes: pick("processes", requested.processes, d.processes, m.processes)?,
            memory_bytes: pick(
                "memory_bytes",
                requested.memory_bytes,
                d.memory_bytes,
                m.memory_bytes,
            )?,
            cpu_seconds: pick(
                "cpu_seconds",
                requested.cpu_seconds,
                d.cpu_seconds,
                m.cpu_seconds,
            )?,
            file_size_bytes: pick(
                "file_size_bytes",
                requested.file_size_bytes,
                d.file_size_bytes,
                m.file_size_bytes,
            )?,
            tmp_bytes: pick("tmp_bytes", requested.tmp_bytes, d.tmp_bytes, m.tmp_bytes)?,
            workspace_bytes: pick(
                "workspace_bytes",
                requested.workspace_bytes,
                d.workspace_bytes,
                m.workspace_bytes,
            )?,
            workspace_entries: pick(
                "workspace_entries",
                requested.workspace_entries,
                d.workspace_entries,
                m.workspace_entries,
            )?,
        })
    }

    /// The helper's `--limits` value: `processes,memory,cpu,file_size`
    /// ([`link_sandbox_helper::args::Limits`], which sets them as rlimits).
    pub fn helper_arg(&self) -> String {
        format!(
            "{},{},{},{}",
            self.processes, self.memory_bytes, self.cpu_seconds, self.file_size_bytes
        )
    }

    /// Which of these bound a command and over what (issue 42: one command held 9.2 GiB as
    /// three processes, each within the per-process bound), with what the probe saw in
    /// force: `checked` names the check (`limit_<what>`) that must have passed. Where the agent
    /// has cgroups (`per_agent`: [`crate::cgroup::support`], or why not), memory and processes
    /// hold over its processes together (an agent's commands run one at a time) and CPU time
    /// over all of one command's; where it has none they are listed as not held over these,
    /// with the reason.
    pub fn bounds(
        &self,
        passed: impl Fn(&str) -> bool,
        per_agent: Result<(), String>,
    ) -> Vec<Bound> {
        use Bounded as B;
        use Scope as S;
        // Seen in force where the probe's check of it passed (the rlimits and the processes).
        let held = |what: Bounded, over, value| Bound {
            what,
            over,
            value: Some(value),
            checked: passed(&format!("limit_{what}")),
            reason: None,
        };
        // The probe's own sandbox has no cgroup: what the cgroups hold is not seen by it.
        let together = |what, over, value| match &per_agent {
            Ok(()) => Bound {
                checked: false,
                ..held(what, over, value)
            },
            Err(why) => Bound {
                what,
                over,
                value: None,
                checked: false,
                reason: Some(why.clone()),
            },
        };
        vec![
            held(B::MemoryBytes, S::Process, self.memory_bytes),
            held(B::CpuSeconds, S::Process, self.cpu_seconds),
            held(B::FileSizeBytes, S::Process, self.file_size_bytes),
            held(B::Processes, S::Command, self.processes),
            held(B::TmpBytes, S::Command, self.tmp_bytes),
            held(B::WallTimeMs, S::Command, DEFAULT_TIMEOUT_MS),
            held(B::WorkspaceBytes, S::Agent, self.workspace_bytes),
            held(B::WorkspaceEntries, S::Agent, self.workspace_entries),
            together(B::MemoryBytes, S::Agent, self.memory_bytes),
            together(B::Processes, S::Agent, self.processes),
            // Counted from each command's start: a budget per command, not per agent.
            together(B::CpuSeconds, S::Command, self.cpu_seconds),
        ]
    }

    /// The limit a signal names: SIGXCPU for CPU time, SIGXFSZ for file size.
    pub fn hit_by_signal(&self, signal: i32) -> Option<LimitHit> {
        match signal {
            libc::SIGXCPU => Some(LimitHit::CpuTime {
                seconds: self.cpu_seconds,
            }),
            libc::SIGXFSZ => Some(LimitHit::FileSize {
                bytes: self.file_size_bytes,
            }),
            _ => None,
        }
    }
}

fn pick(name: &str, requested: Option<u64>, default: u64, max: u64) -> Result<u64, String> {
    match requested {
        None => Ok(default),
        Some(0) => Err(format!("limits.{name} must be at least 1")),
        Some(v) if v > max => Err(format!("limits.{name} {v} exceeds the maximum {max}")),
        Some(v) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_says_over_what_and_only_a_passed_check_is_seen() {
        let bounds = Limits::DEFAULT.bounds(
            |check| check == "limit_memory_bytes",
            Err("no cgroup here".into()),
        );
        let find = |what, over| {
            bounds
                .iter()
                .find(|b| b.what == what && b.over == over)
                .unwrap_or_else(|| panic!("{what} over {over}"))
        };
        let memory = find(Bounded::MemoryBytes, Scope::Process);
        assert_eq!((memory.value, memory.checked), (Some(4 << 30), true));
        // A check that did not pass (or was not made) is not claimed as seen.
        assert!(!find(Bounded::CpuSeconds, Scope::Process).checked);
        assert!(!find(Bounded::WorkspaceBytes, Scope::Agent).checked);
        assert_eq!(find(Bounded::Processes, Scope::Command).value, Some(256));
        // Without cgroups nothing bounds an agent's memory, CPU or processes together: said,
        // with why.
        for what in [Bounded::MemoryBytes, Bounded::Processes] {
            let b = find(what, Scope::Agent);
            assert_eq!(b.value, None);
            assert!(b.reason.is_some(), "{what}");
        }
        assert_eq!(
            find(Bounded::MemoryBytes, Scope::Agent).reason.as_deref(),
            Some("no cgroup here")
        );
        assert_eq!(find(Bounded::CpuSeconds, Scope::Command).value, None);
        // With cgroups, memory and processes hold per agent, CPU time over a whole command.
        let with = Limits::DEFAULT.bounds(|_| true, Ok(()));
        let agent = |what| {
            with.iter()
                .find(|b| b.what == what && b.over == Scope::Agent)
                .unwrap()
        };
        assert_eq!(agent(Bounded::MemoryBytes).value, Some(4 << 30));
        assert_eq!(agent(Bounded::Processes).value, Some(256));
        // The probe's own sandbox has no cgroup: never claimed as seen.
        assert!(!agent(Bounded::MemoryBytes).checked);
        let cpu = with
            .iter()
            .find(|b| b.what == Bounded::CpuSeconds && b.over == Scope::Command)
            .unwrap();
        assert_eq!(cpu.value, Some(600));
        // Every bound held is a value; every bound not held has a reason.
        assert!(bounds
            .iter()
            .all(|b| b.value.is_some() != b.reason.is_some()));
    }

    #[test]
    fn requests_are_checked_and_round_trip_to_the_helper() {
        let l = Limits::with(&ExecLimits {
            processes: Some(10),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(l.processes, 10);
        assert_eq!(l.memory_bytes, Limits::DEFAULT.memory_bytes);
        // The helper reads what the plugin writes.
        let back = link_sandbox_helper::args::Limits::parse(l.helper_arg().as_bytes()).unwrap();
        let read = (
            back.processes,
            back.memory_bytes,
            back.cpu_seconds,
            back.file_size_bytes,
        );
        assert_eq!(read, (10, l.memory_bytes, l.cpu_seconds, GIB));
        let too_many = ExecLimits {
            processes: Some(Limits::MAX.processes + 1),
            ..Default::default()
        };
        assert!(Limits::with(&too_many).unwrap_err().contains("processes"));
        let zero = ExecLimits {
            cpu_seconds: Some(0),
            ..Default::default()
        };
        assert!(Limits::with(&zero).unwrap_err().contains("at least 1"));
        assert_eq!(
            l.hit_by_signal(libc::SIGXFSZ).unwrap().to_string(),
            "killed: file size limit 1 GiB"
        );
        assert_eq!(l.hit_by_signal(libc::SIGKILL), None);
    }
}
