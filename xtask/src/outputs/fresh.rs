//! Whether each program in `target/release` is the current release build: present, not older
//! than a source it was built from or the workspace's configuration, and not a test build.
//!
//! Apart from the build itself: every benchmark asks this before it measures, and `doctor`
//! and the runtime comparison report it.

use super::release::{command_text, expected_outputs, Workspace, BUILT_STAMP};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Why one output cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    Missing {
        output: PathBuf,
    },
    Stale {
        output: PathBuf,
        newer: PathBuf,
    },
    /// Built with the test hooks (by `cargo test`, or a workspace build with its examples):
    /// not the release build.
    TestHooks {
        output: PathBuf,
    },
}

impl Problem {
    pub fn output(&self) -> &Path {
        match self {
            Problem::Missing { output }
            | Problem::Stale { output, .. }
            | Problem::TestHooks { output } => output,
        }
    }

    /// Built, if not as the release is (stale, or a test build): what `--allow-stale` may
    /// measure, saying so.
    pub fn measurable(&self) -> bool {
        !matches!(self, Problem::Missing { .. })
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Missing { output } => write!(f, "missing: {}", output.display()),
            Problem::Stale { output, newer } => write!(
                f,
                "stale:   {} (older than its source {})",
                output.display(),
                newer.display()
            ),
            Problem::TestHooks { output } => write!(
                f,
                "test build: {} (built with test hooks, as `cargo test` builds it)",
                output.display()
            ),
        }
    }
}

/// Checks each output exists in `release` and is not older than the sources it was built from.
///
/// The sources of an output are the files cargo lists in its dep-info (`<output>.d`, which
/// covers the package and its path dependencies). Without one, every source under
/// `root/crates` counts. A newer source or a listed source that is gone makes the output stale.
///
/// Every output is also built from the workspace's configuration ([`workspace_config`]: every
/// `Cargo.toml`, `Cargo.lock`, `.cargo/config.toml`), which dep-info never lists. Cargo does
/// not relink a program for a manifest edit that changes nothing it builds, so a successful
/// `cargo xtask build` leaves [`BUILT_STAMP`]; configuration older than the output or the
/// stamp is current.
pub fn verify(release: &Path, root: &Path) -> Result<Vec<Problem>> {
    verify_outputs(release, root, &expected_outputs())
}

/// [`verify`] of `outputs` (relative to `release`) instead of every expected output.
pub fn verify_outputs(release: &Path, root: &Path, outputs: &[PathBuf]) -> Result<Vec<Problem>> {
    let crates = root.join("crates");
    let config = newest_existing(&workspace_config(root));
    let stamp = modified(&release.join(BUILT_STAMP));
    let mut problems = Vec::new();
    let mut fallback: Option<Option<(SystemTime, PathBuf)>> = None;
    for rel in outputs {
        let output = release.join(rel);
        let Some(built) = modified(&output) else {
            problems.push(Problem::Missing { output });
            continue;
        };
        let newest = match dep_info_sources(&output)? {
            Some(sources) => newest_of(&sources),
            None => fallback
                .get_or_insert_with(|| newest_source_under(&crates))
                .clone(),
        };
        let confirmed = stamp.map_or(built, |s| s.max(built));
        let newer = newest
            .filter(|(when, _)| *when > built)
            .or_else(|| config.clone().filter(|(when, _)| *when > confirmed));
        if let Some((_, newer)) = newer {
            problems.push(Problem::Stale { output, newer });
        }
    }
    let host = release.join(link_protocol::manifest::HOST.program);
    // Only the host is asked: it passes `LNK_TEST_HOOKS` to no plugin unless it has them.
    let hooks = host
        .is_file()
        .then(|| link_protocol::built_with_test_hooks(&host));
    if hooks
        .transpose()
        .with_context(|| format!("{}: rebuild it with `cargo xtask build`", host.display()))?
        == Some(true)
    {
        problems.push(Problem::TestHooks { output: host });
    }
    Ok(problems)
}

