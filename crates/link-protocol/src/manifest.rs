//! The plugin manifest: every plugin declared once, with everything the host, the router, the
//! sandbox's host side, the testing kit and the xtask decide about it.
//!
//! One [`Plugin`] per program, in [`ALL`], in the host's start order (it stops them in
//! reverse). Each field is one property; nothing about a plugin is decided by matching its
//! name anywhere else. Adding a plugin is its crate and one entry here (a const and its line in
//! [`ALL`] where it starts, with its name in [`programs`] where code names it); `tests` checks
//! the table against the route table and against the workspace's binary crates.
//!
//! The host (`link`) is no plugin: it is [`HOST`], which holds the grants and secrets it
//! uses through the router for its HTTP endpoint and the model key.
//!
//! This module decides nothing by itself: the host reads it when it starts, confines and
//! routes, and a plugin linking another version of it changes nothing in the host's copy.

use crate::routes::{self as r, programs, RouteInfo};
use link_report::Profile;

/// One plugin program: what it is, and what it may do.
#[derive(Debug, Clone, Copy)]
pub struct Plugin {
    /// Its program's name: its package's, and its binary's in the programs directory.
    pub program: &'static str,
    /// The profiles that run it.
    pub profiles: &'static [Profile],
    /// What it serves on its socket; the routes it owns are the route table's
    /// ([`Plugin::routes`], `Route::OWNER`).
    pub serves: Serves,
    /// The routes it may call through the router (full Link); everything else is refused.
    pub grants: &'static [RouteInfo],
    /// The secrets its `secret.*` grants may name; no other name is reachable.
    pub secrets: &'static [&'static str],
    /// Whether it may act only for an agent whose call the router is forwarding to it (a
    /// lease: a turn to the harness, a tool call to a tool).
    pub leased: bool,
    /// Whether each `turn.run` it calls must be a due firing of a schedule the router saw
    /// made through it, for that agent and message (the host's `schedule_grant`).
    pub scheduled: bool,
    /// The variables that pass from the host's environment to it alone, on top of
    /// `plugin::PASSTHROUGH`.
    pub env: &'static [&'static str],
    /// Whether it keeps state in its data area (`LNK_DATA`): only then is the area made and
    /// writable. Every other plugin's is named, not made.
    pub data: bool,
    /// Directories it may write besides its home, data area and socket directory.
    pub writes: &'static [Area],
    /// Directories it may read besides system paths and the programs.
    pub reads: &'static [Area],
    /// Directories whose paths it names without reading them (a `stat`): in its view as root
    /// (issue 42, "plugins are not root"), with no Landlock right beyond what it has.
    pub sees: &'static [Area],
    /// The system paths it reads beyond what every plugin's loader does (the loader's cache
    /// and the libraries the host links): nothing else of `/usr`, `/proc` or `/sys`.
    pub system: &'static [System],
    /// Its session and process group.
    pub session: Session,
    /// The capabilities it keeps when Link runs as root; every other one is dropped.
    pub capabilities: &'static [Capability],
    /// How it is confined (confined mode): Landlock rules, or the sandbox plugin's domain
    /// without filesystem rules, read-only view and seccomp filter of its own.
    pub confinement: Confinement,
    /// Whether it reaches the network.
    pub network: NetworkRule,
    /// What it may ask the model service, whose socket is plain HTTP outside the router's
    /// grants (the model's listener checks the caller's recorded program against this).
    pub model: ModelAccess,
}

/// What a plugin may ask the model service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelAccess {
    /// Nothing: its connection is answered `403` and closed.
    None,
    /// The model list (`GET /v1/models[/{id}]`) only.
    ListOnly,
    /// Everything: a turn engine.
    Full,
}

/// What a plugin serves on its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// link-protocol frames: the routes the route table gives it (and its debug hook).
    Frames,
    /// HTTP: no routes, no debug hook.
    Http,
}

