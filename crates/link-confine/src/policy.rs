//! The confinement policy of one command: the bubblewrap arguments and the Landlock rules the
//! helper applies inside, derived from one value so they can never disagree.

use crate::identity::Identity;
use crate::limits::Limits;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the agent workspace appears inside the sandbox (the working directory).
pub const WORKSPACE: &str = "/workspace";
/// Where the isolated home appears inside the sandbox (`HOME`).
pub const HOME: &str = "/home/agent";
/// Where the helper ([`crate::helper`]) is inside the sandbox, a read-only copy of its
/// image that bwrap makes from a memory file: it applies Landlock and executes the command.
pub const HELPER: &str = "/.lnk-sandbox";
/// Where the probe binds this binary, to run its inside checks ([`Policy::probe_program`]).
pub const PROBE_PROGRAM: &str = "/.lnk-probe";

/// The only environment names a confined command may receive.
pub const ENV_ALLOWED: &[&str] = &["PATH", "LANG", "LC_ALL", "TERM"];
/// `PATH` when neither the caller nor the request gives one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// System paths bound read-only (or recreated as the same symlink) when present on the host.
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
/// Secrets under /etc that only their modes guard: where the command's identity could read
/// one ([`could_read`]), the helper's Landlock rules leave it out
/// (`--hide`, [`link_sandbox_helper::landlock`]); elsewhere its modes refuse it inside as on the host.
const SECRET_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
];
const MASKED_DIRS: &[&str] = &["/etc/ssh", "/etc/ssl/private"];

/// Writable inside the sandbox besides the workspace and home: private tmpfs mounts.
const PRIVATE_TMP: &[&str] = &["/tmp", "/dev/shm"];

/// Whether bwrap must start the command in a session of its own (`--new-session`): a command
/// that shares a controlling terminal can push input into it (`TIOCSTI`). The flag costs a
/// `setsid` per command, and with it a scheduler autogroup (about 3 ms a command on a busy
/// machine), so it is skipped where the process running bwrap proves there is no terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// The process running bwrap leads a session with no controlling terminal (the sandbox
    /// plugin, which the host starts so): the command shares that session, which has no
    /// terminal to reach, and only a session leader could give it one.
    Own,
    /// Anything else (a terminal, or a session led by another process that could acquire
    /// one): bwrap gives the command a new session.
    NeedsNew,
}

impl Session {
    /// What this process is now: a few system calls, made for each command so a terminal
    /// acquired since is still seen.
    pub fn current() -> Session {
        Session::of(leads_session(), has_controlling_terminal())
    }

    /// The decision itself: only a session leader with no controlling terminal may skip
    /// `--new-session`.
    pub fn of(leads_session: bool, controlling_terminal: bool) -> Session {
        if leads_session && !controlling_terminal {
            Session::Own
        } else {
            Session::NeedsNew
        }
    }
}

/// Whether this process leads its session. `getsid` answers 0 when the leader is outside this
/// pid namespace (a CI runner that made one without a session of its own): no process here
/// leads it, and rustix's `getsid`, whose `Pid` cannot be 0, must not be asked.
fn leads_session() -> bool {
    // SAFETY: getsid(0) only reads this process's session id.
    let sid = unsafe { libc::getsid(0) };
    sid > 0 && sid.unsigned_abs() == std::process::id()
}

/// `/dev/tty` is the caller's controlling terminal and opening it fails with `ENXIO` when
/// there is none; any other answer (a missing node, a refusal) counts as a terminal, so only
/// proof of none skips the new session.
fn has_controlling_terminal() -> bool {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    !matches!(
        rustix::fs::open("/dev/tty", flags, Mode::empty()),
        Err(rustix::io::Errno::NXIO)
    )
}

/// The confinement of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Host directory bound read-write at [`WORKSPACE`]: the only writable host path.
    pub workspace: PathBuf,
    /// Host directory bound read-write at [`HOME`]; an empty tmpfs when `None`.
    pub home: Option<PathBuf>,
    /// The probe's program, bound read-only at [`PROBE_PROGRAM`]; `None` for every command
    /// but the probe's.
    pub probe_program: Option<PathBuf>,
    /// Who the command is on the host.
    pub identity: Identity,
    pub limits: Limits,
    pub session: Session,
    /// The workspace and home were at their quota when the command began: they take
    /// removals and writes within existing files, and no new entry (the helper's `--shrink`).
    pub full: bool,
}

