//! Issue 42: `link up` as root on a state root another user made followed that user's
//! symlinks (root made log files where the user chose and appended a plugin's stderr to a
//! root-owned file). Now it refuses a state root, or a directory on its path, that someone
//! else controls, and follows no link beneath one (`link_protocol::safe_root`). So do the
//! client verbs (`down`, `status`, `token`, `agent`, `turn`), and the token store follows no
//! link planted at `auth/tokens`.

use crate::support;
use link_harness_conformance::fixture::{OpenParent, StateRoot, TestUser};
use link_protocol::layout::StateLayout;
use link_protocol::manifest::programs_of;
use link_protocol::plugin::Profile;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

const KEPT: &str = "root's own line\n";

/// Root's own directory (0700) and file (0600) outside every state root: what the links
/// planted below point at, and what must stay as it is.
struct Targets {
    dir: PathBuf,
    file: PathBuf,
}

impl Targets {
    fn make(parent: &Path) -> Targets {
        let (dir, file) = (parent.join("root-dir"), parent.join("root-file"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(&file, KEPT).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        Targets { dir, file }
    }

    fn assert_untouched(&self) {
        assert_eq!(std::fs::read_to_string(&self.file).unwrap(), KEPT);
        let made: Vec<_> = std::fs::read_dir(&self.dir).unwrap().collect();
        assert!(made.is_empty(), "made in {}: {made:?}", self.dir.display());
    }
}

/// The finding's plants, all the user's: `home` a link to root's directory, and a real `log/`
/// whose every Mini plugin's log is a link to root's file.
fn plant(user: &TestUser, state: &Path, to: &Targets) {
    let layout = StateLayout::new(state);
    let own = |p: &Path| std::os::unix::fs::lchown(p, Some(user.uid), Some(user.gid)).unwrap();
    std::fs::create_dir(layout.log_dir()).unwrap();
    own(&layout.log_dir());
    for plugin in programs_of(Profile::Mini) {
        std::os::unix::fs::symlink(&to.file, layout.log_file(plugin)).unwrap();
        own(&layout.log_file(plugin));
    }
    std::os::unix::fs::symlink(&to.dir, state.join("home")).unwrap();
    own(&state.join("home"));
}

/// `link up` on `state`, which must be refused within 30 s: one that follows the links instead
/// comes up and runs until it is killed, which fails here rather than hangs.
fn refused(state: &Path, profile: &str) -> std::process::Output {
    let args = [
        "up",
        "--profile",
        profile,
        "--mode",
        support::MODE,
        "--state",
    ];
    let child = support::link(&args, state)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let (exited, wait) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let timeout = std::time::Duration::from_secs(30);
        let killed = wait.recv_timeout(timeout).is_err();
        if killed {
            support::kill(pid, 15);
        }
        killed
    });
    let out = child.wait_with_output().unwrap();
    let _ = exited.send(());
    let killed = watchdog.join().unwrap();
    assert!(
        !killed && !out.status.success(),
        "link up on {} started (killed: {killed}): {}",
        state.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn link_up_as_root_refuses_a_state_root_another_user_controls_and_follows_none_of_its_links() {
    let Some(user) = TestUser::or_skip("lnk-safe") else {
        return;
    };
    let parent = OpenParent::create("lnk-safe").unwrap();
    let to = Targets::make(&parent.0);

    // The state root is the user's, planted as in the finding.
    let state = parent.state_for(&user);
    plant(&user, &state, &to);
    let out = refused(&state, "mini");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{} belongs to user {}",
            state.display(),
            user.name
        )),
        "{err}"
    );
    assert!(err.contains("run `link` as"), "{err}");
    to.assert_untouched();
    assert!(!state.join("run").exists(), "made run/ in the user's root");

    // Its twin: root made the state root, but in a directory the user owns (who could swap it).
    let theirs = parent.0.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    user.chown(&theirs);
    let inner = theirs.join("state");
    std::fs::create_dir(&inner).unwrap();
    let out = refused(&inner, "mini");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{} belongs to user {}",
            theirs.display(),
            user.name
        )),
        "{err}"
    );
    assert!(
        !inner.join("run").exists(),
        "made run/ under the user's directory"
    );

    // Allowed: the same state root, rid of the plants, is the user's own runtime.
    for plant in [state.join("log"), state.join("home")] {
        let _ = std::fs::remove_dir_all(&plant);
        let _ = std::fs::remove_file(&plant);
    }
    let link = parent.programs(Profile::Mini);
    let state_s = state.to_str().unwrap();
    let link_s = link.to_str().unwrap();
    let mut up = user.up(&link, "mini", &state);
    let (code, _, err) = user.run(&[link_s, "down", "--state", state_s]);
    assert_eq!(code, 0, "{err}");
    assert!(up.wait().unwrap().success());
    let log = StateLayout::new(&state).log_file(programs_of(Profile::Mini)[0]);
    assert_eq!(std::fs::metadata(&log).unwrap().uid(), user.uid);

    // Allowed: root's own state root under root's own directories.
    let own = StateRoot::create_in(&parent.0).unwrap();
    let mut rt = support::up(&own, "mini");
    rt.down();
    to.assert_untouched();
}

