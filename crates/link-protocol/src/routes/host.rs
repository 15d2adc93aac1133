//! Routes the host answers on `run/host.sock` for same-uid callers (`link status`, `link
//! down`, the runtime runner). `monitor.*` sent there are forwarded to the measure plugin,
//! which owns them. Every route but `host.status` needs [`Unlock`] first on the connection
//! (`client::control` sends it).

use super::{programs, route, Empty};
use crate::AgentId;
use link_report::{Mode, MonitorStatus as MonitorState, Profile, SampleRound};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Samples {
    pub rounds: Vec<SampleRound>,
}

/// What `link status` prints about one plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginStatus {
    pub name: String,
    pub pid: i32,
    pub state: PluginState,
}

/// A started plugin's state, as the host knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PluginState {
    /// It printed its ready line, and answered in time the last call the router sent it and
    /// the last health check (each `host.status` asks every running plugin).
    Ready,
    /// It missed a routed call's deadline or a health check's bound; `ready` again once it
    /// answers either.
    Unresponsive,
    /// The host asked it to stop.
    Stopping,
    Exited,
}

/// The host's own phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostState {
    /// Its plugins are starting (or the sandbox probe runs).
    Starting,
    Ready,
    Stopping,
}

impl std::fmt::Display for PluginState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PluginState::Ready => "ready",
            PluginState::Unresponsive => "unresponsive",
            PluginState::Stopping => "stopping",
            PluginState::Exited => "exited",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostStatus {
    pub profile: Profile,
    pub mode: Mode,
    pub pid: u32,
    pub state: HostState,
    pub confinement: String,
    pub plugins: Vec<PluginStatus>,
    /// What the sandbox probe proved at start-up (confined full Link only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxStatus>,
}

/// The probe's words on how tool commands run: who they are on the host, the seccomp filter
/// and the default limits, as `link-plugin-sandbox probe` reported them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxStatus {
    pub identity: serde_json::Value,
    pub seccomp: serde_json::Value,
    pub limits: serde_json::Value,
    /// Which bounds hold for a command, over what (a process, a command, an agent), and
    /// which the probe saw in force; what is not bounded per agent says why.
    #[serde(default)]
    pub bounds: Vec<link_report::probe::Bound>,
    /// How this start knew: `ran` (probed before ready), `cached` (a kept answer for this
    /// machine as it is; the probe runs behind it), `cached, confirmed` (and it agreed).
    #[serde(default)]
    pub probe: String,
}

/// Test hooks only: make `plugin` call `route` through the router as itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DebugCallBody {
    pub plugin: String,
    pub route: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
    #[serde(default)]
    pub body: serde_json::Value,
}

/// What the plugin's call gave.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DebugCallReply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<crate::ErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

route!(MonitorStatus = "monitor.status", owner programs::MEASURE, for_agent false, Empty => MonitorState);
route!(
    /// Stops sampling, so later queries are not mistaken for sampled work.
    MonitorStop = "monitor.stop", owner programs::MEASURE, for_agent false, Empty => MonitorState
);
route!(MonitorSamples = "monitor.samples", owner programs::MEASURE, for_agent false, Empty => Samples);
route!(
    /// Presents the runtime's control key: every later call on the same connection gets the
    /// host's full control handler. Refused with a wrong key, and to the runtime's own
    /// processes (a plugin, or anything one started) whatever the key.
    redacted Unlock = "host.unlock", owner programs::HOST, for_agent false, crate::control_key::ControlKey => Empty
);
route!(
    /// The only route answered without [`Unlock`] (Mini's connection service asks for it).
    Status = "host.status", owner programs::HOST, for_agent false, Empty => HostStatus
);
route!(Down = "host.down", owner programs::HOST, for_agent false, Empty => Empty);
/// The remote model's key, as `link model-key set` hands it to the host.
#[derive(Clone, Serialize, Deserialize)]
pub struct ModelKey {
    pub value: String,
}

/// The one rule for a remote model key, on both sides of `host.sock`: it travels as an HTTP
/// header, so one non-empty line of visible ASCII characters.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b.is_ascii_graphic())
}

impl std::fmt::Debug for ModelKey {
    // Hand-written so the key never reaches a log line through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelKey(<redacted>)")
    }
}

route!(
    /// Full Link: stores the remote model key through the secret plugin (`secret.put` of
    /// [`MODEL_REMOTE_KEY`](super::secret::MODEL_REMOTE_KEY), as the host).
    redacted ModelKeySet = "host.model_key.set", owner programs::HOST, for_agent false, ModelKey => Empty
);
route!(
    /// Full Link: removes the stored remote model key.
    ModelKeyDelete = "host.model_key.delete", owner programs::HOST, for_agent false, Empty => super::secret::Deleted
);
route!(
    /// Test hooks only (`LNK_TEST_HOOKS=1`).
    DebugCall = "host.debug_call", owner programs::HOST, for_agent false, DebugCallBody => DebugCallReply
);
/// What every plugin answers, when test hooks are on, by calling `body.route` through the
/// router as itself (→ [`DebugCallReply`]): the host sends it for `host.debug_call`. Not a
/// routed route, so it is not in [`ALL`](super::ALL).
pub const PLUGIN_DEBUG_CALL: &str = "debug.call";

/// The body a plugin's `debug.call` takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginDebugBody {
    pub route: String,
    #[serde(default)]
    pub body: serde_json::Value,
}
