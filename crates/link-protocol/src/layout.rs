//! Where things live under a state root, and the rules a root must satisfy.
//!
//! ```text
//! <root>/                locked (flock) by the running host for its whole life
//! <root>/run/            the host's sockets (host.sock, router.sock, connection.sock),
//!                        pids.json (the running host's plugins)
//! <root>/run/<p>/<p>.sock  each plugin's socket, in a directory only it may change
//! <root>/log/<p>.log     each plugin's stderr
//! <root>/home/<p>/       each plugin's isolated HOME and XDG_* dirs
//! <root>/data/<p>/       the state area of a plugin that keeps one (`manifest::Plugin::data`)
//! <root>/auth/tokens     bearer-token hashes shared by both connection services
//! <root>/control/key     the running host's control key (no plugin's rules reach it)
//! <root>/data/file-store/agents/<id>/conversation.jsonl   full Link agents' conversations
//! <root>/data/file-store/workspaces/<id>/                 their workspaces, apart, so the
//!                                                         sandbox plugin is given them alone
//! <root>/data/agent/homes/<id>/                           their isolated homes
//! ```

use crate::manifest::{self, Area};
use crate::routes::programs;
use std::path::{Path, PathBuf};

/// `HOME` and the XDG base directories for a process whose home is `home`: a plugin's
/// (`plugin::Contract`), and `link`'s own where a test or benchmark starts it
/// ([`StateLayout::host_home_env`]).
pub fn home_env(home: &Path) -> [(&'static str, PathBuf); 5] {
    [
        ("HOME", home.to_path_buf()),
        ("XDG_CONFIG_HOME", home.join(".config")),
        ("XDG_CACHE_HOME", home.join(".cache")),
        ("XDG_DATA_HOME", home.join(".local/share")),
        ("XDG_STATE_HOME", home.join(".local/state")),
    ]
}

/// `sun_path` holds 108 bytes including the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// Why a state root cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RootError {
    #[error("state root {0} is not an absolute path; pass an absolute directory")]
    NotAbsolute(PathBuf),
    #[error(
        "state root {root} is inside the temporary folder {temp}; choose a short directory \
         outside it, for example $HOME/lnk-tests (set LNK_TEST_STATE_DIR)"
    )]
    InTemporaryFolder { root: PathBuf, temp: PathBuf },
    #[error(
        "state root {root} is too long: socket path {socket} would be {len} bytes, over the \
         {max} byte Unix socket limit; choose a shorter directory such as $HOME/lnk-tests",
        max = MAX_SOCKET_PATH
    )]
    SocketPathTooLong {
        root: PathBuf,
        socket: PathBuf,
        len: usize,
    },
}

/// The paths of one state root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateLayout {
    root: PathBuf,
}

