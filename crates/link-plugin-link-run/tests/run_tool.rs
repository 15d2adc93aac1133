//! `tool.run` with the test as the host: it starts link-run (and, when built, the real
//! sandbox plugin) as their parent and serves the router socket itself, forwarding
//! `sandbox.exec` to the sandbox. The real router (in link-cli) replaces this in end-to-end tests.

use link_protocol::layout::StateLayout;
use link_protocol::{Client, ErrorCode, RemoteError};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

const BIN: &str = env!("CARGO_BIN_EXE_link-plugin-link-run");

struct Root(StateLayout);

impl Root {
    fn new(tag: &str) -> Root {
        let root = Path::new(&std::env::var("HOME").unwrap())
            .join(".cache/lnk-t")
            .join(format!("run-{tag}-{}", std::process::id()));
        let layout = StateLayout::new(root);
        layout.check().unwrap();
        std::fs::create_dir_all(layout.run_dir()).unwrap();
        Root(layout)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.root());
    }
}

async fn start(bin: &Path, name: &str, layout: &StateLayout, mode: &str) -> tokio::process::Child {
    let mut child = tokio::process::Command::new(bin)
        .env("LNK_PLUGIN", name)
        .env("LNK_STATE", layout.root())
        .env("LNK_SOCKET", layout.plugin_socket(name))
        .env("LNK_DATA", layout.data(name))
        .env("LNK_MODE", mode)
        .env("LNK_PROFILE", "link")
        .env("HOME", layout.home(name))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        link_protocol::plugin::parse_ready(&line).is_some(),
        "{line}"
    );
    child
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
    let root = Root::new("refuse");
    let layout = &root.0;
    std::fs::create_dir_all(layout.agent_workspace("a1")).unwrap();
    let _run = start(Path::new(BIN), "link-plugin-link-run", layout, "confined").await;
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

    let diag = Root::new("diag");
    std::fs::create_dir_all(diag.0.agent_workspace("a1")).unwrap();
    let _d = start(
        Path::new(BIN),
        "link-plugin-link-run",
        &diag.0,
        "diagnostic",
    )
    .await;
    let e = tool_run(&diag.0, "a1", json!({"command": "true"}))
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
    let Some(sandbox) = sandbox_bin() else {
        println!("SKIPPED: link-plugin-sandbox is not built (cargo build -p link-plugin-sandbox)");
        return;
    };
    let probe = std::process::Command::new(&sandbox)
        .arg("probe")
        .output()
        .unwrap();
    if probe.status.code() != Some(0) {
        let reason = String::from_utf8_lossy(&probe.stdout).into_owned();
        if std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
            panic!("LNK_REQUIRE_SANDBOX=1 but the sandbox is unavailable: {reason}");
        }
        println!("SKIPPED: {reason}");
        return;
    }
    let root = Root::new("e2e");
    let layout = root.0.clone();
    let ws = layout.agent_workspace("a1");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(layout.agent_home("a1")).unwrap();
    let _sb = start(&sandbox, "link-plugin-sandbox", &layout, "confined").await;

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
    let _run = start(Path::new(BIN), "link-plugin-link-run", &layout, "confined").await;

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
