//! link-plugin-link-code: the `code` tool of full Link (`tool.code`).
//!
//! `{op: "search", pattern}` runs a regular expression over every text file of the agent's
//! workspace and answers `{matches: [{path, line, text}], truncated}`, bounded (see
//! [`code`]); `{op: "patch", path, old, new}` replaces the one occurrence of `old` and
//! answers `{bytes}`, refusing with `conflict` when `old` is missing or ambiguous.
//!
//! This plugin may not read workspaces itself (under Landlock it reaches only its own data
//! area): it walks and reads them through the router with `store.file.list`/`read`, and
//! writes patches with `store.file.write`, so the file store's path rules apply to it too.

mod code;

use link_protocol::routes as r;
use link_protocol::server::{self, Peers};
use link_protocol::{client, ErrorCode, RemoteError, Request};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

const HARNESS: &str = "link-plugin-link-harness";
/// Bounds on the walk, so a huge workspace cannot make one search run forever.
const MAX_FILES: usize = 5_000;
const MAX_DIRS: usize = 2_000;
const MAX_READ_BYTES: u64 = 32 * 1024 * 1024;
/// The file store's own limit: larger files are skipped, not read.
const MAX_FILE: u64 = 1024 * 1024;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = link_protocol::plugin::PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let tool = Arc::new(CodeTool {
        router: env.layout().router_socket(),
    });
    let handler = server::handler(move |req| {
        let tool = tool.clone();
        async move { tool.handle(req).await }
    });
    link_protocol::plugin::serve_plugin(&env, &[r::TOOL_CODE], Peers::Parent, handler).await?;
    Ok(())
}

/// What `tool.code` accepts.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum CodeBody {
    Search {
        pattern: String,
    },
    Patch {
        path: String,
        old: String,
        new: String,
    },
}

struct CodeTool {
    router: PathBuf,
}

/// Work left in a search walk.
enum Item {
    Dir(String),
    File(String, u64),
}

#[derive(Deserialize)]
struct Entry {
    name: String,
    kind: String,
    #[serde(default)]
    bytes: u64,
}

impl CodeTool {
    async fn handle(&self, req: Request) -> Result<Value, RemoteError> {
        if req.route != r::TOOL_CODE {
            return Err(RemoteError::not_found(format!(
                "link-plugin-link-code does not serve route {}",
                req.route
            )));
        }
        if let Some(caller) = req.caller.as_deref().filter(|c| *c != HARNESS) {
            return Err(RemoteError::forbidden(format!(
                "{caller} may not call {}; only {HARNESS}",
                req.route
            )));
        }
        let agent = server::agent(&req)?;
        let body: CodeBody = serde_json::from_value(req.body.clone()).map_err(|e| {
            RemoteError::bad_request(format!(
                "tool.code: {e}; use {{op: search, pattern}} or {{op: patch, path, old, new}}"
            ))
        })?;
        match body {
            CodeBody::Search { pattern } => self.search(agent, &pattern).await,
            CodeBody::Patch { path, old, new } => self.patch(agent, &path, &old, &new).await,
        }
    }

    async fn search(&self, agent: &str, pattern: &str) -> Result<Value, RemoteError> {
        let re = code::compile(pattern)?;
        let mut found = code::Found::default();
        // Set when the walk itself was cut short (too many files, dirs or bytes).
        let mut walk_cut = false;
        let (mut files, mut dirs, mut read) = (0usize, 0usize, 0u64);
        // Depth first over sorted listings, so matches come in path order.
        let mut stack = vec![Item::Dir(String::new())];
        while let Some(item) = stack.pop() {
            if found.full() {
                break;
            }
            match item {
                Item::Dir(dir) => {
                    dirs += 1;
                    if dirs > MAX_DIRS {
                        walk_cut = true;
                        break;
                    }
                    let (entries, cut) = self.list(agent, &dir).await?;
                    walk_cut |= cut;
                    for e in entries.into_iter().rev() {
                        let path = if dir.is_empty() {
                            e.name
                        } else {
                            format!("{dir}/{}", e.name)
                        };
                        match e.kind.as_str() {
                            "dir" => stack.push(Item::Dir(path)),
                            "file" if e.bytes <= MAX_FILE => stack.push(Item::File(path, e.bytes)),
                            _ => {} // symlinks, oversized and special files are not searched
                        }
                    }
                }
                Item::File(path, bytes) => {
                    if files == MAX_FILES || read + bytes > MAX_READ_BYTES {
                        walk_cut = true;
                        break;
                    }
                    files += 1;
                    read += bytes;
                    if let Some(text) = self.read_text(agent, &path).await? {
                        found.search(&re, &path, &text);
                    }
                }
            }
        }
        let truncated = found.truncated || walk_cut;
        Ok(json!({"matches": found.matches, "truncated": truncated}))
    }

    /// One directory's entries, and whether the store cut the listing short.
    async fn list(&self, agent: &str, dir: &str) -> Result<(Vec<Entry>, bool), RemoteError> {
        let listed = self
            .call(r::STORE_FILE_LIST, agent, json!({ "path": dir }))
            .await?;
        let entries = serde_json::from_value(listed["entries"].clone())
            .map_err(|e| RemoteError::internal(format!("store.file.list answer: {e}")))?;
        Ok((entries, listed["truncated"].as_bool().unwrap_or(false)))
    }

    /// A file's text, or `None` when it cannot be searched (not UTF-8, gone meanwhile).
    async fn read_text(&self, agent: &str, path: &str) -> Result<Option<String>, RemoteError> {
        match self
            .call(r::STORE_FILE_READ, agent, json!({ "path": path }))
            .await
        {
            Ok(v) => Ok(v["content"].as_str().map(str::to_owned)),
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::BadRequest | ErrorCode::NotFound | ErrorCode::TooLarge
                ) =>
            {
                tracing::debug!("search skips {path}: {}", e.message);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn patch(
        &self,
        agent: &str,
        path: &str,
        old: &str,
        new: &str,
    ) -> Result<Value, RemoteError> {
        let read = self
            .call(r::STORE_FILE_READ, agent, json!({ "path": path }))
            .await?;
        let content = read["content"]
            .as_str()
            .ok_or_else(|| RemoteError::internal("store.file.read answered without content"))?;
        let patched = code::apply_patch(path, content, old, new)?;
        self.call(
            r::STORE_FILE_WRITE,
            agent,
            json!({"path": path, "content": patched}),
        )
        .await
    }

    /// Calls the file store through the host's router, for `agent`.
    async fn call(&self, route: &str, agent: &str, body: Value) -> Result<Value, RemoteError> {
        client::call_once(&self.router, route, Some(agent), body)
            .await
            .map_err(RemoteError::from)
    }
}
