//! The fixture's state root: a short directory outside temporary folders, made per run and
//! removed when the fixture is dropped (also on failure and, through the runner's signal
//! handler, on interrupt).
//!
//! The parent is `LNK_TEST_STATE_DIR` when set, else `~/.cache/lnk`; each run makes its own
//! child `r<pid>-<n>` inside it. Roots inside temporary folders and roots whose socket paths
//! would exceed the Unix limit are refused before anything is created.

use link_protocol::layout::{RootError, StateLayout};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Selects the parent directory of the per-run state roots.
pub const ENV_TEST_STATE_DIR: &str = "LNK_TEST_STATE_DIR";

/// Variables from the invoking environment that children may still see.
const PASSTHROUGH: &[&str] = &["PATH", "LANG", "LC_ALL", "RUST_LOG", "RUST_BACKTRACE"];

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Why a state root cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("{ENV_TEST_STATE_DIR} is empty: set it to a short directory such as $HOME/lnk-tests, or unset it")]
    EmptyVariable,
    #[error(
        "state directory {0} does not exist: create it (mkdir -p {0}) or unset {ENV_TEST_STATE_DIR} to use ~/.cache"
    )]
    ParentMissing(PathBuf),
    #[error("{0} is not a directory: point {ENV_TEST_STATE_DIR} at a directory")]
    ParentNotDirectory(PathBuf),
    #[error(
        "HOME is not set: set {ENV_TEST_STATE_DIR} to a short directory outside temporary folders"
    )]
    NoHome,
    #[error("{0}")]
    Root(#[from] RootError),
    #[error("cannot create state root {path}: {source}; choose a writable directory with {ENV_TEST_STATE_DIR}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where state roots go: `LNK_TEST_STATE_DIR`, else `$HOME/.cache/lnk`.
pub fn parent_dir() -> Result<PathBuf, FixtureError> {
    parent_from(
        std::env::var_os(ENV_TEST_STATE_DIR),
        std::env::var_os("HOME"),
    )
}

/// [`parent_dir`] from explicit values, so the rule can be tested without the environment.
pub fn parent_from(
    test_dir: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf, FixtureError> {
    match test_dir {
        Some(d) if d.is_empty() => Err(FixtureError::EmptyVariable),
        Some(d) => Ok(PathBuf::from(d)),
        None => match home.filter(|h| !h.is_empty()) {
            Some(h) => Ok(PathBuf::from(h).join(".cache").join("lnk")),
            None => Err(FixtureError::NoHome),
        },
    }
}

/// Checks that a child of `parent` could serve as a state root, creating nothing.
/// Returns the path the next root would get.
pub fn plan_in(parent: &Path) -> Result<PathBuf, FixtureError> {
    let next = parent.join(child_name(NEXT.load(Ordering::Relaxed)));
    StateLayout::new(&next).check()?;
    Ok(next)
}

/// [`plan_in`] for the parent the environment selects; a chosen `LNK_TEST_STATE_DIR` must
/// exist (the default `~/.cache/lnk` is made when the root is created).
pub fn plan() -> Result<PathBuf, FixtureError> {
    let parent = parent_dir()?;
    let next = plan_in(&parent)?;
    if std::env::var_os(ENV_TEST_STATE_DIR).is_some() {
        existing_dir(&parent)?;
    }
    Ok(next)
}

fn existing_dir(parent: &Path) -> Result<(), FixtureError> {
    match std::fs::metadata(parent) {
        Err(_) => Err(FixtureError::ParentMissing(parent.to_path_buf())),
        Ok(m) if !m.is_dir() => Err(FixtureError::ParentNotDirectory(parent.to_path_buf())),
        Ok(_) => Ok(()),
    }
}

fn child_name(n: u32) -> String {
    format!("r{}-{n}", std::process::id())
}

/// The directories every process shares that the sandbox plugin's view covers
/// (`link_confine::plugin_ns`), by the attempt that reads a file planted there.
pub const SHARED_PLANTS: [(&str, &str); 2] =
    [("read_shared_tmp", "/tmp"), ("read_shared_shm", "/dev/shm")];

/// The world-readable file the compromised-plugin test plants in `shared` (one of
/// [`SHARED_PLANTS`]) for the runtime at `root` (named after it and the user), which the
/// sandbox plugin's view must not show.
pub fn planted_in(shared: &str, root: &Path) -> PathBuf {
    let name = root.file_name().unwrap_or_default().to_string_lossy();
    let uid = rustix::process::getuid().as_raw();
    Path::new(shared).join(format!("lnk-planted-{uid}-{name}"))
}

#[derive(Debug)]
pub struct StateRoot {
    layout: StateLayout,
    removed: bool,
}

impl StateRoot {
    /// Makes a fresh root under the parent the environment selects.
    pub fn create() -> Result<StateRoot, FixtureError> {
        let parent = parent_dir()?;
        // ~/.cache/lnk is ours to make; a chosen LNK_TEST_STATE_DIR must already exist.
        if std::env::var_os(ENV_TEST_STATE_DIR).is_none() {
            plan_in(&parent)?;
            std::fs::create_dir_all(&parent).map_err(|source| FixtureError::Create {
                path: parent.clone(),
                source,
            })?;
        }
        StateRoot::create_in(&parent)
    }

    /// Makes a fresh root `r<pid>-<n>` inside an existing `parent`.
    pub fn create_in(parent: &Path) -> Result<StateRoot, FixtureError> {
        plan_in(parent)?;
        existing_dir(parent)?;
        loop {
            let path = parent.join(child_name(NEXT.fetch_add(1, Ordering::Relaxed)));
            StateLayout::new(&path).check()?;
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    let root = StateRoot {
                        layout: StateLayout::new(&path),
                        removed: false,
                    };
                    root.make_home().map_err(|source| FixtureError::Create {
                        path: path.clone(),
                        source,
                    })?;
                    return Ok(root);
                }
                // A leftover of an earlier process with the same pid: take the next number.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(FixtureError::Create { path, source }),
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.layout.root()
    }

    pub fn layout(&self) -> &StateLayout {
        &self.layout
    }

    /// The isolated home the runner's own children (`link up`, `link token create`) get.
    pub fn home(&self) -> PathBuf {
        self.path().join("home").join("runner")
    }

    fn make_home(&self) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for (_, dir) in self.xdg_dirs() {
            std::fs::create_dir_all(&dir)?;
        }
        let runtime = self.home().join("run");
        std::fs::create_dir_all(&runtime)?;
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700))
    }

    /// The XDG base directories of [`link_protocol::layout::home_env`] (all but `HOME`).
    fn xdg_dirs(&self) -> Vec<(&'static str, PathBuf)> {
        let home = self.home();
        link_protocol::layout::home_env(&home)
            .into_iter()
            .filter(|(k, _)| *k != "HOME")
            .collect()
    }

    /// The variables that shape a child's run: isolated HOME and XDG_* and the keychain off.
    pub fn isolated_env(&self) -> Vec<(String, String)> {
        let home = self.home();
        let mut env = vec![("HOME".to_owned(), home.display().to_string())];
        env.extend(
            self.xdg_dirs()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.display().to_string())),
        );
        env.push((
            "XDG_RUNTIME_DIR".to_owned(),
            home.join("run").display().to_string(),
        ));
        use link_protocol::manifest::{ENV_KEYCHAIN, KEYCHAIN_OFF};
        env.push((ENV_KEYCHAIN.to_owned(), KEYCHAIN_OFF.to_owned()));
        env
    }

    /// Prepares `cmd` to run with only the isolated environment (plus PATH and locale).
    pub fn isolate(&self, cmd: &mut std::process::Command) {
        cmd.env_clear();
        for key in PASSTHROUGH {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.envs(self.isolated_env());
        cmd.current_dir(self.path());
    }

    /// Removes the root now, reporting failure (drop removes it silently).
    pub fn remove(mut self) -> std::io::Result<()> {
        self.removed = true;
        remove_tree(self.path())
    }
}

