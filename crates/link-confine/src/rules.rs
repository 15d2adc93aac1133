//! Landlock rulesets of the host, which confines its plugins ([`Rules`]). The ruleset inside
//! each sandbox is the helper's ([`link_sandbox_helper::landlock`]), pinned at the same ABI.
//!
//! The access rights are pinned at [`PINNED_ABI`] (never "whatever the kernel offers"), so the
//! same rules mean the same thing on every machine, and a ruleset that the kernel cannot fully
//! enforce is refused rather than applied in part.

use crate::SandboxError;
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, PathBeneath,
    PathFd, RestrictionStatus, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetStatus, Scope, ABI,
};
use std::path::{Path, PathBuf};

/// The Landlock ABI whose access rights every ruleset handles: ABI 7 (Linux 6.15), the highest
/// this project's kernels offer. ABI 7 adds audit-log flags only; its access rights (filesystem
/// incl. truncate and device ioctl, TCP bind/connect, abstract-socket and signal scoping) are
/// those of ABI 6, so the minimum kernel that enforces them fully is Linux 6.12.
pub const PINNED_ABI: ABI = ABI::V7;

/// The pinned ABI as a number, for reports: the helper's, whose inside ruleset is pinned alike.
pub const PINNED_ABI_NUMBER: u32 = link_sandbox_helper::PINNED_ABI;

/// What a confined process may touch; everything else handled by the ruleset is denied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Read, list and execute beneath these paths (missing ones are skipped).
    pub read_exec: Vec<PathBuf>,
    /// Read and list, no execute (missing ones are skipped).
    pub read_only: Vec<PathBuf>,
    /// List directories only: no file beneath is readable through this rule.
    pub list_only: Vec<PathBuf>,
    /// Every right beneath these directories (each must exist, and not be a symlink: see
    /// [`open_dir_not_link`]).
    pub read_write: Vec<PathBuf>,
    /// Read and write these files, typically `/dev/null` (missing ones are skipped).
    pub rw_files: Vec<PathBuf>,
    /// Bind (and replace stale) Unix sockets in these directories (each must exist, and not
    /// be a symlink).
    pub make_sock: Vec<PathBuf>,
    /// Deny every TCP bind and connect.
    pub deny_tcp: bool,
    /// Deny signals to, and abstract-socket connections with, processes outside the domain.
    pub scoped: bool,
    /// Handle no filesystem right at all: the paths above are ignored, and the process keeps
    /// `mount(2)` and `pivot_root(2)`, which Landlock forbids to a domain that handles any
    /// filesystem right. The domain still bounds ptrace (so `/proc/PID/environ` and memory of
    /// processes outside it), and TCP and signals as set above.
    pub leave_filesystem: bool,
}

impl Rules {
    /// A rule beneath which `path` (resolved) lies and which grants access there, listing
    /// aside (it reads no file); `None` when the ruleset gives nothing at `path`. A ruleset
    /// that handles no filesystem right reaches everything: `/`.
    pub fn reaching(&self, path: &Path) -> Option<PathBuf> {
        if self.leave_filesystem {
            return Some(PathBuf::from("/"));
        }
        // As Landlock does, through symlinks (`/lib` may be `/usr/lib`).
        let resolved = |p: &PathBuf| p.canonicalize().unwrap_or_else(|_| p.clone());
        [
            &self.read_exec,
            &self.read_only,
            &self.read_write,
            &self.rw_files,
            &self.make_sock,
        ]
        .into_iter()
        .flatten()
        .map(resolved)
        .find(|rule| path.starts_with(rule))
    }

    /// Builds the ruleset. `HardRequirement` fails here when the kernel lacks a pinned right;
    /// `BestEffort` defers that to [`restrict_self`](Self::restrict_self), which can then say
    /// exactly what the kernel lacks.
    pub fn create(&self, level: CompatLevel) -> Result<RulesetCreated, SandboxError> {
        let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
        let mut ruleset = Ruleset::default().set_compatibility(level);
        if !self.leave_filesystem {
            ruleset = ruleset
                .handle_access(AccessFs::from_all(PINNED_ABI))
                .map_err(err)?;
        }
        if self.deny_tcp {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(PINNED_ABI))
                .map_err(err)?;
        }
        if self.scoped {
            ruleset = ruleset.scope(Scope::from_all(PINNED_ABI)).map_err(err)?;
        }
        let mut created = ruleset.create().map_err(err)?;
        if self.leave_filesystem {
            return Ok(created);
        }
        let read = AccessFs::from_read(PINNED_ABI);
        let read_only = AccessFs::ReadFile | AccessFs::ReadDir;
        let file_rw = AccessFs::ReadFile | AccessFs::WriteFile;
        let sock = AccessFs::MakeSock | AccessFs::RemoveFile | AccessFs::ReadDir;
        for (paths, access, required) in [
            (&self.read_exec, read, false),
            (&self.read_only, read_only, false),
            (&self.list_only, AccessFs::ReadDir.into(), false),
            (&self.read_write, AccessFs::from_all(PINNED_ABI), true),
            (&self.rw_files, file_rw, false),
            (&self.make_sock, sock, true),
        ] {
            for path in paths {
                created = add_path(created, path, access, required)?;
            }
        }
        Ok(created)
    }

    /// Restricts the calling thread (and what it executes next) and checks the result: the
    /// ruleset must be fully enforced and `no_new_privs` set. Returns the kernel's ABI.
    pub fn restrict_self(&self) -> Result<u32, SandboxError> {
        let status = self
            .create(CompatLevel::BestEffort)?
            .restrict_self()
            .map_err(|e| SandboxError::Landlock(e.to_string()))?;
        check_status(&status)
    }
}

