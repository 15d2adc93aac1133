//! link-plugin-agent: full Link's agent registry.
//!
//! It owns the list of agents (`agents.json` in its data area, see [`registry`]) and each
//! agent's isolated home (`data/agent/homes/<id>/` with `.config`, `.cache`, `.local/share`)
//! that the run tool hands to commands. The agent's workspace and conversation belong to the
//! file store: this plugin asks it, through the router, to create and delete them
//! (`store.agent.*`), and asks the scheduler to drop the agent's schedules on delete.
//! Routes: `agent.create` `{name}`, `agent.get`, `agent.list`, `agent.delete` (shapes in
//! `link_protocol::routes`). Names are `[a-z0-9][a-z0-9_-]{0,31}` and the id is the name.

mod registry;

use link_protocol::routes as r;
use link_protocol::server::{self, Peers};
use link_protocol::{client, layout::StateLayout, ErrorCode, RemoteError, Request};
use registry::{Record, Registry};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

const ROUTES: &[&str] = &[
    r::AGENT_CREATE,
    r::AGENT_GET,
    r::AGENT_LIST,
    r::AGENT_DELETE,
];

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = link_protocol::plugin::PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let registry = Registry::load(&env.data)?;
    tracing::info!("{} agents registered", registry.agents.len());
    let agents = Arc::new(Agents {
        layout: env.layout(),
        state: Mutex::new(State {
            registry,
            creating: BTreeSet::new(),
        }),
    });
    let handler = server::handler(move |req| {
        let agents = agents.clone();
        async move { agents.handle(req).await }
    });
    link_protocol::plugin::serve_plugin(&env, ROUTES, Peers::Parent, handler).await?;
    Ok(())
}

/// Checks an agent name: `[a-z0-9][a-z0-9_-]{0,31}`.
pub fn check_name(name: &str) -> Result<(), RemoteError> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 32
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(RemoteError::bad_request(format!(
            "invalid agent name {name:?}: use 1 to 32 characters from a-z, 0-9, `_` and `-`, \
             starting with a letter or digit"
        )))
    }
}

struct Agents {
    layout: StateLayout,
    state: Mutex<State>,
}

/// Never held across an await: calls to other plugins happen outside the lock, so an
/// `agent.get` from another plugin is never stuck behind a slow create or delete.
struct State {
    registry: Registry,
    /// Names being created right now (reserved against duplicates).
    creating: BTreeSet<String>,
}

#[derive(Deserialize)]
struct CreateBody {
    name: String,
}

impl Agents {
    async fn handle(&self, req: Request) -> Result<Value, RemoteError> {
        match req.route.as_str() {
            r::AGENT_CREATE => {
                let body: CreateBody = server::body(&req)?;
                self.create(&body.name).await
            }
            r::AGENT_GET => {
                let id = server::agent(&req)?;
                let rec = self.state().registry.agents.get(id).cloned();
                Ok(self.describe(&rec.ok_or_else(|| unknown(id))?))
            }
            r::AGENT_LIST => {
                let all: Vec<Record> = self.state().registry.agents.values().cloned().collect();
                let agents: Vec<Value> = all.iter().map(|a| self.describe(a)).collect();
                Ok(json!({ "agents": agents }))
            }
            r::AGENT_DELETE => self.delete(server::agent(&req)?).await,
            other => Err(RemoteError::not_found(format!(
                "link-plugin-agent does not serve route {other}"
            ))),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn describe(&self, rec: &Record) -> Value {
        json!({
            "id": rec.id,
            "name": rec.name,
            "workspace": self.layout.agent_workspace(&rec.id),
            "home": self.layout.agent_home(&rec.id),
        })
    }

    async fn create(&self, name: &str) -> Result<Value, RemoteError> {
        check_name(name)?;
        {
            let mut st = self.state();
            if st.registry.agents.contains_key(name) || !st.creating.insert(name.to_owned()) {
                return Err(RemoteError::new(
                    ErrorCode::Conflict,
                    format!("an agent named {name:?} already exists; choose another name"),
                ));
            }
        }
        let made = self.make_files(name).await;
        let mut st = self.state();
        st.creating.remove(name);
        made?;
        let rec = Record {
            id: name.to_owned(),
            name: name.to_owned(),
            created_unix_ms: link_protocol::clock::unix_ms(),
        };
        st.registry.agents.insert(rec.id.clone(), rec.clone());
        if let Err(e) = st.registry.save() {
            st.registry.agents.remove(name);
            return Err(RemoteError::internal(format!(
                "cannot save the agent registry: {e}"
            )));
        }
        tracing::info!("created agent {name}");
        Ok(self.describe(&rec))
    }

    /// The workspace and conversation (by the file store), then the home.
    async fn make_files(&self, id: &str) -> Result<(), RemoteError> {
        self.call(r::STORE_AGENT_CREATE, id).await?;
        let home = self.layout.agent_home(id);
        let made = [".config", ".cache", ".local/share"]
            .iter()
            .try_for_each(|sub| std::fs::create_dir_all(home.join(sub)));
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&home);
            return Err(RemoteError::internal(format!(
                "cannot create home {}: {e}",
                home.display()
            )));
        }
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<Value, RemoteError> {
        if !self.state().registry.agents.contains_key(id) {
            return Err(unknown(id));
        }
        self.call(r::STORE_AGENT_DELETE, id).await?;
        match self.call(r::SCHEDULE_DELETE_AGENT, id).await {
            Ok(_) => {}
            // No scheduler running (or nothing scheduled): there is nothing to cancel.
            Err(e) if matches!(e.code, ErrorCode::Unavailable | ErrorCode::NotFound) => {
                tracing::info!("schedules of {id} not deleted: {}", e.message);
            }
            Err(e) => return Err(e),
        }
        let home = self.layout.agent_home(id);
        match std::fs::remove_dir_all(&home) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(RemoteError::internal(format!(
                    "cannot remove home {}: {e}",
                    home.display()
                )))
            }
        }
        let mut st = self.state();
        if let Some(rec) = st.registry.agents.remove(id) {
            if let Err(e) = st.registry.save() {
                st.registry.agents.insert(id.to_owned(), rec);
                return Err(RemoteError::internal(format!(
                    "cannot save the agent registry: {e}"
                )));
            }
        }
        tracing::info!("deleted agent {id}");
        Ok(json!({}))
    }

    /// Calls another plugin through the host's router, acting for `agent`.
    async fn call(&self, route: &str, agent: &str) -> Result<Value, RemoteError> {
        client::call_once(&self.layout.router_socket(), route, Some(agent), json!({}))
            .await
            .map_err(|e| {
                let mut e = RemoteError::from(e);
                e.message = format!("{route} for agent {agent}: {}", e.message);
                e
            })
    }
}

fn unknown(id: &str) -> RemoteError {
    RemoteError::not_found(format!("no agent {id:?}; create it with agent.create"))
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn names() {
        for ok in ["a", "0", "agent-1", "a_b", &"z".repeat(32)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "_a",
            "A",
            "a b",
            "a.b",
            "../x",
            "a/b",
            &"z".repeat(33),
            "é",
        ] {
            let err = check_name(bad).unwrap_err();
            assert_eq!(err.code, link_protocol::ErrorCode::BadRequest, "{bad}");
        }
    }
}
