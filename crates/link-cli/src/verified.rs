//! The tokens the auth plugin said are valid, remembered by full Link's endpoint so that a
//! request with a token verified before costs no round trip to the auth plugin.
//!
//! An answer stands only while the token store is untouched. Two checks see a change, and
//! either forgets every answer at once:
//! - an inotify watch on the store's directory and on the file itself (any write, rename,
//!   removal or change of mode, through any path). The kernel queues the event inside the
//!   system call that changed the store, so once `link token revoke` has returned, the next
//!   request sees it and asks the auth plugin again;
//! - on every look, the identity of what the path names now (device, inode, and the file's
//!   size, mtime and ctime): a directory removed and made again, renamed away and replaced, a
//!   symlink or a bind mount put in its place, or a write inotify does not report (through a
//!   shared mapping, or from another machine on a network filesystem) all show here.
//!
//! The watches are made again after each change; while they cannot be (no inotify watch left,
//! the directory missing), nothing is remembered. An answer that was in flight while the store
//! changed is not remembered (the generation it was asked under is gone). Where no watch can be
//! made at all, every request is verified by the auth plugin. Once the runtime starts to stop,
//! nothing is remembered and the watches are removed ([`Verified::stop_watching`]).

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
    file: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The inotify descriptor; `None`: nothing is remembered.
    watch: Option<OwnedFd>,
    /// Every watch made on it, current or left on inodes that moved away.
    watches: Vec<i32>,
    /// The descriptor once [`Verified::stop_watching`] removed its watches: closed with
    /// `Verified`, by then without waiting.
    retired: Option<OwnedFd>,
    /// Bumped whenever the store changed.
    generation: u64,
    /// sha256 (hex) of the tokens found valid in this generation.
    valid: HashSet<String>,
    /// What the paths named when the watches were last made; `None`: they could not be made
    /// (or the store changed while they were), so nothing is remembered until they are.
    seen: Option<Identity>,
}

/// What the store's paths name: the directory's (device, inode), and the file's, `None` while
/// there is no file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dir: (u64, u64),
    file: Option<FileIdentity>,
}

/// A file's device, inode, size, mtime and ctime (seconds, nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    at: (u64, u64),
    size: i64,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

impl Verified {
    /// Watches `file` (the token store) and its directory; where they cannot be watched yet
    /// (no directory), every look tries again.
    pub fn watching(file: &Path) -> Verified {
        let watch = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .inspect_err(|e| {
                link_protocol::errln!(
                    "link: cannot watch the token store {} ({e}): every request is verified \
                     by the auth plugin",
                    file.display()
                )
            })
            .ok();
        let mut watches = Vec::new();
        let seen = watch
            .as_ref()
            .and_then(|fd| rewatch(fd, file, &mut watches));
        if watch.is_some() && seen.is_none() {
            link_protocol::errln!(
                "link: cannot watch the token store {} yet: requests are verified by the auth \
                 plugin until it can be",
                file.display()
            );
        }
        Verified {
            file: file.to_owned(),
            state: Mutex::new(State {
                watch,
                watches,
                seen,
                ..State::default()
            }),
        }
    }

    pub fn lookup(&self, token: &str) -> Lookup {
        let hash = link_protocol::tokens::hash(token);
        let state = self.current();
        // Without a watch (or while blind) nothing is remembered: the set is empty.
        if state.valid.contains(&hash) {
            return Lookup::Valid;
        }
        Lookup::Ask(state.generation)
    }

    /// Remembers that the auth plugin found `token` valid when asked under `generation`.
    pub fn remember(&self, token: &str, generation: u64) {
        let hash = link_protocol::tokens::hash(token);
        let mut state = self.current();
        if state.seen.is_none() || state.generation != generation {
            return;
        }
        if state.valid.len() >= MAX {
            state.valid.clear();
        }
        state.valid.insert(hash);
    }