/// A benchmark's programs (`needed`, relative to the release directory) ready to measure:
/// missing ones refuse, naming `builds` (the build commands that make them); stale ones and a
/// test build refuse unless `allow_stale`, which returns them, said.
pub fn ready(
    ws: &Workspace,
    allow_stale: bool,
    needed: &[PathBuf],
    builds: &[Vec<String>],
) -> Result<Vec<String>> {
    let problems = verify_outputs(&ws.release(), &ws.root, needed)?;
    let refused = problems.iter().any(|p| !p.measurable());
    if problems.is_empty() || (allow_stale && !refused) {
        for p in &problems {
            link_protocol::errln!("xtask: --allow-stale: measuring anyway: {p}");
        }
        return Ok(problems.iter().map(|p| p.to_string()).collect());
    }
    link_protocol::errln!("xtask: the release programs are not ready:");
    for p in &problems {
        link_protocol::errln!("  {p}");
    }
    link_protocol::errln!("build them (from {}) with:", ws.root.display());
    for build in builds {
        link_protocol::errln!("  {}", command_text(build));
    }
    if !refused {
        link_protocol::errln!("or pass --allow-stale to measure them as built");
    }
    anyhow::bail!(
        "{} release program(s) missing or stale; build them with the command above",
        problems.len()
    )
}

/// What a report measured with `--allow-stale` says of its `count` programs with problems.
pub fn allow_stale_caveat(count: usize) -> String {
    format!(
        "--allow-stale: {count} of the measured programs are not the current release build \
         (older than a source file, or built with test hooks); the figures are for the programs \
         as built (see their sha256s), not for the working tree's release build"
    )
}

/// The workspace configuration every output is built from: the root manifest, each member's
/// (`crates/*`, `xtask`), `Cargo.lock`, and `.cargo/config.toml` (or the older `.cargo/config`).
pub fn workspace_config(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
        root.join(".cargo/config.toml"),
        root.join(".cargo/config"),
        root.join("xtask/Cargo.toml"),
    ];
    if let Ok(members) = std::fs::read_dir(root.join("crates")) {
        let mut members: Vec<PathBuf> = members
            .flatten()
            .map(|e| e.path().join("Cargo.toml"))
            .collect();
        members.sort();
        out.extend(members);
    }
    out
}

/// The newest of the files in `paths` that exist (an absent optional file is no source).
fn newest_existing(paths: &[PathBuf]) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for p in paths {
        if let Some(when) = modified(p).filter(|_| p.is_file()) {
            if newest.as_ref().is_none_or(|(n, _)| when > *n) {
                newest = Some((when, p.clone()));
            }
        }
    }
    newest
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The sources listed in `<output>.d`, if cargo wrote one.
fn dep_info_sources(output: &Path) -> Result<Option<Vec<PathBuf>>> {
    let mut dep = output.as_os_str().to_owned();
    dep.push(".d");
    let dep = PathBuf::from(dep);
    let text = match std::fs::read_to_string(&dep) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dep.display())),
    };
    Ok(Some(parse_dep_info(&text)))
}

/// `target: a.rs b\ c.rs` (Makefile syntax: spaces in names are escaped).
pub fn parse_dep_info(text: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((_, deps)) = split_rule(line) else {
            continue;
        };
        let mut cur = String::new();
        let mut chars = deps.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => cur.push(chars.next().unwrap_or(' ')),
                ' ' | '\t' => {
                    if !cur.is_empty() {
                        out.push(PathBuf::from(std::mem::take(&mut cur)));
                    }
                }
                _ => cur.push(c),
            }
        }
        if !cur.is_empty() {
            out.push(PathBuf::from(cur));
        }
    }
    out
}

