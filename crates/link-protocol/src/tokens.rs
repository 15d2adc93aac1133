//! The bearer-token store shared by both connection services and the auth plugin.
//!
//! Only the sha256 of a token is written, one per line: `<hex> active|revoked`. Writes
//! replace the file atomically ([`crate::files::write_atomic`]) under an exclusive lock on
//! `<file>.lock`, so two writers (`link token create` and the auth plugin, or two of either)
//! never lose each other's token; comparisons are constant-time.
//!
//! A damaged line (not UTF-8, or not `<hex> active|revoked`) is never a valid token, and it
//! costs no other token its validity: verifying reads past it. Writing refuses while the file
//! has one ([`Damaged`]), naming the lines, so a rewrite never drops what someone must look at.

use sha2::{Digest, Sha256};
use std::io;
use std::path::Path;
use subtle::ConstantTimeEq;

/// The hex sha256 of a token, as stored.
pub fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    // One string, not one per byte: the endpoint hashes every request's token.
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// Makes a new random token (`lnk_` + 64 hex digits); nothing is stored.
pub fn generate() -> io::Result<String> {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(io::Error::other)?;
    Ok(format!("lnk_{}", hex(&raw)))
}

/// Generates a token, stores its hash, and returns the token (shown once, never stored).
pub fn create(file: &Path) -> io::Result<String> {
    let token = generate()?;
    store(file, &token)?;
    Ok(token)
}

/// Stores the hash of `token` (one [`generate`] made) as active: for a caller that must
/// first hand the token over (`link token create` writes it out whole, then stores it).
pub fn store(file: &Path, token: &str) -> io::Result<()> {
    let _lock = lock(file)?;
    let mut entries = read_for_writing(file)?;
    entries.push(Entry {
        hash: hash(token),
        state: State::Active,
    });
    write_atomic(file, &entries)
}

/// Whether the store can take a token now: `Err` ([`Damaged`] as `InvalidData`) when a line of
/// it is damaged, so a caller can refuse before it hands a token over.
pub fn check_writable(file: &Path) -> io::Result<()> {
    read_for_writing(file).map(drop)
}

/// True when `token` matches an active stored hash.
pub fn verify(file: &Path, token: &str) -> io::Result<bool> {
    let want = hash(token);
    let mut found = false;
    for line in read(file)? {
        let Line::Entry(entry) = line else { continue };
        // Compare every line so timing does not reveal which one matched.
        let same: bool = entry.hash.as_bytes().ct_eq(want.as_bytes()).into();
        found |= same && entry.state == State::Active;
    }
    Ok(found)
}

/// Marks the token as revoked; returns false when it was not stored.
pub fn revoke(file: &Path, token: &str) -> io::Result<bool> {
    let want = hash(token);
    let _lock = lock(file)?;
    let mut entries = read_for_writing(file)?;
    let mut hit = false;
    for entry in &mut entries {
        if bool::from(entry.hash.as_bytes().ct_eq(want.as_bytes())) {
            hit = true;
            entry.state = State::Revoked;
        }
    }
    if hit {
        write_atomic(file, &entries)?;
    }
    Ok(hit)
}

/// One stored token: the hex sha256 and whether it is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    hash: String,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Active,
    Revoked,
}

/// A line of the store as read; blank lines are neither.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Entry(Entry),
    /// Its 1-based line number.
    Damaged(usize),
}

/// The store has lines that are not `<sha256 hex> active|revoked`: nothing is written until
/// someone fixes or removes them.
#[derive(Debug, thiserror::Error)]
#[error(
    "{file}: line(s) {} are damaged (each line is `<sha256 hex> active|revoked`); fix or \
     remove them, then retry; nothing was changed",
    lines.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
)]
pub struct Damaged {
    pub file: String,
    pub lines: Vec<usize>,
}

fn parse(number: usize, raw: &[u8]) -> Option<Line> {
    let Ok(text) = std::str::from_utf8(raw) else {
        return Some(Line::Damaged(number));
    };
    let mut parts = text.split_whitespace();
    let line = match (parts.next(), parts.next(), parts.next()) {
        (None, ..) => return None,
        (Some(h), Some(state), None) if is_hash(h) => match state {
            "active" => Line::Entry(Entry {
                hash: h.to_owned(),
                state: State::Active,
            }),
            "revoked" => Line::Entry(Entry {
                hash: h.to_owned(),
                state: State::Revoked,
            }),
            _ => Line::Damaged(number),
        },
        _ => Line::Damaged(number),
    };
    Some(line)
}

