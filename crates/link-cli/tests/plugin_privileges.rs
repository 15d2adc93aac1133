//! What each plugin of a confined full Link keeps, read from `/proc/PID/status`: no_new_privs
//! and a seccomp filter everywhere (the sandbox plugin's own, without the namespace and mount
//! rules its bwrap needs, the commands' for every other), and as root no
//! capability but the few the sandbox plugin and the file store are documented to keep; and
//! each non-dumpable, its environment refused to a process of its uid and rights. Then
//! a turn that needs those few: a file written by the file tool is read by a confined command
//! (which runs as the agent's own uid), and a file that command made is read back by the file
//! tool.

use crate::support::{self, state_root};
use link_confine::host::{kept_capabilities, Shedding};
use link_protocol::routes::programs;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// The mount points of `pid`'s mount namespace (`/proc/PID/mountinfo`'s fifth field).
fn mount_points(pid: &str) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .collect()
}

/// At or below one of the mounts the sandbox plugin's view sheds.
fn unused_by_the_sandbox(point: &str) -> bool {
    link_confine::view::UNUSED
        .iter()
        .any(|p| std::path::Path::new(point).starts_with(p))
}

fn status_field(pid: i32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

/// `cmd` with the capabilities `plugin` keeps (as root; an ordinary user has none) and no
/// Landlock domain: what a process of the plugin's uid and rights, but outside its domain, is.
fn shed_like<'a>(plugin: &str, cmd: &'a mut Command) -> &'a mut Command {
    let plugin = link_protocol::manifest::find(plugin).expect("a declared plugin");
    let network = link_confine::host::Network::of(plugin, false);
    let shedding = Shedding::for_plugin(plugin, network).unwrap();
    // SAFETY: drop_capabilities only makes system calls, with what was prepared before fork.
    unsafe { cmd.pre_exec(move || shedding.drop_capabilities()) }
}

