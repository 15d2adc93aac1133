//! link-mini-harness: Mini's turn engine — agents, their conversations, and model calls, in
//! one process with no router and no tools.
//!
//! Agents live under its data area, `agents/<id>/conversation.jsonl` and
//! `agents/<id>/agent.json` (see [`store`]: the same conversation log and durability as full
//! Link's file store, one `fdatasync` per turn); each log is checked and counted at start,
//! so conversations survive a restart of the runtime, and a damaged agent never stops the
//! others from loading. No conversation is kept whole in memory: a turn reads the tail page
//! its context window needs (`link_conversation::context_window`, the same rule as full
//! Link's: the last entries within a byte budget, starting at a user message) once from the
//! log, sends the window to the model service and appends the user message and the reply
//! together, so a turn whose model call fails (a silent service past `ModelService`'s
//! deadline, too) stores nothing; `agent.get` reads one bounded page
//! (`link_conversation::Log::read_page`).
//!
//! Each agent runs on the model it was created with (`agent.json`'s `model`, checked at
//! create against the models the model service serves), else the runtime's default, which
//! is also what an agent stored before agents had a model reads as.

mod store;

use link_protocol::model::Model;
use link_protocol::model_service::ModelService;
use link_protocol::plugin::PluginEnv;
use link_protocol::routes::agent::{
    AgentInfo, AgentList, Create, CreateBody, Delete, Get, IdempotencyKey, List, ReadBody, Turn,
    TurnBody, TurnReply,
};
use link_protocol::routes::{programs, Empty};
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{AgentId, ErrorCode, RemoteError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use store::Stored as Agent;
use tokio::sync::Mutex;

struct Harness {
    agents_dir: PathBuf,
    state_root: PathBuf,
    models: ModelService,
    /// The model of an agent created without one, and of one stored without one.
    default_model: Model,
    agents: std::sync::Mutex<HashMap<String, Arc<Slot>>>,
}

/// One agent: its model, which never changes, read without waiting for a turn in flight;
/// and its files, locked by each turn.
struct Slot {
    model: Option<Model>,
    agent: Mutex<Agent>,
}

impl Slot {
    fn new(agent: Agent) -> Arc<Slot> {
        Arc::new(Slot {
            model: agent.model.clone(),
            agent: Mutex::new(agent),
        })
    }
}

impl Harness {
    fn open(env: &PluginEnv) -> anyhow::Result<Harness> {
        let agents_dir = env.data.join("agents");
        std::fs::create_dir_all(&agents_dir)?;
        let state_root = env.layout().root().to_owned();
        let agents = store::load(&agents_dir, &state_root)?
            .into_iter()
            .map(|agent| (agent.id.clone(), Slot::new(agent)))
            .collect();
        Ok(Harness {
            agents_dir,
            state_root,
            models: ModelService::new(env.layout().plugin_socket(programs::MODEL)),
            default_model: env.default_model.clone(),
            agents: std::sync::Mutex::new(agents),
        })
    }

    /// The model `slot`'s turns use.
    fn model_of<'a>(&'a self, slot: &'a Slot) -> &'a Model {
        slot.model.as_ref().unwrap_or(&self.default_model)
    }

    async fn create(&self, body: CreateBody) -> Result<AgentInfo, RemoteError> {
        let name = body.name.as_str();
        // The name is the id.
        let id = AgentId::parse(name)?;
        let model = body.model.unwrap_or_else(|| self.default_model.clone());
        // An agent on a model nobody serves would fail every turn.
        self.models.check(&model).await?;
        let mut agents = self.agents.lock().expect("agents lock");
        if agents.contains_key(name) {
            return Err(RemoteError::new(
                ErrorCode::Conflict,
                format!("agent {name} already exists"),
            ));
        }
        let agent = store::create(&self.agents_dir, &self.state_root, name, &model)?;
        agents.insert(name.to_owned(), Slot::new(agent));
        Ok(AgentInfo {
            model: Some(model),
            ..AgentInfo::new(id, name.to_owned())
        })
    }

    fn list(&self) -> Result<AgentList, RemoteError> {
        let agents = self
            .ids()
            .into_iter()
            .map(|id| {
                let slot = self.agent(&id)?;
                Ok(AgentInfo {
                    model: Some(self.model_of(&slot).clone()),
                    ..AgentInfo::new(AgentId::parse(id.clone())?, id)
                })
            })
            .collect::<Result<_, RemoteError>>()?;
        Ok(AgentList { agents })
    }

    fn ids(&self) -> Vec<String> {
        let mut ids: Vec<_> = self
            .agents
            .lock()
            .expect("agents lock")
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    fn agent(&self, id: &str) -> Result<Arc<Slot>, RemoteError> {
        self.agents
            .lock()
            .expect("agents lock")
            .get(id)
            .cloned()
            .ok_or_else(|| RemoteError::not_found(format!("no agent {id}; create it with `link agent create --state DIR {id}` (POST /v1/agents)")))
    }

    /// The agent with one bounded page of its conversation, as the file store pages.
    async fn get(&self, id: &AgentId, body: ReadBody) -> Result<AgentInfo, RemoteError> {
        let slot = self.agent(id)?;
        let mut agent = slot.agent.lock().await;
        let read = agent.page(link_conversation::PageRequest {
            after: body.after,
            limit: body.limit,
            tail: body.tail,
        })?;
        let page = read.page;
        Ok(AgentInfo {
            conversation: Some(read.entries),
            conversation_torn: read.torn,
            conversation_total: Some(page.total),
            conversation_start: Some(page.start),
            conversation_next: page.next,
            model: Some(self.model_of(&slot).clone()),
            ..AgentInfo::new(id.clone(), agent.name.clone())
        })
    }

    async fn delete(&self, id: &AgentId) -> Result<Empty, RemoteError> {
        let slot = self.agent(id)?;
        // Waits for a running turn of this agent to finish before its files go.
        let agent = slot.agent.lock().await;
        std::fs::remove_dir_all(&agent.dir)
            .map_err(|e| RemoteError::internal(format!("removing agent {id}: {e}")))?;
        self.agents.lock().expect("agents lock").remove(id.as_str());
        Ok(Empty {})
    }

    async fn turn(&self, id: &AgentId, body: TurnBody) -> Result<TurnReply, RemoteError> {
        let slot = self.agent(id)?;
        // Turns of one agent are serialised; different agents run concurrently.
        let mut agent = slot.agent.lock().await;
        // The model's context window depends only on the last entries (the same rule as
        // full Link's): only they are read from the log, once, then kept, so a turn costs the
        // same at any length and no conversation stays in memory whole.
        let mut recent = agent.recent()?;
        if agent.torn().is_some() {
            return Err(agent.repair_torn());
        }
        let (message, key) = (&body.message, body.idempotency_key.as_ref());
        if let Some(key) = key {
            if let Some(reply) = earlier_reply(&recent, key, message)? {
                return Ok(reply);
            }
        }
        let user = link_conversation::user_entry(message, key.map(|k| k.as_str()));
        recent.push(user.clone());
        let reply = self
            .complete(
                self.model_of(&slot),
                link_conversation::context_window(&recent),
            )
            .await?;
        let assistant = json!({ "role": "assistant", "content": reply });
        agent.append(vec![user, assistant])?;
        Ok(TurnReply {
            reply,
            tool_calls: Vec::new(),
        })
    }

    async fn complete(&self, model: &Model, messages: &[Value]) -> Result<String, RemoteError> {
        let body = json!({ "model": model, "messages": messages });
        let json = self.models.complete(&body).await?;
        json["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| RemoteError::internal("model reply has no content"))
    }
}

/// The answer of the turn stored under `key`, if `recent` holds it: a Mini turn is stored
/// whole (its message and reply in one append) or not at all.
fn earlier_reply(
    recent: &[Value],
    key: &IdempotencyKey,
    message: &str,
) -> Result<Option<TurnReply>, RemoteError> {
    let turn = link_conversation::earlier_turn(recent, key.as_str(), message)
        .map_err(|e| RemoteError::new(ErrorCode::Conflict, e.to_string()))?;
    let Some(turn) = turn else { return Ok(None) };
    let reply = turn
        .get(1)
        .and_then(|e| e["content"].as_str())
        .ok_or_else(|| {
            RemoteError::internal(format!(
                "the turn stored under Idempotency-Key {key} has no reply"
            ))
        })?;
    Ok(Some(TurnReply {
        reply: reply.to_owned(),
        tool_calls: Vec::new(),
    }))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let harness = Arc::new(Harness::open(&env)?);
    let service = Service::new(harness)
        .on::<Delete, _, _>(|h, call: Call, _| async move { h.delete(call.agent()?).await })
        .on::<Create, _, _>(|h, _, body: CreateBody| async move { h.create(body).await })
        .on::<Get, _, _>(|h, call: Call, body| async move { h.get(call.agent()?, body).await })
        .on::<List, _, _>(|h, _, _| async move { h.list() })
        .on::<Turn, _, _>(|h, call: Call, body: TurnBody| async move {
            h.turn(call.agent()?, body).await
        });
    // Its connection service, a uid of its own as root, is known by the host's pids file.
    let peers = Peers::Recorded {
        state: Box::leak(Box::new(env.layout())),
        program: link_protocol::routes::programs::MINI_CONNECTION,
    };
    link_protocol::plugin::serve_service(&env, peers, service).await?;
    Ok(())
}