fn is_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn read(file: &Path) -> io::Result<Vec<Line>> {
    let bytes = match read_unfollowed(file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .filter_map(|(i, raw)| parse(i + 1, raw))
        .collect())
}

/// `file`'s bytes, never through a link: the auth plugin may write `auth/`, and a link it (or
/// anyone) put at `auth/tokens` would have `link token create` as root read, and report the
/// lines of, a file of its choosing (`safe_root`, issue 42). Opened non-blocking so a FIFO
/// planted there cannot hold the open, then refused unless a regular file.
fn read_unfollowed(file: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(feature = "runtime")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
        open.custom_flags(flags.bits() as i32);
    }
    let mut f = open.open(file).map_err(|e| refused_link(file, e))?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{}: not a regular file; remove it and run this again",
            file.display()
        )));
    }
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A link refused at `path` said as every refusal under a state root is (`safe_root`).
#[cfg(feature = "runtime")]
fn refused_link(path: &Path, e: io::Error) -> io::Error {
    crate::safe_root::refused_link(path, e)
}

/// Without the runtime (the xtask) nothing is refused, and the error stays as it was.
#[cfg(not(feature = "runtime"))]
fn refused_link(_: &Path, e: io::Error) -> io::Error {
    e
}

/// The entries, or [`Damaged`] when a line is.
fn read_for_writing(file: &Path) -> io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    let mut damaged = Vec::new();
    for line in read(file)? {
        match line {
            Line::Entry(e) => entries.push(e),
            Line::Damaged(n) => damaged.push(n),
        }
    }
    if damaged.is_empty() {
        Ok(entries)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            Damaged {
                file: file.display().to_string(),
                lines: damaged,
            },
        ))
    }
}

/// Holds `<file>.lock` exclusively until dropped (the read-modify-write of one writer).
fn lock(file: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new(".")))?;
    let mut name = file.as_os_str().to_owned();
    name.push(".lock");
    let mut open = std::fs::OpenOptions::new();
    open.create(true).truncate(false).write(true).mode(0o600);
    // Never through a link the auth plugin, which may write `auth/`, put in its place: `link
    // token create` as root would create or open its target (`safe_root`, issue 42).
    #[cfg(feature = "runtime")]
    open.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    let f = open
        .open(&name)
        .map_err(|e| refused_link(Path::new(&name), e))?;
    f.lock()?;
    Ok(f)
}

fn write_atomic(file: &Path, entries: &[Entry]) -> io::Result<()> {
    // The directory exists: `lock` made it, and every write holds the lock.
    let dir = file.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".tokens.{}.tmp", std::process::id()));
    let text: String = entries
        .iter()
        .map(|e| {
            let state = match e.state {
                State::Active => "active",
                State::Revoked => "revoked",
            };
            format!("{} {state}\n", e.hash)
        })
        .collect();
    crate::files::write_atomic(file, &tmp, text.as_bytes(), 0o600)
}

