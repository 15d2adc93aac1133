//! link-plugin-link-run: the `run` tool. It serves `tool.run` for the agent a request acts for
//! and runs `/bin/sh -c COMMAND` through the sandbox plugin's `sandbox.exec`, called through
//! the host's router (which checks the grant). It never runs anything itself, and in
//! diagnostic mode it refuses (`unavailable`).

use link_protocol::layout::StateLayout;
use link_protocol::plugin::{Mode, PluginEnv};
use link_protocol::server::Peers;
use link_protocol::{routes, ErrorCode, RemoteError, Request};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;

const DEFAULT_TIMEOUT_SECS: u64 = 60;
const MAX_TIMEOUT_SECS: u64 = 600;
/// Per stream; what the model sees of a command's output.
const OUTPUT_CAP: usize = 64 * 1024;

/// The body of `tool.run`.
#[derive(Debug, Deserialize)]
struct RunRequest {
    command: String,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// The part of the `sandbox.exec` result this tool passes on.
#[derive(Debug, Deserialize)]
struct ExecResult {
    exit_code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    stdout_truncated: bool,
    stderr_truncated: bool,
    duration_ms: u64,
    missing_command: bool,
    #[serde(default)]
    timed_out: bool,
}

/// The `tool.run` result (routes.rs), plus `timed_out` so a kill is not mistaken for a crash.
#[derive(Debug, Serialize)]
struct RunResult {
    exit_code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    truncated: bool,
    duration_ms: u64,
    missing_command: bool,
    timed_out: bool,
}

struct State {
    layout: StateLayout,
    mode: Mode,
}

impl State {
    async fn handle(&self, req: Request) -> Result<Value, RemoteError> {
        if req.route != routes::TOOL_RUN {
            return Err(RemoteError::not_found(format!("no route {}", req.route)));
        }
        if self.mode == Mode::Diagnostic {
            return Err(RemoteError::new(
                ErrorCode::Unavailable,
                "run tool disabled in diagnostic mode",
            ));
        }
        let agent = link_protocol::server::agent(&req)?;
        if agent.is_empty() || agent.contains('/') || agent.starts_with('.') {
            return Err(RemoteError::bad_request(format!(
                "invalid agent id `{agent}`"
            )));
        }
        let body: RunRequest = link_protocol::server::body(&req)?;
        let timeout = body.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
        if timeout == 0 || timeout > MAX_TIMEOUT_SECS {
            return Err(RemoteError::bad_request(format!(
                "timeout_secs must be between 1 and {MAX_TIMEOUT_SECS}"
            )));
        }
        let workspace = self.layout.agent_workspace(agent);
        if !workspace.is_dir() {
            return Err(RemoteError::not_found(format!(
                "agent {agent} has no workspace"
            )));
        }
        let home = Some(self.layout.agent_home(agent)).filter(|h| h.is_dir());
        let exec = json!({
            "argv": ["/bin/sh", "-c", body.command],
            "workspace": workspace,
            "home": home,
            "timeout_ms": timeout * 1000,
            "output_cap": OUTPUT_CAP,
            "env": {},
        });
        let router = self.layout.router_socket();
        let result =
            link_protocol::client::call_once(&router, routes::SANDBOX_EXEC, Some(agent), exec)
                .await?;
        let r: ExecResult = serde_json::from_value(result)
            .map_err(|e| RemoteError::internal(format!("unexpected sandbox.exec result: {e}")))?;
        tracing::info!(agent, exit = ?r.exit_code, timed_out = r.timed_out, "tool.run");
        let result = RunResult {
            exit_code: r.exit_code,
            signal: r.signal,
            stdout: r.stdout,
            stderr: r.stderr,
            truncated: r.stdout_truncated || r.stderr_truncated,
            duration_ms: r.duration_ms,
            missing_command: r.missing_command,
            timed_out: r.timed_out,
        };
        serde_json::to_value(result).map_err(|e| RemoteError::internal(e.to_string()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    let state = Arc::new(State {
        layout: env.layout(),
        mode: env.mode,
    });
    let handler = link_protocol::server::handler(move |req| {
        let state = state.clone();
        async move { state.handle(req).await }
    });
    link_protocol::plugin::serve_plugin(&env, &[routes::TOOL_RUN], Peers::Parent, handler).await?;
    Ok(())
}
