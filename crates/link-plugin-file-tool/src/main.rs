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
use link_protocol::routes as r;
use link_protocol::server::{self, Peers};
use link_protocol::{client, layout::StateLayout, ErrorCode, RemoteError, Request};
use paths::RefusalError;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

const HARNESS: &str = "link-plugin-link-harness";

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = link_protocol::plugin::PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let tool = Arc::new(FileTool {
        layout: env.layout(),
        mode: env.mode,
    });
    let handler = server::handler(move |req| {
        let tool = tool.clone();
        async move { tool.handle(req).await }
    });
    link_protocol::plugin::serve_plugin(&env, &[r::TOOL_FILE], Peers::Parent, handler).await?;
    Ok(())
}

struct FileTool {
    layout: StateLayout,
    mode: Mode,
}

#[derive(Deserialize)]
struct FileBody {
    op: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    content: Option<String>,
}

/// A checked request: which store route to call with which body.
fn plan(body: FileBody) -> Result<(&'static str, Value), RemoteError> {
    let path = body.path.unwrap_or_default();
    match body.op.as_str() {
        "read" | "write" if path.is_empty() => Err(RemoteError::bad_request(format!(
            "file {}: `path` names the file to {}",
            body.op, body.op
        ))),
        "read" => Ok((r::STORE_FILE_READ, json!({ "path": path }))),
        "write" => {
            let content = body.content.ok_or_else(|| {
                RemoteError::bad_request("file write needs `content`, the text to write")
            })?;
            Ok((
                r::STORE_FILE_WRITE,
                json!({"path": path, "content": content}),
            ))
        }
        "list" => Ok((r::STORE_FILE_LIST, json!({ "path": path }))),
        other => Err(RemoteError::bad_request(format!(
            "unknown file op {other:?}: use read, write or list"
        ))),
    }
}

impl FileTool {
    async fn handle(&self, req: Request) -> Result<Value, RemoteError> {
        if req.route != r::TOOL_FILE {
            return Err(RemoteError::not_found(format!(
                "link-plugin-file-tool does not serve route {}",
                req.route
            )));
        }
        if self.mode == Mode::Diagnostic {
            return Err(RemoteError::new(
                ErrorCode::Unavailable,
                "file tool disabled in diagnostic mode",
            ));
        }
        if let Some(caller) = req.caller.as_deref().filter(|c| *c != HARNESS) {
            return Err(RemoteError::forbidden(format!(
                "{caller} may not call {}; only {HARNESS}",
                req.route
            )));
        }
        let agent = server::agent(&req)?;
        let body: FileBody = server::body(&req)?;
        let path = body.path.clone().unwrap_or_default();
        paths::check(&path, &self.layout.agent_dir(agent)).map_err(|why| {
            tracing::warn!(
                "refused file {} {path:?} for agent {agent}: {why:?}",
                body.op
            );
            why.error(&path)
        })?;
        let (route, store_body) = plan(body)?;
        client::call_once(&self.layout.router_socket(), route, Some(agent), store_body)
            .await
            .map_err(RemoteError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> FileBody {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn plans() {
        let (route, b) = plan(body(json!({"op": "read", "path": "a"}))).unwrap();
        assert_eq!((route, b), (r::STORE_FILE_READ, json!({"path": "a"})));
        let (route, b) = plan(body(json!({"op": "write", "path": "a", "content": "x"}))).unwrap();
        assert_eq!(
            (route, b),
            (r::STORE_FILE_WRITE, json!({"path": "a", "content": "x"}))
        );
        let (route, b) = plan(body(json!({"op": "list"}))).unwrap();
        assert_eq!((route, b), (r::STORE_FILE_LIST, json!({"path": ""})));
        for bad in [
            json!({"op": "write", "path": "a"}),
            json!({"op": "read"}),
            json!({"op": "delete", "path": "a"}),
        ] {
            assert_eq!(plan(body(bad)).unwrap_err().code, ErrorCode::BadRequest);
        }
    }
}
