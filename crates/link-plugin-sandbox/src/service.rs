//! The `sandbox.exec` route: one confined command for the agent a request acts for.
//!
//! The owner re-check: the workspace must be `<state>/data/file-store/workspaces/<agent>`
//! and the home `<state>/data/agent/homes/<agent>`, for the agent named in `Request::agent`,
//! after resolving symlinks and `..`. Anything else is `forbidden`. Not a directory *inside*
//! them: the agent controls what is inside, and a path through it could be swapped for a
//! symlink between this check and bwrap's bind (or the walks that hand the files to the
//! agent's uid). Every component of the two accepted paths belongs to Link.
//!
//! One agent's commands run one at a time, so no command of an agent is running while the
//! workspace is walked before or after another.

use link_confine::cgroup::{AgentCgroup, Cgroups};
use link_confine::identity::{Identity, Slots};
use link_confine::limits::Limits;
use link_confine::policy::Policy;
use link_confine::run::{Output, RunError, Spec};
use link_protocol::layout::StateLayout;
use link_protocol::plugin::Mode;
use link_protocol::routes::sandbox::{ExecBody, ExecReply};
use link_protocol::server::{until_deadline, Call};
use link_protocol::AgentId;
use link_protocol::{ErrorCode, RemoteError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use link_protocol::routes::sandbox::{
    DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUT_MS, MAX_OUTPUT_CAP, MAX_TIMEOUT_MS,
};

/// The plugin's state: where agents live, the mode, and the programs it runs.
#[derive(Debug)]
pub struct Service {
    pub layout: StateLayout,
    pub mode: Mode,
    /// bwrap, located once at start; `None` makes every call `unavailable`.
    pub bwrap: Option<PathBuf>,
    /// Each agent's dedicated identity when Link runs as root ([`link_confine::identity`]).
    pub slots: std::sync::Mutex<Slots>,
    /// As root where the host made them: the runtime's cgroups, in which each agent's
    /// commands are bounded together ([`link_confine::cgroup`]).
    pub cgroups: Option<Arc<Cgroups>>,
    /// One lock per agent: its commands run one at a time.
    pub running: std::sync::Mutex<HashMap<AgentId, Arc<tokio::sync::Mutex<()>>>>,
}

impl Service {
    /// Serves `sandbox.exec` for the agent the call acts for.
    pub async fn exec(
        self: std::sync::Arc<Self>,
        call: Call,
        body: ExecBody,
    ) -> Result<ExecReply, RemoteError> {
        if self.mode == Mode::Diagnostic {
            return Err(unavailable("run tool disabled in diagnostic mode"));
        }
        let agent = call.agent()?;
        if body.argv.is_empty() {
            return Err(RemoteError::bad_request("sandbox.exec: argv is empty"));
        }
        let workspace = owned_path(
            &body.workspace,
            &self.layout.agent_workspace(agent),
            "workspace",
        )?;
        let home = match &body.home {
            Some(h) => Some(owned_path(h, &self.layout.agent_home(agent), "home")?),
            None => None,
        };
        let timeout_ms = body.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
            return Err(RemoteError::bad_request(format!(
                "timeout_ms must be between 1 and {MAX_TIMEOUT_MS}"
            )));
        }
        let cap = body.output_cap.unwrap_or(DEFAULT_OUTPUT_CAP);
        if cap > MAX_OUTPUT_CAP {
            return Err(RemoteError::new(
                ErrorCode::TooLarge,
                format!("output_cap {cap} exceeds the {MAX_OUTPUT_CAP} byte limit"),
            ));
        }
        let overrides: Vec<(String, String)> = body.env.into_iter().collect();
        let env = Policy::agent_env(|k| std::env::var_os(k), &overrides)
            .map_err(RemoteError::bad_request)?;
        if body.argv.iter().any(|a| a.contains('\0')) {
            return Err(RemoteError::bad_request(
                "sandbox.exec: an argument holds a NUL byte",
            ));
        }
        let limits = Limits::with(&body.limits).map_err(RemoteError::bad_request)?;
        let identity = self.identity(agent)?;
        let bwrap = self.bwrap.clone().ok_or_else(|| {
            unavailable(
                "bubblewrap (`bwrap`) is not on PATH: install it (apt-get install bubblewrap)",
            )
        })?;
        // Both waits (the agent's earlier command, a free cgroup of the pool) may outlast the
        // request: given up at its deadline, so a command its caller was told timed out never
        // runs and holds no place in either queue.
        let turn = self.agent_lock(agent);
        let _one_at_a_time = until_deadline(turn.lock()).await?;
        let cgroup = until_deadline(self.cgroup(&limits)).await??;
        let spec = Spec {
            bwrap,
            owner: self.layout.root().to_owned(),
            policy: Policy {
                limits,
                ..Policy::new(workspace, home, identity)
            },
            argv: body.argv.iter().map(Into::into).collect(),
            env,
            timeout: Duration::from_millis(timeout_ms),
            output: Output::Capture { cap },
            cgroup,
        };
        let outcome = link_confine::run::run(&spec).await.map_err(run_error)?;
        tracing::info!(
            agent = %agent,
            exit = ?outcome.exit_code,
            timed_out = outcome.timed_out,
            ms = outcome.duration.as_millis() as u64,
            "sandbox.exec"
        );
        Ok(ExecReply {
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            stdout: String::from_utf8_lossy(&outcome.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&outcome.stderr).into_owned(),
            stdout_truncated: outcome.stdout_truncated,
            stderr_truncated: outcome.stderr_truncated,
            duration_ms: outcome.duration.as_millis() as u64,
            missing_command: outcome.missing_command,
            timed_out: outcome.timed_out,
            limit_hit: outcome.limit_hit,
        })
    }

    fn agent_lock(&self, agent: &AgentId) -> Arc<tokio::sync::Mutex<()>> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.entry(agent.clone()).or_default().clone()
    }

    /// Cgroups of the pool set for this command, where the host made the runtime's.
    async fn cgroup(&self, limits: &Limits) -> Result<Option<Arc<AgentCgroup>>, RemoteError> {
        let Some(cgroups) = &self.cgroups else {
            return Ok(None);
        };
        let cgroup = cgroups.take(limits).await.map_err(|e| {
            RemoteError::internal(format!("the command's cgroups: {e}; nothing ran"))
        })?;
        Ok(Some(Arc::new(cgroup)))
    }

    /// The agent's identity: its own dedicated uid as root, the caller's otherwise.
    fn identity(&self, agent: &AgentId) -> Result<Identity, RemoteError> {
        let slot = if rustix::process::geteuid().is_root() {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.slot(agent.as_str()).map_err(RemoteError::internal)?
        } else {
            0
        };
        Identity::for_slot(slot).map_err(unavailable)
    }
}