#[cfg(test)]
mod tests {
    /// Many writers at once, each with its own descriptor on the lock (as separate processes
    /// have): no token is lost.
    #[test]
    fn concurrent_creates_keep_every_token() {
        let dir = std::env::temp_dir().join(format!("lnk-tok-many-{}", std::process::id()));
        let file = dir.join("tokens");
        let writers: Vec<_> = (0..8)
            .map(|_| {
                let file = file.clone();
                std::thread::spawn(move || {
                    (0..10)
                        .map(|_| super::create(&file).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let made: Vec<String> = writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        assert_eq!(made.len(), 80);
        for t in &made {
            assert!(super::verify(&file, t).unwrap(), "a token was lost");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(feature = "runtime")]
    #[test]
    fn a_lock_planted_as_a_link_is_refused_not_followed() {
        let dir = std::env::temp_dir().join(format!("lnk-tok-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (file, target) = (dir.join("tokens"), dir.join("elsewhere"));
        std::os::unix::fs::symlink(&target, dir.join("tokens.lock")).unwrap();
        let err = super::create(&file).unwrap_err().to_string();
        let named = format!("{} is a symlink", dir.join("tokens.lock").display());
        assert!(err.contains(&named) && err.contains("remove it"), "{err}");
        assert!(!target.exists() && !file.exists());
        std::fs::remove_file(dir.join("tokens.lock")).unwrap();
        let token = super::create(&file).unwrap();
        assert!(super::verify(&file, &token).unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A link planted at the store itself (the auth plugin may write `auth/`), to a file
    /// outside: every read and write refuses, naming it and the fix, and the file it points at
    /// is neither read into a token nor changed; a FIFO there is refused without a hang. The
    /// twin: rid of them, the same store works.
    #[cfg(feature = "runtime")]
    #[test]
    fn a_store_planted_as_a_link_or_fifo_is_refused_not_followed() {
        let dir = std::env::temp_dir().join(format!("lnk-tok-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (file, target) = (dir.join("tokens"), dir.join("elsewhere"));
        let kept = format!("{} active\n", super::hash("lnk_theirs"));
        std::fs::write(&target, &kept).unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        let named = format!("{} is a symlink", file.display());
        for refused in [
            super::create(&file).unwrap_err(),
            super::check_writable(&file).unwrap_err(),
            super::revoke(&file, "lnk_theirs").unwrap_err(),
            super::verify(&file, "lnk_theirs").unwrap_err(),
        ] {
            let said = refused.to_string();
            assert!(
                said.contains(&named) && said.contains("remove it"),
                "{said}"
            );
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), kept);
        assert!(std::fs::symlink_metadata(&file).unwrap().is_symlink());

        std::fs::remove_file(&file).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            file.as_path(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let said = super::check_writable(&file).unwrap_err().to_string();
        assert!(said.contains("not a regular file"), "{said}");

        std::fs::remove_file(&file).unwrap();
        let token = super::create(&file).unwrap();
        assert!(super::verify(&file, &token).unwrap());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), kept);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn create_verify_revoke() {
        let dir = std::env::temp_dir().join(format!("lnk-tok-{}", std::process::id()));
        let file = dir.join("tokens");
        let a = super::create(&file).unwrap();
        let b = super::create(&file).unwrap();
        assert!(super::verify(&file, &a).unwrap());
        assert!(!super::verify(&file, "lnk_wrong").unwrap());
        assert!(!std::fs::read_to_string(&file).unwrap().contains(&a));
        assert!(super::revoke(&file, &a).unwrap());
        assert!(!super::verify(&file, &a).unwrap());
        assert!(super::verify(&file, &b).unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A damaged line (not UTF-8, or not a hash and a state) is never valid and costs the
    /// other tokens nothing; a write refuses, naming the line, and changes nothing.
    #[test]
    fn a_damaged_line_is_never_valid_costs_no_other_token_and_blocks_writes_by_name() {
        let dir = std::env::temp_dir().join(format!("lnk-tok-bad-{}", std::process::id()));
        let file = dir.join("tokens");
        let good = super::create(&file).unwrap();
        let revoked = super::create(&file).unwrap();
        assert!(super::revoke(&file, &revoked).unwrap());
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.extend_from_slice(b"\xff\xfe not text\n\n");
        bytes.extend_from_slice(format!("{} maybe\n", super::hash("lnk_x")).as_bytes());
        std::fs::write(&file, &bytes).unwrap();

        assert!(
            super::verify(&file, &good).unwrap(),
            "the good token still works"
        );
        assert!(!super::verify(&file, &revoked).unwrap());
        assert!(
            !super::verify(&file, "lnk_x").unwrap(),
            "a damaged line is not valid"
        );

        for refused in [
            super::store(&file, "lnk_new").unwrap_err(),
            super::revoke(&file, &good).unwrap_err(),
            super::check_writable(&file).unwrap_err(),
        ] {
            assert_eq!(refused.kind(), std::io::ErrorKind::InvalidData);
            let said = refused.to_string();
            assert!(said.contains("line(s) 3, 5 are damaged"), "{said}");
            assert!(said.contains("fix or remove them"), "{said}");
        }
        assert_eq!(std::fs::read(&file).unwrap(), bytes, "nothing was changed");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
