//! A compromised plugin: the `impostor` example, started through `--programs` in the file
//! tool's place, so it runs with the file tool's pid, Landlock domain, seccomp filter and
//! environment in a confined full Link. Each thing it tries is refused with the error the
//! kernel or the router gives, beside an allowed twin in the same run, and the host side is
//! checked: the other plugin's socket is still there and still served by that plugin, the
//! other agent's file was not read, the file of the agent it served was written.
//!
//! It needs the release (or debug) programs and the `impostor` example beside the test
//! executable (`cargo build --workspace --bins --examples`); without them, or where the
//! machine cannot confine, it is skipped loudly (a failure under `LNK_REQUIRE_RUNTIME=1` /
//! `LNK_REQUIRE_SANDBOX=1`).

use link_harness_conformance::fixture::{planted_in, StateRoot, TestUser, SHARED_PLANTS};
use link_harness_conformance::probe::{require_or_skip, sandbox_or_skip, ProbeStatus};
use link_harness_conformance::runtime_process::{
    test_programs, RuntimeProcess, RuntimeSpec, ENV_REQUIRE_RUNTIME,
};
use link_harness_conformance::syscalls;
use link_protocol::layout::StateLayout;
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes::programs;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Whose place the impostor takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    /// The file tool's.
    FileTool,
    /// The file tool's, claiming `auth.verify` in its ready line.
    ClaimingFileTool,
    /// The sandbox plugin's, becoming the real one after its attempts.
    Sandbox,
}

impl Role {
    /// The program the impostor stands in for.
    fn program(self) -> &'static str {
        match self {
            Role::FileTool | Role::ClaimingFileTool => programs::FILE_TOOL,
            Role::Sandbox => programs::SANDBOX,
        }
    }
}

/// A programs directory: every program of full Link from the build, one replaced by the
/// impostor as `role` says. Removed on drop.
struct Programs(PathBuf);

