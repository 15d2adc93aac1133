//! link-mini-harness: Mini's turn engine — agents, their conversations, and model calls, in
//! one process with no router and no tools.
//!
//! Agents live under its data area, `agents/<id>/conversation.jsonl` (JSON lines, fsync'd
//! after each turn) and `agents/<id>/agent.json`; they are loaded at start, so conversations
//! survive a restart of the runtime. A turn sends the whole conversation to the local model
//! service and appends the user message and the reply together.

use link_protocol::plugin::PluginEnv;
use link_protocol::server::{self, Peers};
use link_protocol::{routes, ErrorCode, RemoteError, Request};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Mutex;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    role: String,
    content: String,
}

struct Agent {
    name: String,
    dir: PathBuf,
    conversation: Vec<Entry>,
}

struct Harness {
    agents_dir: PathBuf,
    model: PathBuf,
    agents: std::sync::Mutex<HashMap<String, Arc<Mutex<Agent>>>>,
}

impl Harness {
    fn open(env: &PluginEnv) -> anyhow::Result<Harness> {
        let agents_dir = env.data.join("agents");
        std::fs::create_dir_all(&agents_dir)?;
        let mut agents = HashMap::new();
        for entry in std::fs::read_dir(&agents_dir)? {
            let dir = entry?.path();
            let id = dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            agents.insert(id, Arc::new(Mutex::new(load_agent(&dir)?)));
        }
        Ok(Harness {
            agents_dir,
            model: env.layout().plugin_socket("link-plugin-model"),
            agents: std::sync::Mutex::new(agents),
        })
    }

    async fn handle(&self, req: Request) -> Result<Value, RemoteError> {
        match req.route.as_str() {
            routes::AGENT_CREATE => self.create(&req),
            routes::AGENT_GET => self.get(server::agent(&req)?).await,
            routes::AGENT_LIST => Ok(json!({ "agents": self.ids() })),
            routes::AGENT_DELETE => self.delete(server::agent(&req)?).await,
            routes::TURN_RUN => self.turn(&req).await,
            other => Err(RemoteError::not_found(format!(
                "route {other} is not served here"
            ))),
        }
    }

    fn create(&self, req: &Request) -> Result<Value, RemoteError> {
        #[derive(Deserialize)]
        struct Create {
            name: String,
        }
        let Create { name } = server::body(req)?;
        validate_name(&name)?;
        let mut agents = self.agents.lock().expect("agents lock");
        if agents.contains_key(&name) {
            return Err(RemoteError::new(
                ErrorCode::Conflict,
                format!("agent {name} already exists"),
            ));
        }
        let dir = self.agents_dir.join(&name);
        create_agent_dir(&dir, &name)
            .map_err(|e| RemoteError::internal(format!("creating agent {name}: {e}")))?;
        let agent = Agent {
            name: name.clone(),
            dir,
            conversation: Vec::new(),
        };
        agents.insert(name.clone(), Arc::new(Mutex::new(agent)));
        Ok(json!({ "id": name, "name": name }))
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
            .ok_or_else(|| RemoteError::not_found(format!("no agent {id}")))
    }

    async fn get(&self, id: &str) -> Result<Value, RemoteError> {
        let agent = self.agent(id)?;
        let agent = agent.lock().await;
        Ok(json!({ "id": id, "name": agent.name, "conversation": agent.conversation }))
    }

    async fn delete(&self, id: &str) -> Result<Value, RemoteError> {
        let agent = self.agent(id)?;
        // Waits for a running turn of this agent to finish before its files go.
        let agent = agent.lock().await;
        std::fs::remove_dir_all(&agent.dir)
            .map_err(|e| RemoteError::internal(format!("removing agent {id}: {e}")))?;
        self.agents.lock().expect("agents lock").remove(id);
        Ok(json!({}))
    }

    async fn turn(&self, req: &Request) -> Result<Value, RemoteError> {
        #[derive(Deserialize)]
        struct Turn {
            message: String,
        }
        let Turn { message } = server::body(req)?;
        let agent = self.agent(server::agent(req)?)?;
        // Turns of one agent are serialised; different agents run concurrently.
        let mut agent = agent.lock().await;
        let user = Entry {
            role: "user".into(),
            content: message,
        };
        let mut messages = agent.conversation.clone();
        messages.push(user.clone());
        let reply = self.complete(&messages).await?;
        let assistant = Entry {
            role: "assistant".into(),
            content: reply.clone(),
        };
        append(&agent.dir, &[&user, &assistant])
            .map_err(|e| RemoteError::internal(format!("saving the conversation: {e}")))?;
        agent.conversation.extend([user, assistant]);
        Ok(json!({ "reply": reply, "tool_calls": [] }))
    }

    async fn complete(&self, messages: &[Entry]) -> Result<String, RemoteError> {
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

fn validate_name(name: &str) -> Result<(), RemoteError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(RemoteError::bad_request(format!(
            "invalid agent name {name:?}: use 1-32 of a-z, 0-9, '-' and '_', starting with a letter or digit"
        )))
    }
}

fn create_agent_dir(dir: &Path, name: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("agent.json"), json!({ "name": name }).to_string())?;
    std::fs::File::create(dir.join("conversation.jsonl"))?.sync_all()
}

fn load_agent(dir: &Path) -> anyhow::Result<Agent> {
    let meta: Value = serde_json::from_slice(&std::fs::read(dir.join("agent.json"))?)?;
    let text = std::fs::read_to_string(dir.join("conversation.jsonl"))?;
    let conversation = text
        .lines()
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|e| {
                anyhow::anyhow!(
                    "{}: line {} is damaged ({e}); move the file aside to start afresh",
                    dir.display(),
                    n + 1
                )
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Agent {
        name: meta["name"].as_str().unwrap_or_default().to_owned(),
        dir: dir.to_owned(),
        conversation,
    })
}

fn append(dir: &Path, entries: &[&Entry]) -> std::io::Result<()> {
    let mut buf = Vec::new();
    for e in entries {
        serde_json::to_writer(&mut buf, e)?;
        buf.push(b'\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("conversation.jsonl"))?;
    f.write_all(&buf)?;
    f.sync_data()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let harness = Arc::new(Harness::open(&env)?);
    let handler = server::handler(move |req| {
        let harness = harness.clone();
        async move { harness.handle(req).await }
    });
    let routes = [
        routes::AGENT_DELETE,
        routes::AGENT_CREATE,
        routes::AGENT_GET,
        routes::AGENT_LIST,
        routes::TURN_RUN,
    ];
    link_protocol::plugin::serve_plugin(&env, &routes, Peers::SameUser, handler).await?;
    Ok(())
}
