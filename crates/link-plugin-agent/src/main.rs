//! link-plugin-agent: full Link's agent registry.
//!
//! It owns the list of agents (one record file per agent in its data area, see [`registry`];
//! a damaged record damages its agent alone, which answers 500 naming the file) and each
//! agent's isolated home (`data/agent/homes/<id>/` with `.config`, `.cache`, `.local/share`)
//! that the run tool hands to commands. The agent's workspace and conversation belong to the
//! file store: this plugin asks it, through the router, to create and delete them
//! (`store.agent.*`), and asks the scheduler to drop the agent's schedules on delete.
//! Routes: `agent.create` `{name, model?}`, `agent.get`, `agent.list`, `agent.delete` (shapes
//! in `link_protocol::routes`). Names are `[a-z0-9][a-z0-9_-]{0,31}` and the id is the name.
//! An agent's model is kept in its record and checked at create against the models the model
//! service serves (it may read that list, nothing else of the model); none named: the
//! runtime's default, which is also what a record of an older runtime, without one, reads as.

mod registry;

use link_protocol::model::Model;
use link_protocol::model_service::ModelService;
use link_protocol::routes::agent::{AgentInfo, AgentList, Create, CreateBody, Delete, Get, List};
use link_protocol::routes::programs;
use link_protocol::routes::{schedule, store, Empty, Route};
use link_protocol::server::{Peers, Service};
use link_protocol::{client, layout::StateLayout, AgentId, ErrorCode, RemoteError};
use registry::{Record, Registry};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let layout = env.layout();
    let registry = Registry::load(&env.data, &layout.agent_homes_dir())?;
    tracing::info!("{} agents registered", registry.agents.len());
    for (id, why) in &registry.damaged {
        tracing::error!("agent {id} is damaged and was not loaded: {why}; the other agents are");
    }
    let agents = Arc::new(Agents {
        models: ModelService::new(layout.plugin_socket(programs::MODEL)),
        default_model: env.default_model.clone(),
        layout,
        state: Mutex::new(State {
            registry,
            creating: BTreeSet::new(),
        }),
    });
    let service = Service::new(agents)
        .on::<Create, _, _>(|a, _, body: CreateBody| async move { a.create(body).await })
        .on::<Get, _, _>(|a, call, _| async move { a.get(call.agent()?) })
        .on::<List, _, _>(|a, _, _| async move { Ok(a.list()) })
        .on::<Delete, _, _>(|a, call, _| async move { a.delete(call.agent()?).await });
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}

struct Agents {
    layout: StateLayout,
    /// Asked at create whether it serves the agent's model.
    models: ModelService,
    /// The model of an agent created without one, and of a record without one.
    default_model: Model,
    state: Mutex<State>,
}

/// Never held across an await: calls to other plugins happen outside the lock, so an
/// `agent.get` from another plugin is never stuck behind a slow create or delete.
struct State {
    registry: Registry,
    /// Names being created right now (reserved against duplicates).
    creating: BTreeSet<String>,
}

impl Agents {
    fn get(&self, id: &AgentId) -> Result<AgentInfo, RemoteError> {
        let st = self.state();
        if let Some(why) = st.registry.damaged.get(id) {
            return Err(RemoteError::damaged_agent(id, why));
        }
        let rec = st.registry.agents.get(id).cloned();
        drop(st);
        Ok(self.describe(&rec.ok_or_else(|| unknown(id))?))
    }

    /// Every agent, damaged ones included (by id, as Mini lists them), sorted by id.
    fn list(&self) -> AgentList {
        let st = self.state();
        let mut all: Vec<AgentInfo> = st
            .registry
            .agents
            .values()
            .map(|rec| self.describe(rec))
            .collect();
        // A damaged agent's model is in the record that cannot be read: none is shown.
        all.extend(st.registry.damaged.keys().map(|id| AgentInfo {
            model: None,
            ..self.describe(&Record {
                id: id.clone(),
                name: id.to_string(),
                created_unix_ms: 0,
                model: None,
            })
        }));
        drop(st);
        all.sort_by(|a, b| a.id.cmp(&b.id));
        AgentList { agents: all }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn describe(&self, rec: &Record) -> AgentInfo {
        AgentInfo {
            model: Some(
                rec.model
                    .clone()
                    .unwrap_or_else(|| self.default_model.clone()),
            ),
            workspace: Some(self.layout.agent_workspace(&rec.id)),
            home: Some(self.layout.agent_home(&rec.id)),
            ..AgentInfo::new(rec.id.clone(), rec.name.clone())
        }
    }

    async fn create(&self, body: CreateBody) -> Result<AgentInfo, RemoteError> {
        let name = body.name.as_str();
        // The name is the id.
        let id = AgentId::parse(name)?;
        let model = body.model.unwrap_or_else(|| self.default_model.clone());
        // Before anything is reserved or made: an agent on a model nobody serves would fail
        // every turn.
        self.models.check(&model).await?;
        {
            let mut st = self.state();
            if let Some(why) = st.registry.damaged.get(name) {
                return Err(RemoteError::new(
                    ErrorCode::Conflict,
                    format!("an agent named {name:?} already exists and is damaged: {why}"),
                ));
            }
            if st.registry.agents.contains_key(name) || !st.creating.insert(name.to_owned()) {
                return Err(RemoteError::new(
                    ErrorCode::Conflict,
                    format!("an agent named {name:?} already exists; choose another name"),
                ));
            }
        }
        let rec = Record {
            id: id.clone(),
            name: name.to_owned(),
            created_unix_ms: link_protocol::clock::unix_ms(),
            model: Some(model),
        };
        let made = match self.make_files(&id).await {
            Ok(()) => {
                let mut st = self.state();
                let saved = st.registry.create(&rec);
                if saved.is_ok() {
                    st.registry.agents.insert(rec.id.clone(), rec.clone());
                }
                Ok(saved)
            }
            Err(e) => Err(e),
        };
        match &made {
            // A record put there since the start (a repaired one, say) is kept, and so are
            // the files of its agent.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            // A create that failed (a full disk, say) leaves no files behind.
            Ok(Err(_)) => self.unmake_files(&id).await,
            _ => {}
        }
        self.state().creating.remove(name);
        match made {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let path = self.state().registry.path(name);
                return Err(RemoteError::new(
                    ErrorCode::Conflict,
                    format!(
                        "agent {name:?} has a record {} made since the runtime started; \
                         restart to load it, or choose another name",
                        path.display()
                    ),
                ));
            }
            Ok(Err(e)) => {
                let what = format!(
                    "cannot save the record {}",
                    self.state().registry.path(name).display()
                );
                return Err(self.io_error(&what, e));
            }
            Err(e) => return Err(e),
        }
        tracing::info!("created agent {name}");
        Ok(self.describe(&rec))
    }

