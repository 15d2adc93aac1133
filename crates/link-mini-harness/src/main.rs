//! link-mini-harness: Mini's turn engine — agents, their conversations, and model calls, in
//! one process with no router and no tools.
//!
//! Agents live under its data area, `agents/<id>/conversation.jsonl` and
//! `agents/<id>/agent.json` (see [`store`]: the same conversation log and durability as full
//! Link's file store, one `fdatasync` per turn); they are loaded at start, so conversations
//! survive a restart of the runtime, and a damaged agent never stops the others from loading.
//! A turn sends the conversation's context window (`link_conversation::context_window`, the
//! same rule as full Link's: the last entries within a byte budget, starting at a user
//! message) to the local model service and appends the user message and the reply together;
//! `agent.get` answers one bounded page of the conversation (`link_conversation::page`).

mod store;

use link_protocol::plugin::PluginEnv;
use link_protocol::routes::agent::{
    AgentInfo, AgentList, Create, CreateBody, Delete, Get, List, ReadBody, Turn, TurnBody,
    TurnReply,
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
    model: PathBuf,
    agents: std::sync::Mutex<HashMap<String, Arc<Mutex<Agent>>>>,
}

impl Harness {
    fn open(env: &PluginEnv) -> anyhow::Result<Harness> {
        let agents_dir = env.data.join("agents");
        std::fs::create_dir_all(&agents_dir)?;
        let state_root = env.layout().root().to_owned();
        let agents = store::load(&agents_dir, &state_root)?
            .into_iter()
            .map(|agent| (agent.id.clone(), Arc::new(Mutex::new(agent))))
            .collect();
        Ok(Harness {
            agents_dir,
            state_root,
            model: env.layout().plugin_socket(programs::MODEL),
            agents: std::sync::Mutex::new(agents),
        })
    }

    fn create(&self, name: &str) -> Result<AgentInfo, RemoteError> {
        // The name is the id.
        let id = AgentId::parse(name)?;
        let mut agents = self.agents.lock().expect("agents lock");
        if agents.contains_key(name) {
            return Err(RemoteError::new(
                ErrorCode::Conflict,
                format!("agent {name} already exists"),
            ));
        }
        let agent = store::create(&self.agents_dir, &self.state_root, name)?;
        agents.insert(name.to_owned(), Arc::new(Mutex::new(agent)));
        Ok(AgentInfo::new(id, name.to_owned()))
    }

    fn list(&self) -> Result<AgentList, RemoteError> {
        let agents = self
            .ids()
            .into_iter()
            .map(|id| Ok(AgentInfo::new(AgentId::parse(id.clone())?, id)))
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

    fn agent(&self, id: &str) -> Result<Arc<Mutex<Agent>>, RemoteError> {
        self.agents
            .lock()
            .expect("agents lock")
            .get(id)
            .cloned()
            .ok_or_else(|| RemoteError::not_found(format!("no agent {id}; create it with `link agent create --state DIR {id}` (POST /v1/agents)")))
    }

    /// The agent with one bounded page of its conversation, as the file store pages.
    async fn get(&self, id: &AgentId, body: ReadBody) -> Result<AgentInfo, RemoteError> {
        let agent = self.agent(id)?;
        let agent = agent.lock().await;
        let (conversation, torn) = agent.conversation()?;
        let page = link_conversation::page(
            conversation,
            link_conversation::PageRequest {
                after: body.after,
                limit: body.limit,
                tail: body.tail,
            },
        );
        Ok(AgentInfo {
            conversation: Some(conversation[page.start..page.end].to_vec()),
            conversation_torn: torn.map(|t| t.to_string()),
            conversation_total: Some(page.total),
            conversation_start: Some(page.start),
            conversation_next: page.next,
            ..AgentInfo::new(id.clone(), agent.name.clone())
        })
    }

    async fn delete(&self, id: &AgentId) -> Result<Empty, RemoteError> {
        let agent = self.agent(id)?;
        // Waits for a running turn of this agent to finish before its files go.
        let agent = agent.lock().await;
        std::fs::remove_dir_all(&agent.dir)
            .map_err(|e| RemoteError::internal(format!("removing agent {id}: {e}")))?;
        self.agents.lock().expect("agents lock").remove(id.as_str());
        Ok(Empty {})
    }

    async fn turn(&self, id: &AgentId, message: String) -> Result<TurnReply, RemoteError> {
        let agent = self.agent(id)?;
        // Turns of one agent are serialised; different agents run concurrently.
        let mut agent = agent.lock().await;
        let (conversation, torn) = agent.conversation()?;
        if torn.is_some() {
            return Err(agent.repair_torn());
        }
        let user = json!({ "role": "user", "content": message });
        // The model's context window depends only on the last entries (the same rule as
        // full Link's), so only they are copied: a turn costs the same at any length.
        let recent = conversation
            .len()
            .saturating_sub(link_conversation::CONTEXT_ENTRIES);
        let mut recent = conversation[recent..].to_vec();
        recent.push(user.clone());
        let reply = self
            .complete(link_conversation::context_window(&recent))
            .await?;
        let assistant = json!({ "role": "assistant", "content": reply });
        agent.append(vec![user, assistant])?;
        Ok(TurnReply {
            reply,
            tool_calls: Vec::new(),
        })
    }

    async fn complete(&self, messages: &[Value]) -> Result<String, RemoteError> {
        let body = json!({ "model": "link-local", "messages": messages });
        let resp = link_protocol::http::json(
            &self.model,
            "POST",
            "/v1/chat/completions",
            None,
            Some(&body),
        )
        .await
        .map_err(|e| RemoteError::new(ErrorCode::Unavailable, format!("model service: {e}")))?;
        let json = resp.json();
        if resp.status != 200 {
            return Err(RemoteError::new(
                ErrorCode::Unavailable,
                format!(
                    "model service answered {}: {}",
                    resp.status, json["error"]["message"]
                ),
            ));
        }
        json["choices"][0]["message"]["content"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| RemoteError::internal("model reply has no content"))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let harness = Arc::new(Harness::open(&env)?);
    let service = Service::new(harness)
        .on::<Delete, _, _>(|h, call: Call, _| async move { h.delete(call.agent()?).await })
        .on::<Create, _, _>(|h, _, body: CreateBody| async move { h.create(&body.name) })
        .on::<Get, _, _>(|h, call: Call, body| async move { h.get(call.agent()?, body).await })
        .on::<List, _, _>(|h, _, _| async move { h.list() })
        .on::<Turn, _, _>(|h, call: Call, body: TurnBody| async move {
            h.turn(call.agent()?, body.message).await
        });
    link_protocol::plugin::serve_service(&env, Peers::SameUser, service).await?;
    Ok(())
}
