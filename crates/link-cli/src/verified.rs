//! The tokens the auth plugin said are valid, remembered by full Link's endpoint so that a
//! request with a token verified before costs no round trip to the auth plugin.
//!
//! An answer stands only while the token store is untouched: an inotify watch on the store's
//! directory and on the file itself (any write, rename, removal or change of mode, through any
//! path) forgets every answer at once. The kernel queues the event inside the system call that
//! changed the store, so once `link token revoke` has returned, the next request sees it and
//! asks the auth plugin again. An answer that was in flight while the store changed is not
//! remembered (the generation it was asked under is gone). Where the watch cannot be made,
//! nothing is remembered and every request is verified by the auth plugin.

use rustix::fd::OwnedFd;
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use rustix::io::Errno;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Answers kept at most; past it they are all forgotten (and asked again).
const MAX: usize = 1024;

/// What [`Verified::lookup`] knows of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The auth plugin said it is valid, and the store has not changed since.
    Valid,
    /// Ask the auth plugin; remember its answer under this generation.
    Ask(u64),
}

pub struct Verified {
    /// The inotify descriptor; `None`: nothing is remembered.
    watch: Option<OwnedFd>,
    file: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Bumped whenever the store changed.
    generation: u64,
    /// sha256 (hex) of the tokens found valid in this generation.
    valid: HashSet<String>,
}

impl Verified {
    /// Watches `file` (the token store) and its directory.
    pub fn watching(file: &Path) -> Verified {
        let watch = watch(file)
            .inspect_err(|e| {
                link_protocol::errln!(
                    "link: cannot watch the token store {} ({e}): every request is verified \
                     by the auth plugin",
                    file.display()
                )
            })
            .ok();
        Verified {
            watch,
            file: file.to_owned(),
            state: Mutex::new(State::default()),
        }
    }

    pub fn lookup(&self, token: &str) -> Lookup {
        let state = self.current();
        // Without a watch nothing was ever remembered: the set is empty.
        if state.valid.contains(&link_protocol::tokens::hash(token)) {
            return Lookup::Valid;
        }
        Lookup::Ask(state.generation)
    }

    /// Remembers that the auth plugin found `token` valid when asked under `generation`.
    pub fn remember(&self, token: &str, generation: u64) {
        let mut state = self.current();
        if self.watch.is_none() || state.generation != generation {
            return;
        }
        if state.valid.len() >= MAX {
            state.valid.clear();
        }
        state.valid.insert(link_protocol::tokens::hash(token));
    }

    /// The state, after forgetting everything if the store changed since the last look.
    fn current(&self) -> std::sync::MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = &self.watch {
            if changed(fd) {
                state.generation += 1;
                state.valid.clear();
                // The store is replaced by a rename: watch the file that holds it now.
                let _ = inotify::add_watch(fd, &self.file, FILE_EVENTS);
            }
        }
        state
    }
}

const DIR_EVENTS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

const FILE_EVENTS: WatchFlags = WatchFlags::MODIFY
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF);

fn watch(file: &Path) -> rustix::io::Result<OwnedFd> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
    let dir = file.parent().unwrap_or(Path::new("."));
    inotify::add_watch(&fd, dir, DIR_EVENTS)?;
    match inotify::add_watch(&fd, file, FILE_EVENTS) {
        // No token yet: its creation is an event of the directory.
        Ok(_) | Err(Errno::NOENT) => Ok(fd),
        Err(e) => Err(e),
    }
}

/// True when any event (or an overflow, or an error reading them) is pending; reads them all.
fn changed(fd: &OwnedFd) -> bool {
    let mut buf = [0u8; 4096];
    let mut any = false;
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return true,
            Ok(_) => any = true,
            Err(Errno::AGAIN) => return any,
            Err(Errno::INTR) => {}
            // Unreadable: assume the worst, every time.
            Err(_) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "lnk-verified-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tokens");
        (dir, file)
    }

    /// Each way the store changes (a token made, one revoked, the file written in place
    /// through another name, its mode changed, it removed) forgets what was remembered.
    #[test]
    fn any_change_of_the_store_forgets_every_answer() {
        let (dir, file) = store();
        let token = link_protocol::tokens::create(&file).unwrap();
        // A name for the store outside the watched directory.
        let outside = dir.with_extension("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let other = outside.join("tokens");
        let v = Verified::watching(&file);
        type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let changes: Vec<Change<'_>> = vec![
            (
                "a token made",
                Box::new(|| {
                    link_protocol::tokens::create(&file).unwrap();
                }),
            ),
            (
                "written through a hard link",
                Box::new(|| {
                    let _ = std::fs::remove_file(&other);
                    std::fs::hard_link(&file, &other).unwrap();
                    let _ = v.lookup(&token); // the link itself is a change: seen here
                    use std::io::Write;
                    let mut f = std::fs::OpenOptions::new()
                        .append(true)
                        .open(&other)
                        .unwrap();
                    f.write_all(b"\n").unwrap();
                }),
            ),
            (
                "its mode changed",
                Box::new(|| {
                    use std::os::unix::fs::PermissionsExt;
                    let mode = std::fs::Permissions::from_mode(0o600);
                    std::fs::set_permissions(&file, mode).unwrap();
                }),
            ),
            (
                "the token revoked",
                Box::new(|| {
                    assert!(link_protocol::tokens::revoke(&file, &token).unwrap());
                }),
            ),
        ];
        for (what, change) in changes {
            let Lookup::Ask(generation) = v.lookup(&token) else {
                panic!("{what}: remembered before it was answered");
            };
            v.remember(&token, generation);
            assert_eq!(v.lookup(&token), Lookup::Valid, "{what}: not remembered");
            change();
            assert!(
                matches!(v.lookup(&token), Lookup::Ask(_)),
                "{what}: the answer outlived the change"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    /// An answer asked for before the store changed is not remembered after it.
    #[test]
    fn an_answer_in_flight_across_a_change_is_not_kept() {
        let (dir, file) = store();
        let token = link_protocol::tokens::create(&file).unwrap();
        let v = Verified::watching(&file);
        let Lookup::Ask(generation) = v.lookup(&token) else {
            panic!("nothing was remembered yet");
        };
        assert!(link_protocol::tokens::revoke(&file, &token).unwrap());
        v.remember(&token, generation);
        assert!(matches!(v.lookup(&token), Lookup::Ask(_)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_watch_nothing_is_remembered() {
        let v = Verified::watching(Path::new("/nonexistent-lnk-dir/tokens"));
        let Lookup::Ask(generation) = v.lookup("lnk_x") else {
            panic!("remembered without a watch");
        };
        v.remember("lnk_x", generation);
        assert!(matches!(v.lookup("lnk_x"), Lookup::Ask(_)));
    }
}
