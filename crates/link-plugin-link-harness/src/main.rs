//! link-plugin-link-harness: full Link's turn engine. It owns `turn.run`: for one agent it
//! loads the conversation from the file store, calls the model, runs the tool calls the model
//! asks for over their protected routes (`tool.run`, `tool.file`, `tool.code`,
//! `schedule.create`), feeds the results back, and stores every entry before anything acts
//! on it (`turn`).
//!
//! It keeps no state of its own on disk: conversations belong to the file store, agents to
//! the agent plugin. Every outgoing call goes through the host's router, which lets this
//! harness act only for the agent whose turn it is running. Turns of different agents run
//! concurrently; turns of one agent are serialised.
//!
//! Between turns it keeps each agent's conversation in memory (it is the only appender:
//! the grant table and the store both say so) and trusts it only when the store accepts the
//! next turn's entries as the ones right after it; otherwise it loads the log again. So a warm
//! plain turn costs one append through the router (its user entry and reply together, as
//! Mini's harness stores them), not a read of the whole growing log.

mod conversation;
mod deps;
mod tools;
mod turn;

use link_protocol::plugin::{Mode, PluginEnv};
use link_protocol::routes::agent::{Turn, TurnBody, TurnReply};
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{AgentId, RemoteError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Conversations kept between turns, at most this many agents' (any one is dropped to make
/// room: it is simply loaded again on its next turn).
const KEPT: usize = 64;

/// The harness: where its calls go, the mode, one lock per agent with a turn in flight, and
/// the conversations kept between turns.
struct Harness {
    deps: deps::Deps,
    mode: Mode,
    turns: Mutex<HashMap<AgentId, Arc<tokio::sync::Mutex<()>>>>,
    kept: Mutex<HashMap<AgentId, conversation::Conversation>>,
}

impl Harness {
    fn new(env: &PluginEnv) -> Harness {
        let layout = env.layout();
        Harness {
            deps: deps::Deps::new(
                layout.router_socket(),
                layout.plugin_socket(deps::MODEL_PLUGIN),
                layout.root().to_owned(),
            ),
            mode: env.mode,
            turns: Mutex::new(HashMap::new()),
            kept: Mutex::new(HashMap::new()),
        }
    }

    async fn turn(self: Arc<Self>, call: Call, body: TurnBody) -> Result<TurnReply, RemoteError> {
        let agent = call.agent()?;
        let lock = self.lock_for(agent);
        let result = {
            let _turn = lock.lock().await;
            // Taken and put back under the agent's turn lock, so no other turn sees it.
            let mut kept = self.kept().remove(agent);
            let result = turn::run(&self.deps, self.mode, agent, &body, &mut kept).await;
            if let Some(conversation) = kept {
                self.keep(agent, conversation);
            }
            result
        };
        drop(lock);
        self.forget_idle(agent);
        if let Err(e) = &result {
            // The code and length only: an error may quote the message, a path or a pattern.
            tracing::warn!(
                "turn of {agent} failed: {} ({} bytes of message)",
                e.code.as_str(),
                e.message.len()
            );
        }
        result
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<AgentId, conversation::Conversation>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keep(&self, agent: &AgentId, conversation: conversation::Conversation) {
        let mut kept = self.kept();
        if kept.len() >= KEPT {
            if let Some(other) = kept.keys().next().cloned() {
                kept.remove(&other);
            }
        }
        kept.insert(agent.clone(), conversation);
    }

    fn lock_for(&self, agent: &AgentId) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.turns.lock().expect("turn locks");
        turns.entry(agent.clone()).or_default().clone()
    }

    /// Drops an agent's lock once no turn holds or waits for it, so the map stays small.
    fn forget_idle(&self, agent: &AgentId) {
        let mut turns = self.turns.lock().expect("turn locks");
        if turns.get(agent).is_some_and(|l| Arc::strong_count(l) == 1) {
            turns.remove(agent);
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let harness = Arc::new(Harness::new(&env));
    let service = Service::new(harness).on::<Turn, _, _>(Harness::turn);
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}
