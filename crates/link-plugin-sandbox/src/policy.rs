//! The confinement policy of one command: the bubblewrap arguments and the Landlock rules the
//! helper applies inside, derived from one value so they can never disagree.

use crate::rules::Rules;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the agent workspace appears inside the sandbox (the working directory).
pub const WORKSPACE: &str = "/workspace";
/// Where the isolated home appears inside the sandbox (`HOME`).
pub const HOME: &str = "/home/agent";
/// Where this binary is bound (read-only) inside the sandbox, to apply Landlock.
pub const HELPER: &str = "/.lnk-sandbox";
/// The subcommand of this binary that applies Landlock and executes the command.
pub const LANDLOCK_EXEC: &str = "landlock-exec";

/// The only environment names a confined command may receive.
pub const ENV_ALLOWED: &[&str] = &["PATH", "LANG", "LC_ALL", "TERM"];
/// `PATH` when neither the caller nor the request gives one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// System paths bound read-only (or recreated as the same symlink) when present on the host.
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];
/// Files under /etc that root could read through the owner bits even without capabilities.
const MASKED_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
];
const MASKED_DIRS: &[&str] = &["/etc/ssh", "/etc/ssl/private"];

/// Writable inside the sandbox besides the workspace and home: private tmpfs mounts.
const PRIVATE_TMP: &[&str] = &["/tmp", "/dev/shm"];

/// The confinement of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Host directory bound read-write at [`WORKSPACE`]: the only writable host path.
    pub workspace: PathBuf,
    /// Host directory bound read-write at [`HOME`]; an empty tmpfs when `None`.
    pub home: Option<PathBuf>,
    /// Host path of this binary, bound read-only at [`HELPER`].
    pub helper: PathBuf,
}

impl Policy {
    pub fn new(workspace: impl Into<PathBuf>, home: Option<PathBuf>, helper: PathBuf) -> Self {
        Policy {
            workspace: workspace.into(),
            home,
            helper,
        }
    }

    /// The Landlock rules the helper applies inside the namespace.
    pub fn landlock_rules(&self) -> Rules {
        Rules::inside(&self.inside_writable())
    }

    fn inside_writable(&self) -> Vec<PathBuf> {
        [WORKSPACE, HOME]
            .iter()
            .chain(PRIVATE_TMP)
            .map(PathBuf::from)
            .collect()
    }

    /// Arguments of `bwrap` running `command` confined. `info_fd` receives bwrap's JSON with
    /// the namespace's init pid; `status_fd` receives the helper's one-line status.
    pub fn bwrap_args(
        &self,
        info_fd: Option<i32>,
        status_fd: Option<i32>,
        command: &[OsString],
    ) -> Vec<OsString> {
        let mut a = Args::default();
        a.flags(&[
            "--new-session",
            "--die-with-parent",
            "--unshare-user",
            "--cap-drop",
            "ALL",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
        ]);
        if let Some(fd) = info_fd {
            a.flags(&["--info-fd"]);
            a.push(fd.to_string());
        }
        system_binds(&mut a);
        a.flags(&["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
        a.op("--bind", &self.workspace, WORKSPACE);
        match &self.home {
            Some(home) => a.op("--bind", home, HOME),
            None => a.flags(&["--tmpfs", HOME]),
        }
        a.op("--ro-bind", &self.helper, HELPER);
        a.flags(&[
            "--remount-ro",
            "/",
            "--chdir",
            WORKSPACE,
            "--",
            HELPER,
            LANDLOCK_EXEC,
        ]);
        if let Some(fd) = status_fd {
            a.flags(&["--status-fd"]);
            a.push(fd.to_string());
        }
        for dir in self.landlock_rules().read_write {
            a.flags(&["--rw"]);
            a.push(dir);
        }
        a.flags(&["--"]);
        a.0.extend(command.iter().cloned());
        a.0
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
    for file in MASKED_FILES {
        if Path::new(file).is_file() {
            a.op("--ro-bind", Path::new("/dev/null"), file);
        }
    }
    for dir in MASKED_DIRS {
        if Path::new(dir).is_dir() {
            a.flags(&["--tmpfs", dir]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_hold_the_isolation_flags_and_one_writable_bind() {
        let p = Policy::new("/w", None, "/h/sandbox".into());
        let args: Vec<String> = p
            .bwrap_args(Some(5), Some(6), &["true".into()])
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let joined = args.join(" ");
        assert!(joined.starts_with(
            "--new-session --die-with-parent --unshare-user --cap-drop ALL --unshare-pid \
             --unshare-net --unshare-ipc --unshare-uts --info-fd 5"
        ));
        assert_eq!(args.iter().filter(|a| *a == "--bind").count(), 1);
        assert!(joined.contains("--bind /w /workspace"));
        assert!(joined.contains("--tmpfs /home/agent"));
        assert!(joined.ends_with(
            "/.lnk-sandbox landlock-exec --status-fd 6 --rw /workspace --rw /home/agent \
             --rw /tmp --rw /dev/shm -- true"
        ));
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
}
