//! link-plugin-file-store: full Link's per-agent durable storage.
//!
//! It owns, under its own data area (`data/file-store/agents/<id>/`), each agent's
//! conversation log (`conversation.jsonl`, see [`conversation`]) and workspace files
//! (`workspace/`, see [`workspace`]). It is the only plugin that touches them; everyone else
//! asks over the router. Routes: `store.agent.create`/`delete`, `store.conversation.append`/
//! `read`, `store.file.read`/`write`/`list` (shapes in `link_protocol::routes`).
//!
//! Protection, on top of the router's grant table: appends are accepted only when the router
//! says the caller is the link harness; `store.agent.*` only from the agent plugin (or the
//! host directly); every `store.file.*` path is confined to the workspace (see [`paths`]),
//! and anything resolving to the conversation log or the agent directory is `protected`.
//!
//! Torn conversation tails (a crash mid-append) are reported by `store.conversation.read` as
//! `torn: "<reason>"` beside the intact entries, and repaired by the next append, which cuts
//! only the torn bytes and records them in `conversation.repairs.jsonl` (an append of no
//! entries repairs without adding anything). `store.file.list` also answers `truncated`.
//!
//! `store.conversation.read` answers one bounded page, `{entries, torn, total, start,
//! next?}` for `{after?, limit?, tail?}` (an empty body: the first page), so a log of any
//! length stays readable under the frame limit; the harness reads only the tail page. The
//! store keeps no conversation in memory, not even while it reads one: of each log it keeps
//! only what it knows ([`conversation::Known`]: the file's state and its entry count), reads
//! a page's lines from disk while that still holds, and otherwise scans the log a line at a
//! time keeping only the page ([`link_conversation::Log::read_page`]).
//!
//! `store.conversation.append` also answers `total` (intact entries after the append) and
//! takes an optional `expect_total`: then it appends only to an intact log of exactly that
//! many entries and otherwise refuses with `conflict`, writing nothing. That lets the
//! harness keep a conversation in memory between turns and still notice, before a turn
//! starts, any change it did not make (a torn tail, a re-created agent).

mod conversation;
mod paths;
mod workspace;

use link_protocol::routes::programs::{AGENT as AGENT_PLUGIN, HARNESS};
use link_protocol::routes::store::{
    AgentCreate, AgentDelete, AppendBody, Appended, Content, Conversation, ConversationAppend,
    ConversationRead, FileList, FileRead, FileWrite, Listing, PathBody, ReadBody, Workspace,
    WriteBody, Written,
};
use link_protocol::routes::{Empty, Route};
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{layout::StateLayout, AgentId, RemoteError};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let store = Arc::new(Store::new(env.layout()));
    std::fs::create_dir_all(store.layout.agents_dir())?;
    std::fs::create_dir_all(store.layout.workspaces_dir())?;
    move_old_workspaces(&store.layout)?;
    let service = Service::new(store)
        .on::<AgentCreate, _, _>(|s, call: Call, _| for_agent(s, call, |s, call| s.create(&call)))
        .on::<AgentDelete, _, _>(|s, call: Call, _| for_agent(s, call, |s, call| s.delete(&call)))
        .on::<ConversationAppend, _, _>(|s, call: Call, body| {
            for_agent(s, call, move |s, call| s.append(&call, body))
        })
        .on::<ConversationRead, _, _>(|s, call: Call, body| {
            for_agent(s, call, move |s, call| s.read(call.agent()?, body))
        })
        .on::<FileRead, _, _>(|s, call: Call, body: PathBody| {
            for_agent(s, call, move |s, call| {
                let content = s.workspace(call.agent()?)?.read(&body.path)?;
                Ok(Content { content })
            })
        })
        .on::<FileWrite, _, _>(|s, call: Call, body: WriteBody| {
            for_agent(s, call, move |s, call| {
                let agent = call.agent()?;
                let bytes = s.workspace(agent)?.write(&body.path, &body.content)?;
                // Lengths only: the path and the content are the agent's.
                tracing::info!(
                    "agent {agent} wrote {bytes} bytes to a path of {} bytes",
                    body.path.len()
                );
                Ok(Written { bytes })
            })
        })
        .on::<FileList, _, _>(|s, call: Call, body: PathBody| {
            for_agent(s, call, move |s, call| {
                let (entries, truncated) = s.workspace(call.agent()?)?.list(&body.path)?;
                Ok(Listing { entries, truncated })
            })
        });
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}

