//! link-plugin-link-scheduler: scheduled turns — at a time, after a delay, or every
//! interval — persisted in its data area as `schedules.json`.
//!
//! It owns the `schedule.*` routes. When a schedule is due it runs a turn of its agent by
//! calling `turn.run` through the host's router with the schedule's message, and records
//! the firing count and the last result. One timer task sleeps until the next due time and
//! is woken whenever the schedules change. Schedules survive a restart: on start, the due
//! ones fire; one-shots that already fired are never fired again.
//!
//! Exactly once: it is the only writer of `schedules.json` (an exclusive lock for its whole
//! life; a second scheduler on the same data refuses to start), a fire is made durable as
//! in flight before `turn.run` is called, and a fire found in flight on start — its
//! scheduler died during the turn — is recorded as failed with the reason, not fired again.

mod store;

use link_protocol::clock::unix_ms;
use link_protocol::plugin::PluginEnv;
use link_protocol::routes::agent::{Turn, TurnBody, TurnReply};
use link_protocol::routes::schedule::{
    Cancel, Create as CreateRoute, DeleteAgent, Id, List, Schedules,
};
use link_protocol::routes::Empty;
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{client, AgentId, ErrorCode, RemoteError};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Book, BookFile, Create, LastResult, Schedule, WriterLock};
use tokio::sync::Notify;

/// The timer wakes at least this often, so a changed wall clock is noticed.
const MAX_NAP: Duration = Duration::from_secs(30);
/// How long a scheduled turn may take.
const TURN_TIMEOUT: Duration = Duration::from_secs(600);
/// Waits between attempts to reach the router. Right after start the host may not have
/// registered us yet, and drops our connection; a few short retries cover that.
const RETRY_WAITS_MS: &[u64] = &[200, 400, 800, 1600];
/// When a fire could not be recorded (a full disk, say), due schedules wait this long
/// before the next attempt; no turn runs that is not recorded first.
const SAVE_RETRY_MS: u64 = 5_000;

struct Scheduler {
    file: BookFile,
    /// Held for the process's life: this is the one writer of the file.
    _lock: WriterLock,
    /// The schedules; one whose turn is running has a fire in flight and is not fired
    /// again until it ends.
    book: Mutex<Book>,
    /// After a failed save of a fire, nothing fires before this time.
    hold_until_ms: Mutex<u64>,
    wake: Notify,
    router: PathBuf,
}

impl Scheduler {
    fn open(env: &PluginEnv) -> anyhow::Result<Scheduler> {
        std::fs::create_dir_all(&env.data)?;
        // First, before anything is read or written (and before the socket is bound).
        let lock = WriterLock::acquire(&env.data).map_err(anyhow::Error::msg)?;
        let file = BookFile::new(&env.data);
        match file.remove_stale_temps() {
            Ok(0) => {}
            Ok(n) => tracing::info!("{n} temp files of a killed writer removed"),
            Err(e) => tracing::warn!("could not remove stale temp files: {e}"),
        }
        let mut book = file.load().map_err(anyhow::Error::msg)?;
        book.version = 1;
        tracing::info!(
            "{} schedules loaded from {}",
            book.schedules.len(),
            file.path().display()
        );
        let recovered = book.recover();
        for (id, at) in &recovered {
            tracing::warn!(
                "schedule {id}: the fire at unix ms {at} was cut short (the scheduler stopped \
                 during its turn); recorded as failed, not fired again"
            );
        }
        if !recovered.is_empty() {
            // If this fails, the file still says in flight: the next start records the same.
            if let Err(e) = file.save(&book) {
                tracing::error!("could not save {}: {e}", file.path().display());
            }
        }
        Ok(Scheduler {
            file,
            _lock: lock,
            book: Mutex::new(book),
            hold_until_ms: Mutex::new(0),
            wake: Notify::new(),
            router: env.layout().router_socket(),
        })
    }

