//! The built programs a run uses: which ones, whether they exist, their sizes and hashes.
//! The kit never builds or downloads them; it names every missing one and the build command.

use link_protocol::manifest;
use link_protocol::plugin::Profile;
use link_report::Artifact;
use std::path::{Path, PathBuf};

/// The host program.
pub const HOST: &str = "link";

/// The spec's build command for every program both profiles use.
pub fn build_command() -> String {
    let packages: Vec<String> = manifest::packages().map(|p| format!("-p {p}")).collect();
    format!("cargo build --locked --release {}", packages.join(" "))
}

/// Every program a run of `profile` needs: the host, its plugins, and the sandbox (whose
/// probe the runner runs in both profiles).
pub fn required(profile: Profile) -> Vec<&'static str> {
    let mut names = vec![HOST];
    names.extend(manifest::programs_of(profile));
    if !names.contains(&manifest::SANDBOX.program) {
        names.push(manifest::SANDBOX.program);
    }
    names
}

/// Programs that are not there.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProgramsError {
    #[error("programs directory {} does not exist: build the programs with `{}` and pass target/release", .0.display(), build_command())]
    NoDirectory(PathBuf),
    #[error("programs missing from {dir}: {}; build them with `{}`", names.join(", "), build_command())]
    Missing { dir: PathBuf, names: Vec<String> },
}

/// Finds every program `profile` needs in `dir`, naming all the missing ones at once.
pub fn find(dir: &Path, profile: Profile) -> Result<Vec<PathBuf>, ProgramsError> {
    if !dir.is_dir() {
        return Err(ProgramsError::NoDirectory(dir.to_path_buf()));
    }
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for name in required(profile) {
        let path = dir.join(name);
        if is_executable(&path) {
            found.push(path);
        } else {
            missing.push(name.to_owned());
        }
    }
    if missing.is_empty() {
        Ok(found)
    } else {
        Err(ProgramsError::Missing {
            dir: dir.to_path_buf(),
            names: missing,
        })
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Size and sha256 of one program.
pub fn artifact(path: &Path) -> std::io::Result<Artifact> {
    let digest = link_protocol::digest::sha256_file(path)?;
    Ok(Artifact {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        path: path.display().to_string(),
        bytes: digest.bytes,
        sha256: digest.sha256,
    })
}

/// `target/<profile>/`, where cargo puts every program of the workspace: a test executable
/// runs from its `deps/` directory.
pub fn test_programs() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target profile directory")
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_every_missing_program_and_hashes_files() {
        let dir = PathBuf::from(std::env::var("HOME").unwrap())
            .join(".cache/lnk-t")
            .join(format!("programs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = find(&dir, Profile::Mini).unwrap_err();
        let text = err.to_string();
        for name in required(Profile::Mini) {
            assert!(text.contains(name), "{text}");
        }
        assert!(text.contains("cargo build --locked --release"), "{text}");
        let file = dir.join("x");
        std::fs::write(&file, "abc").unwrap();
        let a = artifact(&file).unwrap();
        assert_eq!(a.bytes, 3);
        assert_eq!(
            a.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(
            find(&dir, Profile::Link),
            Err(ProgramsError::NoDirectory(_))
        ));
    }
}