#[test]
fn a_link_planted_in_a_root_owned_state_root_is_refused_not_followed() {
    let parent = OpenParent::create("lnk-safe-in").unwrap();
    let to = Targets::make(&parent.0);
    let root = support::state_root();
    let layout = StateLayout::new(root.path());
    support::up(&root, "mini").down();
    let plugin = programs_of(Profile::Mini)[0];

    // A plugin's log, which the host appends to at each start, swapped for a link.
    let log = layout.log_file(plugin);
    std::fs::remove_file(&log).unwrap();
    std::os::unix::fs::symlink(&to.file, &log).unwrap();
    let out = refused(root.path(), "mini");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{} is a symlink", log.display())),
        "{err}"
    );
    to.assert_untouched();
    std::fs::remove_file(&log).unwrap();

    // A plugin's home, which the host makes at each start, swapped for a link.
    let home = layout.home(plugin);
    std::fs::remove_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(&to.dir, &home).unwrap();
    let out = refused(root.path(), "mini");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{} is a symlink", home.display())),
        "{err}"
    );
    to.assert_untouched();
    std::fs::remove_file(&home).unwrap();

    // Allowed: rid of the links, the same root starts again.
    support::up(&root, "mini").down();
    to.assert_untouched();
}

/// The client verbs that act on a state root, each with its arguments before `--state`: a
/// refusal must come before any of them reads, makes or connects to anything there.
const CLIENT_VERBS: [&[&str]; 5] = [
    &["status", "--state"],
    &["token", "create", "--state"],
    &["token", "revoke", "lnk_none", "--state"],
    &["agent", "list", "--token", "lnk_none", "--state"],
    &["down", "--state"],
];

/// What `dir` holds, links as links (name, and a link's target), sorted.
fn entries(dir: &Path) -> Vec<(PathBuf, Option<PathBuf>)> {
    let mut all: Vec<_> = walk(dir)
        .into_iter()
        .map(|p| (p.clone(), std::fs::read_link(&p).ok()))
        .collect();
    all.sort();
    all
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            all.extend(walk(&path));
        }
        all.push(path);
    }
    all
}

/// Every client verb as root on `state`: refused, naming `owned` as `user`'s and the fix,
/// printing nothing, and nothing in `state` or `to` made or changed.
fn client_verbs_refused(state: &Path, owned: &Path, user: &TestUser, to: &Targets) {
    let before = entries(state);
    for verb in CLIENT_VERBS {
        let out = support::link(verb, state).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{verb:?}: {err}");
        assert!(
            err.contains(&format!(
                "{} belongs to user {}",
                owned.display(),
                user.name
            )) && err.contains("choose a state root whose directories are yours"),
            "{verb:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{verb:?} printed {:?}", out.stdout);
        assert_eq!(
            entries(state),
            before,
            "{verb:?} changed {}",
            state.display()
        );
        to.assert_untouched();
    }
}