/// Moves each workspace an earlier version kept inside its agent's directory to where it
/// lies now, apart from the conversation (`layout::StateLayout::agent_workspace`): a rename
/// on one filesystem, so a workspace is in one place or the other, never half moved. One
/// found in both places is left as it is and named.
fn move_old_workspaces(layout: &StateLayout) -> std::io::Result<()> {
    let mut moved = false;
    for entry in std::fs::read_dir(layout.agents_dir())? {
        let agent = entry?.file_name();
        let Some(agent) = agent.to_str().filter(|a| AgentId::parse(*a).is_ok()) else {
            continue;
        };
        let (old, new) = (
            layout.old_agent_workspace(agent),
            layout.agent_workspace(agent),
        );
        // Not followed: only a real directory moves (a link there is no workspace of ours).
        let is_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
        let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
        if !is_dir(&old) {
            if exists(&old) {
                tracing::warn!("agent {agent} has something not a directory where its workspace was; left as it is");
            }
            continue;
        }
        if exists(&new) {
            tracing::warn!(
                "agent {agent} has a workspace in its directory and apart; the first is left"
            );
            continue;
        }
        // A failed move (another filesystem mounted there, say) leaves that agent without a
        // workspace, said, and the store serving every other.
        match std::fs::rename(&old, &new) {
            Ok(()) => {
                tracing::info!("moved the workspace of agent {agent} apart from its conversation");
                moved = true;
            }
            Err(e) => link_protocol::errln!(
                "link-plugin-file-store: cannot move the workspace of agent {agent} from \
                 data/file-store/agents/{agent}/workspace to data/file-store/workspaces/{agent} \
                 under the state root: {e}; move it there by hand (on the same filesystem) and \
                 restart"
            ),
        }
    }
    // Only after a move: a start with nothing to move pays no sync.
    if moved {
        sync_dir(&layout.workspaces_dir());
        sync_dir(&layout.agents_dir());
    }
    Ok(())
}

/// Runs `work` for the call's agent on a blocking thread, holding the agent's lock: an
/// agent's calls run one at a time, so a repair and an append, or a create and a delete, or
/// two file writes never mix, while other agents' calls go on. A call waits on the disk (an
/// fsync, a rename: milliseconds each on a busy disk), and one thread doing every agent's
/// in turn made that wait every agent's.
async fn for_agent<T: Send + 'static>(
    store: Arc<Store>,
    call: Call,
    work: impl FnOnce(&Store, Call) -> Result<T, RemoteError> + Send + 'static,
) -> Result<T, RemoteError> {
    let agent = call.agent()?.as_str().to_owned();
    let lock = store.lock_for(&agent);
    // Given up at the call's deadline: its caller was told it timed out, so it is not done.
    let done = match link_protocol::server::until_deadline(lock.clone().lock_owned()).await {
        Ok(held) => holding(store.clone(), held, call, work).await,
        Err(late) => Err(late),
    };
    // On either way: an agent's lock is forgotten once nobody holds or waits for it.
    drop(lock);
    store.forget_idle(&agent);
    done
}

/// `work` on a blocking thread holding `held` (its agent's lock) until it ends.
async fn holding<T: Send + 'static>(
    store: Arc<Store>,
    held: tokio::sync::OwnedMutexGuard<()>,
    call: Call,
    work: impl FnOnce(&Store, Call) -> Result<T, RemoteError> + Send + 'static,
) -> Result<T, RemoteError> {
    tokio::task::spawn_blocking(move || {
        let _held = held;
        work(&store, call)
    })
    .await
    .map_err(|e| RemoteError::internal(format!("a file store call ended: {e}")))?
}

struct Store {
    layout: StateLayout,
    /// What the store knows of each agent's log (see [`conversation::Known`]), changed
    /// only under the agent's lock.
    known: Mutex<HashMap<String, conversation::Known>>,
    /// One lock per agent with a call in progress ([`for_agent`]).
    agents: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Store {
    fn new(layout: StateLayout) -> Self {
        Store {
            layout,
            known: Mutex::new(HashMap::new()),
            agents: Mutex::new(HashMap::new()),
        }
    }

    /// What the store knows of each agent's log; held only to take or put back an agent's.
    fn known(&self) -> MutexGuard<'_, HashMap<String, conversation::Known>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn agents(&self) -> MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.agents.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_for(&self, agent: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.agents().entry(agent.to_owned()).or_default().clone()
    }

