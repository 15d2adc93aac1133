//! link-plugin-link-run: the `run` tool. It serves `tool.run` for the agent a request acts for
//! and runs `/bin/sh -c COMMAND` through the sandbox plugin's `sandbox.exec`, called through
//! the host's router (which checks the grant). It never runs anything itself, and in
//! diagnostic mode it refuses (`unavailable`).

use link_protocol::layout::StateLayout;
use link_protocol::plugin::Mode;
use link_protocol::routes::sandbox::{Exec, ExecBody};
use link_protocol::routes::tool::{Run, RunBody, RunReply};
use link_protocol::server::{Call, Peers, Service};
use link_protocol::{client, ErrorCode, RemoteError};
use std::sync::Arc;

use link_protocol::routes::tool::{
    RUN_DEFAULT_SECS as DEFAULT_TIMEOUT_SECS, RUN_MAX_SECS as MAX_TIMEOUT_SECS,
};
/// Per stream; what the model sees of a command's output.
const OUTPUT_CAP: usize = 64 * 1024;

struct State {
    layout: StateLayout,
    mode: Mode,
}

impl State {
    async fn run(self: Arc<Self>, call: Call, body: RunBody) -> Result<RunReply, RemoteError> {
        if self.mode == Mode::Diagnostic {
            return Err(RemoteError::new(
                ErrorCode::Unavailable,
                "run tool disabled in diagnostic mode",
            ));
        }
        let agent = call.agent()?;
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
        let exec = ExecBody {
            argv: vec!["/bin/sh".into(), "-c".into(), body.command],
            workspace,
            home,
            timeout_ms: Some(timeout * 1000),
            output_cap: Some(OUTPUT_CAP),
            env: Default::default(),
            limits: Default::default(),
        };
        let router = self.layout.router_socket();
        let r = client::request_once::<Exec>(&router, Some(agent), &exec).await?;
        tracing::info!(agent = %agent, exit = ?r.exit_code, timed_out = r.timed_out, "tool.run");
        Ok(RunReply {
            exit_code: r.exit_code,
            signal: r.signal,
            stdout: r.stdout,
            stderr: r.stderr,
            truncated: r.stdout_truncated || r.stderr_truncated,
            duration_ms: r.duration_ms,
            missing_command: r.missing_command,
            timed_out: r.timed_out,
            limit_hit: r.limit_hit,
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let state = Arc::new(State {
        layout: env.layout(),
        mode: env.mode,
    });
    let service = Service::new(state).on::<Run, _, _>(State::run);
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}
