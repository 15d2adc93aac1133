//! The xtask binary as a person runs it: command list, and a clear refusal without programs.

use std::process::Command;

fn xtask() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
}

#[test]
fn no_arguments_lists_the_commands() {
    let out = xtask().output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for c in ["runtime", "build", "qualify", "doctor", "install"] {
        assert!(
            text.contains(&format!("\n  {c} ")),
            "{c} missing from:\n{text}"
        );
    }
}

#[test]
fn runtime_without_programs_names_them_and_the_build_commands() {
    let target = std::env::temp_dir().join(format!("xtask-cli-{}", std::process::id()));
    std::fs::create_dir_all(&target).unwrap();
    let state = state_dir("m");
    let out = xtask()
        .arg("runtime")
        .env("CARGO_TARGET_DIR", &target)
        .env("LNK_TEST_STATE_DIR", &state)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&target).unwrap();
    assert!(state.is_dir(), "the fixture dir is prepared first");
    std::fs::remove_dir(&state).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let release = target.join("release");
    assert!(
        err.contains(&format!("missing: {}", release.join("link").display())),
        "{err}"
    );
    assert!(err.contains(&format!(
        "missing: {}",
        release.join("examples/runtime").display()
    )));
    assert!(err
        .contains("cargo build --locked --release -p link-harness-conformance --example runtime"));
    assert!(err.contains("cargo build --locked --release -p link-cli -p link-plugin-agent"));
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: 16 of 16 release outputs missing"),
        "{last}"
    );
}

#[test]
fn bad_options_are_refused() {
    let out = xtask()
        .args(["runtime", "--mode", "open"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let out = xtask().args(["runtime", "--rounds", "0"]).output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn a_temporary_state_dir_is_refused_before_anything_starts() {
    let target = std::env::temp_dir().join(format!("xtask-cli-t{}", std::process::id()));
    let out = xtask()
        .arg("runtime")
        .env("CARGO_TARGET_DIR", &target)
        .env("LNK_TEST_STATE_DIR", "/tmp/lnk-xtask-never")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
    assert!(err.starts_with("error: LNK_TEST_STATE_DIR /tmp/lnk-xtask-never cannot be used"));
    assert!(err.contains("temporary folder"), "{err}");
    assert!(!std::path::Path::new("/tmp/lnk-xtask-never").exists());
    assert!(!target.exists(), "nothing was built or written");
}

/// Without strace on PATH, `--trace` is refused before anything is built or run, naming the
/// command that installs it here and `--install`; the twin without `--trace` gets past it.
#[test]
fn trace_without_strace_names_the_install_command() {
    let target = std::env::temp_dir().join(format!("xtask-cli-s{}", std::process::id()));
    let state = state_dir("s");
    let bin = std::env::temp_dir().join(format!("xtask-cli-path{}", std::process::id()));
    std::fs::create_dir_all(&bin).unwrap();
    let runtime = |args: &[&str]| {
        xtask()
            .arg("runtime")
            .args(args)
            .env("CARGO_TARGET_DIR", &target)
            .env("LNK_TEST_STATE_DIR", &state)
            .env("PATH", &bin)
            .output()
            .unwrap()
    };
    let traced = runtime(&["--trace"]);
    let untraced = runtime(&[]);
    std::fs::remove_dir_all(&bin).unwrap();
    let _ = std::fs::remove_dir(&state);
    assert_eq!(traced.status.code(), Some(1));
    let err = String::from_utf8(traced.stderr).unwrap();
    assert!(
        err.contains("--trace needs strace, which is not on PATH"),
        "{err}"
    );
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    if os_release.contains("ID=debian") || os_release.contains("ID=ubuntu") {
        assert!(err.contains("apt-get install -y strace"), "{err}");
    }
    assert!(err.contains("--install"), "{err}");
    assert!(!target.exists(), "nothing was built or written");
    let err = String::from_utf8(untraced.stderr).unwrap();
    assert!(!err.contains("strace"), "{err}");
    assert!(err.contains("release outputs missing"), "{err}");
}

/// A short fixture dir outside temporary folders, as the runs require.
fn state_dir(tag: &str) -> std::path::PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    std::path::Path::new(&home)
        .join(".cache/lnk-t")
        .join(format!("xc{tag}{}", std::process::id()))
}
