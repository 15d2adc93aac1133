//! The sha256 the workspace names a file by: a program in a run report or a benchmark, a report
//! in a comparison. One reader and one hex form, so the kit's and the xtask's figures for the
//! same file always agree.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// A file's size and sha256 (lower-case hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    pub bytes: u64,
    pub sha256: String,
}

/// The lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::tokens::hex(&Sha256::digest(bytes))
}

/// The size and sha256 of the file at `path`, read in pieces (a program may be large).
pub fn sha256_file(path: &Path) -> std::io::Result<FileDigest> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok(FileDigest {
        bytes,
        sha256: crate::tokens::hex(&hasher.finalize()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_and_its_bytes_have_one_digest() {
        let dir = std::env::temp_dir().join(format!("lnk-digest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x");
        std::fs::write(&path, "abc").unwrap();
        let d = sha256_file(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(
            d,
            FileDigest {
                bytes: 3,
                sha256: abc.into()
            }
        );
        assert_eq!(sha256_hex(b"abc"), abc);
    }
}