/// The descriptors bwrap is given, by number in the child.
#[derive(Debug, Clone)]
pub struct Fds {
    /// Receives bwrap's JSON with the namespace's init pid.
    pub info: Option<i32>,
    /// Receives the helper's status lines.
    pub status: Option<i32>,
    /// The seccomp program ([`crate::seccomp`]): no command runs without it.
    pub seccomp: i32,
    /// The helper's image ([`crate::helper::image`]), copied to [`HELPER`].
    pub helper: i32,
    /// The user namespace bwrap enters for a dedicated identity
    /// ([`crate::userns::shared_user_namespace`]).
    pub userns: Option<i32>,
}

impl Policy {
    /// A policy with the default limits, for `identity`, with the [`Session`] this process
    /// calls for now.
    pub fn new(workspace: impl Into<PathBuf>, home: Option<PathBuf>, identity: Identity) -> Self {
        Policy {
            workspace: workspace.into(),
            home,
            probe_program: None,
            identity,
            limits: Limits::DEFAULT,
            session: Session::current(),
            full: false,
        }
    }

    /// The secrets the command's identity could read on the host, which it must not inside:
    /// the helper's `--hide` files.
    fn hidden(&self) -> Vec<PathBuf> {
        hidden_of(self.identity, SECRET_FILES)
    }

    /// The helper's writable directories, each with its option: `--shrink` for the host's
    /// (workspace and a bound home) when they are full, else `--rw`.
    fn inside_writable(&self) -> Vec<(&'static str, &'static str)> {
        let host_home = self.home.is_some();
        let host = |dir| dir == WORKSPACE || (dir == HOME && host_home);
        [WORKSPACE, HOME]
            .into_iter()
            .chain(PRIVATE_TMP.iter().copied())
            .map(|dir| match self.full && host(dir) {
                true => ("--shrink", dir),
                false => ("--rw", dir),
            })
            .collect()
    }

    /// Arguments of `bwrap` running `command` confined (handed over with `--args`, so no
    /// process inside sees them on a command line).
    pub fn bwrap_args(&self, fds: &Fds, command: &[OsString]) -> Vec<OsString> {
        let mut a = Args::default();
        if self.session == Session::NeedsNew {
            a.flags(&["--new-session"]);
        }
        a.flags(&[
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            // Its cgroups show as `/`: not the host's path, nor the runtime's digest.
            "--unshare-cgroup",
        ]);
        match self.identity {
            // A user namespace of its own, in which no further one can be made.
            Identity::Caller { .. } => {
                a.flags(&["--unshare-user", "--disable-userns", "--cap-drop", "ALL"])
            }
            // bwrap is root in the user namespace made for the identity (root and the
            // dedicated identity mapped); the helper keeps only what it needs to drop to that
            // identity, and then drops that too.
            Identity::Dedicated { .. } => {
                // Never without one: bwrap would run as root in the host's user namespace.
                let fd = fds
                    .userns
                    .expect("a dedicated identity's bwrap is given its user namespace");
                a.flags(&["--userns"]);
                a.push(fd.to_string());
                a.flags(&[
                    "--cap-drop",
                    "ALL",
                    "--cap-add",
                    "CAP_SETUID",
                    "--cap-add",
                    "CAP_SETGID",
                    "--cap-add",
                    "CAP_SETPCAP",
                ])
            }
        }
        if let Some(fd) = fds.info {
            a.flags(&["--info-fd"]);
            a.push(fd.to_string());
        }
        a.flags(&["--add-seccomp-fd"]);
        a.push(fds.seccomp.to_string());
        system_binds(&mut a);
        let tmp = self.limits.tmp_bytes.to_string();
        a.flags(&["--proc", "/proc", "--dev", "/dev"]);
        for dir in PRIVATE_TMP {
            a.tmpfs(&tmp, dir);
        }
        a.op("--bind", &self.workspace, WORKSPACE);
        // bwrap as root makes a bind's missing parents 0700: the dedicated uid could not
        // reach the home below.
        a.flags(&["--perms", "0755", "--dir", "/home"]);
        match &self.home {
            Some(home) => a.op("--bind", home, HOME),
            None => a.tmpfs(&tmp, HOME),
        }
        a.flags(&["--perms", "0555", "--ro-bind-data"]);
        a.push(fds.helper.to_string());
        a.flags(&[HELPER]);
        if let Some(program) = &self.probe_program {
            a.op("--ro-bind", program, PROBE_PROGRAM);
        }
        // No `--chdir`: bwrap would enter the workspace as root without capabilities, which
        // a workspace owned by the dedicated uid refuses; the helper enters it afterwards.
        a.flags(&["--remount-ro", "/", "--", HELPER]);
        if let Some(fd) = fds.status {
            a.flags(&["--status-fd"]);
            a.push(fd.to_string());
        }
        if let Identity::Dedicated { uid, gid } = self.identity {
            a.flags(&["--drop-to"]);
            a.push(format!("{uid}:{gid}"));
        }
        a.flags(&["--limits"]);
        a.push(self.limits.helper_arg());
        a.flags(&["--chdir", WORKSPACE]);
        for (option, dir) in self.inside_writable() {
            a.flags(&[option, dir]);
        }
        for file in self.hidden() {
            a.flags(&["--hide"]);
            a.push(file);
        }
        a.flags(&["--"]);
        a.0.extend(command.iter().cloned());
        a.0
    }

