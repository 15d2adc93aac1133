//! The persisted agents: one record file per agent, `agents/<id>.json` in the plugin's data
//! area, each written whole (temporary file, fsync, link into place, fsync of the directory)
//! and never over another file, so damage to one record stays with its agent.
//!
//! Damage is per agent, as in Mini's harness: a record that cannot be read is loaded as
//! damaged ([`Registry::damaged`], why and which file), its bytes are left as they are for a
//! human to repair, and every other agent loads and runs.
//!
//! An older runtime kept every agent in one `agents.json`. Loading migrates it once: each
//! entry that reads becomes its agent's record (an existing record is never replaced), then
//! the whole file is renamed to `agents.json.migrated`, so nothing is lost. A damaged
//! `agents.json` (an unreadable entry, cut JSON, bytes that are not UTF-8) is left where it
//! is, untouched: the entries that read are migrated, and every agent with a home but no
//! record (an agent the unreadable part held) is damaged, naming the file. While it stays,
//! an entry is migrated only if its agent still has a home, so an agent deleted since is not
//! brought back; once it is repaired, the next start migrates the rest.

use link_protocol::model::Model;
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
    /// The model its turns use. A record written before agents had a model has none, and
    /// reads as the runtime's default (`link up --model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Model>,
}

/// The registry of an older runtime.
const LEGACY: &str = "agents.json";
/// The directory of the record files.
const RECORDS: &str = "agents";

/// The agents, by id, and where they are kept.
#[derive(Debug)]
pub struct Registry {
    /// The plugin's data area.
    dir: PathBuf,
    pub agents: BTreeMap<AgentId, Record>,
    /// Agents whose record cannot be read: why, naming the file and what to do.
    pub damaged: BTreeMap<AgentId, String>,
}

impl Registry {
    /// Loads the records under `dir` (none yet: an empty registry), damaged ones included,
    /// after migrating an older runtime's `agents.json`; `homes` is where each agent's home
    /// is, by id. `Err` only when a directory cannot be read or a migrated record cannot be
    /// written: damage never stops the load.
    pub fn load(dir: &Path, homes: &Path) -> anyhow::Result<Registry> {
        let mut reg = Registry {
            dir: dir.to_owned(),
            agents: BTreeMap::new(),
            damaged: BTreeMap::new(),
        };
        reg.load_records()?;
        reg.migrate(homes)?;
        Ok(reg)
    }

    fn records(&self) -> PathBuf {
        self.dir.join(RECORDS)
    }

    /// The record file of `id`.
    pub fn path(&self, id: &str) -> PathBuf {
        self.records().join(format!("{id}.json"))
    }