/// Splits `target: deps` at the first unescaped `:` that ends a word.
fn split_rule(line: &str) -> Option<(&str, &str)> {
    let b = line.as_bytes();
    (0..b.len())
        .find(|&i| {
            b[i] == b':'
                && (i == 0 || b[i - 1] != b'\\')
                && b.get(i + 1).is_none_or(|c| c.is_ascii_whitespace())
        })
        .map(|i| (&line[..i], &line[i + 1..]))
}

/// The newest of `sources`; one that is gone counts as infinitely new (the build is outdated).
fn newest_of(sources: &[PathBuf]) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for s in sources {
        let when = modified(s).unwrap_or_else(far_future);
        if newest.as_ref().is_none_or(|(n, _)| when > *n) {
            newest = Some((when, s.clone()));
        }
    }
    newest
}

fn far_future() -> SystemTime {
    SystemTime::now() + std::time::Duration::from_secs(100 * 365 * 24 * 3600)
}

/// The newest Rust or manifest file under `crates`, skipping build output and hidden folders.
pub fn newest_source_under(crates: &Path) -> Option<(SystemTime, PathBuf)> {
    let walk = walkdir::WalkDir::new(crates).into_iter().filter_entry(|e| {
        let name = e.file_name().to_string_lossy();
        e.depth() == 0 || !(name.starts_with('.') || name == "target")
    });
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in walk.flatten() {
        let path = entry.path();
        let source = path.extension().is_some_and(|x| x == "rs" || x == "toml");
        if !entry.file_type().is_file() || !source {
            continue;
        }
        if let Some(when) = modified(path) {
            if newest.as_ref().is_none_or(|(n, _)| when > *n) {
                newest = Some((when, path.to_path_buf()));
            }
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A scratch directory for this test (xtask's own tests may use the temporary folder).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "xtask-outputs-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// An output modified at `when`; the host is a script that prints a release version.
    fn touch(path: &Path, when: SystemTime) {
        if path.ends_with("release/link") {
            return fake_host(path, "echo link 0.1.0", when);
        }
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(when).unwrap();
    }

    /// A host whose `--version` runs `script`.
    fn fake_host(path: &Path, script: &str, when: SystemTime) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(when).unwrap();
    }

    #[test]
    fn a_host_built_with_test_hooks_is_not_a_release_output() {
        let root = scratch("hooks");
        let release = root.join("release");
        let built = SystemTime::now();
        for rel in expected_outputs() {
            touch(&release.join(rel), built);
        }
        let host = release.join("link");
        assert_eq!(verify(&release, &root).unwrap(), vec![]);

        let says = format!("echo 'link 0.1.0 {}'", link_protocol::TEST_HOOKS_MARK);
        fake_host(&host, &says, built);
        let problems = verify(&release, &root).unwrap();
        assert_eq!(
            problems,
            vec![Problem::TestHooks {
                output: host.clone()
            }]
        );
        assert!(
            problems[0].to_string().contains("test build"),
            "{}",
            problems[0]
        );

        fake_host(&host, "exit 3", built);
        let err = format!("{:#}", verify(&release, &root).unwrap_err());
        assert!(
            err.contains("--version failed") && err.contains("cargo xtask build"),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn missing_and_stale_outputs_are_named() {
        let root = scratch("verify");
        let (release, crates) = (root.join("release"), root.join("crates"));
        let old = SystemTime::now() - Duration::from_secs(3600);
        let new = SystemTime::now();
        let source = crates.join("link-cli/src/main.rs");
        touch(&source, old);
        for rel in expected_outputs() {
            touch(&release.join(rel), new);
        }
        assert_eq!(verify(&release, &root).unwrap(), vec![]);

        std::fs::remove_file(release.join("link-plugin-auth")).unwrap();
        std::fs::remove_file(release.join("examples/runtime")).unwrap();
        // The model's dep-info lists a source edited after the build.
        let model_src = crates.join("link-plugin-model/src/lib.rs");
        touch(&model_src, new + Duration::from_secs(60));
        std::fs::write(
            release.join("link-plugin-model.d"),
            format!(
                "{}: {}\n",
                release.join("link-plugin-model").display(),
                model_src.display()
            ),
        )
        .unwrap();
        // The agent's dep-info names a source that no longer exists.
        std::fs::write(
            release.join("link-plugin-agent.d"),
            format!("x: {}\n", crates.join("gone.rs").display()),
        )
        .unwrap();
        let problems = verify(&release, &root).unwrap();
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        // 2 missing, 2 stale by their dep-info, every other one stale by the fallback.
        assert_eq!(problems.len(), expected_outputs().len(), "{text:#?}");
        assert!(problems.contains(&Problem::Missing {
            output: release.join("link-plugin-auth")
        }));
        assert!(problems.contains(&Problem::Missing {
            output: release.join("examples/runtime")
        }));
        assert!(problems.contains(&Problem::Stale {
            output: release.join("link-plugin-model"),
            newer: model_src.clone()
        }));
        assert!(problems.contains(&Problem::Stale {
            output: release.join("link-plugin-agent"),
            newer: crates.join("gone.rs")
        }));
        // Programs without dep-info fall back to every source under crates/: all stale now.
        assert!(problems.contains(&Problem::Stale {
            output: release.join("link"),
            newer: model_src
        }));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn workspace_configuration_newer_than_an_output_makes_it_stale() {
        let root = scratch("config");
        let release = root.join("release");
        let old = SystemTime::now() - Duration::from_secs(3600);
        let built = SystemTime::now() - Duration::from_secs(600);
        let later = SystemTime::now();
        touch(&root.join("crates/link-cli/src/main.rs"), old);
        touch(&root.join("crates/link-cli/Cargo.toml"), old);
        touch(&root.join("Cargo.toml"), old);
        touch(&root.join("Cargo.lock"), old);
        for rel in expected_outputs() {
            touch(&release.join(rel), built);
        }
        // No `.cargo/config.toml` here: an absent optional file is no source.
        assert_eq!(verify(&release, &root).unwrap(), vec![]);

        // `cargo update` after the build: every output is stale, naming Cargo.lock.
        touch(&root.join("Cargo.lock"), later);
        let problems = verify(&release, &root).unwrap();
        assert_eq!(problems.len(), expected_outputs().len(), "{problems:#?}");
        assert!(problems.contains(&Problem::Stale {
            output: release.join("link"),
            newer: root.join("Cargo.lock")
        }));
        // Dep-info that lists only current sources does not hide it.
        std::fs::write(
            release.join("link.d"),
            format!(
                "x: {}\n",
                root.join("crates/link-cli/src/main.rs").display()
            ),
        )
        .unwrap();
        assert!(verify(&release, &root)
            .unwrap()
            .iter()
            .any(|p| p.to_string().contains("Cargo.lock")));

        // A successful `cargo xtask build` after the edit confirms the outputs (cargo need not
        // relink a program for a lock or manifest change that does not touch it).
        touch(&release.join(BUILT_STAMP), later + Duration::from_secs(5));
        assert_eq!(verify(&release, &root).unwrap(), vec![]);

        // A member manifest and `.cargo/config.toml` edited after that are sources too.
        let member = root.join("crates/link-cli/Cargo.toml");
        touch(&member, later + Duration::from_secs(10));
        let problems = verify(&release, &root).unwrap();
        assert!(problems.contains(&Problem::Stale {
            output: release.join("examples/runtime"),
            newer: member
        }));
        let config = root.join(".cargo/config.toml");
        touch(&config, later + Duration::from_secs(20));
        assert!(verify(&release, &root).unwrap().contains(&Problem::Stale {
            output: release.join("link"),
            newer: config
        }));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn dep_info_with_escaped_spaces() {
        let deps = parse_dep_info("/t/link: /a/b\\ c.rs /d.rs\n\n/a/b\\ c.rs:\n");
        assert_eq!(
            deps,
            vec![PathBuf::from("/a/b c.rs"), PathBuf::from("/d.rs")]
        );
    }
}