    /// The environment of a command the plugin runs for an agent ([`Policy::env`]) with
    /// `PATH` never taken from the plugin's own: [`DEFAULT_PATH`] unless the request gives
    /// one, so the host user's directories (root's cargo, pyenv) never reach a command
    /// (issue 42). Only the diagnostic `exec`, the caller's own command line, passes its `PATH`.
    pub fn agent_env(
        inherited: impl Fn(&str) -> Option<OsString>,
        overrides: &[(String, String)],
    ) -> Result<Vec<(OsString, OsString)>, String> {
        Self::env(|k| (k != "PATH").then(|| inherited(k)).flatten(), overrides)
    }

    /// The environment of the confined command: only [`ENV_ALLOWED`] names, taken from
    /// `overrides` first, then from `inherited`; `HOME` is the sandbox home.
    pub fn env(
        inherited: impl Fn(&str) -> Option<OsString>,
        overrides: &[(String, String)],
    ) -> Result<Vec<(OsString, OsString)>, String> {
        if let Some((k, _)) = overrides
            .iter()
            .find(|(k, _)| !ENV_ALLOWED.contains(&k.as_str()))
        {
            return Err(format!(
                "environment variable `{k}` is not allowed in the sandbox; allowed: {}",
                ENV_ALLOWED.join(", ")
            ));
        }
        let mut env = vec![(OsString::from("HOME"), OsString::from(HOME))];
        for name in ENV_ALLOWED {
            let value = overrides
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
                .or_else(|| inherited(name))
                .or_else(|| (*name == "PATH").then(|| DEFAULT_PATH.into()));
            if let Some(v) = value {
                env.push((name.into(), v));
            }
        }
        Ok(env)
    }
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn flags(&mut self, flags: &[&str]) {
        self.0.extend(flags.iter().map(OsString::from));
    }
    fn push(&mut self, v: impl Into<OsString>) {
        self.0.push(v.into());
    }
    fn op(&mut self, op: &str, src: &Path, dest: &str) {
        self.flags(&[op]);
        self.push(src);
        self.push(dest);
    }
    /// A private tmpfs of `size` bytes every identity may write (sticky, like `/tmp`).
    fn tmpfs(&mut self, size: &str, dest: &str) {
        self.flags(&["--size", size, "--perms", "01777", "--tmpfs", dest]);
    }
}

/// System directories read-only; a top-level symlink (`/bin -> usr/bin`) is recreated as the
/// same symlink so the layout inside matches the host.
fn system_binds(a: &mut Args) {
    for path in SYSTEM {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    a.flags(&["--symlink"]);
                    a.push(target);
                    a.push(*path);
                }
            }
            Ok(m) if m.is_dir() => a.op("--ro-bind", Path::new(path), path),
            _ => {}
        }
    }
    for dir in MASKED_DIRS {
        if Path::new(dir).is_dir() {
            a.flags(&["--tmpfs", dir]);
        }
    }
}

/// Whether `identity` could read the file at `path` (false when there is no file). The caller
/// is asked with access(2): its real ids and every group it holds, which its commands keep in
/// their user namespace, ACLs included. The dedicated identity has no supplementary group, so
/// the modes answer, with any access ACL counted as readable. A file that cannot be examined
/// counts as readable, and is hidden.
fn could_read(identity: Identity, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return false,
        Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
    };
    match identity {
        Identity::Caller { .. } => !matches!(
            rustix::fs::access(path, rustix::fs::Access::READ_OK),
            Err(rustix::io::Errno::ACCESS)
        ),
        Identity::Dedicated { uid, gid } => {
            let acl = rustix::fs::getxattr_query(path, "system.posix_acl_access");
            let no_acl = matches!(
                acl,
                Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP)
            );
            !no_acl || readable_by_modes((meta.uid(), meta.gid(), meta.mode()), (uid, gid))
        }
    }
}