    /// The workspace and conversation (by the file store), then the home.
    async fn make_files(&self, id: &AgentId) -> Result<(), RemoteError> {
        self.call::<store::AgentCreate>(id).await?;
        let home = self.layout.agent_home(id);
        let made = [".config", ".cache", ".local/share"]
            .iter()
            .try_for_each(|sub| std::fs::create_dir_all(home.join(sub)));
        if let Err(e) = made {
            self.unmake_files(id).await;
            return Err(self.io_error(&format!("cannot create home {}", home.display()), e));
        }
        Ok(())
    }

    /// Removes what [`Self::make_files`] made, after a create that failed later.
    async fn unmake_files(&self, id: &AgentId) {
        let _ = link_protocol::files::remove_tree(&self.layout.agent_home(id));
        if let Err(e) = self.call::<store::AgentDelete>(id).await {
            tracing::warn!("could not remove the files of the failed create of {id}: {e}");
        }
    }

    /// The wire error for a failed write: a full disk (or quota) names the state root.
    fn io_error(&self, what: &str, e: std::io::Error) -> RemoteError {
        if link_protocol::message::is_storage_full(&e) {
            RemoteError::insufficient_storage(self.layout.root(), format!("{what}: {e}"))
        } else {
            RemoteError::internal(format!("{what}: {e}"))
        }
    }

    async fn delete(&self, id: &AgentId) -> Result<Empty, RemoteError> {
        {
            let st = self.state();
            if !st.registry.agents.contains_key(id) && !st.registry.damaged.contains_key(id) {
                return Err(unknown(id));
            }
        }
        self.call::<store::AgentDelete>(id).await?;
        match self.call::<schedule::DeleteAgent>(id).await {
            Ok(_) => {}
            // No scheduler running (or nothing scheduled): there is nothing to cancel.
            Err(e) if matches!(e.code, ErrorCode::Unavailable | ErrorCode::NotFound) => {
                tracing::info!("schedules of {id} not deleted: {}", e.message);
            }
            Err(e) => return Err(e),
        }
        let home = self.layout.agent_home(id);
        // Whatever the agent's commands did to the modes of its files (issue 42).
        match link_protocol::files::remove_tree(&home) {
            Ok(()) => {}
            Err(e) => {
                return Err(RemoteError::internal(format!(
                    "cannot remove home {}: {e}",
                    home.display()
                )))
            }
        }
        let mut st = self.state();
        if let Err(e) = st.registry.remove(id) {
            return Err(RemoteError::internal(format!(
                "cannot remove the record {}: {e}",
                st.registry.path(id).display()
            )));
        }
        st.registry.agents.remove(id);
        st.registry.damaged.remove(id);
        tracing::info!("deleted agent {id}");
        Ok(Empty {})
    }

    /// Calls another plugin through the host's router, acting for `agent`.
    async fn call<R: Route<Body = Empty>>(&self, agent: &AgentId) -> Result<R::Reply, RemoteError> {
        client::request_once::<R>(&self.layout.router_socket(), Some(agent), &Empty {})
            .await
            .map_err(|e| {
                let mut e = RemoteError::from(e);
                e.message = format!("{} for agent {agent}: {}", R::NAME, e.message);
                e
            })
    }
}

fn unknown(id: &str) -> RemoteError {
    RemoteError::not_found(format!(
        "no agent {id:?}; create it with `link agent create --state DIR NAME` (POST /v1/agents)"
    ))
}
