//! Confinement the host applies to the plugins it starts.
//!
//! The ruleset is prepared in the parent ([`prepare_plugin_ruleset`]), where allocating and
//! failing with a clear error are fine; the child only makes two system calls between fork and
//! exec ([`PluginRuleset::restrict_child`]).
//!
//! The sandbox plugin itself cannot run under Landlock: Landlock forbids `mount(2)` (and
//! `pivot_root(2)`), which bubblewrap needs to build each sandbox. The host starts it with
//! `no_new_privs` only ([`set_no_new_privs`]); the commands it runs are confined by bubblewrap
//! plus Landlock applied inside.
//!
//! Note for plugins under this ruleset: Landlock also denies ptrace-class access (for example
//! some `/proc/<pid>` files) to processes outside the plugin's own domain.

use crate::rules::Rules;
use crate::SandboxError;
use landlock::{CompatLevel, RulesetCreated, RulesetStatus};
use std::io;
use std::path::PathBuf;

/// System paths a plugin may read and execute.
const SYSTEM_EXEC: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
/// Read-only, no execute: process and system information.
const SYSTEM_READ: &[&str] = &["/proc", "/sys", "/dev/urandom", "/dev/random"];

/// The rules of one plugin: read and execute system paths and `programs`, read-write the
/// given directories, bind sockets in `sockets`.
pub fn plugin_rules(programs: PathBuf, read_write: &[PathBuf], sockets: &[PathBuf]) -> Rules {
    let mut read_exec: Vec<PathBuf> = SYSTEM_EXEC.iter().map(PathBuf::from).collect();
    read_exec.push(programs);
    Rules {
        read_exec,
        read_only: SYSTEM_READ.iter().map(PathBuf::from).collect(),
        read_write: read_write.to_vec(),
        rw_files: ["/dev/null", "/dev/zero", "/dev/full"]
            .map(PathBuf::from)
            .to_vec(),
        make_sock: sockets.to_vec(),
        deny_tcp: false,
        scoped: true,
    }
}

/// A prepared ruleset, applied in the child by [`PluginRuleset::restrict_child`].
#[derive(Debug)]
pub struct PluginRuleset {
    ruleset: Option<RulesetCreated>,
}

/// Prepares the ruleset of [`plugin_rules`] in the parent. Fails when the kernel cannot
/// enforce every right of the pinned ABI (run `link-plugin-sandbox probe` for the cause), or a
/// read-write or socket directory does not exist.
pub fn prepare_plugin_ruleset(
    programs: PathBuf,
    read_write: &[PathBuf],
    sockets: &[PathBuf],
) -> Result<PluginRuleset, SandboxError> {
    prepare(&plugin_rules(programs, read_write, sockets))
}

/// Prepares any [`Rules`] for [`PluginRuleset::restrict_child`].
pub fn prepare(rules: &Rules) -> Result<PluginRuleset, SandboxError> {
    let ruleset = rules
        .create(CompatLevel::HardRequirement)
        .map_err(|e| match e {
            SandboxError::Landlock(m) => SandboxError::Unavailable(format!(
                "Landlock cannot enforce the pinned ABI {} rights: {m}; run \
                 `link-plugin-sandbox probe` for the cause",
                crate::rules::PINNED_ABI_NUMBER
            )),
            other => other,
        })?;
    Ok(PluginRuleset {
        ruleset: Some(ruleset),
    })
}

impl PluginRuleset {
    /// Sets `no_new_privs` and restricts the calling process. Meant for
    /// `CommandExt::pre_exec`: it allocates nothing on success and reports failure as a
    /// plain errno (`EPERM` when the ruleset is not fully enforced, `EINVAL` when called
    /// twice), which makes the spawn fail instead of running the plugin unconfined.
    ///
    /// ```no_run
    /// # use std::os::unix::process::CommandExt;
    /// # fn f(programs: std::path::PathBuf, data: std::path::PathBuf) -> anyhow::Result<()> {
    /// let mut ruleset = link_plugin_sandbox::host::prepare_plugin_ruleset(programs, &[data], &[])?;
    /// let mut cmd = std::process::Command::new("/path/to/plugin");
    /// unsafe { cmd.pre_exec(move || ruleset.restrict_child()) };
    /// # Ok(()) }
    /// ```
    pub fn restrict_child(&mut self) -> io::Result<()> {
        let ruleset = self
            .ruleset
            .take()
            .ok_or_else(|| io::Error::from_raw_os_error(rustix::io::Errno::INVAL.raw_os_error()))?;
        rustix::thread::set_no_new_privs(true)?;
        let eperm = || io::Error::from_raw_os_error(rustix::io::Errno::PERM.raw_os_error());
        let status = ruleset.restrict_self().map_err(|_| eperm())?;
        if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
            return Err(eperm());
        }
        Ok(())
    }
}

/// Sets `no_new_privs` on the calling process; `pre_exec`-safe. This is all the confinement
/// the sandbox plugin itself can take (see the module docs).
pub fn set_no_new_privs() -> io::Result<()> {
    rustix::thread::set_no_new_privs(true).map_err(io::Error::from)
}
