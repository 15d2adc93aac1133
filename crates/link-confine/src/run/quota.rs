//! What a command uses while it runs, measured again every [`QUOTA_CHECK`] or so: its
//! workspace and home against the quota and, in the agent's cgroup, the CPU time of all its
//! processes together ([`crate::cgroup`]); the limit passed stops the command.

use crate::cgroup::AgentCgroup;
use crate::identity::{usage_seen, Usage};
use crate::limits::{Limits, QUOTA_CHECK};
use link_protocol::routes::sandbox::LimitHit;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tree whose walk takes longer is measured less often: walks take at most one part in this.
const WALK_SHARE: u32 = 10;

/// One command's quota.
#[derive(Debug)]
pub(super) struct Quota {
    dirs: Vec<PathBuf>,
    /// The most the files may take while it runs: the quota, or what they took when it began
    /// if that was more (a command that began full is held to making nothing by Landlock).
    most: Usage,
    quota: Usage,
    next: Instant,
    every: Duration,
    /// The agent's cgroup, which counts the command's CPU time, read every [`QUOTA_CHECK`]
    /// whatever the walks take.
    cgroup: Option<Arc<AgentCgroup>>,
    cpu_next: Instant,
}

impl Quota {
    pub(super) fn new(
        dirs: Vec<PathBuf>,
        at_start: Usage,
        limits: &Limits,
        cgroup: Option<Arc<AgentCgroup>>,
    ) -> Quota {
        let quota = Usage {
            bytes: limits.workspace_bytes,
            entries: limits.workspace_entries,
        };
        Quota {
            dirs,
            most: Usage {
                bytes: quota.bytes.max(at_start.bytes),
                entries: quota.entries.max(at_start.entries),
            },
            quota,
            next: Instant::now() + QUOTA_CHECK,
            every: QUOTA_CHECK,
            cgroup,
            cpu_next: Instant::now() + QUOTA_CHECK,
        }
    }

    /// How long until the next measure is due.
    pub(super) fn due_in(&self, now: Instant) -> Duration {
        let next = match self.cgroup {
            Some(_) => self.next.min(self.cpu_next),
            None => self.next,
        };
        next.saturating_duration_since(now)
    }

    /// Measures what is due; the limit passed, if one was.
    pub(super) fn check(&mut self, now: Instant) -> Option<LimitHit> {
        self.check_cpu(now).or_else(|| self.check_files(now))
    }

    /// The CPU time of the command's processes together, where its agent has a cgroup.
    fn check_cpu(&mut self, now: Instant) -> Option<LimitHit> {
        let cgroup = self.cgroup.as_ref().filter(|_| now >= self.cpu_next)?;
        self.cpu_next = now + QUOTA_CHECK;
        cgroup.cpu_passed()
    }

    /// The workspace and home against the quota, when due.
    fn check_files(&mut self, now: Instant) -> Option<LimitHit> {
        if now < self.next {
            return None;
        }
        let used = self
            .dirs
            .iter()
            .map(|d| usage_seen(d))
            .fold(Usage::default(), Usage::plus);
        let took = now.elapsed();
        self.every = QUOTA_CHECK.max(took * WALK_SHARE);
        self.next = Instant::now() + self.every;
        self.passed(used)
    }

    fn passed(&self, used: Usage) -> Option<LimitHit> {
        if used.bytes > self.most.bytes {
            return Some(LimitHit::WorkspaceQuota {
                bytes: self.quota.bytes,
            });
        }
        (used.entries > self.most.entries).then_some(LimitHit::WorkspaceEntries {
            entries: self.quota.entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_held_to_the_quota_or_to_what_it_began_with() {
        let limits = Limits {
            workspace_bytes: 100,
            workspace_entries: 10,
            ..Limits::DEFAULT
        };
        let under = Quota::new(
            vec![],
            Usage {
                bytes: 50,
                entries: 5,
            },
            &limits,
            None,
        );
        let at = |bytes, entries| Usage { bytes, entries };
        assert_eq!(under.passed(at(100, 10)), None);
        assert_eq!(
            under.passed(at(101, 1)),
            Some(LimitHit::WorkspaceQuota { bytes: 100 })
        );
        assert_eq!(
            under.passed(at(1, 11)),
            Some(LimitHit::WorkspaceEntries { entries: 10 })
        );
        // Over both when it began: removing is fine, growing is not.
        let over = Quota::new(vec![], at(500, 50), &limits, None);
        assert_eq!(over.passed(at(400, 50)), None);
        assert_eq!(
            over.passed(at(400, 51)),
            Some(LimitHit::WorkspaceEntries { entries: 10 })
        );
    }
}
