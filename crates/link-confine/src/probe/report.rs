//! What the probe answers: the verdict and the figures behind it.
//!
//! Apart from the steps that fill it: every reader of the probe (the host, the kit, the
//! xtask) reads this JSON, so its shape is a contract of its own.

use crate::identity::Identity;
use crate::limits::Limits;
use link_report::probe::Cause;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// Every check passed: commands can run confined.
    Enforced,
    /// A capability is missing (named in `reason` with its fix); exit status 2.
    Unavailable,
    /// The sandbox ran but a check failed, or failed in an unknown way; exit status 1.
    Broken,
}

impl ProbeStatus {
    pub fn exit_code(self) -> i32 {
        match self {
            ProbeStatus::Enforced => 0,
            ProbeStatus::Broken => 1,
            ProbeStatus::Unavailable => 2,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeStatus::Enforced => "enforced",
            ProbeStatus::Unavailable => "unavailable",
            ProbeStatus::Broken => "broken",
        }
    }
}

/// What the probe found; printed as JSON by `link-plugin-sandbox probe`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeReport {
    pub status: ProbeStatus,
    /// Why it is not `enforced`, with the fix; `None` when enforced.
    pub reason: Option<String>,
    /// The Landlock ABI the kernel offers (`None` when it has none or it was not reached).
    pub landlock_abi: Option<u32>,
    /// The ABI whose rights every ruleset handles.
    pub landlock_abi_pinned: u32,
    /// Per namespace (user, pid, net, ipc, uts, mnt): separate from the host's.
    pub namespaces: std::collections::BTreeMap<String, bool>,
    /// A TCP connect from inside to a loopback listener outside failed, and none arrived.
    pub network_blocked: Option<bool>,
    pub bwrap: Option<PathBuf>,
    pub bwrap_version: Option<String>,
    /// Who a confined command is on the host.
    pub identity: Option<Identity>,
    /// The seccomp filter every confined command runs under.
    pub seccomp: Option<FilterInfo>,
    /// The default limits of a confined command.
    pub limits: Option<Limits>,
    /// Which bounds hold for a confined command, over what, and which this probe saw.
    pub bounds: Vec<link_report::probe::Bound>,
    /// Each check: name → `ok` or what was seen instead.
    pub checks: std::collections::BTreeMap<String, String>,
    /// For `unavailable`: what the machine lacks, typed (`doctor` names its fix).
    pub cause: Option<Cause>,
}

/// The seccomp filter, as a report names it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FilterInfo {
    pub name: String,
    pub sha256: String,
    pub programs: usize,
    pub instructions: usize,
}

impl ProbeReport {
    pub(super) fn new() -> Self {
        ProbeReport {
            status: ProbeStatus::Enforced,
            reason: None,
            landlock_abi: None,
            landlock_abi_pinned: crate::rules::PINNED_ABI_NUMBER,
            namespaces: Default::default(),
            network_blocked: None,
            bwrap: None,
            bwrap_version: None,
            identity: None,
            seccomp: None,
            limits: None,
            bounds: Vec::new(),
            checks: Default::default(),
            cause: None,
        }
    }
    /// The answer of a probe that panicked: `broken`, with where and why, so whoever reads
    /// the answer (the host's start, the kit, `doctor`) names the fault, not a backtrace note.
    pub fn panicked(info: &std::panic::PanicHookInfo<'_>) -> Self {
        ProbeReport::new().fail(ProbeStatus::Broken, format!("the probe panicked: {info}"))
    }

    pub(super) fn fail(mut self, status: ProbeStatus, reason: impl Into<String>) -> Self {
        self.status = status;
        self.reason = Some(reason.into());
        self
    }

    /// `unavailable` for `cause`, or `broken` when no cause is known: only a machine's
    /// missing capability is unavailable.
    pub(super) fn lacking(self, cause: Option<Cause>, reason: impl Into<String>) -> Self {
        let status = match cause {
            Some(_) => ProbeStatus::Unavailable,
            None => ProbeStatus::Broken,
        };
        ProbeReport {
            cause,
            ..self.fail(status, reason)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reader of the probe (the kit, the xtask) reads its JSON as
    /// `link_report::probe::SandboxProbe`: whatever this report writes, they read the same
    /// verdict, reason and figures.
    #[test]
    fn every_reader_reads_the_report_the_probe_writes() {
        use link_report::probe::{SandboxProbe, SandboxStatus};
        for (status, want) in [
            (ProbeStatus::Enforced, SandboxStatus::Enforced),
            (ProbeStatus::Unavailable, SandboxStatus::Unavailable),
            (ProbeStatus::Broken, SandboxStatus::Broken),
        ] {
            let mut report = ProbeReport::new().fail(status, "bwrap: no user namespaces");
            report.landlock_abi = Some(7);
            report.bwrap_version = Some("0.11.0".into());
            report.bounds = Limits::DEFAULT.bounds(|_| true, Ok(()));
            let json = serde_json::to_string(&report).unwrap();
            let read = SandboxProbe::parse(&json).expect("a reader reads the probe's JSON");
            assert_eq!(
                read,
                SandboxProbe {
                    status: want,
                    reason: report.reason.clone(),
                    landlock_abi: Some(7),
                    landlock_abi_pinned: Some(crate::rules::PINNED_ABI_NUMBER),
                    bwrap_version: Some("0.11.0".into()),
                    cause: None,
                    bounds: report.bounds.clone(),
                }
            );
            assert_eq!(status.as_str(), serde_json::to_value(want).unwrap());
        }
    }
}