/// A directory of the state root a plugin may reach besides its own
/// (`StateLayout::area` names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    /// `auth/`: the token store.
    Auth,
    /// `run/`: the host's sockets and `pids.json`.
    Run,
    /// The file store's `agents/`: every agent's workspace.
    AgentWorkspaces,
    /// The agent plugin's `homes/`: every agent's home.
    AgentHomes,
}

/// A part of the system a plugin reads beyond what its loader does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// All of `/proc`, read-only: the processes it samples or checks its callers against
    /// (their start times), which a plugin without it cannot see (nor `/proc/net`,
    /// `/proc/sys` or its own `/proc/self`).
    Processes,
    /// The system's programs and libraries (`/usr`, `/bin`, `/lib`, ...), read and executed:
    /// the programs it runs.
    Programs,
}

/// The session a plugin is started in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// A process group of its own in the host's session (a terminal's Ctrl-C reaches the
    /// host, which stops plugins in order).
    Group,
    /// The leader of a session of its own with no controlling terminal: the sandbox plugin,
    /// so the commands it confines share a session with no terminal to push input into
    /// (`TIOCSTI`) and bubblewrap need not start one per command (`--new-session`).
    Own,
}

/// A capability a plugin keeps as root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    Chown,
    DacOverride,
    Fowner,
    Setgid,
    Setuid,
    Setfcap,
}

/// How a confined plugin is confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// Landlock rules from what it may reach (system paths, programs, its own directories
    /// and [`Plugin::writes`] / [`Plugin::reads`]), `no_new_privs`, and the plugins' seccomp
    /// filter: the offline one, Unix sockets only, inherited from the spawner thread, or
    /// the commands' own for a plugin on the network.
    Landlock,
    /// The sandbox plugin, whose bubblewrap must mount (which Landlock forbids a domain
    /// handling any filesystem right): a domain without filesystem rules (ptrace, signal and
    /// TCP bounds), a read-only view of its own (mount namespace, network namespace without
    /// interfaces) in which only its writable directories can be written, and a seccomp
    /// filter of its own (the commands' without the namespace and mount rules).
    Mounting,
}

/// Who reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkRule {
    /// Never: no TCP (Landlock) and no socket but a Unix one (seccomp).
    Off,
    /// When the model forwards (`LNK_MODEL_REMOTE_URL` set): TCP, UDP and the resolver's files.
    WhenForwarding,
}

/// `off` ([`KEYCHAIN_OFF`]) keeps the secret plugin on its file backend, away from the
/// desktop's keychain: what tests and benchmarks start `link` with.
pub const ENV_KEYCHAIN: &str = "LNK_KEYCHAIN";
pub const KEYCHAIN_OFF: &str = "off";

/// The remote model's address: only the model plugin gets it.
pub const ENV_MODEL_REMOTE_URL: &str = "LNK_MODEL_REMOTE_URL";
/// The first uid of the sandbox's dedicated identities (as root): only the sandbox plugin
/// reads it.
pub const ENV_SANDBOX_UID_BASE: &str = "LNK_SANDBOX_UID_BASE";
/// Test hooks only: the connection endpoint's header-read timeout (ms) and connection cap.
pub const ENV_TEST_HEADER_TIMEOUT_MS: &str = "LNK_TEST_HEADER_TIMEOUT_MS";
pub const ENV_TEST_MAX_CONNECTIONS: &str = "LNK_TEST_MAX_CONNECTIONS";
/// Test hooks only: how long the model waits for the remote (ms): for its answer's head and
/// between the parts of its body (`model_service::REMOTE_HEAD_DEADLINE`,
/// `REMOTE_IDLE_DEADLINE`), so a test of either deadline need not wait minutes.
pub const ENV_TEST_MODEL_TIMEOUT_MS: &str = "LNK_TEST_MODEL_TIMEOUT_MS";
/// Test hooks only: the router's default deadline (ms, in place of 30 s), which is also the
/// deadline of every model call ([`crate::model_service::ModelService`]), so tests of an
/// unresponsive plugin need not wait. The host reads it; so do the plugins that call the
/// model.
pub const ENV_TEST_DEADLINE_MS: &str = "LNK_TEST_DEADLINE_MS";