impl StateLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StateLayout { root: root.into() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
    pub fn host_socket(&self) -> PathBuf {
        self.run_dir().join("host.sock")
    }
    pub fn router_socket(&self) -> PathBuf {
        self.run_dir().join("router.sock")
    }
    pub fn connection_socket(&self) -> PathBuf {
        self.run_dir().join("connection.sock")
    }
    /// The plugins a running host started, with their start times; removed on a clean exit.
    pub fn pids_file(&self) -> PathBuf {
        self.run_dir().join("pids.json")
    }
    /// A plugin's own socket directory: the only place under `run/` it may create or remove
    /// entries, so no plugin can replace another's socket.
    pub fn plugin_run_dir(&self, plugin: &str) -> PathBuf {
        self.run_dir().join(short_name(plugin))
    }
    /// The socket a plugin serves its routes on, in its own [`plugin_run_dir`](Self::plugin_run_dir).
    pub fn plugin_socket(&self, plugin: &str) -> PathBuf {
        self.plugin_run_dir(plugin)
            .join(format!("{}.sock", short_name(plugin)))
    }
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("log")
    }
    pub fn log_file(&self, plugin: &str) -> PathBuf {
        self.log_dir().join(format!("{}.log", short_name(plugin)))
    }
    pub fn home(&self, plugin: &str) -> PathBuf {
        self.root.join("home").join(short_name(plugin))
    }
    /// `link`'s own HOME and XDG base directories when a test or benchmark starts it on this
    /// root: `home/link/...`, beside the plugins' homes, so it never reads or writes the
    /// caller's.
    pub fn host_home_env(&self) -> [(&'static str, PathBuf); 5] {
        home_env(&self.home(programs::HOST))
    }
    pub fn data(&self, plugin: &str) -> PathBuf {
        self.root.join("data").join(short_name(plugin))
    }
    pub fn auth_dir(&self) -> PathBuf {
        self.root.join("auth")
    }
    pub fn tokens_file(&self) -> PathBuf {
        self.auth_dir().join("tokens")
    }
    /// The host's own directory: no plugin's Landlock rules grant anything in it.
    pub fn control_dir(&self) -> PathBuf {
        self.root.join("control")
    }
    /// The running host's control key ([`crate::control_key`]).
    pub fn control_key_file(&self) -> PathBuf {
        self.control_dir().join("key")
    }
    /// Full Link: the schedules the host's router saw made, whose firings alone the
    /// scheduler may run turns for.
    pub fn schedule_ledger_file(&self) -> PathBuf {
        self.control_dir().join("schedules.json")
    }
    /// Full Link: every agent's conversation, owned by the file store.
    pub fn agents_dir(&self) -> PathBuf {
        self.data(programs::FILE_STORE).join("agents")
    }
    /// Full Link: an agent's conversation files, owned by the file store.
    pub fn agent_dir(&self, agent: &str) -> PathBuf {
        self.agents_dir().join(agent)
    }
    /// Full Link: every agent's workspace, owned by the file store, apart from the
    /// conversations: the root the sandbox plugin is given ([`Area::AgentWorkspaces`]).
    pub fn workspaces_dir(&self) -> PathBuf {
        self.data(programs::FILE_STORE).join("workspaces")
    }
    /// The agent's workspace: the only place its tools may write.
    pub fn agent_workspace(&self, agent: &str) -> PathBuf {
        self.workspaces_dir().join(agent)
    }
    /// `target` as a path relative to `agent`'s workspace: what a tool would be given to
    /// reach it from there (`../../agents/<id>/conversation.jsonl` for the agent's own log).
    pub fn seen_from_workspace(&self, agent: &str, target: &Path) -> String {
        let from = self.agent_workspace(agent);
        let common = from
            .components()
            .zip(target.components())
            .take_while(|(a, b)| a == b)
            .count();
        let up = from.components().count() - common;
        let down = target.components().skip(common);
        let parts: Vec<String> = std::iter::repeat_n("..".to_owned(), up)
            .chain(down.map(|c| c.as_os_str().to_string_lossy().into_owned()))
            .collect();
        parts.join("/")
    }
    /// Where earlier versions kept the agent's workspace (inside its directory): the
    /// file store moves it to [`StateLayout::agent_workspace`] when it starts.
    pub fn old_agent_workspace(&self, agent: &str) -> PathBuf {
        self.agent_dir(agent).join("workspace")
    }
    /// The agent's conversation log (JSON lines); protected from every tool.
    pub fn agent_conversation(&self, agent: &str) -> PathBuf {
        self.agent_dir(agent).join("conversation.jsonl")
    }
    /// The agent's isolated home for the commands its tools run; owned by the agent plugin.
    pub fn agent_home(&self, agent: &str) -> PathBuf {
        self.agent_homes_dir().join(agent)
    }
    /// Every agent's isolated home; owned by the agent plugin.
    pub fn agent_homes_dir(&self) -> PathBuf {
        self.data(programs::AGENT).join("homes")
    }

    /// A directory a plugin may reach besides its own ([`manifest::Plugin::writes`],
    /// [`manifest::Plugin::reads`]).
    pub fn area(&self, area: Area) -> PathBuf {
        match area {
            Area::Auth => self.auth_dir(),
            Area::Run => self.run_dir(),
            Area::AgentWorkspaces => self.workspaces_dir(),
            Area::AgentHomes => self.agent_homes_dir(),
        }
    }

    /// Every socket path this root will hold.
    pub fn all_sockets(&self) -> Vec<PathBuf> {
        let mut all = vec![
            self.host_socket(),
            self.router_socket(),
            self.connection_socket(),
        ];
        all.extend(manifest::ALL.iter().map(|p| self.plugin_socket(p.program)));
        all
    }

    /// The sockets (and Mini's connection link, even dangling) this root holds now.
    pub fn present_sockets(&self) -> Vec<PathBuf> {
        self.all_sockets()
            .into_iter()
            .filter(|s| s.symlink_metadata().is_ok())
            .collect()
    }

    /// Checks the root is absolute, outside temporary folders, and short enough for sockets.
    pub fn check(&self) -> Result<(), RootError> {
        check_root(&self.root)?;
        for socket in self.all_sockets() {
            let len = socket.as_os_str().len();
            if len > MAX_SOCKET_PATH {
                return Err(RootError::SocketPathTooLong {
                    root: self.root.clone(),
                    socket,
                    len,
                });
            }
        }
        Ok(())
    }
}