impl Drop for StateRoot {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = remove_tree(self.path()) {
                link_protocol::errln!(
                    "warning: could not remove state root {}: {e}",
                    self.path().display()
                );
            }
        }
    }
}

/// Removes a tree, first making directories writable when a plugin left them read-only.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            make_writable(path);
            std::fs::remove_dir_all(path)
        }
    }
}

fn make_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_dir() {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                make_writable(&entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_parent() -> PathBuf {
        let home = std::env::var_os("HOME").expect("HOME");
        let dir = PathBuf::from(home).join(".cache").join("lnk-t");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn parent_follows_the_variable_then_home() {
        let p = parent_from(Some("/srv/lnk".into()), Some("/home/u".into())).unwrap();
        assert_eq!(p, PathBuf::from("/srv/lnk"));
        let p = parent_from(None, Some("/home/u".into())).unwrap();
        assert_eq!(p, PathBuf::from("/home/u/.cache/lnk"));
        assert!(matches!(
            parent_from(Some("".into()), None),
            Err(FixtureError::EmptyVariable)
        ));
        assert!(matches!(parent_from(None, None), Err(FixtureError::NoHome)));
    }

    #[test]
    fn refuses_temporary_and_long_roots_creating_nothing() {
        for temp in ["/tmp/lnk-x", "/var/tmp/lnk-x", "/dev/shm/lnk-x"] {
            let err = StateRoot::create_in(Path::new(temp)).unwrap_err();
            assert!(err.to_string().contains("temporary folder"), "{err}");
            assert!(!Path::new(temp).exists());
        }
        let long = test_parent().join("x".repeat(100));
        let err = StateRoot::create_in(&long).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("107 byte") && text.contains("shorter"),
            "{text}"
        );
        assert!(!long.exists());
        let err = StateRoot::create_in(Path::new("relative/dir")).unwrap_err();
        assert!(err.to_string().contains("absolute"), "{err}");
    }

    #[test]
    fn missing_parent_is_named() {
        let missing = test_parent().join("does-not-exist");
        let err = StateRoot::create_in(&missing).unwrap_err();
        assert!(matches!(err, FixtureError::ParentMissing(_)), "{err}");
        assert!(err.to_string().contains("mkdir -p"), "{err}");
    }

    #[test]
    fn root_is_a_fresh_child_with_an_isolated_home_and_is_removed_on_drop() {
        let parent = test_parent();
        let a = StateRoot::create_in(&parent).unwrap();
        let b = StateRoot::create_in(&parent).unwrap();
        assert_ne!(a.path(), b.path());
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(&format!("r{}-", std::process::id())),
            "{name}"
        );
        a.layout().check().unwrap();
        let env = a.isolated_env();
        let get = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        assert_eq!(get("LNK_KEYCHAIN").as_deref(), Some("off"));
        for key in [
            "HOME",
            "XDG_CONFIG_HOME",
            "XDG_RUNTIME_DIR",
            "XDG_DATA_HOME",
        ] {
            let dir = PathBuf::from(get(key).unwrap());
            assert!(dir.starts_with(a.path()) && dir.is_dir(), "{key}={dir:?}");
        }
        let out = {
            let mut cmd = std::process::Command::new("sh");
            cmd.args(["-c", "echo $HOME:$LNK_KEYCHAIN:$XDG_CACHE_HOME"]);
            a.isolate(&mut cmd);
            // Through the reaper, so its background pass never collects this child.
            crate::reaper::global()
                .output(&mut cmd, std::time::Duration::from_secs(30))
                .unwrap()
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with(&a.home().display().to_string()), "{text}");
        assert!(text.contains(":off:"), "{text}");
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        std::fs::write(pa.join("file"), "x").unwrap();
        drop(a);
        assert!(!pa.exists());
        b.remove().unwrap();
        assert!(!pb.exists());
    }

    #[test]
    fn root_is_removed_when_the_run_panics() {
        let parent = test_parent();
        let mut path = PathBuf::new();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let root = StateRoot::create_in(&parent).unwrap();
            path = root.path().to_path_buf();
            std::fs::create_dir_all(root.path().join("data/x")).unwrap();
            panic!("a failing run");
        }));
        assert!(result.is_err());
        assert!(!path.as_os_str().is_empty() && !path.exists(), "{path:?}");
    }
}

