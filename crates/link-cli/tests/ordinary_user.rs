//! A confined full Link run by an ordinary user (made for the test): it comes up, a turn's
//! `run` command runs as that user inside the sandbox and cannot read what only root can, and
//! the runtime goes down leaving nothing running.

use crate::support;
use link_harness_conformance::fixture::{OpenParent, TestUser};
use link_protocol::plugin::Profile;
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn post(
    socket: &Path,
    path: &str,
    token: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resp = rt
        .block_on(link_protocol::http::json(
            socket,
            "POST",
            path,
            Some(token),
            Some(&body),
        ))
        .expect("an answer");
    (resp.status, resp.json())
}

#[test]
fn an_ordinary_user_runs_confined_full_link_and_its_tools() {
    if !support::sandbox_available() {
        return;
    }
    let Some(user) = TestUser::or_skip("lnk-up") else {
        return;
    };
    // The programs where the user can reach them (the build may sit under a 0700 home).
    let parent = OpenParent::create("lnk-user-up").unwrap();
    let link = parent.programs(Profile::Link);
    let state = parent.0.join("state");
    std::fs::create_dir(&state).unwrap();
    user.chown(&state);
    let (link_s, state_s) = (link.to_str().unwrap(), state.to_str().unwrap());
    let mut up = user.up(&link, "link", &state);
    let (code, token, err) = user.run(&[link_s, "token", "create", "--state", state_s]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim();
    let socket = state.join("run/connection.sock");
    assert_eq!(
        post(&socket, "/v1/agents", token, json!({"name": "k"})).0,
        201
    );
    let secret = Path::new("/etc").join(format!("lnk-user-up-{}.key", std::process::id()));
    std::fs::write(&secret, "private words").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let message = format!("run: id -u; cat {} || echo refused", secret.display());
    let (status, reply) = post(
        &socket,
        "/v1/agents/k/turns",
        token,
        json!({"message": message}),
    );
    let _ = std::fs::remove_file(&secret);
    assert_eq!(status, 200, "{reply}");
    let text = reply.to_string();
    assert!(
        text.contains(&user.uid.to_string()),
        "not the user's uid: {text}"
    );
    assert!(
        text.contains("refused") && text.contains("Permission denied"),
        "{text}"
    );
    assert!(!text.contains("private words"), "{text}");
    assert_plugins_non_dumpable(&user, &link);
    let (code, _, err) = user.run(&[link_s, "down", "--state", state_s]);
    assert_eq!(code, 0, "{err}");
    let status = up.wait().unwrap();
    assert!(status.success(), "link up exited {status:?}");
    let left = user.processes();
    assert!(left.is_empty(), "processes of {} left: {left:?}", user.name);
}

/// The user's processes started from `bin`'s programs: (pid, program name).
fn programs_of(user: &TestUser, bin: &Path) -> Vec<(i32, String)> {
    user.processes()
        .into_iter()
        .filter_map(|pid| {
            let argv = procfs::process::Process::new(pid).ok()?.cmdline().ok()?;
            let program = Path::new(argv.first()?);
            let name = program.file_name()?.to_str()?.to_owned();
            (program.parent() == Some(bin)).then_some((pid, name))
        })
        .collect()
}

/// Every plugin the user's runtime runs is non-dumpable: `/proc/PID/environ` belongs to root and the
/// user is refused its environment, where the user reads the host's (dumpable) environment.
fn assert_plugins_non_dumpable(user: &TestUser, link: &Path) {
    let running = programs_of(user, link.parent().unwrap());
    let environ = |pid: i32| user.run(&["cat", &format!("/proc/{pid}/environ")]);
    // The files in `/proc/PID` (not the directory) belong to root for a non-dumpable process.
    let owner = |pid: i32| {
        std::fs::metadata(format!("/proc/{pid}/environ"))
            .unwrap()
            .uid()
    };
    let host: Vec<_> = running.iter().filter(|(_, n)| n == "link").collect();
    assert_eq!(host.len(), 1, "one host among {running:?}");
    let (code, _, err) = environ(host[0].0);
    assert_eq!(code, 0, "the host's environ: {err}");
    assert_eq!(owner(host[0].0), user.uid);
    let plugins = link_protocol::manifest::programs_of(Profile::Link);
    for name in &plugins {
        let pid = running
            .iter()
            .find(|(_, n)| n == name)
            .unwrap_or_else(|| panic!("{name} is not among {running:?}"))
            .0;
        assert_eq!(owner(pid), 0, "{name}: /proc/{pid}/environ is not root's");
        let (code, _, err) = environ(pid);
        assert_eq!(code, 1, "{name}: {err}");
        assert!(err.contains("Permission denied"), "{name}: {err}");
    }
}
