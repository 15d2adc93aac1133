//! The runtime's state that the control socket, the router, the endpoint and the supervisor
//! share: the profile and mode, each plugin's pid and state, the host's phase, the stop
//! request and what the sandbox probe proved.

use crate::router::Heard;
use link_protocol::layout::StateLayout;
pub use link_protocol::routes::host::{
    HostState, HostStatus, PluginState, PluginStatus, SandboxStatus,
};
use link_report::{Mode, Profile};
use std::sync::Mutex;
use tokio::sync::Notify;

/// State shared by the control socket, the router and the supervisor.
pub struct Shared {
    pub layout: StateLayout,
    pub profile: Profile,
    pub mode: Mode,
    pub plugins: Mutex<Vec<PluginStatus>>,
    pub phase: Mutex<HostState>,
    pub stop: Notify,
    /// Set, with the reason, when the runtime starts stopping.
    pub stopping: tokio::sync::watch::Sender<Option<String>>,
    pub router: crate::router::Router,
    /// Set once the sandbox probe proved confinement.
    pub sandbox: Mutex<Option<SandboxStatus>>,
}

impl Shared {
    /// Who must serve `plugin`'s socket: the pid the host started for it.
    pub fn peer_of(&self, plugin: &str) -> link_protocol::client::Peer {
        let plugins = self.plugins.lock().expect("lock");
        match plugins.iter().find(|p| p.name == plugin) {
            Some(p) => link_protocol::client::Peer::Pid(p.pid),
            // Not started (yet): no process may answer for it.
            None => link_protocol::client::Peer::Pid(0),
        }
    }

    pub fn status(&self) -> HostStatus {
        HostStatus {
            profile: self.profile,
            mode: self.mode,
            pid: std::process::id(),
            state: *self.phase.lock().expect("lock"),
            confinement: confinement_summary(self.mode).to_owned(),
            plugins: self.plugins.lock().expect("lock").clone(),
            sandbox: self.sandbox.lock().expect("lock").clone(),
        }
    }

    pub fn status_json(&self) -> serde_json::Value {
        serde_json::to_value(self.status()).expect("a status serializes")
    }

    pub fn set_phase(&self, phase: HostState) {
        *self.phase.lock().expect("lock") = phase;
    }

    /// Records what a routed call or a health check ([`crate::health`]) heard from `plugin`:
    /// `ready` again after an answer, `unresponsive` after silence. Only those two states
    /// change: the host's own (`exited`, `stopping`) are left alone, so a late finding cannot
    /// bring back a plugin that stopped.
    pub fn heard(&self, plugin: &str, heard: Heard) {
        let (from, to) = match heard {
            Heard::Answered => (PluginState::Unresponsive, PluginState::Ready),
            Heard::Silent => (PluginState::Ready, PluginState::Unresponsive),
        };
        let mut plugins = self.plugins.lock().expect("lock");
        for p in plugins
            .iter_mut()
            .filter(|p| p.name == plugin && p.state == from)
        {
            p.state = to;
            link_protocol::errln!("link: {plugin} is {to}");
        }
    }

    pub fn set_plugin_state(&self, name: &str, state: PluginState) {
        for p in self
            .plugins
            .lock()
            .expect("lock")
            .iter_mut()
            .filter(|p| p.name == name)
        {
            p.state = state;
        }
    }
}

/// What `link status` says of how the plugins are confined.
fn confinement_summary(mode: Mode) -> &'static str {
    match mode {
        Mode::Confined => "plugins under Landlock, no_new_privs and seccomp (the sandbox plugin: a Landlock domain without filesystem rules and its own seccomp filter; its commands: bubblewrap + Landlock + the full filter)",
        Mode::Diagnostic => "diagnostic: plugins unconfined; run and file tools disabled; not evidence of confinement",
    }
}
