//! link-plugin-link-scheduler: scheduled turns — at a time, after a delay, or every
//! interval — persisted in its data area as `schedules.json`.
//!
//! It owns the `schedule.*` routes. When a schedule is due it runs a turn of its agent by
//! calling `turn.run` through the host's router with the schedule's message, and records
//! the firing count and the last result. One timer task sleeps until the next due time and
//! is woken whenever the schedules change. Schedules survive a restart: on start, the due
//! ones fire; one-shots that already fired are never fired again.

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
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Book, BookFile, Create, Firing, LastResult, Schedule};
use tokio::sync::Notify;

/// The timer wakes at least this often, so a changed wall clock is noticed.
const MAX_NAP: Duration = Duration::from_secs(30);
/// How long a scheduled turn may take.
const TURN_TIMEOUT: Duration = Duration::from_secs(600);
/// Waits between attempts to reach the router. Right after start the host may not have
/// registered us yet, and drops our connection; a few short retries cover that.
const RETRY_WAITS_MS: &[u64] = &[200, 400, 800, 1600];

struct Scheduler {
    file: BookFile,
    book: Mutex<Book>,
    /// Schedules whose turn is running now; they are not fired again until it ends.
    busy: Mutex<HashSet<String>>,
    wake: Notify,
    router: PathBuf,
}

impl Scheduler {
    fn open(env: &PluginEnv) -> anyhow::Result<Scheduler> {
        std::fs::create_dir_all(&env.data)?;
        let file = BookFile::new(&env.data);
        let mut book = file.load().map_err(anyhow::Error::msg)?;
        book.version = 1;
        tracing::info!(
            "{} schedules loaded from {}",
            book.schedules.len(),
            file.path().display()
        );
        Ok(Scheduler {
            file,
            book: Mutex::new(book),
            busy: Mutex::new(HashSet::new()),
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
            .schedules
            .iter()
            .filter(|s| agent.is_none_or(|a| &s.agent == a))
            .cloned()
            .collect();
        Schedules { schedules }
    }

    fn cancel(&self, agent: Option<&AgentId>, Id { id }: Id) -> Result<Empty, RemoteError> {
        let mut book = self.book.lock().expect("book");
        let owner = book.get_mut(&id).map(|s| s.agent.clone());
        match (owner, agent) {
            (None, _) => return Err(RemoteError::not_found(format!("no schedule {id}"))),
            (Some(owner), Some(agent)) if &owner != agent => {
                return Err(RemoteError::forbidden(format!(
                    "schedule {id} belongs to another agent than {agent}"
                )))
            }
            _ => {}
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
        let busy = self.busy.lock().expect("busy");
        self.book
            .lock()
            .expect("book")
            .next_due(&|id| busy.contains(id))
    }

    /// Marks every due, idle schedule as fired and saves that before any turn runs, so a
    /// crash cannot fire a one-shot twice.
    fn take_due(&self, now: u64) -> Vec<Schedule> {
        let mut busy = self.busy.lock().expect("busy");
        let mut book = self.book.lock().expect("book");
        let mut due = Vec::new();
        for s in book.schedules.iter_mut() {
            if s.due(now) && !busy.contains(&s.id) {
                let fired = s.clone();
                s.mark_fired(now);
                busy.insert(s.id.clone());
                due.push(fired);
            }
        }
        if !due.is_empty() {
            if let Err(e) = self.file.save(&book) {
                tracing::error!("could not save {}: {e}", self.file.path().display());
            }
        }
        due
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
                tracing::warn!("schedule {} turn failed: {e}", schedule.id);
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
            if let Some(s) = book.get_mut(&schedule.id) {
                s.last_result = Some(last);
                // The agent is gone: a recurring schedule would only fail again.
                if matches!(&result, Err(e) if e.code == ErrorCode::NotFound) {
                    s.done = true;
                }
                if let Err(e) = self.file.save(&book) {
                    tracing::error!("could not save {}: {e}", self.file.path().display());
                }
            }
        }
        self.busy.lock().expect("busy").remove(&schedule.id);
        self.wake.notify_one();
    }

    /// Calls `turn.run` through the router, retrying only when the router could not be
    /// reached (then no turn ran).
    async fn run_turn(&self, agent: &AgentId, message: &str) -> Result<TurnReply, RemoteError> {
        let mut waits = RETRY_WAITS_MS.iter();
        let body = TurnBody {
            message: message.to_owned(),
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
    link_protocol::plugin::init_logging();
    let env = PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let scheduler = Arc::new(Scheduler::open(&env)?);
    // Runs once serving starts, after the ready line: due schedules fire then.
    tokio::spawn(scheduler.clone().run_timer());
    let service = Service::new(scheduler)
        .on::<CreateRoute, _, _>(|s, call: Call, body| async move { s.create(call.agent()?, body) })
        .on::<List, _, _>(|s, call: Call, _| async move { Ok(s.list(call.agent.as_ref())) })
        .on::<Cancel, _, _>(
            |s, call: Call, body| async move { s.cancel(call.agent.as_ref(), body) },
        )
        .on::<DeleteAgent, _, _>(|s, call: Call, _| async move { s.delete_agent(call.agent()?) });
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}