/// A local user made for one test (`useradd`, no home), removed on drop: the tests that must
/// also hold for an ordinary user run their programs as it.
#[derive(Debug)]
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl TestUser {
    /// A new user; `Err` says why not (not root, no `useradd`).
    pub fn create(prefix: &str) -> Result<TestUser, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not root: cannot create a second local user".into());
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        let out = std::process::Command::new("useradd")
            .args(["-M", "-s", "/usr/sbin/nologin", &name])
            .output()
            .map_err(|e| format!("useradd: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "useradd {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // Made first, so a failure below still removes it on drop.
        let mut user = TestUser {
            name,
            uid: 0,
            gid: 0,
        };
        user.uid = user.id("-u")?;
        user.gid = user.id("-g")?;
        Ok(user)
    }

    /// A new user for a test that must also hold for an ordinary user; `None`, after saying
    /// the test is skipped, only where this process is not root. As root a user that cannot be
    /// made fails the test: the machine is broken, and a skip would hide it.
    pub fn or_skip(prefix: &str) -> Option<TestUser> {
        if !rustix::process::geteuid().is_root() {
            crate::probe::skipped(
                "SKIPPED (ordinary user): not root, so no second local user can be made",
            );
            return None;
        }
        Some(TestUser::create(prefix).unwrap_or_else(|why| {
            panic!("as root, a local user for the test: {why} (install useradd: passwd)")
        }))
    }

    fn id(&self, flag: &str) -> Result<u32, String> {
        let out = std::process::Command::new("id")
            .args([flag, &self.name])
            .output()
            .map_err(|e| format!("id: {e}"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| format!("id {flag} {} printed no number", self.name))
    }

    /// Its live processes (by real uid, zombies aside): none should be left after a test.
    /// The real uid is read from `status`; the owner of `/proc/PID` is the effective uid.
    pub fn processes(&self) -> Vec<i32> {
        let Ok(all) = procfs::process::all_processes() else {
            return Vec::new();
        };
        all.flatten()
            .filter(|p| p.status().is_ok_and(|s| s.ruid == self.uid))
            .filter(|p| p.stat().is_ok_and(|s| s.state != 'Z'))
            .map(|p| p.pid())
            .collect()
    }

    /// `args` as this user (`runuser`), with the environment `runuser` gives.
    pub fn command(&self, args: &[impl AsRef<std::ffi::OsStr>]) -> std::process::Command {
        let mut cmd = std::process::Command::new("runuser");
        cmd.args(["-u", &self.name, "--"]).args(args);
        cmd
    }

    /// `link up --profile PROFILE --state STATE` as this user, with `link` the host program
    /// (somewhere this user can run it), once it printed its ready line; a start that fails
    /// fails the test with the host's stderr. Stop it with `link down` as this user.
    pub fn up(&self, link: &Path, profile: &str, state: &Path) -> std::process::Child {
        self.ready(self.command(&Self::up_args(link, profile, state)))
    }

    /// `link up --profile PROFILE --state STATE` with `link` the host program.
    pub fn up_args(link: &Path, profile: &str, state: &Path) -> Vec<std::ffi::OsString> {
        let args = [link.as_os_str(), "up".as_ref(), "--profile".as_ref()];
        let mut args: Vec<std::ffi::OsString> = args.iter().map(|a| a.into()).collect();
        args.extend([profile.into(), "--state".into(), state.into()]);
        args
    }

    /// `args` as this user in the process that runs it (`setpriv` becomes the user and execs
    /// them: no `runuser` stays beside them, in their cgroup say). A `pre_exec` of its runs
    /// as root.
    pub fn exec_as(&self, args: &[impl AsRef<std::ffi::OsStr>]) -> std::process::Command {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--init-groups", "--reset-env", "--"])
            .args(args);
        cmd
    }

    /// `up`, a command that starts `link up` as this user, started; returned once it
    /// printed its ready line; a start that fails fails the test with the host's stderr.
    pub fn ready(&self, mut up: std::process::Command) -> std::process::Child {
        use std::io::BufRead;
        let mut up = up
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting link up");
        let mut ready = String::new();
        std::io::BufReader::new(up.stdout.take().expect("piped"))
            .read_line(&mut ready)
            .expect("reading the ready line");
        if !ready.starts_with("ready ") {
            let _ = up.kill();
            let out = up.wait_with_output().expect("waiting for link up");
            panic!(
                "link up as {}: {ready:?} {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        up
    }

    /// Runs `tests` (exact names) of this test executable again as this user, one at a time,
    /// and asserts they all pass and leave none of its processes: the executable and
    /// `programs` (paths under [`test_programs`](crate::programs::test_programs)) copied
    /// into an [`OpenParent`] made with `prefix`, where the user can reach them, its state roots
    /// in a directory there it owns. The `LNK_REQUIRE_*` variables are passed on.
    pub fn rerun(&self, prefix: &str, programs: &[&str], tests: &[&str]) {
        let parent = OpenParent::create(prefix).unwrap();
        let (dir, state) = (parent.0.join("programs"), parent.0.join("state"));
        let exe = std::env::current_exe().unwrap();
        // test_programs() is the executable's directory's parent, as in target/release/deps.
        let test_exe = dir.join("deps").join(exe.file_name().unwrap());
        let built = crate::programs::test_programs();
        let mut copies: Vec<(PathBuf, PathBuf)> = programs
            .iter()
            .map(|p| (built.join(p), dir.join(p)))
            .collect();
        copies.push((exe, test_exe.clone()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(&state).unwrap();
        // The user makes directories beside the programs (stand-ins) and its state roots.
        self.chown(&dir);
        self.chown(&state);
        for (from, to) in &copies {
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, to).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
            self.chown(to);
            self.chown(to.parent().unwrap());
        }
        let mut args: Vec<std::ffi::OsString> = vec![
            "env".into(),
            format!("{}={}", ENV_TEST_STATE_DIR, state.display()).into(),
        ];
        for name in [
            crate::probe::ENV_REQUIRE_RUNTIME,
            crate::probe::ENV_REQUIRE_SANDBOX,
            crate::probe::ENV_REQUIRE_NATIVE,
        ] {
            if let Some(v) = std::env::var_os(name) {
                let mut pair = std::ffi::OsString::from(format!("{name}="));
                pair.push(v);
                args.push(pair);
            }
        }
        args.push(test_exe.into());
        args.push("--exact".into());
        args.extend(tests.iter().map(Into::into));
        args.push("--test-threads=1".into());
        let out = self.command(&args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let passed = format!("{} passed", tests.len());
        assert!(
            out.status.success() && text.contains(&passed),
            "as {}: {text}\n{}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let left = self.processes();
        assert!(left.is_empty(), "processes of {} left: {left:?}", self.name);
    }

    /// Gives `path` to this user (and its group).
    pub fn chown(&self, path: &Path) {
        let (uid, gid) = (
            rustix::fs::Uid::from_raw(self.uid),
            rustix::fs::Gid::from_raw(self.gid),
        );
        rustix::fs::chown(path, Some(uid), Some(gid))
            .unwrap_or_else(|e| panic!("chown {} to {}: {e}", path.display(), self.name));
    }

    /// `args` as this user: (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.command(args).output().expect("runuser runs");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        )
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        // A test that failed half-way can leave the user's processes (a whole runtime)
        // running as a user about to be removed; a passing test has already checked that
        // none is left ([`TestUser::processes`]).
        for pid in self
            .processes()
            .into_iter()
            .filter_map(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        let _ = std::process::Command::new("userdel")
            .arg(&self.name)
            .status();
    }
}

/// A directory every user can traverse, outside temporary folders and any 0700 home (where
/// a second user would be refused for the wrong reason); removed on drop.
#[derive(Debug)]
pub struct OpenParent(pub PathBuf);

impl OpenParent {
    /// `/var/lib/<prefix>-<pid>-<n>`, mode 0755.
    pub fn create(prefix: &str) -> std::io::Result<OpenParent> {
        use std::os::unix::fs::PermissionsExt;
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let path = PathBuf::from(format!("/var/lib/{prefix}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(OpenParent(path))
    }

    /// `profile`'s programs and `link`, copied from
    /// [`test_programs`](crate::programs::test_programs) into `bin/` here, mode 0755, so any
    /// user can run them (the build may sit under a 0700 home); → the copied `link`.
    pub fn programs(&self, profile: link_protocol::plugin::Profile) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let (from, bin) = (crate::programs::test_programs(), self.0.join("bin"));
        std::fs::create_dir(&bin).unwrap();
        for name in link_protocol::manifest::programs_of(profile)
            .into_iter()
            .chain([crate::programs::HOST])
        {
            let to = bin.join(name);
            std::fs::copy(from.join(name), &to)
                .unwrap_or_else(|e| panic!("copying {name} to {}: {e}", bin.display()));
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        bin.join(crate::programs::HOST)
    }

    /// `state/` here, made and given to `user`: a state root of that user's.
    pub fn state_for(&self, user: &TestUser) -> PathBuf {
        let state = self.0.join("state");
        std::fs::create_dir(&state).unwrap();
        user.chown(&state);
        state
    }
}

impl Drop for OpenParent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
