//! Start-up: a token, then `link up` (through [`RuntimeSpec`], the kit's one way to start it)
//! until its ready line, then `host.status` judged. Hands the later phases a [`Session`].

use super::cpu::cpu_so_far;
use super::judge::{self, Startup};
use super::report::{Recorder, Timer};
use super::session::{guarded, Session};
use super::text::{ms, tail, tail_file};
use super::{ScenarioConfig, MONITOR_INTERVAL_SECS};
use crate::client::{host_call, Connection};
use crate::fixture::StateRoot;
use crate::interrupt;
use crate::runtime_process::{Exclusive, NotReady, RuntimeProcess, RuntimeSpec};
use link_protocol::routes;
use link_report::{CheckName, PhaseName};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the scenario runs `link`: the root's isolated environment only, its own process group
/// (a terminal's Ctrl-C reaches the runner, which stops it in order), owned by the reaper,
/// within the run's exclusive `turn`.
pub(super) fn spec(
    config: &ScenarioConfig,
    root: &StateRoot,
    programs: &Path,
    turn: &Exclusive,
) -> RuntimeSpec {
    let scale = config.scale() as u64;
    RuntimeSpec::new(programs, config.profile, config.mode)
        .within(turn)
        .isolated_by(root)
        .monitor_interval(MONITOR_INTERVAL_SECS)
        .supervised()
        .own_process_group()
        .ready_within(Duration::from_secs(180 * scale))
        .exit_within(Duration::from_secs(60 * scale))
}

/// A spawned host, not yet ready, with the token made before it and its phase timer.
pub(super) struct Launched {
    pub host: RuntimeProcess,
    pub token: String,
    pub timer: Timer,
}

/// A bearer token (before start-up, so start-up timing does not include it), then
/// `link up`. An error means no host was started.
pub(super) fn launch(
    rec: &mut Recorder<'_>,
    config: &ScenarioConfig,
    root: &StateRoot,
    programs: &Path,
) -> Result<Launched, String> {
    let spec = spec(config, root, programs, rec.scope().turn());
    let token = create_token(root)?;
    let timer = Timer::start();
    let host = spec
        .spawn_in(root.path())
        .map_err(|e| format!("cannot start link up: {e}"))?;
    rec.host_started(host.host_pid());
    Ok(Launched { host, token, timer })
}

/// The run's bearer token, stored straight into the root's token file before the host starts:
/// `link token create` refuses a root `link up` has not prepared yet.
fn create_token(root: &StateRoot) -> Result<String, String> {
    let file = root.layout().tokens_file();
    link_protocol::tokens::create(&file)
        .map_err(|e| format!("cannot create a token in {}: {e}", file.display()))
}

/// Waits for the ready line (the `startup` phase ends there), then judges `host.status`.
pub(super) async fn ready<'a>(
    rec: &mut Recorder<'_>,
    config: &'a ScenarioConfig,
    host: &mut RuntimeProcess,
    token: String,
    timer: Timer,
) -> Result<Session<'a>, String> {
    let ready = host.wait_ready().map_err(describe);
    let took = rec.end_phase(PhaseName::Startup, 0, timer);
    let socket: PathBuf = ready.map_err(|e| format!("{e}; {}", log_tail(host)))?;
    rec.startup_cpu(cpu_so_far(host.host_pid()));
    let layout = host.layout().clone();
    let peer = link_protocol::client::connection_peer(&layout);
    let conn = Connection::new(&socket, token).served_by(peer);
    let status = guarded(
        config.scale(),
        "host.status",
        30,
        host_call::<routes::host::Status>(&layout),
    )
    .await?;
    // The judges read it as a client reads `link status`.
    let status = serde_json::to_value(status).map_err(|e| e.to_string())?;
    rec.roles(judge::roles(&status));
    if !status["sandbox"].is_null() {
        rec.host_probe(&status["sandbox"]["probe"]);
    }
    let result = judge::startup(&Startup {
        profile: config.profile,
        mode: config.mode,
        status: &status,
        socket: &socket,
        socket_exists: socket.exists(),
        took,
    });
    rec.observe(PhaseName::Startup);
    rec.judge(CheckName::Startup, result)?;
    Ok(Session {
        config,
        layout,
        conn,
    })
}

fn describe(e: NotReady) -> String {
    match e {
        NotReady::Interrupted(sig) => {
            format!("interrupted by {} during start-up", interrupt::name(sig))
        }
        NotReady::Exited(status) => format!("link up exited before it was ready ({status})"),
        NotReady::Timeout(limit) => format!("link up was not ready within {}", ms(limit)),
        NotReady::Wait(e) => e,
    }
}

/// The tail of the host's stderr and of every plugin log: what a failed start-up needs.
pub(super) fn log_tail(host: &RuntimeProcess) -> String {
    let mut parts = Vec::new();
    if let Some(t) = tail(&host.stderr(), 8) {
        parts.push(format!("link up stderr: {t}"));
    }
    if let Ok(entries) = std::fs::read_dir(host.layout().log_dir()) {
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            if let Some(t) = tail_file(&f, 3) {
                let name = f
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                parts.push(format!("{name}: {t}"));
            }
        }
    }
    if parts.is_empty() {
        "no logs were written".into()
    } else {
        parts.join(" | ")
    }
}
