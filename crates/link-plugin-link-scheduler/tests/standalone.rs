//! The scheduler run as a real process with this test as its parent (the host's role):
//! schedules are created, listed, cancelled, written to disk, and survive a restart. There
//! is no router here, so due schedules fire and record `unavailable` as their last result;
//! turns that really run are covered by the link harness's engine tests. Where a fire must
//! stay in flight, the test listens on the router's socket and takes the call without ever
//! answering it.

use link_harness_conformance::plugin_process::{PluginProcess, PluginSpec};
use link_protocol::layout::StateLayout;
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes::Route as _;
use link_protocol::{routes, ErrorCode};
use serde_json::{json, Value};
use std::io::Read as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PLUGIN: &str = "link-plugin-link-scheduler";
const PATIENCE: Duration = Duration::from_secs(60);
/// The last result of a fire its scheduler did not live to finish.
const INTERRUPTED: &str =
    "the scheduler stopped during this fire; the turn may or may not have run — see the conversation";

const ROUTES: [&str; 4] = [
    routes::schedule::Create::NAME,
    routes::schedule::List::NAME,
    routes::schedule::Cancel::NAME,
    routes::schedule::DeleteAgent::NAME,
];

struct Running(PluginProcess);

fn start() -> Running {
    let exe = env!("CARGO_BIN_EXE_link-plugin-link-scheduler");
    let p = PluginProcess::start(exe, PLUGIN, Profile::Link, Mode::Diagnostic, &[]);
    assert_eq!(p.ready().routes, ROUTES);
    Running(p)
}