    /// Drops an agent's lock once no call holds or waits for it, so the map stays small.
    fn forget_idle(&self, agent: &str) {
        let mut agents = self.agents();
        if agents.get(agent).is_some_and(|l| Arc::strong_count(l) == 1) {
            agents.remove(agent);
        }
    }

    fn create(&self, call: &Call) -> Result<Workspace, RemoteError> {
        only_callers::<AgentCreate>(call, &[AGENT_PLUGIN])?;
        let agent = call.agent()?;
        self.known().remove(agent.as_str());
        let workspace = self.layout.agent_workspace(agent);
        let dir = self.layout.agent_dir(agent);
        let fresh = !dir.exists() && !workspace.exists();
        // Idempotent on purpose: the agent plugin may retry after a crash between steps.
        let made = std::fs::create_dir_all(&workspace)
            .map_err(|e| self.io_error(&workspace, e))
            .and_then(|()| std::fs::create_dir_all(&dir).map_err(|e| self.io_error(&dir, e)))
            .and_then(|()| {
                let log = self.layout.agent_conversation(agent);
                conversation::create_empty(&log).map_err(|e| self.io_error(&log, e))
            });
        if let Err(e) = made {
            // A create that failed (a full disk, say) leaves nothing half made behind.
            if fresh {
                let _ = std::fs::remove_dir_all(&dir);
                let _ = std::fs::remove_dir_all(&workspace);
            }
            return Err(e);
        }
        // The log's entry in the agent's directory, and each new directory's in its parent.
        sync_dir(&dir);
        sync_dir(&self.layout.agents_dir());
        sync_dir(&self.layout.workspaces_dir());
        tracing::info!("created files of agent {agent}");
        Ok(Workspace { workspace })
    }

    fn delete(&self, call: &Call) -> Result<Empty, RemoteError> {
        only_callers::<AgentDelete>(call, &[AGENT_PLUGIN])?;
        let agent = call.agent()?;
        self.known().remove(agent.as_str());
        // The workspace first: while it is there, the agent's conversation is too. Whatever
        // the agent's commands did to the modes of its files (issue 42).
        for dir in [
            self.layout.agent_workspace(agent),
            self.layout.agent_dir(agent),
        ] {
            if let Err(e) = link_protocol::files::remove_tree(&dir) {
                return Err(self.io_error(&dir, e));
            }
        }
        tracing::info!("deleted files of agent {agent}");
        Ok(Empty {})
    }

    /// One bounded page of the log (see [`link_conversation::page`]), so no answer outgrows
    /// a frame however long the conversation is; while the store knows the log (it scanned
    /// it or appended to it last), only the page's lines are read.
    fn read(&self, agent: &AgentId, body: ReadBody) -> Result<Conversation, RemoteError> {
        let req = link_conversation::PageRequest {
            after: body.after,
            limit: body.limit,
            tail: body.tail,
        };
        // Taken first: after a failed read only a full scan may be trusted.
        let before = self.known().remove(agent.as_str());
        let (read, now) = self.log(agent)?.read_page(req, before)?;
        remember(&mut self.known(), agent, now);
        Ok(Conversation {
            entries: read.entries,
            torn: read.torn,
            total: read.page.total,
            start: read.page.start,
            next: read.page.next,
        })
    }

    fn append(&self, call: &Call, body: AppendBody) -> Result<Appended, RemoteError> {
        if call.caller.as_deref() != Some(HARNESS) {
            return Err(RemoteError::forbidden(format!(
                "only {HARNESS} may append to a conversation, not {}",
                call.caller.as_deref().unwrap_or("an unnamed caller")
            )));
        }
        let agent = call.agent()?;
        // Forgotten first: after a failed append only a full scan may be trusted.
        let before = self.known().remove(agent.as_str());
        let done = self
            .log(agent)?
            .append(&body.entries, body.expect_total, before)?;
        remember(&mut self.known(), agent, done.known);
        Ok(Appended {
            count: done.count,
            total: done.total,
            repaired: done.repaired,
        })
    }

    fn log(&self, agent: &str) -> Result<conversation::Log, RemoteError> {
        Ok(conversation::Log::new(
            self.layout.agent_conversation(agent),
            self.layout.root(),
        ))
    }

    fn workspace(&self, agent: &str) -> Result<workspace::Workspace, RemoteError> {
        let root = self.layout.agent_workspace(agent);
        if !root.is_dir() {
            return Err(RemoteError::not_found(format!(
                "agent {agent} has no workspace in the file store (create it with `link agent create --state DIR NAME` (POST /v1/agents))"
            )));
        }
        Ok(workspace::Workspace {
            agent_dir: self.layout.agent_dir(agent),
            root,
            state_root: self.layout.root().to_owned(),
        })
    }