/// Of `files`, those `identity` could read, each by its real path: the helper refuses a hidden
/// file named through a symlink, whose real name its rules would leave readable.
fn hidden_of(identity: Identity, files: &[&str]) -> Vec<PathBuf> {
    files
        .iter()
        .map(PathBuf::from)
        .filter(|f| could_read(identity, f))
        .map(|f| std::fs::canonicalize(&f).unwrap_or(f))
        .collect()
}

/// The permission bits' answer for a process of `uid` and `gid` alone: the owner's bits if it
/// owns the file, else the group's if the group is its own, else the others'.
fn readable_by_modes((owner, group, mode): (u32, u32, u32), (uid, gid): (u32, u32)) -> bool {
    let bit = if owner == uid {
        0o400
    } else if group == gid {
        0o040
    } else {
        0o004
    };
    mode & bit != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_hold_the_isolation_flags_and_one_writable_bind() {
        let caller = Identity::Caller {
            uid: 1000,
            gid: 1000,
        };
        let p = Policy {
            session: Session::NeedsNew,
            ..Policy::new("/w", None, caller)
        };
        let fds = Fds {
            info: Some(5),
            status: Some(6),
            seccomp: 7,
            helper: 10,
            userns: Some(9),
        };
        let args: Vec<String> = p
            .bwrap_args(&fds, &["true".into()])
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let joined = args.join(" ");
        assert!(joined.starts_with(
            "--new-session --die-with-parent --unshare-pid --unshare-net --unshare-ipc \
             --unshare-uts --unshare-cgroup --unshare-user --disable-userns --cap-drop ALL \
             --info-fd 5 \
             --add-seccomp-fd 7"
        ));
        assert_eq!(args.iter().filter(|a| *a == "--bind").count(), 1);
        assert!(joined.contains("--bind /w /workspace"));
        assert!(joined.contains("--size 268435456 --perms 01777 --tmpfs /home/agent"));
        assert!(joined.contains("--size 268435456 --perms 01777 --tmpfs /tmp"));
        // The secrets this process could read (as the caller would) are hidden from it.
        let hide: String = p
            .hidden()
            .iter()
            .map(|f| format!(" --hide {}", f.display()))
            .collect();
        assert!(joined.ends_with(&format!(
            "--perms 0555 --ro-bind-data 10 /.lnk-sandbox --remount-ro / -- /.lnk-sandbox --status-fd 6 --limits 256,4294967296,600,1073741824 \
             --chdir /workspace --rw /workspace --rw /home/agent --rw /tmp --rw /dev/shm{hide} \
             -- true"
        )));
        assert!(
            !joined.contains("/dev/null"),
            "no file is bound over: {joined}"
        );

        // In a session of its own with no terminal the command shares it: no new session.
        let own = Policy {
            session: Session::Own,
            ..p
        };
        let joined = own
            .bwrap_args(&fds, &["true".into()])
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            joined.starts_with("--die-with-parent --unshare-pid"),
            "{joined}"
        );
        assert!(!joined.contains("--new-session"), "{joined}");

        // Full: the host's directories take no new entry; the private tmpfs ones still do.
        let writable = |home: Option<PathBuf>| {
            let full = Policy {
                full: true,
                ..Policy::new("/w", home, caller)
            };
            let args = full.bwrap_args(&fds, &["true".into()]);
            let joined = args.join(std::ffi::OsStr::new(" ")).into_string().unwrap();
            let (_, options) = joined.split_once(" --chdir /workspace ").unwrap();
            let end = options.find(" --hide").or(options.find(" -- ")).unwrap();
            options[..end].to_owned()
        };
        assert_eq!(
            writable(Some("/h".into())),
            "--shrink /workspace --shrink /home/agent --rw /tmp --rw /dev/shm"
        );
        assert_eq!(
            writable(None),
            "--shrink /workspace --rw /home/agent --rw /tmp --rw /dev/shm"
        );

        let dedicated = Identity::Dedicated { uid: 7, gid: 8 };
        let p = Policy::new("/w", None, dedicated);
        let joined = p
            .bwrap_args(&fds, &["true".into()])
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(!joined.contains("--unshare-user"), "{joined}");
        assert!(
            joined.contains("--userns 9 --cap-drop ALL --cap-add CAP_SETUID --cap-add CAP_SETGID")
        );
        assert!(joined.contains("/.lnk-sandbox --status-fd 6 --drop-to 7:8 --limits"));
    }

    #[test]
    fn a_secret_is_hidden_only_where_its_modes_let_the_identity_read_it() {
        let shadow = (0, 42, 0o100640);
        assert!(!readable_by_modes(shadow, (7, 7)));
        assert!(readable_by_modes(shadow, (7, 42)), "its group reads it");
        assert!(
            readable_by_modes((0, 42, 0o100644), (7, 7)),
            "anyone reads it"
        );
        assert!(readable_by_modes((7, 0, 0o100400), (7, 7)), "it owns it");
        // The owner's bits alone count for the owner, the group's for the group.
        assert!(!readable_by_modes((7, 0, 0o100044), (7, 0)));
        assert!(!readable_by_modes((0, 7, 0o100404), (8, 7)));

        let dir = std::env::temp_dir().join(format!("lnk-hide-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, "x").unwrap();
        let me = Identity::Caller {
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        };
        let stranger = Identity::Dedicated { uid: 7, gid: 7 };
        use std::os::unix::fs::PermissionsExt;
        for (mode, me_reads, stranger_reads) in [(0o600, true, false), (0o604, true, true)] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(could_read(me, &file), me_reads, "{mode:o}");
            assert_eq!(could_read(stranger, &file), stranger_reads, "{mode:o}");
        }
        assert!(!could_read(me, &dir.join("missing")));
        assert!(
            !could_read(stranger, &dir),
            "a directory is not a file to hide"
        );
        // A secret behind a symlink is hidden by its real name (the helper refuses the other).
        std::os::unix::fs::symlink("secret", dir.join("link")).unwrap();
        let link = dir.join("link");
        let names = [link.to_str().unwrap(), file.to_str().unwrap()];
        assert_eq!(hidden_of(stranger, &names), [file.clone(), file.clone()]);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(hidden_of(stranger, &names), Vec::<PathBuf>::new());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_a_session_leader_without_a_terminal_skips_the_new_session() {
        assert_eq!(Session::of(true, false), Session::Own);
        assert_eq!(Session::of(true, true), Session::NeedsNew);
        assert_eq!(Session::of(false, false), Session::NeedsNew);
        assert_eq!(Session::of(false, true), Session::NeedsNew);
        // The test runner starts this process in its own session only if it was made so.
        if !leads_session() {
            assert_eq!(Session::current(), Session::NeedsNew);
        }
    }

    #[test]
    fn environment_is_allow_listed() {
        let inherited = |k: &str| (k == "LANG").then(|| OsString::from("C.UTF-8"));
        let env = Policy::env(inherited, &[("TERM".into(), "dumb".into())]).unwrap();
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["HOME", "PATH", "LANG", "TERM"]);
        assert_eq!(env[1].1, DEFAULT_PATH);
        let err = Policy::env(inherited, &[("SECRET".into(), "x".into())]).unwrap_err();
        assert!(err.contains("`SECRET` is not allowed"), "{err}");
    }

    #[test]
    fn an_agents_command_gets_the_fixed_path_not_the_plugins() {
        let inherited = |k: &str| match k {
            "PATH" => Some(OsString::from("/root/.cargo/bin:/usr/bin")),
            "LANG" => Some(OsString::from("C.UTF-8")),
            _ => None,
        };
        let path = |env: &[(OsString, OsString)]| {
            env.iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone())
        };
        let agent = Policy::agent_env(inherited, &[]).unwrap();
        assert_eq!(path(&agent), Some(DEFAULT_PATH.into()));
        assert!(agent.contains(&("LANG".into(), "C.UTF-8".into())));
        // The twin: the diagnostic `exec` passes the caller's own.
        let exec = Policy::env(inherited, &[]).unwrap();
        assert_eq!(path(&exec), Some("/root/.cargo/bin:/usr/bin".into()));
        // A request may still name one.
        let asked = Policy::agent_env(inherited, &[("PATH".into(), "/bin".into())]).unwrap();
        assert_eq!(path(&asked), Some("/bin".into()));
    }
}
