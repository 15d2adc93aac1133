//! The persisted list of agents: `agents.json` in the plugin's data area, replaced
//! atomically (temp file, fsync, rename, fsync of the directory) on every change.

use link_protocol::AgentId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One registered agent. The id is its name (names are unique and path-safe).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub id: AgentId,
    pub name: String,
    pub created_unix_ms: u64,
}

#[derive(Serialize, Deserialize, Default)]
struct File {
    agents: Vec<Record>,
}

/// The agents, by id, and where they are kept.
#[derive(Debug)]
pub struct Registry {
    path: PathBuf,
    pub agents: BTreeMap<AgentId, Record>,
}

impl Registry {
    /// Loads `dir/agents.json` (none yet: an empty registry).
    pub fn load(dir: &Path) -> anyhow::Result<Registry> {
        let path = dir.join("agents.json");
        let agents = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: File = serde_json::from_slice(&bytes).map_err(|e| {
                    anyhow::anyhow!(
                        "agent registry {} is not valid ({e}); restore it from a backup or \
                         remove it to start with no agents",
                        path.display()
                    )
                })?;
                file.agents.into_iter().map(|r| (r.id.clone(), r)).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => anyhow::bail!("cannot read agent registry {}: {e}", path.display()),
        };
        Ok(Registry { path, agents })
    }

    /// Writes the registry atomically.
    pub fn save(&self) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let file = File {
            agents: self.agents.values().cloned().collect(),
        };
        let mut bytes = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let tmp = dir.join(format!(".agents.json.{}.tmp", std::process::id()));
        // 0o666 before the umask, as `File::create` makes it.
        link_protocol::files::write_atomic(&self.path, &tmp, &bytes, 0o666)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_a_reload() {
        let home = std::env::var("HOME").unwrap();
        let dir =
            PathBuf::from(home).join(format!(".cache/lnk-t/agent-reg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut reg = Registry::load(&dir).unwrap();
        assert!(reg.agents.is_empty());
        let rec = Record {
            id: "a".parse().unwrap(),
            name: "a".into(),
            created_unix_ms: 7,
        };
        reg.agents.insert("a".parse().unwrap(), rec.clone());
        reg.save().unwrap();
        let again = Registry::load(&dir).unwrap();
        assert_eq!(again.agents.get("a"), Some(&rec));
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["agents.json"], "no temp file left");

        std::fs::write(dir.join("agents.json"), "{oops").unwrap();
        let err = Registry::load(&dir).unwrap_err().to_string();
        assert!(
            err.contains("agents.json") && err.contains("remove it"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
