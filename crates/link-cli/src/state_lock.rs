//! One runtime per state root: the lock, who holds it, and stopping that holder.
//!
//! The lock is an `flock` on the state root directory itself, taken by `link up` before it
//! touches anything and held for the host's life (the descriptor is close-on-exec, so no plugin
//! inherits it). Removing `run/`, or any file, cannot undo it; the kernel drops it when the host
//! exits, however it exits. Who holds it is read from `/proc/locks`, so a refusal names the
//! process holding it now, never a pid a file remembered; and `link down` finds a host there
//! that does not answer on its socket yet (still starting) or any more (`run/` removed).

use anyhow::{bail, Context, Result};
use link_protocol::layout::StateLayout;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `up` waits for a lock held by something other than a host (a `link down`
/// clearing what a dead host left, which kills its survivors for at most 10 s).
const WAIT_FOR_NON_HOST: Duration = Duration::from_secs(15);

/// The state root's lock, held until the returned directory is dropped; `None` while another
/// process holds it.
pub(crate) fn lock_if_free(layout: &StateLayout) -> Result<Option<File>> {
    use rustix::fs::{flock, FlockOperation};
    let root = layout.root();
    let dir = File::open(root).with_context(|| format!("opening {}", root.display()))?;
    Ok(flock(&dir, FlockOperation::NonBlockingLockExclusive)
        .is_ok()
        .then_some(dir))
}

/// The process holding the lock on `root` now, from `/proc/locks`.
fn holder(root: &Path) -> Option<i32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root).ok()?;
    let dev = meta.dev();
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // `1: FLOCK  ADVISORY  WRITE 1234 fe:00:5309944 0 EOF`; a waiter's line has `->`.
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&"FLOCK") {
            return None;
        }
        let mut id = fields.get(5)?.split(':');
        let (ma, mi, ino) = (id.next()?, id.next()?, id.next()?);
        let same = u32::from_str_radix(ma, 16).ok()? == major
            && u32::from_str_radix(mi, 16).ok()? == minor
            && ino.parse::<u64>().ok()? == meta.ino();
        let pid: i32 = fields.get(4)?.parse().ok()?;
        (same && pid > 0).then_some(pid)
    })
}

/// The `link` verb `pid` runs (`up`, `down`), from its command line.
fn verb_of(pid: i32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let arg = cmdline.split(|b| *b == 0).nth(1)?;
    Some(String::from_utf8_lossy(arg).into_owned())
}

/// The host holding the lock on `layout` now: a `link up` process (not a `link down`
/// clearing what a dead host left).
pub(crate) fn host(layout: &StateLayout) -> Option<i32> {
    holder(layout.root()).filter(|pid| verb_of(*pid).as_deref() == Some("up"))
}

/// Takes the lock for `up`, held until the directory is dropped. A host holding it is named
/// and the start refused; while something else holds it (a `link down` clearing up, a host
/// that has just exited), `up` waits, and stops waiting on SIGTERM or SIGINT.
pub(crate) async fn take(
    layout: &StateLayout,
    signals: &mut link_protocol::plugin::ShutdownSignals,
) -> Result<File> {
    let root = layout.root();
    let deadline = Instant::now() + WAIT_FOR_NON_HOST;
    loop {
        if let Some(dir) = lock_if_free(layout)? {
            return Ok(dir);
        }
        if let Some(pid) = host(layout) {
            bail!(
                "state root {} is in use by a running `link up` (pid {pid}); stop it with \
                 `link down --state {}` or choose another --state",
                root.display(),
                root.display()
            );
        }
        if Instant::now() > deadline {
            let who = match holder(root) {
                Some(pid) => format!("process {pid} ({})", verb_of(pid).unwrap_or_default()),
                None => "another process".to_owned(),
            };
            bail!(
                "state root {} has been locked by {who} for {WAIT_FOR_NON_HOST:?}; nothing was \
                 started",
                root.display()
            );
        }
        tokio::select! {
            _ = signals.recv() => bail!(
                "stopped by a signal while waiting for the lock of {}; nothing was started",
                root.display()
            ),
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
}

/// A `link up` for `layout` that has not taken the lock yet: a process running this very
/// program as `link up` whose `--state` names this root.
pub(crate) fn starting_up(layout: &StateLayout) -> Vec<i32> {
    let Ok(me) = std::fs::metadata("/proc/self/exe") else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mine = std::process::id() as i32;
    procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != mine)
        .filter(|pid| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe.dev() == me.dev() && exe.ino() == me.ino())
        })
        .filter(|pid| up_state(*pid).as_deref() == Some(layout.root()))
        .collect()
}

/// The state root a `link up` process was given, made absolute against its working directory.
fn up_state(pid: i32) -> Option<PathBuf> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if args.get(1).map(String::as_str) != Some("up") {
        return None;
    }
    let state = args
        .iter()
        .enumerate()
        .find_map(|(i, a)| match a.strip_prefix("--state") {
            Some("") => args.get(i + 1).cloned(),
            Some(rest) => rest.strip_prefix('=').map(str::to_owned),
            None => None,
        })?;
    let state = PathBuf::from(state);
    if state.is_absolute() {
        return Some(state);
    }
    Some(
        std::fs::read_link(format!("/proc/{pid}/cwd"))
            .ok()?
            .join(state),
    )
}

/// How often a running host checks that its state root is still the directory it locked
/// ([`root_lost`]): a removed root is noticed within this, and the check (two `stat`s) costs
/// nothing that matters once a second. Not inotify: `IN_DELETE_SELF` on the root comes only
/// once the last descriptor of it is closed, and the host holds one (the lock) for its life.
pub(crate) const ROOT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Why the directory `lock` holds is no longer the state root at `root`: it was removed (its
/// link count is 0, or nothing is at the path) or another directory is at the path now (its
/// device and inode differ). `None` while it still is, or when the path cannot be looked at
/// for another reason (a transient error must not stop a runtime).
pub(crate) fn root_replaced(lock: &File, root: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let held = lock.metadata().ok()?;
    if held.nlink() == 0 {
        return Some(format!("its state root {} was removed", root.display()));
    }
    match std::fs::metadata(root) {
        Ok(now) if (now.dev(), now.ino()) == (held.dev(), held.ino()) => None,
        Ok(_) => Some(format!(
            "its state root {} was replaced by another directory",
            root.display()
        )),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Some(format!(
                "its state root {} was removed or moved away",
                root.display()
            ))
        }
        Err(_) => None,
    }
}

/// Resolves with the reason once the state root `lock` holds is no longer the one at `root`
/// ([`root_replaced`]), checked every [`ROOT_CHECK_INTERVAL`]. A runtime whose root is gone
/// serves nothing anyone can reach (its sockets, pids file and control key went with it) and
/// would otherwise run on detached, while `link down` on the path reaches only a runtime
/// started there since.
pub(crate) async fn root_lost(lock: &File, root: &Path) -> String {
    let mut every = tokio::time::interval(ROOT_CHECK_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Some(reason) = root_replaced(lock, root) {
            return reason;
        }
    }
}

/// Removes the files a host made under its state root when it stops, through the locked
/// directory: a root removed while the host ran (and perhaps made again for another runtime)
/// is not where these names resolve, so nothing of another runtime is touched.
pub(crate) fn remove_own_files(lock: &File, layout: &StateLayout) {
    let mut own = layout.all_sockets();
    own.extend([layout.pids_file(), layout.control_key_file()]);
    for path in own {
        if let Ok(relative) = path.strip_prefix(layout.root()) {
            let _ = rustix::fs::unlinkat(lock, relative, rustix::fs::AtFlags::empty());
        }
    }
}