/// As root, `link down`, `status`, `token create|revoke` and `agent list` on a state root
/// another user prepared (its `auth/` a link to root's own directory, where a token store
/// would be written), or on root's state root inside that user's directory, are refused as
/// `link up` is: before, `token create` wrote `tokens` and `tokens.lock` into root's
/// directory, and `down`/`status` connected to whatever answered on the user's `run/`. The
/// twin: the same verbs on root's own state root work.
#[test]
fn client_verbs_as_root_refuse_a_state_root_another_user_controls_and_change_nothing() {
    let Some(user) = TestUser::or_skip("lnk-safe-cli") else {
        return;
    };
    let parent = OpenParent::create("lnk-safe-cli").unwrap();
    let to = Targets::make(&parent.0);

    let state = parent.0.join("state");
    let run = StateLayout::new(&state).run_dir();
    std::fs::create_dir_all(&run).unwrap();
    user.chown(&state);
    user.chown(&run);
    let auth = StateLayout::new(&state).auth_dir();
    std::os::unix::fs::symlink(&to.dir, &auth).unwrap();
    std::os::unix::fs::lchown(&auth, Some(user.uid), Some(user.gid)).unwrap();
    client_verbs_refused(&state, &state, &user, &to);

    // Root's own state root, but in a directory the user owns (who could swap it).
    let theirs = parent.0.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    user.chown(&theirs);
    let inner = theirs.join("state");
    std::fs::create_dir_all(inner.join("run")).unwrap();
    client_verbs_refused(&inner, &theirs, &user, &to);

    // Allowed: the same verbs on root's own state root under root's own directories.
    let own = StateRoot::create_in(&parent.0).unwrap();
    let mut rt = support::up(&own, "mini");
    let status = support::link_ok(&["status", "--state"], own.path());
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["pid"], rt.host_pid(), "{status}");
    let out = support::link_ok(&["token", "create", "--state"], own.path());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let tokens = own.layout().tokens_file();
    assert!(link_protocol::tokens::verify(&tokens, &token).unwrap());
    support::link_ok(&["agent", "list", "--token", &token, "--state"], own.path());
    support::link_ok(&["token", "revoke", &token, "--state"], own.path());
    assert!(!link_protocol::tokens::verify(&tokens, &token).unwrap());
    support::link_ok(&["down", "--state"], own.path());
    assert!(rt.wait_exit().success(), "{}", rt.stderr());
    to.assert_untouched();
}

/// A link planted at `auth/tokens` (the auth plugin may write `auth/`) to a root-owned file
/// outside: `token create` refuses, naming it and the fix, shows no token, and the file is
/// byte for byte as it was. Before, the store read that file (here, one of the form of a
/// token store, so the token printed was stored by replacing the link). The twin: rid of the
/// link, `token create` works.
#[test]
fn token_create_refuses_a_link_planted_at_the_token_store_and_changes_nothing() {
    let parent = OpenParent::create("lnk-safe-tok").unwrap();
    let to = Targets::make(&parent.0);
    let kept = format!("{} active\n", link_protocol::tokens::hash("lnk_root's"));
    std::fs::write(&to.file, &kept).unwrap();
    let root = support::state_root();
    let mut rt = support::up(&root, "mini");
    let tokens = root.layout().tokens_file();
    std::fs::create_dir_all(root.layout().auth_dir()).unwrap();
    let _ = std::fs::remove_file(&tokens);
    std::os::unix::fs::symlink(&to.file, &tokens).unwrap();

    let out = support::link(&["token", "create", "--state"], root.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{} is a symlink", tokens.display()))
            && err.contains("remove it")
            && err.contains("no token was created"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "showed a token");
    assert_eq!(std::fs::read_to_string(&to.file).unwrap(), kept);
    assert!(std::fs::symlink_metadata(&tokens).unwrap().is_symlink());

    std::fs::remove_file(&tokens).unwrap();
    let out = support::link_ok(&["token", "create", "--state"], root.path());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(link_protocol::tokens::verify(&tokens, &token).unwrap());
    assert_eq!(std::fs::read_to_string(&to.file).unwrap(), kept);
    rt.down();
}