/// The short name a plugin's socket, log, home and data area are named after.
/// `p` made absolute against the working directory, as a state root or programs directory
/// given on the command line is taken.
pub fn absolute(p: &Path) -> std::io::Result<PathBuf> {
    Ok(if p.is_absolute() {
        p.to_owned()
    } else {
        std::env::current_dir()?.join(p)
    })
}

pub fn short_name(plugin: &str) -> &str {
    plugin
        .strip_prefix("link-plugin-")
        .or_else(|| plugin.strip_prefix("link-"))
        .unwrap_or(plugin)
}

/// The temporary folders a state root may not live under.
pub fn temporary_folders() -> Vec<PathBuf> {
    let mut temps = vec![
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/dev/shm"),
    ];
    if let Some(t) = std::env::var_os("TMPDIR").filter(|t| !t.is_empty()) {
        temps.push(PathBuf::from(t));
    }
    temps
}

fn check_root(root: &Path) -> Result<(), RootError> {
    if !root.is_absolute() {
        return Err(RootError::NotAbsolute(root.to_path_buf()));
    }
    let resolved = resolve_existing_prefix(root);
    for temp in temporary_folders() {
        let temp_resolved = temp.canonicalize().unwrap_or_else(|_| temp.clone());
        if root.starts_with(&temp) || resolved.starts_with(&temp_resolved) {
            return Err(RootError::InTemporaryFolder {
                root: root.to_path_buf(),
                temp,
            });
        }
    }
    Ok(())
}

/// Canonicalizes the longest existing ancestor so a symlink into /tmp is caught too.
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = path.to_path_buf();
    loop {
        if let Ok(real) = cur.canonicalize() {
            return rest.iter().rev().fold(real, |acc, part| acc.join(part));
        }
        match (cur.file_name().map(|f| f.to_owned()), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_agents_log_seen_from_its_workspace_lies_two_levels_up() {
        let l = StateLayout::new("/s");
        assert_eq!(
            l.seen_from_workspace("a", &l.agent_conversation("a")),
            "../../agents/a/conversation.jsonl"
        );
        let other = l.agent_workspace("b").join("f.txt");
        assert_eq!(l.seen_from_workspace("a", &other), "../b/f.txt");
        assert_eq!(l.seen_from_workspace("a", &l.agent_workspace("a")), "");
    }

    use super::*;

    #[test]
    fn refuses_temporary_relative_and_long_roots() {
        assert!(matches!(
            StateLayout::new("/tmp/x").check(),
            Err(RootError::InTemporaryFolder { .. })
        ));
        assert!(matches!(
            StateLayout::new("/var/tmp/x").check(),
            Err(RootError::InTemporaryFolder { .. })
        ));
        assert!(matches!(
            StateLayout::new("rel").check(),
            Err(RootError::NotAbsolute(_))
        ));
        let long = format!("/root/{}", "a".repeat(90));
        let err = StateLayout::new(long).check().unwrap_err();
        assert!(err.to_string().contains("107 byte"), "{err}");
        StateLayout::new("/root/lnk-tests/r1").check().unwrap();
    }
}