const BOTH: &[Profile] = &[Profile::Mini, Profile::Link];
const MINI: &[Profile] = &[Profile::Mini];
const LINK: &[Profile] = &[Profile::Link];

/// What most plugins are: everything off, nothing extra.
const PLAIN: Plugin = Plugin {
    program: "",
    profiles: &[],
    serves: Serves::Frames,
    grants: &[],
    secrets: &[],
    leased: false,
    scheduled: false,
    env: &[],
    data: false,
    writes: &[],
    reads: &[],
    sees: &[],
    system: &[],
    session: Session::Group,
    capabilities: &[],
    confinement: Confinement::Landlock,
    network: NetworkRule::Off,
    model: ModelAccess::None,
};

/// The workspace files of an agent, through the file store.
const WORKSPACE_FILES: &[RouteInfo] = &[
    RouteInfo::of::<r::store::FileRead>(),
    RouteInfo::of::<r::store::FileWrite>(),
    RouteInfo::of::<r::store::FileList>(),
];

/// What a plugin keeps to read, write and remove what the agents' uids own.
const AGENT_FILES: &[Capability] = &[Capability::DacOverride, Capability::Fowner];

/// The monitor: samples the runtime's processes.
pub const MEASURE: Plugin = Plugin {
    program: programs::MEASURE,
    profiles: BOTH,
    system: &[System::Processes],
    ..PLAIN
};

/// The local model service (HTTP), forwarding to a remote one when asked.
pub const MODEL: Plugin = Plugin {
    program: programs::MODEL,
    profiles: BOTH,
    serves: Serves::Http,
    grants: &[RouteInfo::of::<r::secret::Get>()],
    secrets: &[r::secret::MODEL_REMOTE_KEY],
    env: &[ENV_MODEL_REMOTE_URL, ENV_TEST_MODEL_TIMEOUT_MS],
    // Its callers are checked against the host's pids file (`run/pids.json`) and the
    // start times of the processes it names.
    reads: &[Area::Run],
    system: &[System::Processes],
    network: NetworkRule::WhenForwarding,
    ..PLAIN
};

/// Mini's turn engine: agents, conversations and model calls in one process.
pub const MINI_HARNESS: Plugin = Plugin {
    program: programs::MINI_HARNESS,
    profiles: MINI,
    env: &[ENV_TEST_DEADLINE_MS],
    data: true,
    // Its connection service is checked against the host's pids file (`run/pids.json`) and
    // that process's start time.
    reads: &[Area::Run],
    system: &[System::Processes],
    model: ModelAccess::Full,
    ..PLAIN
};

/// Mini's connection service (HTTP).
pub const MINI_CONNECTION: Plugin = Plugin {
    program: programs::MINI_CONNECTION,
    profiles: MINI,
    serves: Serves::Http,
    env: &[ENV_TEST_HEADER_TIMEOUT_MS, ENV_TEST_MAX_CONNECTIONS],
    reads: &[Area::Auth],
    ..PLAIN
};

/// Secrets, in a file or the keychain.
pub const SECRET: Plugin = Plugin {
    program: programs::SECRET,
    profiles: LINK,
    data: true,
    // The keychain's program (`secret-tool`), unless `LNK_KEYCHAIN=off`.
    system: &[System::Programs],
    ..PLAIN
};

/// Client tokens: issue, verify, revoke.
pub const AUTH: Plugin = Plugin {
    program: programs::AUTH,
    profiles: LINK,
    writes: &[Area::Auth],
    ..PLAIN
};

/// Each agent's conversation and workspace.
pub const FILE_STORE: Plugin = Plugin {
    program: programs::FILE_STORE,
    profiles: LINK,
    data: true,
    // Workspaces the agents' uids own: read, written, removed on delete.
    capabilities: AGENT_FILES,
    ..PLAIN
};

