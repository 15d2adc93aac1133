//! The file store as a real process: this test is its parent, so it calls it directly, and
//! checks every effect on disk.

use link_harness_conformance::plugin_process::{PluginProcess, PluginSpec};
use link_protocol::layout::StateLayout;
use link_protocol::ErrorCode;
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const NAME: &str = "link-plugin-file-store";
const HARNESS: &str = "link-plugin-link-harness";

struct Store(PluginProcess);

impl Store {
    fn start() -> Store {
        // Warnings only: the log file is inside the root that some tests snapshot.
        let p = PluginSpec::new(env!("CARGO_BIN_EXE_link-plugin-file-store"), NAME)
            .env("RUST_LOG", "warn")
            .start();
        assert!(p.ready().routes.contains(&"store.file.write".to_owned()));
        Store(p)
    }

    fn layout(&self) -> &StateLayout {
        self.0.layout()
    }

    async fn call(
        &self,
        route: &str,
        agent: &str,
        body: Value,
    ) -> Result<Value, link_protocol::Error> {
        self.call_as(None, route, agent, body).await
    }

    async fn call_as(
        &self,
        caller: Option<&str>,
        route: &str,
        agent: &str,
        body: Value,
    ) -> Result<Value, link_protocol::Error> {
        self.0.call_as(caller, route, Some(agent), body).await
    }

    async fn create(&self, agent: &str) {
        self.call("store.agent.create", agent, json!({}))
            .await
            .unwrap();
    }

    async fn refused(&self, route: &str, agent: &str, body: Value) -> ErrorCode {
        let (code, message) = self.0.refusal(None, route, Some(agent), body).await;
        assert!(!message.is_empty());
        code
    }

    fn conversation(&self, agent: &str) -> PathBuf {
        self.layout().agent_conversation(agent)
    }
}

/// Every file under `dir` with its bytes (symlinks as their target), for before/after checks.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p.clone());
                out.push((p, b"<dir>".to_vec()));
            } else if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.push((p, t.to_string_lossy().as_bytes().to_vec()));
            } else if meta.is_file() {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            } else {
                out.push((p, b"<other>".to_vec())); // the socket
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn conversation_append_read_and_torn_tail() {
    let s = Store::start();
    s.create("a").await;
    let log = s.conversation("a");
    assert_eq!(std::fs::read(&log).unwrap(), b"");
    assert_eq!(std::fs::metadata(&log).unwrap().mode() & 0o777, 0o600);

    let entries = json!({"entries": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello\nthere"},
    ]});
    // Only the link harness may append; nothing is written otherwise.
    for caller in [None, Some("link-plugin-file-tool"), Some("host")] {
        let err = s
            .call_as(caller, "store.conversation.append", "a", entries.clone())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::Forbidden), "{caller:?}: {err}");
    }
    assert_eq!(std::fs::read(&log).unwrap(), b"");

    let done = s
        .call_as(Some(HARNESS), "store.conversation.append", "a", entries)
        .await
        .unwrap();
    assert_eq!(done["count"], 2);
    assert_eq!(done["repaired"], Value::Null);
    let read = s
        .call("store.conversation.read", "a", json!({}))
        .await
        .unwrap();
    assert_eq!(read["entries"].as_array().unwrap().len(), 2);
    assert_eq!(read["entries"][1]["content"], "hello\nthere");
    assert_eq!(read["torn"], Value::Null);
    let intact = std::fs::read(&log).unwrap();
    assert_eq!(intact.iter().filter(|&&b| b == b'\n').count(), 2);

    // A crash mid-append leaves a line without its end, as a torn write would.
    let mut torn = intact.clone();
    torn.extend_from_slice(br#"{"role":"user","content":"half"#);
    std::fs::write(&log, &torn).unwrap();
    let read = s
        .call("store.conversation.read", "a", json!({}))
        .await
        .unwrap();
    assert_eq!(read["entries"].as_array().unwrap().len(), 2, "{read}");
    let reason = read["torn"].as_str().expect("torn is reported");
    assert!(reason.contains("no newline"), "{reason}");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        torn,
        "reading changes nothing"
    );

    // The next append cuts exactly the torn tail, records it, and appends cleanly.
    let done = s
        .call_as(
            Some(HARNESS),
            "store.conversation.append",
            "a",
            json!({"entries": [{"role": "user", "content": "again"}]}),
        )
        .await
        .unwrap();
    assert_eq!(done["count"], 1);
    assert!(done["repaired"].as_str().unwrap().contains("no newline"));
    let after = std::fs::read(&log).unwrap();
    assert!(
        after.starts_with(&intact),
        "intact lines kept byte for byte"
    );
    assert_eq!(
        &after[intact.len()..],
        b"{\"content\":\"again\",\"role\":\"user\"}\n"
    );
    let read = s
        .call("store.conversation.read", "a", json!({}))
        .await
        .unwrap();
    assert_eq!(read["entries"].as_array().unwrap().len(), 3);
    assert_eq!(read["entries"][2]["content"], "again");
    assert_eq!(read["torn"], Value::Null);
    let repairs =
        std::fs::read_to_string(log.with_file_name("conversation.repairs.jsonl")).unwrap();
    let record: Value = serde_json::from_str(repairs.lines().next().unwrap()).unwrap();
    assert_eq!(record["truncated_at"], intact.len());
    assert_eq!(record["removed"], r#"{"role":"user","content":"half"#);

    // A corrupt line in the middle is not a crash artefact: refused, nothing changed.
    let mut corrupt = b"not json\n".to_vec();
    corrupt.extend_from_slice(&after);
    std::fs::write(&log, &corrupt).unwrap();
    let code = s.refused("store.conversation.read", "a", json!({})).await;
    assert_eq!(code, ErrorCode::Internal);
    let err = s
        .call_as(
            Some(HARNESS),
            "store.conversation.append",
            "a",
            json!({"entries": [{"role": "user"}]}),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("line 1"), "{err}");
    assert!(err.to_string().contains("conversation.jsonl"), "{err}");
    assert_eq!(std::fs::read(&log).unwrap(), corrupt);

    // Bad entries and unknown agents.
    let err = s
        .call_as(
            Some(HARNESS),
            "store.conversation.append",
            "a",
            json!({"entries": [{"content": "x"}]}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest));
    assert_eq!(
        s.refused("store.conversation.read", "nobody", json!({}))
            .await,
        ErrorCode::NotFound
    );
    assert_eq!(
        s.refused("store.conversation.read", "../a", json!({}))
            .await,
        ErrorCode::BadRequest
    );
}

