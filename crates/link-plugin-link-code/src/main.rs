//! link-plugin-link-code: the `code` tool of full Link (`tool.code`).
//!
//! `{op: "search", pattern}` runs a regular expression over every text file of the agent's
//! workspace and answers `{matches: [{path, line, text}], truncated}`, bounded (see
//! [`code`]); `{op: "patch", path, old, new}` replaces the one occurrence of `old` and
//! answers `{bytes}`, refusing with `conflict` when `old` is missing or ambiguous.
//!
//! This plugin may not read workspaces itself (under Landlock it writes only its own home;
//! it keeps no data area): it walks and reads them through the router with `store.file.list`/`read`, and
//! writes patches with `store.file.write`, so the file store's path rules apply to it too.

mod code;

use link_protocol::routes::store::{FileList, FileRead, FileWrite, ListEntry, PathBody, WriteBody};
use link_protocol::routes::tool::{Code, CodeBody, CodeReply, Matches};
use link_protocol::routes::{programs, Route};
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{client, AgentId, ErrorCode, RemoteError};
use std::path::PathBuf;
use std::sync::Arc;
/// Bounds on the walk, so a huge workspace cannot make one search run forever.
const MAX_FILES: usize = 5_000;
const MAX_DIRS: usize = 2_000;
const MAX_READ_BYTES: u64 = 32 * 1024 * 1024;
/// The file store's own limit: larger files are skipped, not read.
const MAX_FILE: u64 = 1024 * 1024;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let tool = Arc::new(CodeTool {
        router: env.layout().router_socket(),
    });
    let service = Service::new(tool).on::<Code, _, _>(CodeTool::code);
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}

struct CodeTool {
    router: PathBuf,
}

/// Work left in a search walk.
enum Item {
    Dir(String),
    File(String, u64),
}

impl CodeTool {
    async fn code(self: Arc<Self>, call: Call, body: CodeBody) -> Result<CodeReply, RemoteError> {
        if let Some(caller) = call.caller.as_deref().filter(|c| *c != programs::HARNESS) {
            return Err(RemoteError::forbidden(format!(
                "{caller} may not call {}; only {}",
                Code::NAME,
                programs::HARNESS
            )));
        }
        let agent = call.agent()?;
        match body {
            CodeBody::Search { pattern } => {
                self.search(agent, &pattern).await.map(CodeReply::Matches)
            }
            CodeBody::Patch { path, old, new } => self
                .patch(agent, &path, &old, &new)
                .await
                .map(CodeReply::Written),
        }
    }

    async fn search(&self, agent: &AgentId, pattern: &str) -> Result<Matches, RemoteError> {
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
        Ok(Matches {
            matches: found.matches,
            truncated,
        })
    }

    /// One directory's entries, and whether the store cut the listing short.
    async fn list(
        &self,
        agent: &AgentId,
        dir: &str,
    ) -> Result<(Vec<ListEntry>, bool), RemoteError> {
        let body = PathBody {
            path: dir.to_owned(),
        };
        let listed = client::request_once::<FileList>(&self.router, Some(agent), &body).await?;
        Ok((listed.entries, listed.truncated))
    }

    /// A file's text, or `None` when it cannot be searched (not UTF-8, gone meanwhile).
    async fn read_text(&self, agent: &AgentId, path: &str) -> Result<Option<String>, RemoteError> {
        match self.read(agent, path).await {
            Ok(content) => Ok(Some(content)),
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::BadRequest | ErrorCode::NotFound | ErrorCode::TooLarge
                ) =>
            {
                // The kind only: a path in the workspace is the agent's content.
                tracing::debug!("search skips a file: {}", e.code.as_str());
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn read(&self, agent: &AgentId, path: &str) -> Result<String, RemoteError> {
        let body = PathBody {
            path: path.to_owned(),
        };
        let read = client::request_once::<FileRead>(&self.router, Some(agent), &body).await?;
        Ok(read.content)
    }

    async fn patch(
        &self,
        agent: &AgentId,
        path: &str,
        old: &str,
        new: &str,
    ) -> Result<link_protocol::routes::store::Written, RemoteError> {
        let content = self.read(agent, path).await?;
        let patched = code::apply_patch(path, &content, old, new)?;
        let body = WriteBody {
            path: path.to_owned(),
            content: patched,
        };
        Ok(client::request_once::<FileWrite>(&self.router, Some(agent), &body).await?)
    }
}
