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
//! `store.conversation.append` also answers `total` (intact entries after the append) and
//! takes an optional `expect_total`: then it appends only to an intact log of exactly that
//! many entries and otherwise refuses with `conflict`, writing nothing. That lets the
//! harness keep a conversation in memory between turns and still notice, before a turn
//! starts, any change it did not make (a torn tail, a re-created agent).

mod conversation;
mod paths;
mod workspace;

use link_protocol::routes as r;
use link_protocol::server::{self, Peers};
use link_protocol::{layout::StateLayout, RemoteError, Request};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

const HARNESS: &str = "link-plugin-link-harness";
const AGENT_PLUGIN: &str = "link-plugin-agent";

const ROUTES: &[&str] = &[
    r::STORE_AGENT_CREATE,
    r::STORE_AGENT_DELETE,
    r::STORE_CONVERSATION_APPEND,
    r::STORE_CONVERSATION_READ,
    r::STORE_FILE_READ,
    r::STORE_FILE_WRITE,
    r::STORE_FILE_LIST,
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = link_protocol::plugin::PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let store = std::sync::Arc::new(Store::new(env.layout()));
    std::fs::create_dir_all(store.layout.data("link-plugin-file-store").join("agents"))?;
    let handler = server::handler(move |req| {
        let store = store.clone();
        async move { store.handle(&req) }
    });
    link_protocol::plugin::serve_plugin(&env, ROUTES, Peers::Parent, handler).await?;
    Ok(())
}

struct Store {
    layout: StateLayout,
    /// Serializes changes so a repair and an append, or a create and a delete, never mix;
    /// it guards what the store knows of each agent's log (see [`conversation::Known`]).
    known: Mutex<HashMap<String, conversation::Known>>,
}

#[derive(Deserialize, Default)]
struct PathBody {
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
struct WriteBody {
    path: String,
    content: String,
}

#[derive(Deserialize)]
struct AppendBody {
    entries: Vec<Value>,
    #[serde(default)]
    expect_total: Option<usize>,
}

impl Store {
    fn new(layout: StateLayout) -> Self {
        Store {
            layout,
            known: Mutex::new(HashMap::new()),
        }
    }

    fn handle(&self, req: &Request) -> Result<Value, RemoteError> {
        let agent = self.agent_id(req)?;
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        match req.route.as_str() {
            r::STORE_AGENT_CREATE => {
                known.remove(agent);
                self.create(req, agent)
            }
            r::STORE_AGENT_DELETE => {
                known.remove(agent);
                self.delete(req, agent)
            }
            r::STORE_CONVERSATION_APPEND => self.append(req, agent, &mut known),
            r::STORE_CONVERSATION_READ => {
                let (scan, now) = self.log(agent)?.read()?;
                remember(&mut known, agent, now);
                Ok(json!({"entries": scan.entries, "torn": scan.torn}))
            }
            r::STORE_FILE_READ => {
                let body: PathBody = server::body(req)?;
                let content = self.workspace(agent)?.read(&body.path)?;
                Ok(json!({ "content": content }))
            }
            r::STORE_FILE_WRITE => {
                let body: WriteBody = server::body(req)?;
                let bytes = self.workspace(agent)?.write(&body.path, &body.content)?;
                tracing::info!("agent {agent} wrote {:?} ({bytes} bytes)", body.path);
                Ok(json!({ "bytes": bytes }))
            }
            r::STORE_FILE_LIST => {
                // `{path?}`: an absent body lists the workspace itself.
                let body: PathBody = if req.body.is_null() {
                    PathBody::default()
                } else {
                    server::body(req)?
                };
                let (entries, truncated) = self.workspace(agent)?.list(&body.path)?;
                Ok(json!({"entries": entries, "truncated": truncated}))
            }
            other => Err(RemoteError::not_found(format!(
                "link-plugin-file-store does not serve route {other}"
            ))),
        }
    }

    /// The agent a call acts for, checked to be a plain directory name.
    fn agent_id<'a>(&self, req: &'a Request) -> Result<&'a str, RemoteError> {
        let agent = server::agent(req)?;
        if !paths::valid_agent_id(agent) {
            return Err(RemoteError::bad_request(format!(
                "{}: invalid agent id {agent:?} (expected [a-z0-9][a-z0-9_-]{{0,31}})",
                req.route
            )));
        }
        Ok(agent)
    }

    fn create(&self, req: &Request, agent: &str) -> Result<Value, RemoteError> {
        only_callers(req, &[AGENT_PLUGIN])?;
        let workspace = self.layout.agent_workspace(agent);
        // Idempotent on purpose: the agent plugin may retry after a crash between steps.
        std::fs::create_dir_all(&workspace).map_err(|e| internal(&workspace, e))?;
        let log = self.layout.agent_conversation(agent);
        conversation::create_empty(&log).map_err(|e| internal(&log, e))?;
        sync_dir(&self.layout.agent_dir(agent));
        tracing::info!("created files of agent {agent}");
        Ok(json!({ "workspace": workspace }))
    }

    fn delete(&self, req: &Request, agent: &str) -> Result<Value, RemoteError> {
        only_callers(req, &[AGENT_PLUGIN])?;
        let dir = self.layout.agent_dir(agent);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => tracing::info!("deleted files of agent {agent}"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(internal(&dir, e)),
        }
        Ok(json!({}))
    }

    fn append(
        &self,
        req: &Request,
        agent: &str,
        known: &mut HashMap<String, conversation::Known>,
    ) -> Result<Value, RemoteError> {
        if req.caller.as_deref() != Some(HARNESS) {
            return Err(RemoteError::forbidden(format!(
                "only {HARNESS} may append to a conversation, not {}",
                req.caller.as_deref().unwrap_or("an unnamed caller")
            )));
        }
        let body: AppendBody = server::body(req)?;
        // Forgotten first: after a failed append only a full scan may be trusted.
        let before = known.remove(agent);
        let done = self
            .log(agent)?
            .append(&body.entries, body.expect_total, before)?;
        remember(known, agent, done.known);
        Ok(json!({"count": done.count, "total": done.total, "repaired": done.repaired}))
    }

    fn log(&self, agent: &str) -> Result<conversation::Log, RemoteError> {
        Ok(conversation::Log::new(
            self.layout.agent_conversation(agent),
        ))
    }

    fn workspace(&self, agent: &str) -> Result<workspace::Workspace, RemoteError> {
        let root = self.layout.agent_workspace(agent);
        if !root.is_dir() {
            return Err(RemoteError::not_found(format!(
                "agent {agent} has no workspace in the file store (create it with agent.create)"
            )));
        }
        Ok(workspace::Workspace {
            agent_dir: self.layout.agent_dir(agent),
            root,
        })
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
fn only_callers(req: &Request, allowed: &[&str]) -> Result<(), RemoteError> {
    match req.caller.as_deref() {
        Some(c) if !allowed.contains(&c) => Err(RemoteError::forbidden(format!(
            "{c} may not call {}; only {}",
            req.route,
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
