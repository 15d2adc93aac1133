//! The sandbox probe's answer (`link-plugin-sandbox probe`'s JSON, which a run report keeps
//! verbatim in `platform.sandbox`) as every reader reads it: the kit, the xtask's `doctor`,
//! `runtime` and `bench-sandbox`. The probe writes its full `ProbeReport`
//! (`link-confine`); this is the part its readers decide on, typed, so none of them
//! looks a field up by name. `link-confine`'s
//! `probe::report::tests::every_reader_reads_the_report_the_probe_writes` pins the two together.

use serde::{Deserialize, Serialize};

vocabulary! {
    /// The probe's verdict: its exit status 0, 2 and 1.
    pub enum SandboxStatus ("sandbox status") {
        /// Every check passed: commands can run confined.
        Enforced = "enforced",
        /// A capability is missing (named in `reason`, with its fix).
        Unavailable = "unavailable",
        /// The sandbox ran but a check failed, or failed in an unknown way.
        Broken = "broken",
    }
}

vocabulary! {
    /// Why confinement is unavailable, as the probe found it: what `cargo xtask doctor`
    /// names the fix for, without reading the probe's sentence.
    pub enum Cause ("unavailable cause") {
        /// bubblewrap (`bwrap`) is not on PATH.
        NoBubblewrap = "no_bubblewrap",
        /// The kernel enforces no Landlock (or not at the pinned ABI).
        NoLandlock = "no_landlock",
        /// AppArmor refuses unprivileged user namespaces (Ubuntu 24.04's default).
        UserNamespacesAppArmor = "userns_apparmor",
        /// The kernel or a container's seccomp profile refuses user namespaces, or
        /// `user.max_user_namespaces` is 0.
        UserNamespacesBlocked = "userns_blocked",
        /// Link runs in a user namespace that does not map root and the dedicated range.
        UserNamespacesUnmapped = "userns_unmapped",
        /// `/proc` cannot be mounted (a container's masked paths).
        ProcNotMountable = "proc_not_mountable",
    }
}

vocabulary! {
    /// What a bound on a confined command limits; the unit is in the name.
    pub enum Bounded ("bounded") {
        MemoryBytes = "memory_bytes",
        CpuSeconds = "cpu_seconds",
        FileSizeBytes = "file_size_bytes",
        Processes = "processes",
        TmpBytes = "tmp_bytes",
        WallTimeMs = "wall_time_ms",
        WorkspaceBytes = "workspace_bytes",
        WorkspaceEntries = "workspace_entries",
    }
}

vocabulary! {
    /// Over what a bound is counted.
    pub enum Scope ("bound scope") {
        /// Each process of a command on its own (an rlimit): N processes may use N times it.
        Process = "process",
        /// A command with every process it starts.
        Command = "command",
        /// Every command of one agent together.
        Agent = "agent",
    }
}

/// One bound on a confined command, as the probe and `link status` report it: what it
/// limits, over what, to how much by default, and whether the probe saw it in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bound {
    pub what: Bounded,
    pub over: Scope,
    /// The default limit; `None`: not enforced over this scope (`reason` says why).
    pub value: Option<u64>,
    /// Whether this probe saw the limit in force inside its own sandbox (the others hold by
    /// the sandbox plugin's own checks, which its tests prove).
    pub checked: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What the sandbox probe found, as its readers need it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProbe {
    pub status: SandboxStatus,
    /// Why it is not `enforced`, with the fix.
    #[serde(default)]
    pub reason: Option<String>,
    /// The Landlock ABI the kernel offers.
    #[serde(default)]
    pub landlock_abi: Option<u32>,
    /// The ABI whose rights every ruleset handles.
    #[serde(default)]
    pub landlock_abi_pinned: Option<u32>,
    #[serde(default)]
    pub bwrap_version: Option<String>,
    /// For `unavailable`: what is missing, typed.
    #[serde(default)]
    pub cause: Option<Cause>,
    /// Which bounds hold for a confined command, and over what.
    #[serde(default)]
    pub bounds: Vec<Bound>,
}

impl SandboxProbe {
    /// The probe's stdout, when it is the JSON the probe promises.
    pub fn parse(stdout: &str) -> Option<SandboxProbe> {
        serde_json::from_str(stdout.trim()).ok()
    }

    /// A report's `platform.sandbox`, when it holds the probe's answer.
    pub fn read(value: &serde_json::Value) -> Option<SandboxProbe> {
        SandboxProbe::deserialize(value).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_json_reads_and_anything_else_does_not() {
        let p = SandboxProbe::parse(
            r#"{"status":"unavailable","reason":"bwrap: setting up uid map: Permission denied","landlock_abi":6,"checks":{}}"#,
        )
        .unwrap();
        assert_eq!(p.status, SandboxStatus::Unavailable);
        assert_eq!(
            p.reason.as_deref(),
            Some("bwrap: setting up uid map: Permission denied")
        );
        assert_eq!(p.landlock_abi, Some(6));
        assert_eq!(SandboxProbe::parse("not json"), None);
        assert_eq!(SandboxProbe::read(&serde_json::Value::Null), None);
        assert_eq!(
            SandboxProbe::read(&serde_json::json!({"status": "maybe"})),
            None
        );
    }
}