    /// Forgets every answer and removes the watches, for good: from here on every token is
    /// asked of the auth plugin. The runtime calls it when it starts to stop. Closing an
    /// inotify descriptor that still holds watches waits for the kernel to free them (an RCU
    /// grace period, up to 15-20 ms on the 2-core machine), and the host's exit waits for
    /// that; watches removed here are freed in the background while the plugins stop, and the
    /// descriptor then closes at once.
    pub fn stop_watching(&self) {
        let mut state = self.lock();
        state.valid.clear();
        state.seen = None;
        if let Some(fd) = state.watch.take() {
            for wd in std::mem::take(&mut state.watches) {
                // A watch already gone (its inode deleted) is an error, and nothing to do.
                let _ = inotify::remove_watch(&fd, wd);
            }
            state.retired = Some(fd);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, after forgetting everything if the store changed since the last look.
    fn current(&self) -> std::sync::MutexGuard<'_, State> {
        let mut state = self.lock();
        let State {
            watch,
            watches,
            seen,
            ..
        } = &mut *state;
        if let Some(fd) = watch {
            // Both checks run every time: inotify's queue must be drained either way.
            let events = changed(fd);
            if events || seen.is_none() || identity(&self.file) != *seen {
                *seen = rewatch(fd, &self.file, watches);
                state.generation += 1;
                state.valid.clear();
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

/// How many watch descriptors [`State::watches`] keeps.
const KEPT_WATCHES: usize = 16;

/// Watches what the directory and the file are now, adding each watch to `watches` (the old
/// watches stay on inodes that left the store's paths, harmless: any event there only forgets
/// more).
fn add_watches(fd: &OwnedFd, file: &Path, watches: &mut Vec<i32>) -> rustix::io::Result<()> {
    let mut keep = |wd: i32| {
        if !watches.contains(&wd) {
            // The oldest are on inodes long deleted, whose watches went with them.
            if watches.len() == KEPT_WATCHES {
                watches.remove(0);
            }
            watches.push(wd);
        }
    };
    keep(inotify::add_watch(fd, dir_of(file), DIR_EVENTS)?);
    match inotify::add_watch(fd, file, FILE_EVENTS) {
        Ok(wd) => keep(wd),
        // No token yet: its creation is an event of the directory.
        Err(Errno::NOENT) => {}
        Err(e) => return Err(e),
    }
    Ok(())
}

/// Makes the watches again and says what they watch; `None` when they could not be made or the
/// paths changed while they were being made (the next look tries again).
fn rewatch(fd: &OwnedFd, file: &Path, watches: &mut Vec<i32>) -> Option<Identity> {
    let before = identity(file)?;
    add_watches(fd, file, watches).ok()?;
    let after = identity(file)?;
    // A change between the two looks may have moved a watch onto an inode already gone.
    (before == after && !changed(fd)).then_some(after)
}

fn dir_of(file: &Path) -> &Path {
    file.parent().unwrap_or(Path::new("."))
}

/// `None` when the directory cannot be looked at (then nothing can be trusted).
fn identity(file: &Path) -> Option<Identity> {
    let dir = rustix::fs::stat(dir_of(file)).ok()?;
    let file = match rustix::fs::stat(file) {
        Ok(st) => Some(FileIdentity {
            at: (st.st_dev, st.st_ino),
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }),
        Err(Errno::NOENT) => None,
        Err(_) => return None,
    };
    Some(Identity {
        dir: (dir.st_dev, dir.st_ino),
        file,
    })
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
    /// through another name, its mode changed) forgets what was remembered; removals and
    /// replacements are `a_store_replaced_under_the_watch_is_watched_again`.
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
            assert_forgotten_after(&v, &token, what, change);
        }
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    /// `token`, asked for, found valid and remembered, is forgotten after `change`.
    fn assert_forgotten_after(v: &Verified, token: &str, what: &str, change: impl FnOnce()) {
        let Lookup::Ask(generation) = v.lookup(token) else {
            panic!("{what}: remembered before it was answered");
        };
        v.remember(token, generation);
        assert_eq!(v.lookup(token), Lookup::Valid, "{what}: not remembered");
        change();
        assert!(
            matches!(v.lookup(token), Lookup::Ask(_)),
            "{what}: the answer outlived the change"
        );
    }

    /// A token the auth plugin found valid is asked about again all the same.
    fn assert_not_remembered(v: &Verified, token: &str, what: &str) {
        let Lookup::Ask(generation) = v.lookup(token) else {
            panic!("{what}: remembered before it was answered");
        };
        v.remember(token, generation);
        assert!(
            matches!(v.lookup(token), Lookup::Ask(_)),
            "{what}: remembered"
        );
    }

    /// A token made, found valid and remembered, then revoked: the revocation must be seen.
    fn assert_revocation_seen(v: &Verified, file: &Path, what: &str) {
        let token = link_protocol::tokens::create(file).unwrap();
        let what = format!("{what}, then the token revoked");
        assert_forgotten_after(v, &token, &what, || {
            assert!(link_protocol::tokens::revoke(file, &token).unwrap());
        });
    }

    /// The store's directory or file replaced under the watch (removed and made again, renamed
    /// away, a symlink in its place): the answers go, and what the path names now is watched.
    #[test]
    fn a_store_replaced_under_the_watch_is_watched_again() {
        let (dir, file) = store();
        let v = Verified::watching(&file);
        assert_revocation_seen(&v, &file, "no tokens file at first");
        let moved = dir.with_extension("moved");
        let elsewhere = dir.with_extension("elsewhere");
        type Replace<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let replacements: Vec<Replace<'_>> = vec![
            (
                "the file removed",
                Box::new(|| std::fs::remove_file(&file).unwrap()),
            ),
            (
                "the directory removed and made again",
                Box::new(|| {
                    std::fs::remove_dir_all(&dir).unwrap();
                    std::fs::create_dir(&dir).unwrap();
                }),
            ),
            (
                "the directory renamed away and replaced",
                Box::new(|| {
                    std::fs::rename(&dir, &moved).unwrap();
                    std::fs::create_dir(&dir).unwrap();
                    std::fs::copy(moved.join("tokens"), &file).unwrap();
                    std::fs::remove_dir_all(&moved).unwrap();
                }),
            ),
            (
                "a symlink in the directory's place",
                Box::new(|| {
                    std::fs::create_dir_all(&elsewhere).unwrap();
                    std::fs::copy(&file, elsewhere.join("tokens")).unwrap();
                    std::fs::remove_dir_all(&dir).unwrap();
                    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
                }),
            ),
        ];
        for (what, replace) in replacements {
            let token = link_protocol::tokens::create(&file).unwrap();
            assert_forgotten_after(&v, &token, what, replace);
            assert_revocation_seen(&v, &file, what);
        }
        std::fs::remove_file(&dir).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
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

    /// A store whose directory appears only after the endpoint started is watched from then.
    #[test]
    fn a_store_made_after_the_start_is_watched_once_it_exists() {
        let (dir, file) = store();
        std::fs::remove_dir(&dir).unwrap();
        let v = Verified::watching(&file);
        assert_not_remembered(&v, "lnk_x", "unwatched");
        std::fs::create_dir(&dir).unwrap();
        assert_revocation_seen(&v, &file, "the directory made after the start");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Once stopped, what was remembered is forgotten, nothing is remembered again, and no
    /// watch is left on the descriptor.
    #[test]
    fn a_stopped_watch_remembers_nothing_and_holds_no_watch() {
        let (dir, file) = store();
        let token = link_protocol::tokens::create(&file).unwrap();
        let v = Verified::watching(&file);
        let watches = v.lock().watches.clone();
        assert_eq!(watches.len(), 2, "the directory's and the file's");
        assert_forgotten_after(&v, &token, "stopped", || v.stop_watching());
        assert_not_remembered(&v, &token, "once stopped");
        let state = v.lock();
        let retired = state
            .retired
            .as_ref()
            .expect("the descriptor is kept to close");
        for wd in watches {
            let gone = inotify::remove_watch(retired, wd);
            assert_eq!(gone, Err(Errno::INVAL), "watch {wd} is still there");
        }
        drop(state);
        v.stop_watching();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
