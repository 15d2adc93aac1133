//! Handing a workspace to the identity a command runs as, and taking back what it leaves.
//!
//! Because the workspace and home are written by the file tool as root too, [`prepare`]
//! gives every entry to the agent's identity before a command, and [`clear_setid`] removes
//! setuid and setgid bits after one. Both walk with directory descriptors and never follow a
//! symlink, so nothing a command plants can redirect them outside the directory.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags};
use std::ffi::{CStr, CString};
use std::path::Path;

/// What the files under a directory take: allocated bytes (so a sparse file counts what it
/// uses) and entries (each name, the directory itself not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub entries: u64,
}

impl Usage {
    fn count(&mut self, stat: &rustix::fs::Stat) {
        self.bytes = self
            .bytes
            .saturating_add((stat.st_blocks as u64).saturating_mul(512));
        self.entries += 1;
    }

    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            bytes: self.bytes.saturating_add(other.bytes),
            entries: self.entries.saturating_add(other.entries),
        }
    }
}

/// Measures what is under `dir` and, given an identity, gives every entry not already its own
/// to it.
pub fn prepare(dir: &Path, owner: Option<(u32, u32)>) -> std::io::Result<Usage> {
    let root = open_dir(rustix::fs::CWD, dir)?;
    if let Some((uid, gid)) = owner {
        rustix::fs::fchown(
            &root,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )?;
    }
    let mut usage = Usage::default();
    walk(root, &mut |parent, name, stat| {
        usage.count(stat);
        let Some((uid, gid)) = owner else {
            return Ok(());
        };
        if stat.st_uid != uid || stat.st_gid != gid {
            let (u, g) = (
                rustix::fs::Uid::from_raw(uid),
                rustix::fs::Gid::from_raw(gid),
            );
            rustix::fs::chownat(parent, name, Some(u), Some(g), AtFlags::SYMLINK_NOFOLLOW)?;
        }
        Ok(())
    })?;
    Ok(usage)
}

/// What the walk of `dir` saw while a command may be changing it, counted up to an error
/// too. (A walk racing the command's renames may count a moved entry twice: at that
/// command's own cost.)
pub fn usage_seen(dir: &Path) -> Usage {
    let mut usage = Usage::default();
    if let Ok(root) = open_dir(rustix::fs::CWD, dir) {
        let _ = walk(root, &mut |_, _, stat| {
            usage.count(stat);
            Ok(())
        });
    }
    usage
}

/// Clears setuid and setgid on every file and directory under `dir`; returns how many had
/// either bit.
pub fn clear_setid(dir: &Path) -> std::io::Result<usize> {
    let root = open_dir(rustix::fs::CWD, dir)?;
    let mut cleared = 0;
    walk(root, &mut |parent, name, stat| {
        let kind = stat.st_mode & libc::S_IFMT;
        if stat.st_mode & (libc::S_ISUID | libc::S_ISGID) == 0
            || (kind != libc::S_IFREG && kind != libc::S_IFDIR)
        {
            return Ok(());
        }
        // Opened without following, then changed through the descriptor: the entry cannot be
        // swapped for a symlink between the look and the change.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let keep = Mode::from_raw_mode(stat.st_mode & 0o1777);
        match rustix::fs::openat(parent, name, flags | OFlags::NOCTTY, Mode::empty()) {
            Ok(fd) => {
                let now = rustix::fs::fstat(&fd)?;
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(now.st_mode & 0o1777))?;
            }
            // A file its owner may not read (mode 4000, say) cannot be opened by an ordinary
            // user: changed by name, which `statat` just saw is not a symlink.
            Err(rustix::io::Errno::ACCESS) => {
                rustix::fs::chmodat(parent, name, keep, AtFlags::empty())?
            }
            Err(e) => return Err(e.into()),
        }
        cleared += 1;
        Ok(())
    })?;
    Ok(cleared)
}

type Visit<'a> = dyn FnMut(BorrowedFd<'_>, &CStr, &rustix::fs::Stat) -> std::io::Result<()> + 'a;

/// A directory of the walk: which one it is (so coming back up through `..` can be checked)
/// and its subdirectories not visited yet.
struct Frame {
    id: (u64, u64),
    pending: Vec<CString>,
}

