//! `<state>/run/pids.json`: the processes the running host started, with their start times.
//! The host writes it (as soon as every plugin is spawned) and removes it on a clean exit; the next
//! `up` ends what a killed host left; and it says who may serve or call a socket: the model
//! accepts only the harness it records, clients of `run/connection.sock` only its server.
//! It lives in `run/`, where no plugin with Landlock filesystem rules may write (the sandbox
//! plugin, whose domain has none because bubblewrap must mount, is the exception).

use crate::layout::StateLayout;
use crate::routes::programs;
use link_os::process::start_time;
use serde::{Deserialize, Serialize};

/// One started process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedPlugin {
    pub name: String,
    pub pid: i32,
    pub start_time: u64,
}

/// The file's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PidsFile {
    pub host: u32,
    pub plugins: Vec<RecordedPlugin>,
}

impl PidsFile {
    /// The file of the runtime on `layout`: `Ok(None)` when no host runs or ran there.
    pub fn read(layout: &StateLayout) -> std::io::Result<Option<PidsFile>> {
        let path = layout.pids_file();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                std::io::Error::other(format!("{} is not a pids file: {e}", path.display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The recorded plugin `pid` is, if it is still that process (a reused pid is not).
    pub fn plugin_of(&self, pid: i32) -> Option<&str> {
        self.plugins
            .iter()
            .find(|p| p.pid == pid && start_time(pid) == Some(p.start_time))
            .map(|p| p.name.as_str())
    }

    /// Who serves `run/connection.sock`: Mini's connection plugin, else (full Link) the host.
    pub fn connection_server(&self) -> i32 {
        self.plugins
            .iter()
            .find(|p| p.name == programs::MINI_CONNECTION)
            .map_or(self.host as i32, |p| p.pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_pid_is_that_plugin_only_while_its_start_time_matches() {
        let me = std::process::id() as i32;
        let now = start_time(me).expect("this process has a start time");
        let file = PidsFile {
            host: 1,
            plugins: vec![
                RecordedPlugin {
                    name: programs::HARNESS.into(),
                    pid: me,
                    start_time: now,
                },
                RecordedPlugin {
                    name: programs::MINI_CONNECTION.into(),
                    pid: me,
                    start_time: now + 1,
                },
            ],
        };
        assert_eq!(file.plugin_of(me), Some(programs::HARNESS));
        assert_eq!(file.plugin_of(me + 1_000_000), None);
        // A pid recorded with another start time is a reused pid: not that plugin.
        let reused = PidsFile {
            plugins: file.plugins[1..].to_vec(),
            ..file.clone()
        };
        assert_eq!(reused.plugin_of(me), None);
        assert_eq!(file.connection_server(), me);
        let link = PidsFile {
            host: 7,
            plugins: vec![],
        };
        assert_eq!(link.connection_server(), 7);
    }
}
