//! The machine a comparison ran on, as a fleet of machines is compared: kernel, distribution,
//! architecture and the knobs that decide whether unprivileged user namespaces (so
//! bubblewrap) work. Read from `/proc` and `/etc/os-release`; what cannot be read says so.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The sysctls that can refuse an unprivileged user namespace (Debian's, the generic limit,
/// Ubuntu 24.04's AppArmor restriction).
pub const USERNS_SYSCTLS: [&str; 3] = [
    "kernel/unprivileged_userns_clone",
    "user/max_user_namespaces",
    "kernel/apparmor_restrict_unprivileged_userns",
];

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Machine {
    pub hostname: String,
    pub kernel: String,
    /// `/etc/os-release`'s `PRETTY_NAME`, or why it is unknown.
    pub distribution: String,
    pub arch: String,
    pub cpus: usize,
    /// Each of [`USERNS_SYSCTLS`] present on this kernel, as `name=value` (`kernel.x=1`).
    pub userns_sysctls: Vec<String>,
    /// From the sandbox probe, when it ran: `bwrap --version`'s number and the kernel's
    /// Landlock ABI.
    #[serde(default)]
    pub bwrap_version: Option<String>,
    #[serde(default)]
    pub landlock_abi: Option<u32>,
}

impl Machine {
    /// This machine, without the probe's facts.
    pub fn detect() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
        Machine {
            hostname: read("/proc/sys/kernel/hostname").unwrap_or_default(),
            kernel: read("/proc/sys/kernel/osrelease").unwrap_or_default(),
            distribution: distribution(Path::new("/etc/os-release")),
            arch: std::env::consts::ARCH.into(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            userns_sysctls: USERNS_SYSCTLS
                .iter()
                .filter_map(|k| {
                    let v = read(&format!("/proc/sys/{k}"))?;
                    Some(format!("{}={v}", k.replace('/', ".")))
                })
                .collect(),
            bwrap_version: None,
            landlock_abi: None,
        }
    }
}

/// `PRETTY_NAME` of an os-release file, unquoted; or why there is none.
fn distribution(path: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return format!("unknown ({} unreadable)", path.display());
    };
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .unwrap_or_else(|| format!("unknown (no PRETTY_NAME in {})", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_a_kernel_and_a_distribution_or_says_why_not() {
        let m = Machine::detect();
        assert!(!m.kernel.is_empty());
        assert!(!m.distribution.is_empty());
        assert!(m.cpus >= 1);
        for s in &m.userns_sysctls {
            assert!(s.contains('='), "{s}");
        }
        let missing = distribution(Path::new("/nonexistent/os-release"));
        assert!(missing.starts_with("unknown"), "{missing}");
    }
}