    /// The wire error for a failed file operation: a full disk (or quota) names the state
    /// root, anything else is internal.
    fn io_error(&self, path: &Path, e: std::io::Error) -> RemoteError {
        if link_protocol::message::is_storage_full(&e) {
            RemoteError::insufficient_storage(
                self.layout.root(),
                format!("{}: {e}", path.display()),
            )
        } else {
            internal(path, e)
        }
    }
}

fn remember(
    known: &mut HashMap<String, conversation::Known>,
    agent: &str,
    now: Option<conversation::Known>,
) {
    match now {
        Some(k) => {
            known.insert(agent.to_owned(), k);
        }
        None => {
            known.remove(agent);
        }
    }
}

/// Refuses a call the router forwarded from a plugin not in `allowed`; the host calling
/// directly (no caller) is trusted, since only it can connect to this socket.
fn only_callers<R: Route>(call: &Call, allowed: &[&str]) -> Result<(), RemoteError> {
    match call.caller.as_deref() {
        Some(c) if !allowed.contains(&c) => Err(RemoteError::forbidden(format!(
            "{c} may not call {}; only {}",
            R::NAME,
            allowed.join(", ")
        ))),
        _ => Ok(()),
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

fn internal(path: &Path, e: std::io::Error) -> RemoteError {
    RemoteError::internal(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// The most calls in progress at once when one call runs for each of `agents` together.
    fn most_at_once(agents: &[&str]) -> usize {
        let store = Arc::new(Store::new(StateLayout::new("/nonexistent")));
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let calls: Vec<_> = agents
                .iter()
                .map(|a| {
                    let call = Call {
                        agent: Some(a.parse().unwrap()),
                        caller: None,
                    };
                    let (now, most) = (now.clone(), most.clone());
                    for_agent(store.clone(), call, move |_, _| {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(100));
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    })
                })
                .collect();
            for result in together(calls).await {
                result.unwrap();
            }
        });
        assert!(store.agents().is_empty(), "idle locks are forgotten");
        most.load(Ordering::SeqCst)
    }

    /// Runs `calls` as tasks at once; → their results in order.
    async fn together<F>(calls: Vec<F>) -> Vec<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let tasks: Vec<_> = calls.into_iter().map(tokio::spawn).collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    /// A call read in time that waits for its agent's earlier call past its deadline is
    /// answered `timeout` and not done (its caller was told it timed out); the twin, with a
    /// far deadline, is done after the same wait.
    #[test]
    fn a_call_that_waited_past_its_deadline_for_its_agent_is_not_done() {
        use link_protocol::message::NotAfter;
        let store = Arc::new(Store::new(StateLayout::new("/nonexistent")));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let call = || Call {
            agent: Some("a".parse().unwrap()),
            caller: None,
        };
        let results = rt.block_on(async {
            let slow = for_agent(store.clone(), call(), |_, _| {
                std::thread::sleep(Duration::from_millis(150));
                Ok(())
            });
            let queued = |within: u64| {
                let (store, done) = (store.clone(), done.clone());
                let due = link_protocol::server::Answering {
                    call: None,
                    deadline: Some((NotAfter::within(Duration::from_millis(within)), "x".into())),
                };
                link_protocol::server::answering(
                    due,
                    for_agent(store, call(), move |_, _| {
                        done.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    }),
                )
            };
            let slow = tokio::spawn(slow);
            tokio::time::sleep(Duration::from_millis(20)).await;
            let late = tokio::spawn(queued(50));
            let in_time = tokio::spawn(queued(60_000));
            slow.await.unwrap().unwrap();
            (late.await.unwrap(), in_time.await.unwrap())
        });
        let late = results.0.unwrap_err();
        assert_eq!(late.code, link_protocol::ErrorCode::Timeout, "{late}");
        assert!(results.1.is_ok());
        assert_eq!(
            done.load(Ordering::SeqCst),
            1,
            "only the twin's work was done"
        );
        assert!(store.agents().is_empty(), "no lock kept");
    }

    #[test]
    fn an_agents_calls_run_one_at_a_time_and_other_agents_meanwhile() {
        assert_eq!(most_at_once(&["a", "a", "a"]), 1);
        assert_eq!(most_at_once(&["a", "b", "c"]), 3);
    }
}
