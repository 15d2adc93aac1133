//! Who a confined command is on the host.
//!
//! As an ordinary user, a command runs as that user inside a user namespace of its own
//! ([`Identity::Caller`]). As root it must never be root: every agent gets a dedicated uid and
//! gid ([`Identity::Dedicated`], `base + slot`, the slot allocated once per agent in the
//! plugin's data directory). bubblewrap then runs as root *inside a user namespace* the plugin
//! makes for the identity on its first command and keeps ([`shared_user_namespace`]: root
//! and the dedicated identity mapped to themselves, nothing else), so its mounts need no
//! capability on the host and the plugin holds none of `CAP_SYS_ADMIN`'s; the helper inside
//! drops to that identity (groups, gid, uid, the capability bounding set) before Landlock and
//! the command. Root-only files are then unreadable, files the command creates are that uid's,
//! and a setuid file it could make would give nobody more than that uid. DESIGN.md §4 gives
//! the reasons.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

// Making the namespaces and walking the workspace are concepts of their own (`userns`,
// `handover`); their names stay here too, where `run` and others have always found them.
pub use crate::handover::{clear_setid, prepare, usage_seen, Usage};
pub use crate::userns::{
    shared_user_namespace, user_namespace, user_namespace_mapped, UserNamespaceError,
};

/// First uid (and gid) of the dedicated range: `0x6C6E0000`, far from the ranges distributions
/// allocate and from `/etc/subuid`'s usual `100000`. `LNK_SANDBOX_UID_BASE` overrides it.
pub const DEFAULT_BASE: u32 = 0x6C6E_0000;
/// The environment variable naming another base (the host passes it to this plugin alone).
pub const ENV_BASE: &str = link_protocol::plugin::ENV_SANDBOX_UID_BASE;
/// Slots per base: agents beyond it are refused rather than made to share.
pub const SLOTS: u32 = 65_536;
/// The last slot is no agent's: it is the sandbox plugin's own identity as root
/// ([`crate::plugin_ns`]), so no agent's command ever shares its uid.
pub const PLUGIN_SLOT: u32 = SLOTS - 1;
/// The top slots no agent is given: the plugins' own identities as root, the sandbox
/// plugin's ([`PLUGIN_SLOT`]) and one per Landlock-confined plugin ([`plugin_uid`]), with
/// room for more plugins.
pub const RESERVED_SLOTS: u32 = 32;
/// The first slot no agent is given ([`RESERVED_SLOTS`]).
pub const FIRST_RESERVED: u32 = SLOTS - RESERVED_SLOTS;

/// The host uid (and gid) of the plugin `program` as root (issue 42, "plugins are not
/// root"): the sandbox plugin's [`PLUGIN_SLOT`], every other plugin's `SLOTS - 2 - i`, `i` its
/// place in the manifest, so no two plugins of a runtime and no agent share one. `None` for a
/// program the manifest does not name.
pub fn plugin_uid(base: u32, program: &str) -> Option<u32> {
    let all = link_protocol::manifest::ALL;
    let index = all.iter().position(|p| p.program == program)? as u32;
    if program == link_protocol::manifest::SANDBOX.program {
        return Some(base + PLUGIN_SLOT);
    }
    let slot = SLOTS - 2 - index;
    (slot >= FIRST_RESERVED).then_some(base + slot)
}

/// The identity a confined command has on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Identity {
    /// Link is not root: the command runs as the caller, in a user namespace of its own.
    Caller { uid: u32, gid: u32 },
    /// Link is root: the command runs as this uid and gid, set by the helper.
    Dedicated { uid: u32, gid: u32 },
}

impl Identity {
    /// The identity of slot `slot` (0 for the probe and the `exec` command, agents from 1).
    pub fn for_slot(slot: u32) -> Result<Identity, String> {
        if !rustix::process::geteuid().is_root() {
            return Ok(Identity::Caller {
                uid: rustix::process::getuid().as_raw(),
                gid: rustix::process::getgid().as_raw(),
            });
        }
        let base = base()?;
        let id = base
            .checked_add(slot)
            .filter(|_| slot < SLOTS)
            .ok_or_else(|| format!("sandbox identity slot {slot} is outside {ENV_BASE}'s range"))?;
        Ok(Identity::Dedicated { uid: id, gid: id })
    }

    pub fn uid(&self) -> u32 {
        match *self {
            Identity::Caller { uid, .. } | Identity::Dedicated { uid, .. } => uid,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Identity::Caller { uid, .. } => format!("uid {uid} (the caller, in a user namespace)"),
            Identity::Dedicated { uid, gid } => format!("dedicated uid {uid} gid {gid}"),
        }
    }
}

/// How many runtimes' ranges lie between [`DEFAULT_BASE`] and 2^31 (ids past it are left
/// alone: some programs take a uid for a signed number).
const RANGES: u32 = ((1u64 << 31) - DEFAULT_BASE as u64) as u32 / SLOTS;