    fn create(&self, agent: &AgentId, create: Create) -> Result<Id, RemoteError> {
        let mut book = self.book.lock().expect("book");
        let id = book
            .add(agent, &create, unix_ms())
            .map_err(|e| RemoteError::bad_request(format!("schedule.create: {e}")))?
            .id
            .clone();
        if let Err(e) = self.file.save(&book) {
            book.remove(&id);
            return Err(self.save_error(e));
        }
        drop(book);
        tracing::info!("schedule {id} created for {agent}");
        self.wake.notify_one();
        Ok(Id { id })
    }

    fn list(&self, agent: Option<&AgentId>) -> Schedules {
        let book = self.book.lock().expect("book");
        let schedules = book
            .listed()
            .filter(|s| agent.is_none_or(|a| &s.agent == a))
            .cloned()
            .collect();
        Schedules { schedules }
    }

    fn cancel(&self, agent: &AgentId, Id { id }: Id) -> Result<Empty, RemoteError> {
        let mut book = self.book.lock().expect("book");
        let owner = book.get_mut(&id).map(|k| k.schedule.agent.clone());
        match owner {
            None => return Err(RemoteError::not_found(format!("no schedule {id}"))),
            Some(owner) if &owner != agent => {
                return Err(RemoteError::forbidden(format!(
                    "schedule {id} belongs to another agent than {agent}"
                )))
            }
            Some(_) => {}
        }
        let removed = book.remove(&id).expect("checked above");
        if let Err(e) = self.file.save(&book) {
            book.schedules.push(removed);
            return Err(self.save_error(e));
        }
        drop(book);
        tracing::info!("schedule {id} cancelled");
        self.wake.notify_one();
        Ok(Empty {})
    }

    fn delete_agent(&self, agent: &AgentId) -> Result<Empty, RemoteError> {
        let mut book = self.book.lock().expect("book");
        let before = book.clone();
        let removed = book.remove_agent(agent);
        if removed > 0 {
            if let Err(e) = self.file.save(&book) {
                *book = before;
                return Err(self.save_error(e));
            }
            tracing::info!("{removed} schedules of deleted agent {agent} removed");
        }
        drop(book);
        self.wake.notify_one();
        Ok(Empty {})
    }

    fn save_error(&self, e: std::io::Error) -> RemoteError {
        RemoteError::internal(format!(
            "could not save {}: {e}; nothing was changed",
            self.file.path().display()
        ))
    }