#[tokio::test]
async fn path_tricks_are_refused_and_change_nothing() {
    let s = Store::start();
    s.create("a").await;
    s.create("b").await;
    s.call_as(
        Some(HARNESS),
        "store.conversation.append",
        "a",
        json!({"entries": [{"role": "user", "content": "secret history"}]}),
    )
    .await
    .unwrap();
    let ws = s.layout().agent_workspace("a");
    std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
    std::os::unix::fs::symlink("../b", ws.join("other")).unwrap();
    let up = s.layout().seen_from_workspace("a", &s.conversation("a"));
    std::os::unix::fs::symlink(&up, ws.join("conv")).unwrap();
    std::os::unix::fs::symlink("../../agents/a", ws.join("up")).unwrap();
    let up_x = format!("x/../{up}");
    std::os::unix::fs::symlink(s.conversation("a"), ws.join("conv-abs")).unwrap();
    let root_before = snapshot(s.layout().root());
    let passwd = std::fs::read("/etc/passwd").unwrap();

    let cases: &[(&str, ErrorCode)] = &[
        ("../x", ErrorCode::Forbidden),
        ("/etc/passwd", ErrorCode::Forbidden),
        ("a/../../x", ErrorCode::Forbidden),
        ("../b/x", ErrorCode::Forbidden),
        ("etc/passwd", ErrorCode::Forbidden),
        ("other/x", ErrorCode::Forbidden),
        ("../conversation.jsonl", ErrorCode::Forbidden),
        (up.as_str(), ErrorCode::Protected),
        (up_x.as_str(), ErrorCode::Protected),
        ("conv", ErrorCode::Protected),
        ("conv-abs", ErrorCode::Protected),
        ("up/conversation.jsonl", ErrorCode::Protected),
    ];
    let abs_conv = s.conversation("a").display().to_string();
    let mut all = cases.to_vec();
    all.push((abs_conv.as_str(), ErrorCode::Protected));
    for (path, want) in &all {
        for (route, body) in [
            (
                "store.file.write",
                json!({"path": path, "content": "pwned"}),
            ),
            ("store.file.read", json!({"path": path})),
        ] {
            let code = s.refused(route, "a", body).await;
            assert_eq!(code, *want, "{route} {path}");
        }
    }
    for (path, want) in [
        ("..", ErrorCode::Forbidden),
        ("../../agents/a", ErrorCode::Protected),
        ("../..", ErrorCode::Forbidden),
        ("up", ErrorCode::Protected),
        ("/", ErrorCode::Forbidden),
    ] {
        let code = s
            .refused("store.file.list", "a", json!({"path": path}))
            .await;
        assert_eq!(code, want, "list {path}");
    }
    assert_eq!(
        snapshot(s.layout().root()),
        root_before,
        "nothing changed on disk"
    );
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);

    // Symlinks that stay inside the workspace are followed.
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::os::unix::fs::symlink("sub", ws.join("inner")).unwrap();
    s.call(
        "store.file.write",
        "a",
        json!({"path": "inner/b.txt", "content": "via link"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/b.txt")).unwrap(),
        "via link"
    );
    let got = s
        .call(
            "store.file.read",
            "a",
            json!({"path": "inner/../sub/b.txt"}),
        )
        .await
        .unwrap();
    assert_eq!(got["content"], "via link");

    // Not regular files, and sizes.
    let fifo = ws.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    assert_eq!(
        s.refused("store.file.read", "a", json!({"path": "fifo"}))
            .await,
        ErrorCode::BadRequest
    );
    assert_eq!(
        s.refused("store.file.read", "a", json!({"path": "sub"}))
            .await,
        ErrorCode::BadRequest
    );
    assert_eq!(
        s.refused("store.file.read", "a", json!({"path": ""})).await,
        ErrorCode::BadRequest
    );
    assert_eq!(
        s.refused("store.file.read", "a", json!({"path": "missing.txt"}))
            .await,
        ErrorCode::NotFound
    );
    let big = "x".repeat(1024 * 1024 + 1);
    assert_eq!(
        s.refused(
            "store.file.write",
            "a",
            json!({"path": "big.txt", "content": big})
        )
        .await,
        ErrorCode::TooLarge
    );
    assert!(!ws.join("big.txt").exists());
    std::fs::write(ws.join("huge.txt"), &big).unwrap();
    assert_eq!(
        s.refused("store.file.read", "a", json!({"path": "huge.txt"}))
            .await,
        ErrorCode::TooLarge
    );
    std::fs::write(ws.join("bin"), [0xff, 0xfe, 0]).unwrap();
    assert_eq!(
        s.refused("store.file.read", "a", json!({"path": "bin"}))
            .await,
        ErrorCode::BadRequest
    );
}

#[tokio::test]
async fn writes_are_atomic_and_lists_are_plain() {
    let s = Store::start();
    s.create("a").await;
    let ws = s.layout().agent_workspace("a");
    let done = s
        .call(
            "store.file.write",
            "a",
            json!({"path": "d/e/f.txt", "content": "one"}),
        )
        .await
        .unwrap();
    assert_eq!(done["bytes"], 3);
    let file = ws.join("d/e/f.txt");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one");

    // The old file is replaced by rename, never rewritten in place: a hard link to the old
    // inode keeps the old bytes, the mode is kept, and no temporary file is left behind.
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::hard_link(&file, ws.join("old")).unwrap();
    let ino = std::fs::metadata(&file).unwrap().ino();
    s.call(
        "store.file.write",
        "a",
        json!({"path": "d/e/f.txt", "content": "two!"}),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "two!");
    assert_eq!(std::fs::read_to_string(ws.join("old")).unwrap(), "one");
    let meta = std::fs::metadata(&file).unwrap();
    assert_ne!(meta.ino(), ino);
    assert_eq!(meta.mode() & 0o777, 0o755);
    let names: Vec<String> = std::fs::read_dir(ws.join("d/e"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["f.txt"]);

    let list = s.call("store.file.list", "a", json!({})).await.unwrap();
    assert_eq!(
        list["entries"],
        json!([{"name": "d", "kind": "dir", "bytes": 0}, {"name": "old", "kind": "file", "bytes": 3}])
    );
    let list = s
        .call("store.file.list", "a", json!({"path": "d/e"}))
        .await
        .unwrap();
    assert_eq!(
        list["entries"],
        json!([{"name": "f.txt", "kind": "file", "bytes": 4}])
    );
    assert_eq!(
        s.refused("store.file.list", "a", json!({"path": "old"}))
            .await,
        ErrorCode::BadRequest
    );
    assert_eq!(
        s.refused("store.file.list", "a", json!({"path": "nope"}))
            .await,
        ErrorCode::NotFound
    );
    assert_eq!(
        s.refused(
            "store.file.write",
            "a",
            json!({"path": "d", "content": "x"})
        )
        .await,
        ErrorCode::BadRequest
    );
}

#[tokio::test]
async fn agents_are_isolated_and_deleted() {
    let s = Store::start();
    s.create("a").await;
    s.create("b").await;
    for (agent, text) in [("a", "from a"), ("b", "from b")] {
        s.call(
            "store.file.write",
            agent,
            json!({"path": "notes.txt", "content": text}),
        )
        .await
        .unwrap();
    }
    for (agent, text) in [("a", "from a"), ("b", "from b")] {
        let got = s
            .call("store.file.read", agent, json!({"path": "notes.txt"}))
            .await
            .unwrap();
        assert_eq!(got["content"], text);
        let on_disk = s.layout().agent_workspace(agent).join("notes.txt");
        assert_eq!(std::fs::read_to_string(on_disk).unwrap(), text);
    }

    // Creating again keeps what is there (the agent plugin may retry).
    let again = s.call("store.agent.create", "a", json!({})).await.unwrap();
    assert_eq!(again["workspace"], json!(s.layout().agent_workspace("a")));
    assert!(s.layout().agent_workspace("a").join("notes.txt").exists());

    // Only the agent plugin (through the router) or the host may create and delete.
    let err = s
        .call_as(
            Some("link-plugin-file-tool"),
            "store.agent.delete",
            "a",
            json!({}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Forbidden));
    assert!(s.layout().agent_dir("a").exists());
    s.call_as(
        Some("link-plugin-agent"),
        "store.agent.delete",
        "a",
        json!({}),
    )
    .await
    .unwrap();
    assert!(!s.layout().agent_dir("a").exists());
    assert!(!s.layout().agent_workspace("a").exists());
    assert_eq!(
        s.refused("store.file.read", "a", json!({"path": "notes.txt"}))
            .await,
        ErrorCode::NotFound
    );
    assert!(s.layout().agent_workspace("b").join("notes.txt").exists());
    s.call("store.agent.delete", "a", json!({})).await.unwrap();
    assert_eq!(
        s.refused("store.agent.create", "Bad/Name", json!({})).await,
        ErrorCode::BadRequest
    );
}

/// A state root of an earlier version kept each workspace inside its agent's directory, beside
/// the conversation; the store moves it apart when it starts (its files with it, the log left
/// where it is), and one found in both places is left as it was.
#[tokio::test]
async fn a_workspace_kept_beside_its_conversation_is_moved_apart_at_start() {
    let mut s = Store::start();
    for agent in ["a", "b"] {
        s.create(agent).await;
        s.call(
            "store.file.write",
            agent,
            json!({"path": "notes.txt", "content": agent}),
        )
        .await
        .unwrap();
    }
    let layout = s.layout().clone();
    s.0.kill();
    // The earlier layout for both; b also has a workspace in the new place.
    for agent in ["a", "b"] {
        let (new, old) = (
            layout.agent_workspace(agent),
            layout.old_agent_workspace(agent),
        );
        std::fs::rename(&new, &old).unwrap();
    }
    std::fs::create_dir(layout.agent_workspace("b")).unwrap();
    // A link where a workspace was is not followed: nothing moves for c.
    std::fs::create_dir(layout.agent_dir("c")).unwrap();
    std::os::unix::fs::symlink("/etc", layout.old_agent_workspace("c")).unwrap();
    s.0.restart();
    let got = s
        .call("store.file.read", "a", json!({"path": "notes.txt"}))
        .await
        .unwrap();
    assert_eq!(got["content"], "a");
    assert!(!layout.old_agent_workspace("a").exists());
    assert!(layout.agent_conversation("a").exists());
    assert!(layout.old_agent_workspace("b").join("notes.txt").exists());
    assert!(!layout.agent_workspace("b").join("notes.txt").exists());
    assert!(std::fs::symlink_metadata(layout.agent_workspace("c")).is_err());
    assert!(std::fs::symlink_metadata(layout.old_agent_workspace("c")).is_ok());
}