    fn load_records(&mut self) -> anyhow::Result<()> {
        let records = self.records();
        let entries = match std::fs::read_dir(&records) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => anyhow::bail!(
                "cannot list the agent records in {}: {e}",
                records.display()
            ),
        };
        for entry in entries {
            let entry = entry.map_err(|e| {
                anyhow::anyhow!(
                    "cannot list the agent records in {}: {e}",
                    records.display()
                )
            })?;
            let file = entry.file_name();
            let file = file.to_string_lossy();
            // Temporary files of a write a crash cut short start with a dot.
            if file.starts_with('.') {
                continue;
            }
            let Some(id) = file
                .strip_suffix(".json")
                .and_then(|s| AgentId::parse(s).ok())
            else {
                tracing::warn!("{} is not an agent record; ignored", entry.path().display());
                continue;
            };
            let path = entry.path();
            match read_record(&path, &id) {
                Ok(rec) => {
                    self.agents.insert(id, rec);
                }
                Err(why) => {
                    self.damaged.insert(id, why);
                }
            }
        }
        Ok(())
    }

    /// Migrates `agents.json`, if any (see the module's documentation).
    fn migrate(&mut self, homes: &Path) -> anyhow::Result<()> {
        let legacy = self.dir.join(LEGACY);
        let (entries, damage) = match std::fs::read(&legacy) {
            Ok(bytes) => read_legacy(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let has_home = |id: &AgentId| homes.join(&**id).is_dir();
        for rec in entries {
            let known = self.agents.contains_key(&rec.id) || self.damaged.contains_key(&rec.id);
            if known || (damage.is_some() && !has_home(&rec.id)) {
                continue;
            }
            self.create(&rec).map_err(|e| {
                anyhow::anyhow!(
                    "cannot migrate agent {} from {} to {}: {e}",
                    rec.id,
                    legacy.display(),
                    self.path(&rec.id).display()
                )
            })?;
            self.agents.insert(rec.id.clone(), rec);
        }
        let Some(why) = damage else {
            let kept = free_name(&self.dir.join(format!("{LEGACY}.migrated")));
            std::fs::rename(&legacy, &kept)
                .and_then(|()| std::fs::File::open(&self.dir)?.sync_all())
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot rename {} to {}: {e}",
                        legacy.display(),
                        kept.display()
                    )
                })?;
            tracing::info!(
                "migrated {} to {}; kept it as {}",
                legacy.display(),
                self.records().display(),
                kept.display()
            );
            return Ok(());
        };
        let why = format!(
            "its record is in {}, the registry of an older runtime, which cannot be read \
             ({why}); repair that file and restart, and the agents it holds are migrated",
            legacy.display()
        );
        let orphans = match std::fs::read_dir(homes) {
            Ok(entries) => entries
                .filter_map(|e| AgentId::parse(e.ok()?.file_name().to_str()?).ok())
                .filter(|id| has_home(id))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => anyhow::bail!("cannot list the agent homes in {}: {e}", homes.display()),
        };
        for id in orphans {
            if !self.agents.contains_key(&id) && !self.damaged.contains_key(&id) {
                self.damaged.insert(id, why.clone());
            }
        }
        tracing::error!("{why}");
        Ok(())
    }

    /// Writes a new record, never over an existing file: one already there (a damaged
    /// record, say) is an `AlreadyExists` error and stays as it is.
    pub fn create(&self, rec: &Record) -> std::io::Result<()> {
        let records = self.records();
        std::fs::create_dir_all(&records)?;
        let mut bytes = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let path = self.path(&rec.id);
        let tmp = records.join(format!(".{}.json.{}.tmp", rec.id, std::process::id()));
        // 0o666 before the umask, as `File::create` makes it. Written whole beside its
        // name, then linked into place, which fails if the name is taken.
        let linked = write_new(&tmp, &bytes).and_then(|()| std::fs::hard_link(&tmp, &path));
        let _ = std::fs::remove_file(&tmp);
        linked?;
        std::fs::File::open(&records)?.sync_all()
    }

    /// Removes the record of `id` (damaged or not); none is not an error.
    pub fn remove(&self, id: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(id)) {
            Ok(()) => std::fs::File::open(self.records())?.sync_all(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Creates `path` afresh (a leftover of that name replaced), writes `bytes` and fsyncs.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// One record file, or why it is damaged.
fn read_record(path: &Path, id: &AgentId) -> Result<Record, String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("its record {} cannot be read ({e})", path.display()))?;
    let rec: Record = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "its record {} is not valid ({e}); repair or restore that file and restart",
            path.display()
        )
    })?;
    if &rec.id != id {
        return Err(format!(
            "its record {} names agent {}; repair that file and restart",
            path.display(),
            rec.id
        ));
    }
    Ok(rec)
}