/// The first uid of the range of the runtime on `state_root`: `LNK_SANDBOX_UID_BASE` where
/// set (every runtime shares it then), else one of [`RANGES`] ranges from [`DEFAULT_BASE`] on,
/// picked by the digest of the state root. Two runtimes' sandbox plugins and agents are then
/// not the same kernel identities, so a compromised sandbox plugin, which may act as any uid
/// of its range, reaches no process of another runtime by uid (a cgroup v1 move, say); two
/// state roots whose digests pick the same range (one chance in [`RANGES`]) share it.
pub fn base_for(state_root: &Path) -> Result<u32, String> {
    if std::env::var_os(ENV_BASE).is_some() {
        return base();
    }
    let digest = crate::leftovers::digest(state_root);
    let pick = u64::from_str_radix(&digest, 16).map_err(|e| format!("{digest}: {e}"))?;
    Ok(DEFAULT_BASE + (pick % u64::from(RANGES)) as u32 * SLOTS)
}

/// The first uid of the dedicated range: [`DEFAULT_BASE`] or `LNK_SANDBOX_UID_BASE` (which
/// the host sets for its sandbox plugin to [`base_for`] its state root).
pub fn base() -> Result<u32, String> {
    let Some(v) = std::env::var_os(ENV_BASE) else {
        return Ok(DEFAULT_BASE);
    };
    let base: u32 = v
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{ENV_BASE} must be a number, got {v:?}"))?;
    if base < 1000 || base.checked_add(SLOTS).is_none() {
        return Err(format!(
            "{ENV_BASE}={base} must leave the system range (>= 1000) and fit {SLOTS} slots"
        ));
    }
    Ok(base)
}

/// The agents' slots, kept in one JSON file (`{"agent": slot}`); slot 0 is never given out.
#[derive(Debug)]
pub struct Slots {
    path: PathBuf,
    slots: BTreeMap<String, u32>,
}

impl Slots {
    /// Loads `path` (absent: no agent has a slot yet).
    pub fn load(path: PathBuf) -> Result<Slots, String> {
        let slots = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                format!("{} is damaged ({e}): restore or remove it", path.display())
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Ok(Slots { path, slots })
    }

    /// The agent's slot, allocating and saving the next free one on its first command.
    pub fn slot(&mut self, agent: &str) -> Result<u32, String> {
        if let Some(&s) = self.slots.get(agent) {
            return Ok(s);
        }
        let next = self.slots.values().max().map_or(1, |m| m + 1);
        if next >= FIRST_RESERVED {
            return Err(format!(
                "every one of the {SLOTS} sandbox identities is taken"
            ));
        }
        self.slots.insert(agent.to_owned(), next);
        if let Err(e) = self.save() {
            self.slots.remove(agent);
            return Err(e);
        }
        Ok(next)
    }

    /// Written beside and renamed over, so a crash leaves the old table or the new one.
    fn save(&self) -> Result<(), String> {
        let tmp = self.path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let bytes = serde_json::to_vec_pretty(&self.slots)?;
            let mut f = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut f, &bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot save {}: {e}", self.path.display())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_root_picks_a_range_below_2_31() {
        if std::env::var_os(ENV_BASE).is_some() {
            return;
        }
        let a = base_for(Path::new("/srv/link-a")).unwrap();
        let b = base_for(Path::new("/srv/link-b")).unwrap();
        assert_ne!(a, b);
        for base in [a, b] {
            assert!(
                base >= DEFAULT_BASE && (base - DEFAULT_BASE).is_multiple_of(SLOTS),
                "{base}"
            );
            assert!(u64::from(base) + u64::from(SLOTS) <= 1 << 31, "{base}");
        }
        // The same directory under another spelling picks the same range.
        assert_eq!(base_for(Path::new("/srv/link-a/")).unwrap(), a);
    }

    #[test]
    fn each_plugin_has_a_reserved_uid_of_its_own() {
        let base = DEFAULT_BASE;
        let mut seen = std::collections::BTreeSet::new();
        for plugin in link_protocol::manifest::ALL {
            let uid = plugin_uid(base, plugin.program).expect("every plugin has one");
            assert!(uid >= base + FIRST_RESERVED && uid < base + SLOTS, "{uid}");
            assert!(seen.insert(uid), "{} shares {uid}", plugin.program);
        }
        assert_eq!(
            plugin_uid(base, link_protocol::manifest::SANDBOX.program),
            Some(base + PLUGIN_SLOT)
        );
        assert_eq!(plugin_uid(base, "link"), None);
    }

    #[test]
    fn slots_are_allocated_once_and_kept() {
        let path = std::env::temp_dir().join(format!("lnk-slots-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut s = Slots::load(path.clone()).unwrap();
        assert_eq!((s.slot("a").unwrap(), s.slot("b").unwrap()), (1, 2));
        assert_eq!(s.slot("a").unwrap(), 1);
        let mut again = Slots::load(path.clone()).unwrap();
        assert_eq!(again.slot("b").unwrap(), 2);
        assert_eq!(again.slot("c").unwrap(), 3);
        std::fs::write(&path, b"{").unwrap();
        assert!(Slots::load(path.clone()).unwrap_err().contains("damaged"));
        std::fs::remove_file(&path).unwrap();
    }
}