impl Programs {
    fn new(built: &Path, role: Role) -> Programs {
        // Beside the build, so hard links work: a copy's write descriptor can leak into a
        // process another test forks, and exec of it then fails with ETXTBSY.
        // One each: two tests of one role run at once, and each removes its own on drop.
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = built.join(format!("lnk-impostor-{}-{role:?}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let replaced = role.program();
        let plugins = link_protocol::manifest::programs_of(Profile::Link);
        let names = plugins.iter().chain(&[programs::HOST]);
        for name in names {
            let from = if *name == replaced {
                built.join("examples/impostor")
            } else {
                built.join(name)
            };
            // A hard link, not a symlink: Landlock lets plugins execute only what is under
            // this directory, and a symlink resolves outside it.
            std::fs::hard_link(&from, dir.join(name))
                .unwrap_or_else(|e| panic!("linking {}: {e}", from.display()));
        }
        match role {
            Role::ClaimingFileTool => std::fs::write(dir.join("impostor.claim"), "").unwrap(),
            Role::Sandbox => {
                let real = format!("{}.real", programs::SANDBOX);
                std::fs::hard_link(built.join(programs::SANDBOX), dir.join(real)).unwrap();
            }
            Role::FileTool => {
                use std::os::unix::fs::PermissionsExt;
                for (name, mode) in [("planted-0600", 0o600), ("planted-0644", 0o644)] {
                    let path = dir.join(name);
                    std::fs::write(&path, "planted").unwrap();
                    let mode = std::fs::Permissions::from_mode(mode);
                    std::fs::set_permissions(&path, mode).unwrap();
                }
            }
        }
        Programs(dir)
    }
}

impl Drop for Programs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The built programs and the impostor, or `None` (skipped, or failed where required).
fn built() -> Option<PathBuf> {
    let dir = test_programs();
    if !dir.join("examples/impostor").is_file() || !dir.join(programs::HOST).is_file() {
        let why = format!(
            "the impostor example or `link` is not built in {}; run `cargo build --workspace \
             --bins --examples`",
            dir.display()
        );
        assert!(!require_or_skip(
            "runtime",
            ProbeStatus::Unavailable,
            &why,
            ENV_REQUIRE_RUNTIME
        ));
        return None;
    }
    sandbox_or_skip(&dir).then_some(dir)
}

fn spec(programs: &Programs) -> RuntimeSpec {
    RuntimeSpec::new(programs.0.clone(), Profile::Link, Mode::Confined).with_test_hooks()
}

/// A confined full Link on `root` with the impostor in `role`'s place, its programs
/// directory (bind it, even unused, so it outlives the runtime) and what the impostor tried
/// at start.
fn up_as(built: &Path, root: &StateRoot, role: Role) -> (Programs, RuntimeProcess, Value) {
    let programs = Programs::new(built, role);
    let rt = spec(&programs)
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    let got = attempts(root.path(), role.program());
    (programs, rt, got)
}

fn attempts(root: &Path, plugin: &str) -> Value {
    let layout = link_protocol::layout::StateLayout::new(root);
    let path = layout.home(plugin).join("attempts.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the impostor wrote no {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_plugin_claiming_a_foreign_route_stops_start_up() {
    let Some(built) = built() else { return };
    let root = StateRoot::create().unwrap();
    let programs = Programs::new(&built, Role::ClaimingFileTool);
    let failed = match spec(&programs).up_in(root.path()) {
        Ok(mut rt) => {
            rt.down();
            panic!("a runtime whose file tool claims auth.verify started");
        }
        Err(f) => f.output(),
    };
    for part in ["auth.verify", programs::FILE_TOOL, "refusing to start"] {
        assert!(failed.contains(part), "no {part:?} in:\n{failed}");
    }
    let layout = link_protocol::layout::StateLayout::new(root.path());
    let left = layout.present_sockets();
    assert!(left.is_empty(), "sockets left: {left:?}");
}

#[test]
fn a_compromised_plugin_is_refused_everything_outside_its_own_domain() {
    let Some(built) = built() else { return };
    let root = StateRoot::create().unwrap();
    let (_programs, mut rt, got) = up_as(&built, &root, Role::FileTool);
    let layout = rt.layout().clone();

    // The socket directory: refused in the file store's and in run/, allowed in its own.
    for (attempt, want) in [
        ("rename_other_socket", "EACCES"),
        ("remove_other_socket", "EACCES"),
        ("bind_over_other", "EACCES"),
        ("bind_in_run", "EACCES"),
        ("own_socket_dir", "ok"),
    ] {
        assert_refused_as(&got, attempt, want);
    }
    // Landlock's own refusal, as root too: `run/` is in its view, not in its rules.
    assert_eq!(got["list_run_dir"], "EACCES", "{got}");
    let store_socket = layout.plugin_socket(programs::FILE_STORE);
    let store_pid = rt
        .plugin_pids()
        .into_iter()
        .find_map(|(name, pid)| (name == programs::FILE_STORE).then_some(pid))
        .expect("the file store runs");
    let stream = std::os::unix::net::UnixStream::connect(&store_socket).unwrap();
    let served_by = rustix::net::sockopt::socket_peercred(&stream).unwrap().pid;
    assert_eq!(
        served_by.as_raw_nonzero().get(),
        store_pid,
        "the file store's socket is served by someone else"
    );
    assert!(!layout.run_dir().join("connection.sock.new").exists());

    // Other processes' environments, and the keyring. The file tool's manifest entry names
    // no part of the system, so it reads nothing of `/proc`, its own environment included
    // (the ptrace bound that keeps a plugin with `/proc` from the others' is proven in the
    // sandbox plugin's slot, whose own is read, and in `off_network.rs` for every plugin whose
    // manifest entry names `/proc`).
    assert!(link_protocol::manifest::FILE_TOOL.system.is_empty());
    assert_eq!(got["own_environ"], "EACCES", "{got}");
    assert_eq!(got["host_environ"], "EACCES", "{got}");
    assert_eq!(got["sibling_environ"], "EACCES", "{got}");
    assert!(
        syscalls::keyring().is_ok(),
        "the twin: keyctl works outside the plugin"
    );
    assert_eq!(got["keyring"], "EPERM", "{got}");

    // The file tool keeps no data: none is made for it and it may make none; its home is its.
    assert_refused_as(&got, "make_data_area", "EACCES");
    assert!(!layout.data(programs::FILE_TOOL).exists());
    assert_eq!(got["own_home_file"], "ok", "{got}");
    assert!(layout.home(programs::FILE_TOOL).join("twin.txt").is_file());

    // The store through the router: only for the agent of the call it serves.
    rt.create_agent("alpha");
    rt.create_agent("victim");
    let secret = layout.agent_workspace("victim").join("secret.txt");
    std::fs::write(&secret, "s3cret").unwrap();
    let reply = rt.turn("alpha", "write x.txt: hi");
    assert_eq!(reply["tool_calls"][0]["ok"], true, "{reply}");
    let got = attempts(root.path(), programs::FILE_TOOL);
    assert_eq!(got["store_in_lease"], "ok", "{got}");
    assert_eq!(
        std::fs::read_to_string(layout.agent_workspace("alpha").join("x.txt")).unwrap(),
        "hi"
    );
    let refused = &got["store_outside_lease"];
    assert_eq!(refused["code"], "forbidden", "{got}");
    assert!(
        refused["message"].as_str().unwrap_or("").contains("victim"),
        "{got}"
    );
    assert!(
        !serde_json::to_string(&reply).unwrap().contains("s3cret"),
        "{reply}"
    );
    // The model answers only the harness: this turn's replies came from it, the impostor's
    // own call got one 403 naming why, and nothing of the model.
    assert!(
        reply["reply"].as_str().is_some_and(|r| !r.is_empty()),
        "{reply}"
    );
    let model_call = got["model_call"].as_str().unwrap_or_default();
    assert!(
        model_call.starts_with("answered 403") && model_call.contains("no grant to the model"),
        "{got}"
    );
    // The host's control socket answers a plugin its status only: no key was stored, the
    // runtime was not stopped (the turn above ran, `down` below finds it), no key it made up
    // opened the rest; the control key's file is outside its rules.
    assert_eq!(got["host_status"], "ok", "{got}");
    for attempt in ["host_model_key_set", "host_down", "host_unlock"] {
        assert_runtime_refused(&got, attempt);
    }
    assert_refused_as(&got, "read_control_key", "EACCES");
    assert!(
        std::fs::read(layout.control_key_file()).is_ok(),
        "the twin: the user who started the runtime reads its control key"
    );
    let stored = layout
        .data(programs::SECRET)
        .join("secrets/model.remote-key");
    assert!(!stored.exists(), "the impostor stored a model key");
    rt.down();
}

/// As root every plugin runs as an unprivileged uid of its own (issue 42, "plugins are not
/// root"): the impostor in the file tool's place cannot read a root-owned 0600 file its
/// Landlock rules allow (in the programs directory), and reads its 0644 twin there; every
/// plugin's uid is non-zero and no two plugins share one.
#[test]
fn as_root_a_plugin_is_not_root_and_owner_bits_hold() {
    if !rustix::process::geteuid().is_root() {
        link_report::skip::skipped(
            "SKIPPED: as an ordinary user every plugin is that user; this test is root's",
        );
        return;
    }
    let Some(built) = built() else { return };
    let root = StateRoot::create().unwrap();
    let (programs, mut rt, got) = up_as(&built, &root, Role::FileTool);
    assert_eq!(got["read_root_only_file"], "EACCES", "{got}");
    assert_eq!(got["read_world_readable_file"], "ok", "{got}");
    assert_eq!(got["read_shadow"], "EACCES", "{got}");
    // Root of its own namespace, an unprivileged uid on the host.
    assert_eq!(got["own_uid"], "0", "{got}");
    let mut uids = std::collections::BTreeMap::new();
    for (name, pid) in rt.plugin_pids() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        let ids: Vec<u32> = line
            .split_whitespace()
            .skip(1)
            .map(|n| n.parse().unwrap())
            .collect();
        assert!(
            ids.iter().all(|&id| id == ids[0] && id >= 1000),
            "{name}: {line}"
        );
        if let Some(other) = uids.insert(ids[0], name.clone()) {
            panic!("{name} and {other} share uid {}", ids[0]);
        }
    }
    assert!(uids.len() >= 12, "{uids:?}");
    // The twin: the test, root, reads both.
    assert!(std::fs::read(programs.0.join("planted-0600")).is_ok());
    rt.down();
}

/// `attempt` answered `want`; as root, where the plugin runs in a view of its own (issue 42,
/// "plugins are not root"), a refusal `EACCES` is also the view's: a read-only mount
/// (`EROFS`) or a directory not in the view at all (`ENOENT`).
fn assert_refused_as(got: &Value, attempt: &str, want: &str) {
    let view = ["EACCES", "EROFS", "ENOENT"];
    if want == "EACCES" && rustix::process::geteuid().is_root() {
        let answered = got[attempt].as_str().unwrap_or_default();
        assert!(view.contains(&answered), "{attempt}: {got}");
    } else {
        assert_eq!(got[attempt], want, "{attempt}: {got}");
    }
}

/// `attempt` on the host's control socket was refused as the runtime's own process's.
fn assert_runtime_refused(got: &Value, attempt: &str) {
    let refused = &got[attempt];
    assert_eq!(refused["code"], "forbidden", "{attempt}: {got}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the runtime's own processes"),
        "{attempt}: {got}"
    );
}

/// The sandbox plugin has no filesystem rules (its bwrap mounts), but its domain still keeps
/// it from other processes' environments (the host's, a sibling plugin's: as root too, where
/// it keeps no CAP_SYS_ADMIN, which would pass the domain's ptrace bound), from signalling the
/// host and from TCP, and its seccomp filter from keyrings and `process_vm_readv`. The twins:
/// its own environment and child, and the same calls from this test; and after the attempts
/// the real sandbox plugin, in the same domain, runs a confined command.
#[test]
fn a_compromised_sandbox_plugin_reaches_no_process_outside_its_domain() {
    let Some(built) = built() else { return };
    let root = StateRoot::create().unwrap();
    let (_programs, mut rt, got) = up_as(&built, &root, Role::Sandbox);
    for (attempt, want) in [
        ("host_environ", "EACCES"),
        ("sibling_environ", "EACCES"),
        ("own_environ", "ok"),
        ("signal_own_child", "ok"),
        ("signal_host", "EPERM"),
        ("tcp_connect", "EACCES"),
        // Its seccomp filter, as root too.
        ("keyring", "EPERM"),
        ("read_own_memory", "EPERM"),
        // Its read-only view, as root (which keeps DAC_OVERRIDE in its own namespace) too.
        // `run/` holds only its own socket directory there: the other plugins' are not there.
        ("write_pids_file", "EROFS"),
        ("bind_in_run", "EROFS"),
        ("rename_other_socket", "ENOENT"),
        ("write_state_root", "EROFS"),
        ("write_device", "EACCES"),
        ("write_null", "ok"),
        ("own_data_file", "ok"),
        ("workspaces_file", "ok"),
        ("own_socket_dir", "ok"),
        ("mount_in_own_namespace", "ok"),
        ("clear_read_only", "EPERM"),
        // The control directory is not in its view (`plugin_ns`): no key to read, so neither
        // the full handler nor the raced connection is reached. (Were it read, the host
        // refuses its own descendants the full handler: `control_socket.rs`.)
        ("read_control_key", "ENOENT"),
    ] {
        assert_eq!(got[attempt], want, "{attempt}: {got}");
    }
    for attempt in ["host_unlock_with_key", "host_down_raced"] {
        let message = got[attempt].as_str().unwrap_or_default();
        assert!(message.contains("No such file"), "{attempt}: {got}");
    }
    assert!(
        syscalls::keyring().is_ok(),
        "the twin: keyctl works outside"
    );
    let here = syscalls::read_memory(std::process::id() as i32);
    assert_eq!(
        here.err().and_then(|e| e.raw_os_error()),
        Some(libc::EFAULT),
        "the twin: process_vm_readv is allowed outside (and checks the address)"
    );
    assert!(rustix::process::test_kill_process(
        rustix::process::Pid::from_raw(rt.host_pid()).unwrap()
    )
    .is_ok());
    let layout = StateLayout::new(root.path());
    let host_side = std::fs::OpenOptions::new()
        .append(true)
        .open(layout.pids_file());
    assert!(
        host_side.is_ok(),
        "the twin: the host's view writes the pids file"
    );
    assert!(!layout.root().join("escaped.txt").exists());
    if rustix::process::geteuid().is_root() {
        let kmsg = std::fs::OpenOptions::new().append(true).open("/dev/kmsg");
        assert!(
            kmsg.is_ok(),
            "the twin: root opens /dev/kmsg outside: {kmsg:?}"
        );
    }
    let tcp = std::net::TcpStream::connect(("127.0.0.1", 1)).unwrap_err();
    assert_eq!(tcp.kind(), std::io::ErrorKind::ConnectionRefused);
    rt.create_agent("alpha");
    let reply = rt.turn("alpha", "run: echo confined-$((6*7))");
    assert_eq!(reply["tool_calls"][0]["ok"], true, "{reply}");
    assert!(reply.to_string().contains("confined-42"), "{reply}");
    rt.down();
}

/// Issue 42: the sandbox plugin holds no privilege over the machine. As root it is root only
/// in a user namespace of its own, whose root is an unprivileged uid on the host and which
/// maps no host root (`link_confine::plugin_ns`); as either, it sees of the state root
/// only what it serves. A stand-in in its place, as root and as an ordinary user: writing
/// `core_pattern` is refused (and the host's is unchanged), reading `/etc/shadow` (`EACCES`)
/// and the tokens, a stored secret, the control key, the conversation of an agent it serves
/// (which lies apart from the workspaces it is given) and another runtime's file beside the
/// state root and a world-readable file in `/tmp` (not in its view: `ENOENT`) too; the twins: reading
/// `core_pattern` and `/etc/passwd`, writing its data area and the agents' workspaces, and the
/// real plugin's confined command after. It is not in the host's user namespace, and its uid
/// map maps no host uid 0.
#[test]
fn a_compromised_sandbox_plugin_holds_no_privilege_over_the_machine() {
    let Some(built) = built() else { return };
    let root = StateRoot::create().unwrap();
    let layout = StateLayout::new(root.path());
    let planted = |path: PathBuf| {
        use std::os::unix::fs::OpenOptionsExt;
        link_protocol::files::private_dir_all(path.parent().unwrap()).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"planted\n").unwrap();
    };
    link_protocol::files::private_dir_all(&layout.auth_dir()).unwrap();
    link_protocol::tokens::create(&layout.tokens_file()).unwrap();
    planted(layout.data(programs::SECRET).join("secrets/planted"));
    planted(layout.agent_conversation("victim"));
    let mut other = root.path().as_os_str().to_owned();
    other.push(".other");
    let other = PathBuf::from(other);
    planted(other.join("secret"));
    let shared_plants: Vec<RemovedOnDrop> = SHARED_PLANTS
        .iter()
        .map(|(_, shared)| {
            let plant = RemovedOnDrop(planted_in(shared, root.path()));
            std::fs::write(&plant.0, b"planted\n").unwrap();
            let world_readable = std::os::unix::fs::PermissionsExt::from_mode(0o644);
            std::fs::set_permissions(&plant.0, world_readable).unwrap();
            plant
        })
        .collect();
    let core = std::path::Path::new("/proc/sys/kernel/core_pattern");
    let core_before = std::fs::read(core).unwrap();
    let (_programs, mut rt, got) = up_as(&built, &root, Role::Sandbox);
    for (attempt, want) in [
        ("write_core_pattern", "EACCES"),
        ("read_core_pattern", "ok"),
        ("read_shadow", "EACCES"),
        ("read_passwd", "ok"),
        ("read_tokens", "ENOENT"),
        ("read_secret_store", "ENOENT"),
        ("read_control_key", "ENOENT"),
        ("read_other_runtime", "ENOENT"),
        ("read_conversation", "ENOENT"),
        ("read_shared_tmp", "ENOENT"),
        ("read_shared_shm", "ENOENT"),
        ("own_data_file", "ok"),
        ("workspaces_file", "ok"),
    ] {
        assert_eq!(got[attempt], want, "{attempt}: {got}");
    }
    assert_eq!(
        std::fs::read(core).unwrap(),
        core_before,
        "core_pattern changed"
    );
    // Handed its runtime's cgroups where the machine allows them, it moves itself into one
    // of the pool, makes none, and reaches no other cgroup (`..` is the directory itself).
    match link_confine::cgroup::support() {
        Ok(_) => {
            assert_eq!(got["cgroup_parent"], "itself", "{got}");
            assert_eq!(got["cgroup_make"], "EACCES", "{got}");
            let said = link_protocol::layout::StateLayout::new(root.path())
                .home(programs::SANDBOX)
                .join("cgroup_join");
            link_harness_conformance::reaper::wait_until(
                std::time::Duration::from_secs(20),
                || said.exists(),
            );
            let log = root.path().join("log/sandbox.log");
            assert_eq!(
                std::fs::read_to_string(&said).unwrap_or_default(),
                "ok",
                "{}\nhost: {}",
                std::fs::read_to_string(&log).unwrap_or_default(),
                rt.stderr()
            );
        }
        Err(why) => {
            assert!(!link_harness_conformance::vm::inside(), "{why}");
            assert_eq!(got["cgroup_parent"], "none", "{got}")
        }
    }
    let host_ns = std::fs::read_link("/proc/self/ns/user").unwrap();
    let its_ns = got["user_namespace"].as_str().unwrap_or_default();
    assert!(its_ns.starts_with("user:["), "{got}");
    assert_ne!(
        its_ns,
        host_ns.display().to_string(),
        "in the host's user namespace: {got}"
    );
    // No line of its map reaches host uid 0 (outside start, host start, count).
    let map = got["uid_map"].as_str().unwrap_or_default();
    assert!(!map.trim().is_empty(), "{got}");
    for line in map.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert!(f[1] != 0, "its namespace maps host root: {map}");
    }
    if rustix::process::geteuid().is_root() {
        // Its root is an unprivileged uid of the dedicated range (`identity::PLUGIN_SLOT`).
        let first: Vec<u64> = map
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert!(first[0] == 0 && first[1] >= 1000 && first[2] == 1, "{map}");
    }
    rt.create_agent("alpha");
    let reply = rt.turn(
        "alpha",
        "run: echo confined-$((6*7)) > out && cat out && id -u",
    );
    assert_eq!(reply["tool_calls"][0]["ok"], true, "{reply}");
    assert!(reply.to_string().contains("confined-42"), "{reply}");
    rt.down();
    std::fs::remove_dir_all(&other).unwrap();
    for plant in &shared_plants {
        assert!(
            std::fs::read(&plant.0).is_ok(),
            "the twin: the test reads {} the plugin could not",
            plant.0.display()
        );
    }
}