/// The agent registry, and each agent's home.
pub const AGENT: Plugin = Plugin {
    program: programs::AGENT,
    profiles: LINK,
    grants: &[
        RouteInfo::of::<r::store::AgentCreate>(),
        RouteInfo::of::<r::store::AgentDelete>(),
        RouteInfo::of::<r::schedule::DeleteAgent>(),
    ],
    // It asks the model which models it serves (an agent's model is checked at its creation).
    env: &[ENV_TEST_DEADLINE_MS],
    model: ModelAccess::ListOnly,
    data: true,
    // Homes the agents' uids own, removed on delete whatever modes their commands left
    // (issue 42); its Landlock rules keep both to its own data area.
    capabilities: AGENT_FILES,
    ..PLAIN
};

/// Runs each command confined: bubblewrap, Landlock, seccomp.
pub const SANDBOX: Plugin = Plugin {
    program: programs::SANDBOX,
    profiles: LINK,
    env: &[ENV_SANDBOX_UID_BASE],
    data: true,
    // The roots its commands' binds lie under: read-only mounts, not Landlock, keep it to
    // them, so they must exist before it starts.
    writes: &[Area::AgentWorkspaces, Area::AgentHomes],
    session: Session::Own,
    // The id maps of each command's user namespace (`SETUID`, `SETGID`, and `SETFCAP`, which
    // the kernel asks of whoever maps root), the workspace handed to the agent's uid and its
    // setuid bits cleared (`CHOWN`, `FOWNER`, `DAC_OVERRIDE`). No `CAP_SYS_ADMIN`: it would
    // pass Landlock's ptrace bound. As root each is over its own user namespace only, whose
    // root is an unprivileged uid on the host (`link-confine`'s `plugin_ns`).
    capabilities: &[
        Capability::DacOverride,
        Capability::Fowner,
        Capability::Setuid,
        Capability::Setgid,
        Capability::Setfcap,
        Capability::Chown,
    ],
    confinement: Confinement::Mounting,
    ..PLAIN
};

/// The `run` tool.
pub const RUN: Plugin = Plugin {
    program: programs::RUN,
    profiles: LINK,
    grants: &[RouteInfo::of::<r::sandbox::Exec>()],
    leased: true,
    // It checks that the agent's workspace and home exist before it asks for a command.
    sees: &[Area::AgentWorkspaces, Area::AgentHomes],
    ..PLAIN
};

/// The `file` tool.
pub const FILE_TOOL: Plugin = Plugin {
    program: programs::FILE_TOOL,
    profiles: LINK,
    grants: WORKSPACE_FILES,
    leased: true,
    ..PLAIN
};

/// The `code` tool.
pub const CODE: Plugin = Plugin {
    program: programs::CODE,
    profiles: LINK,
    grants: WORKSPACE_FILES,
    leased: true,
    ..PLAIN
};

/// Full Link's turn engine.
pub const HARNESS: Plugin = Plugin {
    program: programs::HARNESS,
    profiles: LINK,
    grants: &[
        RouteInfo::of::<r::store::ConversationAppend>(),
        RouteInfo::of::<r::store::ConversationRead>(),
        RouteInfo::of::<r::agent::Get>(),
        RouteInfo::of::<r::tool::Run>(),
        RouteInfo::of::<r::tool::File>(),
        RouteInfo::of::<r::tool::Code>(),
        RouteInfo::of::<r::schedule::Create>(),
    ],
    leased: true,
    env: &[ENV_TEST_DEADLINE_MS],
    model: ModelAccess::Full,
    ..PLAIN
};

/// Scheduled turns.
pub const SCHEDULER: Plugin = Plugin {
    program: programs::SCHEDULER,
    profiles: LINK,
    grants: &[RouteInfo::of::<r::agent::Turn>()],
    scheduled: true,
    data: true,
    ..PLAIN
};

/// Every plugin of both profiles, in the host's start order.
pub const ALL: &[Plugin] = &[
    MEASURE,
    MODEL,
    MINI_HARNESS,
    MINI_CONNECTION,
    SECRET,
    AUTH,
    FILE_STORE,
    AGENT,
    SANDBOX,
    RUN,
    FILE_TOOL,
    CODE,
    HARNESS,
    SCHEDULER,
];

