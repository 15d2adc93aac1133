//! Naming why bubblewrap failed: a cause the machine lacks, with its fix, or none.
//!
//! Apart from the probe's steps: the sandbox plugin names a failed command's cause with it
//! too, from what bwrap printed alone.

use link_report::probe::Cause;

/// Names the known causes of a bwrap failure with their fix: a cause the machine lacks, or
/// none (`broken`) with what bwrap said.
pub fn diagnose_bwrap(stderr: &str, code: Option<i32>) -> (Option<Cause>, String) {
    let msg = stderr.trim();
    let known = if msg.contains("setting up uid map: Permission denied") {
        Some((
            Cause::UserNamespacesAppArmor,
            "user namespaces are blocked by AppArmor (`setting up uid map: Permission denied`): \
             allow them with `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` or an \
             AppArmor profile granting `userns` to bwrap",
        ))
    } else if msg.contains("new namespace") {
        Some((
            Cause::UserNamespacesBlocked,
            "user namespaces cannot be created (a container's seccomp profile, or \
             user.max_user_namespaces=0): run the container with a seccomp profile that allows \
             clone/unshare of user namespaces (e.g. docker --security-opt seccomp=unconfined) \
             or raise user.max_user_namespaces",
        ))
    } else if msg.contains("Can't mount proc") {
        Some((
            Cause::ProcNotMountable,
            "/proc is not mountable in this container (masked /proc paths): run it with \
             --security-opt systempaths=unconfined, or on a host without masked /proc",
        ))
    } else {
        None
    };
    match known {
        Some((cause, why)) => (Some(cause), format!("{why}; bwrap said: {msg}")),
        None => (None, crate::run::bwrap_failed(code, msg)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{ProbeReport, ProbeStatus};

    #[test]
    fn known_bwrap_failures_are_named_with_their_fix() {
        let cases = [
            (
                "bwrap: setting up uid map: Permission denied",
                Cause::UserNamespacesAppArmor,
                "AppArmor",
            ),
            (
                "bwrap: No permissions to creating new namespace, likely because the kernel \
                 does not allow non-privileged user namespaces.",
                Cause::UserNamespacesBlocked,
                "seccomp",
            ),
            (
                "bwrap: Creating new namespace failed: Operation not permitted",
                Cause::UserNamespacesBlocked,
                "seccomp",
            ),
            (
                "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
                Cause::ProcNotMountable,
                "/proc",
            ),
        ];
        for (stderr, want, fix) in cases {
            let (cause, reason) = diagnose_bwrap(stderr, Some(1));
            assert_eq!(cause, Some(want), "{stderr}");
            assert!(reason.contains(fix), "{reason}");
            let report = ProbeReport::new().lacking(cause, reason);
            assert_eq!(report.status, ProbeStatus::Unavailable);
            let read =
                link_report::probe::SandboxProbe::parse(&serde_json::to_string(&report).unwrap())
                    .unwrap();
            assert_eq!(read.cause, Some(want), "the readers read the cause");
        }
        let (cause, reason) = diagnose_bwrap("bwrap: something new", Some(1));
        assert_eq!(cause, None);
        assert_eq!(
            reason,
            "bubblewrap failed (exit status 1): bwrap: something new"
        );
        let (_, killed) = diagnose_bwrap("", None);
        assert_eq!(killed, "bubblewrap failed (ended by a signal): ");
        assert_eq!(
            ProbeReport::new().lacking(cause, reason).status,
            ProbeStatus::Broken
        );
    }
}