/// `cat /proc/PID/environ` run [`shed_like`] `plugin`: `Ok`, or cat's complaint.
fn read_environ_like(plugin: &str, pid: i32) -> Result<(), String> {
    let mut cat = Command::new("cat");
    cat.arg(format!("/proc/{pid}/environ"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = shed_like(plugin, &mut cat).output().expect("cat starts");
    match out.status.code() {
        Some(0) => Ok(()),
        Some(127) => panic!("cat is missing (exit 127)"),
        _ => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// Every plugin is non-dumpable: a process of its uid with its capabilities, outside its
/// Landlock domain, is refused its environment (`EACCES`), where the same reader gets that of a
/// dumpable process with the same uid and capabilities.
fn assert_non_dumpable(pids: &[(String, i32)]) {
    for (name, pid) in pids {
        let mut twin = Command::new("/bin/sleep");
        twin.arg("30");
        let mut twin = shed_like(name, &mut twin).spawn().expect("sleep starts");
        let allowed = read_environ_like(name, twin.id() as i32);
        let _ = twin.kill();
        let _ = twin.wait();
        assert_eq!(allowed, Ok(()), "{name}: its twin's environ");
        let refused = read_environ_like(name, *pid).expect_err(&format!("{name} is dumpable"));
        assert!(refused.contains("Permission denied"), "{name}: {refused}");
    }
}

#[test]
fn plugins_keep_only_what_they_need_and_the_tools_still_work() {
    if !support::sandbox_available() {
        return;
    }
    let root = state_root();
    let mut rt = support::up_in(&root, "link", "confined");
    let root_user = rustix::process::geteuid().is_root();
    let pids = rt.plugin_pids();
    assert!(pids.len() >= 10, "{pids:?}");
    for (name, pid) in &pids {
        assert_eq!(status_field(*pid, "NoNewPrivs"), "1", "{name}");
        assert_eq!(status_field(*pid, "Seccomp"), "2", "{name}");
        // One program above what the host runs under: the sandbox plugin's own, or the
        // commands', inherited from the host's spawner thread, for every other (which one is
        // the kit's `host_confine` test's to tell).
        let host_filters: usize = status_field(rt.host_pid(), "Seccomp_filters")
            .parse()
            .unwrap();
        let filters = host_filters + 1;
        assert_eq!(
            status_field(*pid, "Seccomp_filters"),
            filters.to_string(),
            "{name}"
        );
        let eff = u64::from_str_radix(&status_field(*pid, "CapEff"), 16).unwrap();
        let bnd = u64::from_str_radix(&status_field(*pid, "CapBnd"), 16).unwrap();
        let kept = if root_user {
            kept_capabilities(link_protocol::manifest::find(name).unwrap()).bits()
        } else {
            0
        };
        assert_eq!(eff, kept, "{name}: CapEff {eff:x}, want {kept:x}");
        if root_user {
            assert_eq!(bnd, kept, "{name}: CapBnd {bnd:x}, want {kept:x}");
        }
    }
    assert_non_dumpable(&pids);
    // As root, the sandbox plugin's view has none of the mounts its bwrap would read back
    // after each bind for nothing; the test's own namespace keeps them (an ordinary user's view
    // keeps them too: the kernel locks the mounts a user namespace inherits).
    if root_user {
        let sandbox = pids.iter().find(|(n, _)| n == programs::SANDBOX).unwrap().1;
        let shed: Vec<String> = mount_points(&sandbox.to_string())
            .into_iter()
            .filter(|p| unused_by_the_sandbox(p))
            .collect();
        assert_eq!(
            shed,
            Vec::<String>::new(),
            "left in the sandbox plugin's view"
        );
        assert!(
            mount_points("self")
                .iter()
                .any(|p| unused_by_the_sandbox(p)),
            "the twin: this test's namespace has such mounts"
        );
    }
    // Allowed twin of the empty sets: the two exceptions really keep something as root.
    if root_user {
        assert_ne!(
            kept_capabilities(&link_protocol::manifest::SANDBOX).bits(),
            0
        );
        assert_ne!(
            kept_capabilities(&link_protocol::manifest::FILE_STORE).bits(),
            0
        );
    }

    // `link status` names who tool commands run as, the filter and the limits.
    let out = support::link(&["status", "--state"], root.path())
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sandbox = &status["sandbox"];
    let kind = if root_user { "dedicated" } else { "caller" };
    assert_eq!(sandbox["identity"]["kind"], kind, "{status:#}");
    assert_ne!(sandbox["identity"]["uid"], 0, "{status:#}");
    assert_eq!(sandbox["seccomp"]["name"], "link-seccomp-v4", "{status:#}");
    assert_eq!(sandbox["limits"]["processes"], 256, "{status:#}");
    // And which bounds hold over what, as the probe found them (one of each kind here).
    let bounds = sandbox["bounds"].as_array().cloned().unwrap_or_default();
    let over = |what: &str, scope: &str| {
        bounds
            .iter()
            .find(|b| b["what"] == what && b["over"] == scope)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        over("cpu_seconds", "process")["checked"],
        true,
        "{status:#}"
    );
    assert_eq!(
        over("workspace_bytes", "agent")["value"],
        4u64 << 30,
        "{status:#}"
    );
    // Processes per agent and CPU time over a whole command: a cgroup's bound where the
    // machine gives Link one (as root on cgroup v1), else said unbounded with why.
    for (what, scope, value) in [("processes", "agent", 256), ("cpu_seconds", "command", 600)] {
        match link_confine::cgroup::support() {
            Ok(_) => assert_eq!(over(what, scope)["value"], value, "{status:#}"),
            Err(_) => assert!(over(what, scope)["reason"].is_string(), "{status:#}"),
        }
    }

    let token = rt.create_token();
    assert_eq!(
        rt.post("/v1/agents", &token, json!({ "name": "k" })).status,
        201
    );
    let turn =
        "write given.txt: from the file tool\nrun: cat given.txt; id -u > made.txt\nread made.txt";
    let resp = rt.post("/v1/agents/k/turns", &token, json!({ "message": turn }));
    assert_eq!(resp.status, 200, "{:?}", resp.json());
    let reply = resp.json().to_string();
    assert!(
        reply.contains("from the file tool"),
        "the command read the tool's file: {reply}"
    );
    let layout = link_protocol::layout::StateLayout::new(root.path());
    let made = layout.agent_workspace("k").join("made.txt");
    let uid: u32 = std::fs::read_to_string(&made)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        reply.contains(&uid.to_string()),
        "the tool read the command's file: {reply}"
    );
    if root_user {
        // The first agent of this runtime's own range of identities, not of a range every
        // runtime shares.
        let base = link_confine::identity::base_for(root.path()).unwrap();
        assert_eq!(uid, base + 1, "the command's uid");
    }
    rt.down();
}