impl Running {
    async fn call(
        &self,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> Result<Value, link_protocol::Error> {
        self.0.call(route, agent, body).await
    }

    async fn list(&self, agent: Option<&str>) -> Vec<Value> {
        let v = self
            .call(routes::schedule::List::NAME, agent, json!({}))
            .await
            .unwrap();
        v["schedules"].as_array().unwrap().clone()
    }

    async fn schedule(&self, id: &str) -> Value {
        let all = self.list(None).await;
        all.into_iter()
            .find(|s| s["id"] == id)
            .unwrap_or(Value::Null)
    }

    /// Polls until schedule `id` has a last result, and returns it.
    async fn wait_result(&self, id: &str) -> Value {
        let start = Instant::now();
        loop {
            let s = self.schedule(id).await;
            if !s["last_result"].is_null() {
                return s;
            }
            assert!(start.elapsed() < PATIENCE, "schedule {id} never fired: {s}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM: a clean exit that removes the socket.
    fn stop(&mut self) {
        let status = self.0.terminate_within(PATIENCE);
        assert!(status.success(), "{status}");
        assert!(!self.0.socket().exists(), "socket removed on exit");
    }

    /// Starts the scheduler again on the same state root.
    fn restart(&mut self) {
        self.0.restart();
        assert_eq!(self.0.ready().routes, ROUTES);
    }

    fn layout(&self) -> &StateLayout {
        self.0.layout()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn on_disk(layout: &StateLayout) -> Value {
    let path = layout.data(PLUGIN).join("schedules.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn disk_schedule(layout: &StateLayout, id: &str) -> Value {
    on_disk(layout)["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "current_thread")]
async fn schedules_persist_fire_and_survive_a_restart() {
    let mut sched = start();
    let root = sched.layout().clone();

    // Create: later, due now, recurring; bad bodies are refused with what to fix.
    let later = sched
        .call(
            routes::schedule::Create::NAME,
            Some("a"),
            json!({"message": "later", "delay_ms": 3_600_000}),
        )
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let now = sched
        .call(
            routes::schedule::Create::NAME,
            Some("b"),
            json!({"message": "now", "at_unix_ms": now_ms() - 1}),
        )
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let tick = sched
        .call(
            routes::schedule::Create::NAME,
            Some("a"),
            json!({"message": "tick", "every_ms": 3_600_000}),
        )
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let err = sched
        .call(
            routes::schedule::Create::NAME,
            Some("a"),
            json!({"message": "when?"}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{err}");
    let err = sched
        .call(
            routes::schedule::Create::NAME,
            None,
            json!({"message": "x", "delay_ms": 1}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{err}");

    // The due one fires at once; without a router its turn is recorded as unavailable.
    let fired = sched.wait_result(&now).await;
    assert_eq!(fired["fired"], 1, "{fired}");
    assert_eq!(fired["done"], true);
    assert_eq!(fired["last_result"]["ok"], false);
    let error = fired["last_result"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("unavailable:") && error.contains("router"),
        "{error}"
    );
    assert_eq!(disk_schedule(&root, &now)["fired"], 1);
    assert_eq!(disk_schedule(&root, &now)["done"], true);

    // The list shape, the agent filter, and what is on disk.
    let a = sched.list(Some("a")).await;
    assert_eq!(a.len(), 2);
    let s = &a[0];
    assert_eq!(s["id"], later.as_str());
    assert_eq!(s["agent"], "a");
    assert_eq!(s["message"], "later");
    assert_eq!(s["fired"], 0);
    assert!(s["every_ms"].is_null());
    let next = s["next_unix_ms"].as_u64().unwrap();
    assert!(next > now_ms() + 3_500_000, "{s}");
    assert_eq!(a[1]["every_ms"], 3_600_000);
    assert_eq!(on_disk(&root)["schedules"].as_array().unwrap().len(), 3);
    assert!(!root.data(PLUGIN).join("schedules.json.tmp").exists());

    // Cancel: only for its own agent; then gone, in memory and on disk.
    let err = sched
        .call(
            routes::schedule::Cancel::NAME,
            Some("b"),
            json!({"id": later}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::Forbidden), "{err}");
    let err = sched
        .call(routes::schedule::Cancel::NAME, None, json!({"id": later}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest), "no agent: {err}");
    sched
        .call(
            routes::schedule::Cancel::NAME,
            Some("a"),
            json!({"id": later}),
        )
        .await
        .unwrap();
    let err = sched
        .call(
            routes::schedule::Cancel::NAME,
            Some("a"),
            json!({"id": later}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotFound), "{err}");
    assert!(disk_schedule(&root, &later).is_null());

    // One due while the scheduler is down fires once it is back; the fired one-shot does not.
    let down = sched
        .call(
            routes::schedule::Create::NAME,
            Some("c"),
            json!({"message": "while down", "delay_ms": 300}),
        )
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    sched.stop();
    let stopped = disk_schedule(&root, &down);
    assert!(
        stopped["fired"] == 0 || !stopped["last_result"].is_null(),
        "{stopped}"
    );
    let due = stopped["next_unix_ms"].as_u64().unwrap();
    while now_ms() <= due {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    sched.restart();
    let fired = sched.wait_result(&down).await;
    assert_eq!(fired["fired"], 1, "{fired}");
    assert_eq!(fired["done"], true);
    let again = sched.schedule(&now).await;
    assert_eq!(
        again["fired"], 1,
        "a fired one-shot is never fired again: {again}"
    );
    assert_eq!(sched.schedule(&tick).await["fired"], 0);

    // Deleting an agent removes all its schedules.
    sched
        .call(routes::schedule::DeleteAgent::NAME, Some("a"), json!({}))
        .await
        .unwrap();
    assert!(sched.list(Some("a")).await.is_empty());
    assert!(disk_schedule(&root, &tick).is_null());
    assert_eq!(sched.list(None).await.len(), 2);

    // New ids never repeat an old one, across the restart.
    let fresh = sched
        .call(
            routes::schedule::Create::NAME,
            Some("d"),
            json!({"message": "x", "delay_ms": 60_000}),
        )
        .await
        .unwrap();
    assert_eq!(fresh["id"], "s5");
    sched.stop();
}

async fn create(sched: &Running, agent: &str, body: Value) -> String {
    let v = sched
        .call(routes::schedule::Create::NAME, Some(agent), body)
        .await
        .unwrap();
    v["id"].as_str().unwrap().to_owned()
}

/// Temp files of `schedules.json` left in the data area.
fn temps(layout: &StateLayout) -> Vec<String> {
    std::fs::read_dir(layout.data(PLUGIN))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("schedules.json.tmp"))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_second_scheduler_on_the_same_data_is_refused_and_the_first_keeps_working() {
    let sched = start();
    let root = sched.layout().clone();
    let first = create(
        &sched,
        "a",
        json!({"message": "one", "delay_ms": 3_600_000}),
    )
    .await;

    // The same program on the same state, as a second `link up` would start it.
    let exe = env!("CARGO_BIN_EXE_link-plugin-link-scheduler");
    let mut cmd = PluginSpec::new(exe, PLUGIN).command(&root);
    cmd.stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the second scheduler kept running"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{status}: {err}");
    assert!(out.is_empty(), "no ready line: {out}");
    let holder = format!("pid {}", sched.0.pid());
    assert!(
        err.contains("another scheduler")
            && err.contains(&holder)
            && err.contains("schedules.lock"),
        "a clear refusal naming the holder: {err}"
    );

    // The first still serves, writes, and owns its socket.
    assert!(sched.0.socket().exists());
    let second = create(
        &sched,
        "a",
        json!({"message": "two", "delay_ms": 3_600_000}),
    )
    .await;
    let listed: Vec<_> = sched.list(Some("a")).await;
    assert_eq!(listed.len(), 2);
    assert_eq!(
        (listed[0]["id"].as_str(), listed[1]["id"].as_str()),
        (Some(first.as_str()), Some(second.as_str()))
    );
    assert_eq!(disk_schedule(&root, &second)["message"], "two");
    assert!(temps(&root).is_empty(), "{:?}", temps(&root));
}

/// The router's socket with nobody behind it who answers: every call is read and held open.
struct SilentRouter {
    calls: Arc<Mutex<Vec<Value>>>,
}

impl SilentRouter {
    fn bind(layout: &StateLayout) -> SilentRouter {
        let listener = UnixListener::bind(layout.router_socket()).unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = calls.clone();
        // Blocks in accept until the test binary ends; the connections stay open with it.
        std::thread::spawn(move || {
            let mut held: Vec<UnixStream> = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut len = [0u8; 4];
                if stream.read_exact(&mut len).is_ok() {
                    let mut frame = vec![0; u32::from_be_bytes(len) as usize];
                    if stream.read_exact(&mut frame).is_ok() {
                        let call = serde_json::from_slice(&frame).unwrap_or(Value::Null);
                        seen.lock().unwrap().push(call);
                    }
                }
                held.push(stream);
            }
        });
        SilentRouter { calls }
    }

    fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }

    /// Waits until `n` calls have come.
    async fn wait_calls(&self, n: usize) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let calls = self.calls();
            if calls.len() >= n {
                return calls;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "only {} calls came: {calls:?}",
                calls.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_fire_cut_by_kill_9_is_reported_as_failed_and_never_fired_again() {
    let mut sched = start();
    let root = sched.layout().clone();
    let router = SilentRouter::bind(&root);

    // Two fires that stay in flight: a one-shot due now, a recurring one whose first is now.
    let once = create(
        &sched,
        "a",
        json!({"message": "once", "at_unix_ms": now_ms() - 1}),
    )
    .await;
    let tick = create(
        &sched,
        "b",
        json!({"message": "tick", "delay_ms": 0, "every_ms": 3_600_000}),
    )
    .await;
    let mut calls = router.wait_calls(2).await;
    calls.sort_by_key(|c| c["agent"].as_str().map(str::to_owned));
    assert_eq!(calls[0]["route"], routes::agent::Turn::NAME, "{calls:?}");
    assert_eq!(
        (
            calls[0]["agent"].as_str(),
            calls[0]["body"]["message"].as_str()
        ),
        (Some("a"), Some("once"))
    );
    assert_eq!(
        (
            calls[1]["agent"].as_str(),
            calls[1]["body"]["message"].as_str()
        ),
        (Some("b"), Some("tick"))
    );

    // While the turns run, the fires are on disk as in flight, with no result yet.
    for id in [&once, &tick] {
        let s = sched.schedule(id).await;
        assert_eq!(s["fired"], 1, "{s}");
        assert!(s["last_result"].is_null(), "{s}");
        let kept = disk_schedule(&root, id);
        assert!(kept["in_flight"]["at_unix_ms"].is_u64(), "{kept}");
        assert_eq!(kept["fired"], 1, "{kept}");
    }
    let tick_next = disk_schedule(&root, &tick)["next_unix_ms"]
        .as_u64()
        .unwrap();
    assert!(
        tick_next > now_ms() + 3_500_000,
        "the recurring one moved on"
    );

    // kill -9 mid-fire, then the host starts it again.
    sched.0.kill();
    sched.restart();

    // Both fires are reported as failed with the reason, counted once, and not fired again.
    let check = |s: &Value| {
        assert_eq!(s["fired"], 1, "{s}");
        assert_eq!(s["last_result"]["ok"], false, "{s}");
        assert_eq!(s["last_result"]["error"], INTERRUPTED, "{s}");
        assert!(s["last_result"]["reply"].is_null(), "{s}");
    };
    let s = sched.schedule(&once).await;
    check(&s);
    assert_eq!(s["done"], true, "{s}");
    let s = sched.schedule(&tick).await;
    check(&s);
    assert_eq!(s["done"], false, "the recurring one continues: {s}");
    assert_eq!(s["next_unix_ms"], tick_next, "at its next interval: {s}");
    for id in [&once, &tick] {
        let kept = disk_schedule(&root, id);
        assert!(kept.get("in_flight").is_none(), "{kept}");
        check(&kept);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        router.calls().len(),
        2,
        "no fire again: {:?}",
        router.calls()
    );

    // And the record holds across another (clean) restart.
    sched.stop();
    sched.restart();
    tokio::time::sleep(Duration::from_millis(500)).await;
    check(&sched.schedule(&once).await);
    check(&sched.schedule(&tick).await);
    assert_eq!(
        router.calls().len(),
        2,
        "no fire again: {:?}",
        router.calls()
    );
    assert!(temps(&root).is_empty(), "{:?}", temps(&root));
    sched.stop();
}
