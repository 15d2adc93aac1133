//! The scheduler run as a real process with this test as its parent (the host's role):
//! schedules are created, listed, cancelled, written to disk, and survive a restart. There
//! is no router here, so due schedules fire and record `unavailable` as their last result;
//! turns that really run are covered by the link harness's engine tests.

use link_harness_conformance::plugin_process::PluginProcess;
use link_protocol::layout::StateLayout;
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes::Route as _;
use link_protocol::{routes, ErrorCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const PLUGIN: &str = "link-plugin-link-scheduler";
const PATIENCE: Duration = Duration::from_secs(60);

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
    sched
        .call(routes::schedule::Cancel::NAME, None, json!({"id": later}))
        .await
        .unwrap();
    let err = sched
        .call(routes::schedule::Cancel::NAME, None, json!({"id": later}))
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