/// The host as a program and as a caller of the router.
#[derive(Debug, Clone, Copy)]
pub struct Host {
    /// Its program's name (`link`).
    pub program: &'static str,
    /// Its package (`link-cli`).
    pub package: &'static str,
    /// Its name as a caller: what the owners of the routes it calls see in `caller`.
    pub caller: &'static str,
    /// The routes its HTTP endpoint and model-key commands may call through the router.
    pub grants: &'static [RouteInfo],
    /// The secrets its grants may name.
    pub secrets: &'static [&'static str],
}

/// The host.
pub const HOST: Host = Host {
    program: programs::HOST,
    package: "link-cli",
    caller: "host",
    grants: &[
        RouteInfo::of::<r::auth::Verify>(),
        RouteInfo::of::<r::agent::Create>(),
        RouteInfo::of::<r::agent::Get>(),
        RouteInfo::of::<r::agent::List>(),
        RouteInfo::of::<r::agent::Delete>(),
        RouteInfo::of::<r::agent::Turn>(),
        RouteInfo::of::<r::store::ConversationRead>(),
        RouteInfo::of::<r::schedule::List>(),
        RouteInfo::of::<r::schedule::Cancel>(),
        RouteInfo::of::<r::host::MonitorStatus>(),
        RouteInfo::of::<r::host::MonitorStop>(),
        RouteInfo::of::<r::host::MonitorSamples>(),
        RouteInfo::of::<r::secret::Put>(),
        RouteInfo::of::<r::secret::Delete>(),
    ],
    secrets: &[r::secret::MODEL_REMOTE_KEY],
};

/// Routes an owner serves that no caller may reach through the router, and why. Only the
/// owner's parent (the host, or a test standing in for it) can call them directly.
pub const UNROUTED: &[(RouteInfo, &str)] = &[
    (
        RouteInfo::of::<r::auth::Issue>(),
        "`link token create` writes the token store itself",
    ),
    (
        RouteInfo::of::<r::auth::Revoke>(),
        "`link token revoke` writes the token store itself",
    ),
];

impl Plugin {
    /// Whether `profile` runs it.
    pub fn runs_in(&self, profile: Profile) -> bool {
        self.profiles.contains(&profile)
    }

    /// The routes it owns in the route table (full Link; Mini's harness serves the agent
    /// routes itself).
    pub fn routes(&self) -> impl Iterator<Item = &'static RouteInfo> + '_ {
        r::ALL
            .iter()
            .filter(move |route| route.owner == self.program)
    }

    /// Whether it holds the grant for the route called `route`.
    pub fn granted(&self, route: &str) -> bool {
        self.grants.iter().any(|g| g.name == route)
    }
}

impl PartialEq for Plugin {
    /// One entry per program.
    fn eq(&self, other: &Plugin) -> bool {
        self.program == other.program
    }
}

impl Eq for Plugin {}

/// The plugins `profile` runs, in start order.
pub fn of(profile: Profile) -> impl Iterator<Item = &'static Plugin> {
    ALL.iter().filter(move |p| p.runs_in(profile))
}

/// The program names of [`of`]`(profile)`, in start order.
pub fn programs_of(profile: Profile) -> Vec<&'static str> {
    of(profile).map(|p| p.program).collect()
}

/// The packages of every program, the host's first, then the plugins' in start order: what
/// the spec's locked release build builds (`cargo build --locked --release -p ...`).
pub fn packages() -> impl Iterator<Item = &'static str> {
    std::iter::once(HOST.package).chain(ALL.iter().map(|p| p.program))
}

/// The plugin whose program is `program`: for a name that came from outside (a command
/// line, a status, a file); the runtime itself passes entries.
pub fn find(program: &str) -> Option<&'static Plugin> {
    ALL.iter().find(|p| p.program == program)
}

#[cfg(test)]
mod tests;