    /// Sleeps until the next due schedule or a change, and fires what is due.
    async fn run_timer(self: Arc<Self>) {
        loop {
            for schedule in self.take_due(unix_ms()) {
                tokio::spawn(self.clone().fire(schedule));
            }
            let nap = match self.next_due() {
                Some(t) => Duration::from_millis(t.saturating_sub(unix_ms())).min(MAX_NAP),
                None => MAX_NAP,
            };
            tokio::select! {
                _ = tokio::time::sleep(nap) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    fn next_due(&self) -> Option<u64> {
        let hold = *self.hold_until_ms.lock().expect("hold");
        let next = self.book.lock().expect("book").next_due()?;
        Some(next.max(hold))
    }

    /// Records a fire of every due schedule with none in flight (fired count, next time,
    /// `in_flight`) and saves that, fsynced, before any turn runs: after a crash a fire is
    /// neither run twice nor lost without a word. If the save fails, nothing fires now.
    fn take_due(&self, now: u64) -> Vec<Schedule> {
        let mut hold = self.hold_until_ms.lock().expect("hold");
        if now < *hold {
            return Vec::new();
        }
        let mut book = self.book.lock().expect("book");
        if !book.schedules.iter().any(|k| k.due(now)) {
            return Vec::new();
        }
        let before = book.clone();
        let due = book.begin_due(now);
        let Err(e) = self.file.save(&book) else {
            return due;
        };
        // Back as it was: the fires did not happen, and are tried again shortly.
        *book = before;
        *hold = now + SAVE_RETRY_MS;
        tracing::error!(
            "could not save {}: {e}; {} due schedules not fired, retried in {SAVE_RETRY_MS} ms",
            self.file.path().display(),
            due.len()
        );
        for s in &due {
            if let Some(k) = book.get_mut(&s.id) {
                k.schedule.last_result = Some(LastResult {
                    at_unix_ms: now,
                    ok: false,
                    reply: None,
                    error: Some(format!(
                        "not fired: could not record the fire in {}: {e}; retried in {SAVE_RETRY_MS} ms",
                        self.file.path().display()
                    )),
                });
            }
        }
        Vec::new()
    }

    /// Runs the schedule's turn and records what it gave.
    async fn fire(self: Arc<Self>, schedule: Schedule) {
        tracing::info!(
            "schedule {} fires a turn of {}",
            schedule.id,
            schedule.agent
        );
        let result = self.run_turn(&schedule.agent, &schedule.message).await;
        let last = match &result {
            Ok(v) => LastResult {
                at_unix_ms: unix_ms(),
                ok: true,
                reply: Some(v.reply.clone()),
                error: None,
            },
            Err(e) => {
                // The code only: the turn's error may quote the scheduled message.
                tracing::warn!("schedule {} turn failed: {}", schedule.id, e.code.as_str());
                LastResult {
                    at_unix_ms: unix_ms(),
                    ok: false,
                    reply: None,
                    error: Some(e.to_string()),
                }
            }
        };
        {
            let mut book = self.book.lock().expect("book");
            // Gone if it was cancelled (or its agent deleted) during the turn.
            if let Some(k) = book.get_mut(&schedule.id) {
                k.finish_fire(last);
                // The agent is gone: a recurring schedule would only fail again.
                if matches!(&result, Err(e) if e.code == ErrorCode::NotFound) {
                    k.schedule.done = true;
                }
                // If this fails, the file still says in flight, and the next save (or the
                // next start) records it.
                if let Err(e) = self.file.save(&book) {
                    tracing::error!("could not save {}: {e}", self.file.path().display());
                }
            }
        }
        self.wake.notify_one();
    }

    /// Calls `turn.run` through the router, retrying only when the router could not be
    /// reached (then no turn ran).
    async fn run_turn(&self, agent: &AgentId, message: &str) -> Result<TurnReply, RemoteError> {
        let mut waits = RETRY_WAITS_MS.iter();
        let body = TurnBody {
            message: message.to_owned(),
            idempotency_key: None,
        };
        loop {
            let call = client::request_once::<Turn>(&self.router, Some(agent), &body);
            let err = match tokio::time::timeout(TURN_TIMEOUT, call).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(link_protocol::Error::Remote(e))) => return Err(e),
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(RemoteError::new(
                        ErrorCode::Timeout,
                        format!("turn.run did not answer within {TURN_TIMEOUT:?}"),
                    ))
                }
            };
            match waits.next() {
                Some(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                None => {
                    return Err(RemoteError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "the router ({}) could not be reached: {err}; is `link up` running?",
                            self.router.display()
                        ),
                    ))
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let scheduler = Arc::new(Scheduler::open(&env)?);
    // Runs once serving starts, after the ready line: due schedules fire then.
    tokio::spawn(scheduler.clone().run_timer());
    let service = Service::new(scheduler)
        .on::<CreateRoute, _, _>(|s, call: Call, body| async move { s.create(call.agent()?, body) })
        .on::<List, _, _>(|s, call: Call, _| async move { Ok(s.list(call.agent.as_ref())) })
        .on::<Cancel, _, _>(|s, call: Call, body| async move { s.cancel(call.agent()?, body) })
        .on::<DeleteAgent, _, _>(|s, call: Call, _| async move { s.delete_agent(call.agent()?) });
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}