fn unavailable(msg: impl Into<String>) -> RemoteError {
    RemoteError::new(ErrorCode::Unavailable, msg)
}

fn run_error(e: RunError) -> RemoteError {
    match e {
        RunError::Bwrap { stderr, code } => {
            unavailable(link_confine::probe::diagnose_bwrap(&stderr, code).1)
        }
        RunError::Landlock(reason) => unavailable(format!(
            "Landlock not enforced inside the sandbox, nothing ran: {reason}"
        )),
        RunError::Stopped => unavailable("the sandbox plugin is stopping; nothing ran"),
        RunError::UserNamespace { error, .. } if error.machine_cannot() => {
            unavailable(format!("{error}; nothing ran"))
        }
        other => RemoteError::internal(other.to_string()),
    }
}

/// Checks `requested` lies inside `allowed`, first as written (so nothing is learnt about
/// paths elsewhere), then resolved (so a symlink cannot lead out).
fn owned_path(requested: &Path, allowed: &Path, what: &str) -> Result<PathBuf, RemoteError> {
    let outside = || {
        RemoteError::forbidden(format!(
            "{what} {} is outside the agent's own {what} {}",
            requested.display(),
            allowed.display()
        ))
    };
    let dotdot = requested
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    if dotdot || !requested.starts_with(allowed) {
        return Err(outside());
    }
    let resolved = requested
        .canonicalize()
        .map_err(|e| RemoteError::not_found(format!("{what} {}: {e}", requested.display())))?;
    let allowed_resolved = allowed.canonicalize().map_err(|_| outside())?;
    if resolved != allowed_resolved {
        return Err(RemoteError::forbidden(format!(
            "{what} {} is not the agent's own {what} {} (a directory inside it is refused too)",
            requested.display(),
            allowed.display()
        )));
    }
    if !resolved.is_dir() {
        return Err(RemoteError::bad_request(format!(
            "{what} {} is not a directory",
            requested.display()
        )));
    }
    Ok(resolved)
}