/// The entries of an older runtime's `agents.json` that read, and why the file is damaged
/// if any part of it is not.
fn read_legacy(bytes: &[u8]) -> (Vec<Record>, Option<String>) {
    #[derive(Deserialize)]
    struct File {
        agents: Vec<serde_json::Value>,
    }
    let file: File = match serde_json::from_slice(bytes) {
        Ok(file) => file,
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for (i, entry) in file.agents.into_iter().enumerate() {
        match serde_json::from_value::<Record>(entry) {
            Ok(rec) => good.push(rec),
            Err(e) => bad.push(format!("entry {}: {e}", i + 1)),
        }
    }
    let damage = (!bad.is_empty()).then(|| bad.join("; "));
    (good, damage)
}

/// `path`, or `path.N` for the first N that names nothing yet.
fn free_name(path: &Path) -> PathBuf {
    let mut at = path.to_owned();
    let mut n = 1;
    while at.symlink_metadata().is_ok() {
        at = PathBuf::from(format!("{}.{n}", path.display()));
        n += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh data area and homes under `$HOME/.cache/lnk-t`, removed on drop.
    struct Temp(PathBuf);

    impl Temp {
        fn new(name: &str) -> Temp {
            let home = std::env::var("HOME").unwrap();
            let dir = PathBuf::from(home).join(format!(
                ".cache/lnk-t/agent-reg-{name}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("homes")).unwrap();
            Temp(dir)
        }
        fn load(&self) -> Registry {
            Registry::load(&self.0, &self.0.join("homes")).unwrap()
        }
        fn home(&self, id: &str) {
            std::fs::create_dir_all(self.0.join("homes").join(id)).unwrap();
        }
        fn names(&self, sub: &str) -> Vec<String> {
            let mut names: Vec<_> = std::fs::read_dir(self.0.join(sub))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn rec(id: &str) -> Record {
        Record {
            id: id.parse().unwrap(),
            name: id.into(),
            created_unix_ms: 7,
            model: Some(Model::parse("gpt-remote").unwrap()),
        }
    }

    #[test]
    fn a_record_without_a_model_reads_as_one_without() {
        let t = Temp::new("no-model");
        let records = t.0.join(RECORDS);
        std::fs::create_dir_all(&records).unwrap();
        let old = r#"{"id": "old", "name": "old", "created_unix_ms": 5}"#;
        std::fs::write(records.join("old.json"), old).unwrap();
        let reg = t.load();
        assert!(reg.damaged.is_empty(), "{:?}", reg.damaged);
        assert_eq!(reg.agents["old"].model, None);
        reg.create(&rec("new")).unwrap();
        let reg = t.load();
        assert_eq!(
            reg.agents["new"].model.as_ref().unwrap().as_str(),
            "gpt-remote"
        );
    }

    #[test]
    fn survives_a_reload_and_never_writes_over_a_record() {
        let t = Temp::new("reload");
        let reg = t.load();
        assert!(reg.agents.is_empty() && reg.damaged.is_empty());
        reg.create(&rec("a")).unwrap();
        let again = t.load();
        assert_eq!(again.agents.get("a"), Some(&rec("a")));
        assert_eq!(t.names("agents"), ["a.json"], "no temp file left");

        std::fs::write(again.path("a"), "{oops").unwrap();
        let e = again.create(&rec("a")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(again.path("a")).unwrap(), b"{oops");
        assert_eq!(t.names("agents"), ["a.json"], "no temp file left");
        again.remove("a").unwrap();
        again.remove("a").unwrap();
        assert!(t.load().agents.is_empty());
    }

    #[test]
    fn a_damaged_record_is_that_agents_alone() {
        let t = Temp::new("damage");
        let reg = t.load();
        for id in ["a", "b", "c"] {
            reg.create(&rec(id)).unwrap();
        }
        std::fs::write(reg.path("b"), b"\xff\x00").unwrap();
        std::fs::write(reg.path("c"), serde_json::to_vec(&rec("a")).unwrap()).unwrap();
        let reg = t.load();
        assert_eq!(
            reg.agents.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        let b = &reg.damaged["b"];
        assert!(
            b.contains(&reg.path("b").display().to_string()) && b.contains("restart"),
            "{b}"
        );
        assert!(
            reg.damaged["c"].contains("names agent a"),
            "{}",
            reg.damaged["c"]
        );
        assert_eq!(std::fs::read(reg.path("b")).unwrap(), b"\xff\x00", "kept");
    }

    #[test]
    fn an_older_registry_is_migrated_once_and_kept() {
        let t = Temp::new("migrate");
        let legacy = t.0.join(LEGACY);
        let bytes =
            serde_json::to_vec(&serde_json::json!({"agents": [rec("a"), rec("b")]})).unwrap();
        std::fs::write(&legacy, &bytes).unwrap();
        let reg = t.load();
        assert_eq!(
            reg.agents.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(reg.damaged.is_empty());
        assert_eq!(t.names("agents"), ["a.json", "b.json"]);
        assert!(!legacy.exists());
        assert_eq!(
            std::fs::read(t.0.join("agents.json.migrated")).unwrap(),
            bytes
        );
        // Deleted since: not brought back.
        reg.remove("b").unwrap();
        assert_eq!(
            t.load()
                .agents
                .keys()
                .map(|k| k.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        // Another migration keeps the first one's file.
        std::fs::write(&legacy, br#"{"agents": []}"#).unwrap();
        t.load();
        assert!(t.0.join("agents.json.migrated.1").exists());
    }

    #[test]
    fn a_damaged_older_registry_is_kept_and_damages_only_the_agents_it_lost() {
        let t = Temp::new("legacy-damage");
        let legacy = t.0.join(LEGACY);
        for id in ["a", "b", "c"] {
            t.home(id);
        }
        let bad = br#"{"agents": [{"id": "a", "name": "a", "created_unix_ms": 1},
            {"id": "b", "name": 7, "created_unix_ms": 2},
            {"id": "gone", "name": "gone", "created_unix_ms": 3}]}"#;
        std::fs::write(&legacy, bad).unwrap();
        let reg = t.load();
        assert_eq!(
            reg.agents.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["a"],
            "gone has no home"
        );
        assert_eq!(
            reg.damaged.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["b", "c"]
        );
        let why = &reg.damaged["b"];
        assert!(
            why.contains(&legacy.display().to_string()) && why.contains("entry 2"),
            "{why}"
        );
        assert_eq!(std::fs::read(&legacy).unwrap(), bad, "kept as it was");

        for cut in [&bad[..30], b"\xff\xfe{".as_slice()] {
            std::fs::write(&legacy, cut).unwrap();
            let reg = t.load();
            assert_eq!(
                reg.agents.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
                ["a"]
            );
            assert_eq!(
                reg.damaged.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
                ["b", "c"]
            );
            assert_eq!(std::fs::read(&legacy).unwrap(), cut, "kept as it was");
        }

        // Repaired: the rest is migrated, the file renamed.
        std::fs::write(
            &legacy,
            serde_json::to_vec(&serde_json::json!({"agents": [rec("b"), rec("c")]})).unwrap(),
        )
        .unwrap();
        let reg = t.load();
        assert_eq!(
            reg.agents.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert!(reg.damaged.is_empty() && !legacy.exists());
    }
}