/// A file the test planted outside its state root, removed however the test ends.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The three tests above, run again as an ordinary user made for the test (as root; an
/// ordinary user runs them as itself already): this test's executable, the programs and the
/// impostor copied where that user can reach them, the state in a directory it owns.
/// [`a_compromised_sandbox_plugin_holds_no_privilege_over_the_machine`] inside a virtual
/// machine whose one cgroup hierarchy is v2 (`link_harness_conformance::vm`), where the
/// stand-in runs in the runtime's leaf and owns the runtime directory's `cgroup.procs`: it
/// still makes no cgroup and reaches no other, and joins one of the pool.
#[test]
fn in_cgroup_v2_a_compromised_sandbox_plugin_holds_no_privilege() {
    link_harness_conformance::vm::rerun_in_cgroup_v2(
        "a_compromised_sandbox_plugin_holds_no_privilege_over_the_machine",
    );
}

#[test]
fn the_compromised_plugin_tests_hold_for_an_ordinary_user() {
    if !rustix::process::geteuid().is_root() || built().is_none() {
        return;
    }
    let Some(user) = TestUser::or_skip("lnk-cpu") else {
        return;
    };
    let mut copied: Vec<&str> = link_protocol::manifest::programs_of(Profile::Link).to_vec();
    copied.extend([programs::HOST, "examples/impostor"]);
    user.rerun(
        "lnk-compromised",
        &copied,
        &[
            "a_plugin_claiming_a_foreign_route_stops_start_up",
            "a_compromised_plugin_is_refused_everything_outside_its_own_domain",
            "a_compromised_sandbox_plugin_reaches_no_process_outside_its_domain",
            "a_compromised_sandbox_plugin_holds_no_privilege_over_the_machine",
        ],
    );
}