fn add_path(
    created: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
    required: bool,
) -> Result<RulesetCreated, SandboxError> {
    if required {
        let fd = open_dir_not_link(path)
            .map_err(|e| SandboxError::MissingPath(path.to_path_buf(), e.to_string()))?;
        return created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| SandboxError::Landlock(format!("rule for {}: {e}", path.display())));
    }
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(_) if !required => return Ok(created),
        Err(e) => return Err(SandboxError::MissingPath(path.to_path_buf(), e.to_string())),
    };
    // A rule on a file may only carry file rights; directories take the full set.
    let access = if path.is_dir() {
        access
    } else {
        access & AccessFs::from_file(PINNED_ABI)
    };
    created
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|e| SandboxError::Landlock(format!("rule for {}: {e}", path.display())))
}

/// The directory at `path`, opened for a rule or a mount without following a symlink in its
/// last component. The writable directories of a plugin lie in the state root, and the last
/// component of some (the file store's `agents`, the agent plugin's `homes`) is an entry of
/// another plugin's area: that plugin, running already, could put a symlink there between
/// the host's check and this open, and a rule or mount by path would follow it. Their
/// parents are the host's, which no plugin may change. System calls only, no allocation for
/// a `&CStr` path (the sandbox plugin's view calls it between fork and exec).
pub fn open_dir_not_link<P: rustix::path::Arg>(path: P) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::open(path, flags, Mode::empty())?)
}

/// Turns a restriction status into the kernel ABI, or the named reason it is not enough.
pub fn check_status(status: &RestrictionStatus) -> Result<u32, SandboxError> {
    let abi =
        match status.landlock {
            LandlockStatus::NotImplemented => {
                return Err(SandboxError::Unavailable(
                    "kernel without Landlock (ENOSYS): use a Linux >= 6.12 kernel built with \
                 CONFIG_SECURITY_LANDLOCK=y"
                        .into(),
                ))
            }
            LandlockStatus::NotEnabled => return Err(SandboxError::Unavailable(
                "Landlock is built into the kernel but not enabled (EOPNOTSUPP): add `landlock` \
                 to the `lsm=` kernel boot parameter"
                    .into(),
            )),
            LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            } => kernel_abi.map_or(abi_number(effective_abi), |k| k as u32),
        };
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(SandboxError::Unavailable(format!(
            "kernel Landlock ABI {abi} cannot fully enforce the rights of the pinned ABI \
             {PINNED_ABI_NUMBER} (status {:?}): use Linux >= 6.12",
            status.ruleset
        )));
    }
    if !status.no_new_privs {
        return Err(SandboxError::Landlock(
            "no_new_privs could not be set (blocked by seccomp?)".into(),
        ));
    }
    Ok(abi)
}

/// The number of an ABI (the crate's enum is non-exhaustive, so no `as` cast).
pub fn abi_number(abi: ABI) -> u32 {
    let all = [
        ABI::V1,
        ABI::V2,
        ABI::V3,
        ABI::V4,
        ABI::V5,
        ABI::V6,
        ABI::V7,
        ABI::V8,
        ABI::V9,
        ABI::V10,
    ];
    all.iter()
        .position(|a| *a == abi)
        .map_or(0, |i| i as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writable directory of a plugin that is a symlink is refused, not followed, by the
    /// rule and by the view's clone; the same directory itself is granted.
    #[test]
    fn a_link_in_place_of_a_writable_directory_is_refused_not_followed() {
        let dir = std::env::temp_dir().join(format!("lnk-rules-{}", std::process::id()));
        let (real, link) = (dir.join("real"), dir.join("agents"));
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = open_dir_not_link(&link).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
        assert!(open_dir_not_link(&real).is_ok());
        let rules = |dir: &Path| Rules {
            read_write: vec![dir.to_owned()],
            ..Rules::default()
        };
        match rules(&link).create(CompatLevel::BestEffort) {
            Err(SandboxError::MissingPath(path, _)) => assert_eq!(path, link),
            other => panic!("a rule through the link: {other:?}"),
        }
        assert!(rules(&real).create(CompatLevel::BestEffort).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The host's rulesets (the `landlock` crate) and the helper's inside ruleset (its own
    /// constants, no crate) are pinned at one ABI and handle the same rights: a change to one
    /// that the other does not follow fails here, not on a kernel in the field.
    #[test]
    fn the_host_and_the_helper_pin_one_abi_and_one_rights_set() {
        assert_eq!(
            PINNED_ABI,
            ABI::from(PINNED_ABI_NUMBER as i32),
            "the helper's PINNED_ABI is not the host's"
        );
        let host = (
            AccessFs::from_all(PINNED_ABI).bits(),
            AccessNet::from_all(PINNED_ABI).bits(),
            Scope::from_all(PINNED_ABI).bits(),
        );
        let (fs, net, scope) = link_sandbox_helper::landlock::HANDLED;
        assert_eq!(host, (fs, net, scope));
    }
}