/// Depth-first over `root`, calling `visit` for every entry. Iterative and holding two
/// descriptors at most, whatever the depth: it goes down by name and comes back up through
/// `..`, checked to be the directory it came from. An entry that fails is recorded and the
/// walk goes on, so one bad entry never leaves the rest unvisited; the first error is
/// returned at the end.
fn walk(root: OwnedFd, visit: &mut Visit<'_>) -> std::io::Result<()> {
    let mut first_error = None;
    let mut cur = root;
    let mut frame = scan(&cur, visit, &mut first_error)?;
    let mut stack: Vec<Frame> = Vec::new();
    loop {
        if let Some(name) = frame.pending.pop() {
            match open_dir(&cur, name.as_c_str()) {
                Ok(child) => {
                    let child_frame = scan(&child, visit, &mut first_error)?;
                    stack.push(std::mem::replace(&mut frame, child_frame));
                    cur = child;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            continue;
        }
        let Some(parent) = stack.pop() else { break };
        let up = open_dir(&cur, c"..")?;
        if id_of(&rustix::fs::fstat(&up)?) != parent.id {
            return Err(std::io::Error::other("a directory moved during the walk"));
        }
        cur = up;
        frame = parent;
    }
    first_error.map_or(Ok(()), Err)
}

/// Visits every entry of `dir`; returns its frame with the subdirectories to descend into.
fn scan(
    dir: &OwnedFd,
    visit: &mut Visit<'_>,
    first_error: &mut Option<std::io::Error>,
) -> std::io::Result<Frame> {
    let id = id_of(&rustix::fs::fstat(dir)?);
    let mut pending = Vec::new();
    let mut entries = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(s) => s,
            // Removed meanwhile: nothing to do for it.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => {
                first_error.get_or_insert(e.into());
                continue;
            }
        };
        if let Err(e) = visit(dir.as_fd(), name, &stat) {
            first_error.get_or_insert(e);
        }
        if stat.st_mode & libc::S_IFMT == libc::S_IFDIR {
            pending.push(name.to_owned());
        }
    }
    Ok(Frame { id, pending })
}

fn id_of(stat: &rustix::fs::Stat) -> (u64, u64) {
    (stat.st_dev, stat.st_ino)
}

fn open_dir<P: rustix::path::Arg>(at: impl AsFd, path: P) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(at, path, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn setid_bits_are_cleared_and_symlinks_not_followed() {
        let dir = std::env::temp_dir().join(format!("lnk-setid-{}", std::process::id()));
        let outside = dir.with_extension("outside");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(&outside, b"x").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let file = dir.join("sub/tool");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o6755)).unwrap();
        symlink(&outside, dir.join("link")).unwrap();
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();

        assert_eq!(clear_setid(&dir).unwrap(), 1);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&file), 0o755);
        assert_eq!(mode(&plain), 0o755);
        assert_eq!(
            mode(&outside),
            0o4755,
            "the symlink's target is not the walk's"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }

    #[test]
    fn a_tree_deeper_than_the_descriptor_limit_is_walked_whole() {
        let dir = std::env::temp_dir().join(format!("lnk-deep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Built by descriptor: the path itself would pass PATH_MAX long before the bottom.
        let mut fd = open_dir(rustix::fs::CWD, &dir).unwrap();
        for _ in 0..500 {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = open_dir(&fd, "d").unwrap();
        }
        let bottom = rustix::fs::openat(
            &fd,
            "tool",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o755),
        )
        .unwrap();
        rustix::fs::fchmod(&bottom, Mode::from_raw_mode(0o4755)).unwrap();
        // 500 levels under a limit of 64 descriptors: only a walk that does not hold one per
        // level gets to the bottom.
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let before = getrlimit(Resource::Nofile);
        let low = Rlimit {
            current: Some(64),
            maximum: before.maximum,
        };
        setrlimit(Resource::Nofile, low).unwrap();
        let cleared = clear_setid(&dir);
        setrlimit(Resource::Nofile, before).unwrap();
        assert_eq!(cleared.unwrap(), 1);
        let mode = rustix::fs::fstat(&bottom).unwrap().st_mode & 0o7777;
        assert_eq!(mode, 0o755);
        drop((fd, bottom));
        // remove_dir_all goes by path, too deep for it; GNU rm walks by descriptor.
        let rm = std::process::Command::new("rm")
            .arg("-rf")
            .arg(&dir)
            .status();
        assert!(rm.unwrap().success());
    }
}
