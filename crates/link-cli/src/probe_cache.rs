//! The sandbox probe's last `enforced` answer, kept so a confined `link up` need not wait ~30 ms
//! for it on every start. It is used only while everything it depends on is unchanged — the
//! boot, the kernel release, the uid, the user-namespace settings, the `bwrap` found on PATH
//! and the `link-plugin-sandbox` program (each file by device, inode, size and mtime, which
//! also covers the seccomp filter and the policy compiled into it) — and even then the probe
//! still runs, after `ready` and at nice 19: if it no longer says `enforced` the runtime stops
//! with its reason and the entry is removed. A refusal is never kept, so a fix is seen at once.
//!
//! The entry lives beside the programs (`.link-probe-<uid>.json`); where that directory is not
//! writable nothing is kept and every start probes first.

use link_protocol::routes::host::SandboxStatus;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Files whose content is a setting the probe's answer depends on (missing ones count too).
const SETTINGS: &[&str] = &[
    "/proc/sys/kernel/random/boot_id",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
];

/// What the answer depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    kernel: String,
    uid: u32,
    settings: Vec<String>,
    bwrap: Option<(PathBuf, [i64; 4])>,
    sandbox: [i64; 4],
}

#[derive(Serialize, Deserialize)]
struct Entry {
    key: Key,
    status: SandboxStatus,
}

/// A file's identity: device, inode, size and mtime (ns).
fn identity(path: &Path) -> Option<[i64; 4]> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = m.mtime() * 1_000_000_000 + m.mtime_nsec();
    Some([m.dev() as i64, m.ino() as i64, m.size() as i64, mtime])
}

impl Key {
    /// The key of this machine now for the sandbox program in `programs`.
    pub fn now(programs: &Path) -> Option<Key> {
        let uname = rustix::system::uname();
        let bwrap = which::which("bwrap")
            .ok()
            .and_then(|p| Some((p.clone(), identity(&p)?)));
        Some(Key {
            kernel: uname.release().to_string_lossy().into_owned(),
            uid: rustix::process::getuid().as_raw(),
            settings: SETTINGS
                .iter()
                .map(|f| std::fs::read_to_string(f).unwrap_or_else(|_| "-".into()))
                .collect(),
            bwrap,
            sandbox: identity(&programs.join("link-plugin-sandbox"))?,
        })
    }
}

fn path(programs: &Path, key: &Key) -> PathBuf {
    programs.join(format!(".link-probe-{}.json", key.uid))
}

/// The kept answer for `key`, if there is one and it was made under the same key.
pub fn lookup(programs: &Path, key: &Key) -> Option<SandboxStatus> {
    let bytes = std::fs::read(path(programs, key)).ok()?;
    let entry: Entry = serde_json::from_slice(&bytes).ok()?;
    (entry.key == *key).then_some(entry.status)
}

/// Keeps an `enforced` answer for `key`; a failure to write only means no cache.
pub fn keep(programs: &Path, key: &Key, status: &SandboxStatus) {
    let entry = Entry {
        key: key.clone(),
        status: status.clone(),
    };
    let Ok(bytes) = serde_json::to_vec(&entry) else {
        return;
    };
    let file = path(programs, key);
    let temp = file.with_extension(format!("{}.tmp", std::process::id()));
    let _ = link_protocol::files::write_atomic(&file, &temp, &bytes, 0o600);
}

/// Removes the kept answer: the probe no longer agrees with it.
pub fn forget(programs: &Path, key: &Key) {
    let _ = std::fs::remove_file(path(programs, key));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> SandboxStatus {
        SandboxStatus {
            identity: serde_json::json!({"kind": "dedicated"}),
            seccomp: serde_json::json!({"sha256": "ab"}),
            limits: serde_json::json!({}),
            bounds: Vec::new(),
            probe: "ran".into(),
        }
    }

    #[test]
    fn an_answer_is_used_only_under_the_key_it_was_made_under() {
        let dir = std::env::temp_dir().join(format!("lnk-probe-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("link-plugin-sandbox"), "v1").unwrap();
        let key = Key::now(&dir).expect("a key");
        assert!(lookup(&dir, &key).is_none(), "nothing kept yet");
        keep(&dir, &key, &status());
        assert_eq!(lookup(&dir, &key).unwrap().seccomp, status().seccomp);
        // A rebuilt sandbox program is another key: the kept answer does not stand for it.
        std::fs::write(dir.join("link-plugin-sandbox"), "v2, longer").unwrap();
        let rebuilt = Key::now(&dir).unwrap();
        assert_ne!(rebuilt, key);
        assert!(lookup(&dir, &rebuilt).is_none());
        let other_kernel = Key {
            kernel: "0.0.0".into(),
            ..key.clone()
        };
        assert!(lookup(&dir, &other_kernel).is_none());
        forget(&dir, &key);
        assert!(lookup(&dir, &key).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
