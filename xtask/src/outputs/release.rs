//! The spec's locked release build commands and the programs they must leave in `target/release`.
//!
//! Apart from whether what `target/release` holds is current (`fresh`): these are the spec's
//! own words, which a test holds against its text.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Where the workspace and its build output are.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub root: PathBuf,
    pub target: PathBuf,
}

impl Workspace {
    /// The workspace this xtask belongs to; `CARGO_TARGET_DIR` moves the target directory.
    pub fn locate() -> Workspace {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let target = match std::env::var_os("CARGO_TARGET_DIR").filter(|t| !t.is_empty()) {
            Some(t) => root.join(t),
            None => root.join("target"),
        };
        Workspace { root, target }
    }

    pub fn release(&self) -> PathBuf {
        self.target.join("release")
    }

    pub fn runner(&self) -> PathBuf {
        self.release().join(RUNNER)
    }

    /// `path` relative to the workspace root when inside it, for commands a person reads.
    pub fn show(&self, path: &Path) -> PathBuf {
        path.strip_prefix(&self.root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

/// The packages of the first locked build command: the host's, then every plugin's, in the
/// manifest's order (`link_protocol::manifest::packages`); the spec lists the same set.
pub fn packages() -> Vec<&'static str> {
    link_protocol::manifest::packages().collect()
}

/// The runner example's path under the release directory.
pub const RUNNER: &str = "examples/runtime";

/// The spec's two build commands, as argument lists after `cargo`.
pub fn build_commands() -> Vec<Vec<String>> {
    let mut programs: Vec<String> = ["build", "--locked", "--release"]
        .map(String::from)
        .to_vec();
    for p in packages() {
        programs.push("-p".into());
        programs.push(p.into());
    }
    let runner = [
        "build",
        "--locked",
        "--release",
        "-p",
        "link-harness-conformance",
        "--example",
        "runtime",
    ]
    .map(String::from)
    .to_vec();
    vec![programs, runner]
}

/// The load benchmark's measuring program under the release directory. Not an output of the
/// spec's two build commands (no `runtime` needs it): `cargo xtask load` asks for it with
/// [`load_build_command`].
pub const LOAD: &str = "examples/load";

/// The build command of [`LOAD`], as arguments after `cargo`.
pub fn load_build_command() -> Vec<String> {
    [
        "build",
        "--locked",
        "--release",
        "-p",
        "link-cli",
        "--example",
        "load",
    ]
    .map(String::from)
    .to_vec()
}

/// The outputs of the first build command (the host and every plugin), relative to the
/// release directory.
pub fn program_outputs() -> Vec<PathBuf> {
    packages()
        .iter()
        .map(|p| PathBuf::from(binary_name(p)))
        .collect()
}

/// A build command as a person would type it.
pub fn command_text(args: &[String]) -> String {
    format!("cargo {}", args.join(" "))
}

/// Binary names equal package names, except the host's (`link-cli`), whose binary is `link`.
pub fn binary_name(package: &str) -> &str {
    let host = link_protocol::manifest::HOST;
    if package == host.package {
        host.program
    } else {
        package
    }
}

/// Every output of the two build commands, relative to the release directory.
pub fn expected_outputs() -> Vec<PathBuf> {
    let mut all = program_outputs();
    all.push(PathBuf::from(RUNNER));
    all
}

/// A program, by name, with its sha256.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Program {
    pub name: String,
    pub sha256: String,
}

/// Every program of the first build command in `dir`, by name, with its sha256.
pub fn hash_programs(dir: &Path) -> Result<Vec<Program>> {
    packages()
        .iter()
        .map(|p| {
            let name = binary_name(p);
            let path = dir.join(name);
            let digest = link_protocol::digest::sha256_file(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Ok(Program {
                name: name.into(),
                sha256: digest.sha256,
            })
        })
        .collect()
}

/// Runs the spec's two locked release build commands, from the workspace root.
pub fn build(ws: &Workspace) -> Result<()> {
    let sh = Shell::new()?;
    sh.change_dir(&ws.root);
    // Inside `cargo xtask`, CARGO names the cargo that is running us.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for args in build_commands() {
        let text = command_text(&args);
        link_protocol::errln!("xtask: $ {text}");
        cmd!(sh, "{cargo} {args...}")
            .quiet()
            .run()
            .with_context(|| format!("the locked release build failed: `{text}`"))?;
    }
    // Written after both commands succeeded, so it is newer than the configuration they read.
    let stamp = ws.release().join(BUILT_STAMP);
    std::fs::write(
        &stamp,
        "written by `cargo xtask build` after the locked release build succeeded\n",
    )
    .with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(())
}

/// Left in the release directory by a successful [`build`]: every output is current with the
/// workspace configuration as of this file's modification time.
pub const BUILT_STAMP: &str = ".xtask-built";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    /// The first command builds the spec's packages (the manifest's, in its order), the
    /// second the runner.
    fn commands_match_the_spec_text() {
        let spec = "cargo build --locked --release -p link-cli -p link-plugin-agent -p \
             link-plugin-sandbox -p link-plugin-measure -p link-plugin-model -p \
             link-plugin-secret -p link-plugin-auth -p link-plugin-file-store -p \
             link-mini-harness -p link-mini-connection -p link-plugin-link-harness -p \
             link-plugin-link-run -p link-plugin-file-tool -p link-plugin-link-code -p \
             link-plugin-link-scheduler";
        let cmds = build_commands();
        let words = |text: &str| {
            let mut words: Vec<String> = text.split_whitespace().map(String::from).collect();
            words.sort();
            words
        };
        let text = command_text(&cmds[0]);
        assert!(
            text.starts_with("cargo build --locked --release -p link-cli -p "),
            "{text}"
        );
        assert_eq!(words(&text), words(spec), "{text}");
        assert_eq!(
            command_text(&cmds[1]),
            "cargo build --locked --release -p link-harness-conformance --example runtime"
        );
        let outputs = expected_outputs();
        assert_eq!(outputs.len(), link_protocol::manifest::ALL.len() + 2);
        assert_eq!(outputs[0], PathBuf::from("link"));
        assert_eq!(outputs.last(), Some(&PathBuf::from("examples/runtime")));
    }
}
