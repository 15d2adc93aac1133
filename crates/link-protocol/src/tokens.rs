//! The bearer-token store shared by both connection services and the auth plugin.
//!
//! Only the sha256 of a token is written, one per line: `<hex> active|revoked`. Writes
//! replace the file atomically ([`crate::files::write_atomic`]) under an exclusive lock on
//! `<file>.lock`, so two writers (`link token create` and the auth plugin, or two of either)
//! never lose each other's token; comparisons are constant-time.

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
    let mut lines = read_lines(file)?;
    lines.push(format!("{} active", hash(token)));
    write_atomic(file, &lines)
}

/// True when `token` matches an active stored hash.
pub fn verify(file: &Path, token: &str) -> io::Result<bool> {
    let want = hash(token);
    let mut found = false;
    for line in read_lines(file)? {
        let mut parts = line.split_whitespace();
        let (Some(stored), Some(state)) = (parts.next(), parts.next()) else {
            continue;
        };
        // Compare every line so timing does not reveal which one matched.
        let same: bool = stored.as_bytes().ct_eq(want.as_bytes()).into();
        found |= same && state == "active";
    }
    Ok(found)
}

/// Marks the token as revoked; returns false when it was not stored.
pub fn revoke(file: &Path, token: &str) -> io::Result<bool> {
    let want = hash(token);
    let mut hit = false;
    let _lock = lock(file)?;
    let lines = read_lines(file)?
        .into_iter()
        .map(|line| match line.split_whitespace().next() {
            Some(stored) if bool::from(stored.as_bytes().ct_eq(want.as_bytes())) => {
                hit = true;
                format!("{stored} revoked")
            }
            _ => line,
        })
        .collect::<Vec<_>>();
    if hit {
        write_atomic(file, &lines)?;
    }
    Ok(hit)
}

/// Holds `<file>.lock` exclusively until dropped (the read-modify-write of one writer).
fn lock(file: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new(".")))?;
    let mut name = file.as_os_str().to_owned();
    name.push(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(name)?;
    f.lock()?;
    Ok(f)
}

fn read_lines(file: &Path) -> io::Result<Vec<String>> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(text.lines().map(str::to_owned).collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

fn write_atomic(file: &Path, lines: &[String]) -> io::Result<()> {
    // The directory exists: `lock` made it, and every write holds the lock.
    let dir = file.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".tokens.{}.tmp", std::process::id()));
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
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
}
