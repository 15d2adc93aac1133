//! `tool.run` with the test as the host: it starts link-run (and, when built, the real
//! sandbox plugin) as their parent and serves the router socket itself, forwarding
//! `sandbox.exec` to the sandbox. The real router (in link-cli) replaces this in end-to-end tests.

use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::plugin_process::{PluginProcess, PluginSpec};
use link_protocol::layout::StateLayout;
use link_protocol::plugin::Mode;
use link_protocol::{Client, ErrorCode, RemoteError};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_link-plugin-link-run");

fn fresh_root() -> Arc<StateRoot> {
    Arc::new(StateRoot::create().expect("a state root"))
}

fn start(bin: &Path, name: &str, root: &Arc<StateRoot>, mode: Mode) -> PluginProcess {
    PluginSpec::new(bin, name)
        .mode(mode)
        .ready_within(Duration::from_secs(30))
        .start_in(root)
}

async fn tool_run(
    layout: &StateLayout,
    agent: &str,
    body: Value,
) -> Result<Value, link_protocol::Error> {
    let mut c = Client::connect(&layout.plugin_socket("link-plugin-link-run"))
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(60),
        c.call("tool.run", Some(agent), body),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn refusals_without_a_sandbox() {
    let root = fresh_root();
    let layout = root.layout();
    std::fs::create_dir_all(layout.agent_workspace("a1")).unwrap();
    let _run = start(
        Path::new(BIN),
        "link-plugin-link-run",
        &root,
        Mode::Confined,
    );
    let e = tool_run(layout, "nobody", json!({"command": "true"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotFound), "{e}");
    // No router: the call fails as unavailable, nothing runs in its place.
    let e = tool_run(layout, "a1", json!({"command": "touch ran"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Unavailable), "{e}");
    assert!(!layout.agent_workspace("a1").join("ran").exists());

    let diag = fresh_root();
    std::fs::create_dir_all(diag.layout().agent_workspace("a1")).unwrap();
    let _d = start(
        Path::new(BIN),
        "link-plugin-link-run",
        &diag,
        Mode::Diagnostic,
    );
    let e = tool_run(diag.layout(), "a1", json!({"command": "true"}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Unavailable), "{e}");
    assert!(e.to_string().contains("diagnostic"), "{e}");
}

/// The sandbox binary of the same build, if it was built.
fn sandbox_bin() -> Option<PathBuf> {
    let p = Path::new(BIN).with_file_name("link-plugin-sandbox");
    p.is_file().then_some(p)
}

#[tokio::test(flavor = "current_thread")]
async fn runs_through_the_router_and_the_real_sandbox() {
    // Not built or unavailable: a skip; a broken probe (exit 1): a failure.
    let programs = Path::new(BIN).parent().expect("the programs directory");
    if !link_harness_conformance::probe::sandbox_or_skip(programs) {
        return;
    }
    let sandbox = sandbox_bin().expect("sandbox_or_skip found it");
    let root = fresh_root();
    let layout = root.layout().clone();
    let ws = layout.agent_workspace("a1");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(layout.agent_home("a1")).unwrap();
    let _sb = start(&sandbox, "link-plugin-sandbox", &root, Mode::Confined);

    // The test plays the router: forward sandbox.exec to the sandbox, refuse anything else.
    let sandbox_sock = layout.plugin_socket("link-plugin-sandbox");
    let handler = link_protocol::server::handler(move |req: link_protocol::Request| {
        let sock = sandbox_sock.clone();
        async move {
            if req.route != "sandbox.exec" {
                return Err(RemoteError::forbidden("not granted"));
            }
            let mut c = Client::connect(&sock).await?;
            Ok(c.call(&req.route, req.agent.as_deref(), req.body).await?)
        }
    });
    let listener = link_protocol::plugin::bind(&layout.router_socket()).unwrap();
    let router = tokio::spawn(link_protocol::server::serve(
        listener,
        link_protocol::server::Peers::SameUser,
        Arc::clone(&handler),
    ));
    let _run = start(
        Path::new(BIN),
        "link-plugin-link-run",
        &root,
        Mode::Confined,
    );

    let r = tool_run(
        &layout,
        "a1",
        json!({"command": "echo hi; echo made > f; pwd; exit 3"}),
    )
    .await
    .unwrap();
    assert_eq!(r["exit_code"], 3, "{r}");
    assert_eq!(r["stdout"], "hi\n/workspace\n");
    assert_eq!(r["truncated"], false);
    assert_eq!(r["missing_command"], false);
    assert_eq!(std::fs::read_to_string(ws.join("f")).unwrap(), "made\n");
    let r = tool_run(&layout, "a1", json!({"command": "no-such-command-lnk"}))
        .await
        .unwrap();
    assert_eq!(r["missing_command"], true, "{r}");
    let r = tool_run(
        &layout,
        "a1",
        json!({"command": "sleep 30", "timeout_secs": 1}),
    )
    .await
    .unwrap();
    assert_eq!(r["timed_out"], true, "{r}");
    assert_eq!(r["signal"], 9);
    router.abort();
}
