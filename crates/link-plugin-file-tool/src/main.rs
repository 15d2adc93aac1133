//! link-plugin-file-tool: the `file` tool of full Link (`tool.file`).
//!
//! It reads, writes and lists files inside the agent's workspace for the link harness, and
//! never touches the conversation log. It holds no files itself: after checking the path
//! (see [`paths`]) it asks the file store, through the host's router, with
//! `store.file.read`/`write`/`list` for the same agent — the store re-checks everything on
//! the real files. In diagnostic mode the tool is disabled (`unavailable`), as protected
//! tools are only offered where the runtime is confined.

mod paths;

use link_protocol::plugin::Mode;
use link_protocol::routes::store::{FileList, FileRead, FileWrite, PathBody, WriteBody};
use link_protocol::routes::tool::{File, FileBody, FileReply};
use link_protocol::routes::{programs, Route};
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{client, layout::StateLayout, AgentId, ErrorCode, RemoteError};
use paths::RefusalError;
use std::sync::Arc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let tool = Arc::new(FileTool {
        layout: env.layout(),
        mode: env.mode,
    });
    let service = Service::new(tool).on::<File, _, _>(FileTool::file);
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}

struct FileTool {
    layout: StateLayout,
    mode: Mode,
}

/// The path an operation names; reads and writes need a file, a list may name the workspace.
fn path_of(body: &FileBody) -> Result<&str, RemoteError> {
    let (op, path) = match body {
        FileBody::Read { path } => ("read", path),
        FileBody::Write { path, .. } => ("write", path),
        FileBody::List { path } => return Ok(path),
    };
    if path.is_empty() {
        return Err(RemoteError::bad_request(format!(
            "file {op}: `path` names the file to {op}"
        )));
    }
    Ok(path)
}

/// What a refused operation was, for the log: its kind and lengths, never its path or content
/// (issue 42: the log kept every refused write whole).
fn described(body: &FileBody) -> String {
    match body {
        FileBody::Read { path } => format!("read of a path of {} bytes", path.len()),
        FileBody::Write { path, content } => format!(
            "write of {} bytes to a path of {} bytes",
            content.len(),
            path.len()
        ),
        FileBody::List { path } => format!("list of a path of {} bytes", path.len()),
    }
}

impl FileTool {
    async fn file(self: Arc<Self>, call: Call, body: FileBody) -> Result<FileReply, RemoteError> {
        if self.mode == Mode::Diagnostic {
            return Err(RemoteError::new(
                ErrorCode::Unavailable,
                "file tool disabled in diagnostic mode",
            ));
        }
        if let Some(caller) = call.caller.as_deref().filter(|c| *c != programs::HARNESS) {
            return Err(RemoteError::forbidden(format!(
                "{caller} may not call {}; only {}",
                File::NAME,
                programs::HARNESS
            )));
        }
        let agent = call.agent()?;
        let path = path_of(&body)?;
        let (dir, workspace) = (
            self.layout.agent_dir(agent),
            self.layout.agent_workspace(agent),
        );
        paths::check(path, &dir, &workspace).map_err(|why| {
            // Lengths and kinds only: the path and the content are the agent's, never logged.
            tracing::warn!("refused {} for agent {agent}: {why:?}", described(&body));
            why.error(path)
        })?;
        self.forward(agent, body).await.map_err(RemoteError::from)
    }

    /// The store route the operation maps to, for the same agent.
    async fn forward(
        &self,
        agent: &AgentId,
        body: FileBody,
    ) -> Result<FileReply, link_protocol::Error> {
        let router = self.layout.router_socket();
        let agent = Some(agent);
        Ok(match body {
            FileBody::Read { path } => FileReply::Content(
                client::request_once::<FileRead>(&router, agent, &PathBody { path }).await?,
            ),
            FileBody::Write { path, content } => FileReply::Written(
                client::request_once::<FileWrite>(&router, agent, &WriteBody { path, content })
                    .await?,
            ),
            FileBody::List { path } => FileReply::Listing(
                client::request_once::<FileList>(&router, agent, &PathBody { path }).await?,
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: serde_json::Value) -> Result<FileBody, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn bodies_and_paths() {
        let read = body(json!({"op": "read", "path": "a"})).unwrap();
        assert_eq!(path_of(&read).unwrap(), "a");
        let list = body(json!({"op": "list"})).unwrap();
        assert_eq!(path_of(&list).unwrap(), "");
        let read_nothing = body(json!({"op": "read", "path": ""})).unwrap();
        assert_eq!(
            path_of(&read_nothing).unwrap_err().code,
            ErrorCode::BadRequest
        );
        for bad in [
            json!({"op": "write", "path": "a"}),
            json!({"op": "read"}),
            json!({"op": "delete", "path": "a"}),
        ] {
            assert!(body(bad).is_err());
        }
    }
}
