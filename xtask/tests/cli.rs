//! The xtask binary as a person runs it: command list, and a clear refusal without programs.

use std::process::Command;

// The xtask's own exit statuses, the one set its commands return.
#[path = "../src/exit.rs"]
#[allow(dead_code)]
mod exit;

fn xtask() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
}

#[test]
fn no_arguments_lists_the_commands() {
    let out = xtask().output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for c in [
        "runtime",
        "bench-sandbox",
        "load",
        "build",
        "qualify",
        "doctor",
        "install",
    ] {
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
    assert_eq!(out.status.code(), Some(exit::FAILED.into()));
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
    assert!(err.contains("cargo build --locked --release -p link-cli -p link-plugin-measure"));
    let last = err.lines().last().unwrap();
    // The host, every plugin of the manifest, and the runner.
    let n = link_protocol::manifest::ALL.len() + 2;
    assert!(
        last.starts_with(&format!("error: {n} of {n} release outputs missing")),
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
    assert_eq!(out.status.code(), Some(exit::FAILED.into()));
    let err = String::from_utf8(out.stderr).unwrap();
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: LNK_TEST_STATE_DIR /tmp/lnk-xtask-never cannot be used"));
    assert!(last.contains("temporary folder"), "{err}");
    assert!(!std::path::Path::new("/tmp/lnk-xtask-never").exists());
    assert!(!target.join("release").exists(), "nothing was built");
    // What a pipeline publishes says why nothing was measured, never an earlier result.
    let said = said_failed(
        &target,
        "LNK_TEST_STATE_DIR /tmp/lnk-xtask-never cannot be used",
    );
    std::fs::remove_dir_all(&target).unwrap();
    said.unwrap();
}

/// The comparison `runtime` left in `target` says both sides failed for `why`, in its JSON,
/// Markdown and SVG, with no ratio.
fn said_failed(target: &std::path::Path, why: &str) -> Result<(), String> {
    let read = |ext: &str| {
        std::fs::read_to_string(target.join(format!("runtime-comparison.{ext}")))
            .map_err(|e| format!("no runtime-comparison.{ext}: {e}"))
    };
    let json: serde_json::Value =
        serde_json::from_str(&read("json")?).map_err(|e| e.to_string())?;
    for side in ["mini", "link"] {
        let s = &json[side];
        if s["outcome"] != "failed" || !s["reason"].as_str().unwrap_or("").contains(why) {
            return Err(format!("{side} does not say failed: {why}: {s}"));
        }
    }
    if !json["stats"].as_array().is_some_and(Vec::is_empty) {
        return Err(format!(
            "figures where nothing was measured: {}",
            json["stats"]
        ));
    }
    let md = read("md")?;
    if !md.contains("**failed**") || !md.contains(why) || md.contains("× [") {
        return Err(format!("the Markdown does not say so: {md}"));
    }
    let svg = read("svg")?;
    if !svg.contains("Mini: failed") {
        return Err(format!("the picture does not say so: {svg}"));
    }
    Ok(())
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
    assert_eq!(traced.status.code(), Some(exit::FAILED.into()));
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
    assert!(!target.join("release").exists(), "nothing was built");
    let err = String::from_utf8(untraced.stderr).unwrap();
    assert!(!err.contains("strace"), "{err}");
    assert!(err.contains("release outputs missing"), "{err}");
    let _ = std::fs::remove_dir_all(&target);
}

/// Two comparisons in one target directory would overwrite each other's files: the second
/// is refused, naming the first, and touches nothing of it.
#[test]
fn a_second_runtime_on_the_same_target_is_refused() {
    use std::io::Write;
    let target = std::env::temp_dir().join(format!("xtask-cli-l{}", std::process::id()));
    std::fs::create_dir_all(&target).unwrap();
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(target.join("runtime.lock"))
        .unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    write!(&lock, "4242").unwrap();
    let theirs = target.join("runtime-comparison.json");
    std::fs::write(&theirs, "the first one's").unwrap();
    let out = xtask()
        .arg("runtime")
        .env("CARGO_TARGET_DIR", &target)
        .env("LNK_TEST_STATE_DIR", state_dir("l"))
        .output()
        .unwrap();
    let kept = std::fs::read_to_string(&theirs);
    std::fs::remove_dir_all(&target).unwrap();
    assert_eq!(out.status.code(), Some(exit::FAILED.into()));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("another `cargo xtask runtime` (pid 4242) is running"),
        "{err}"
    );
    assert_eq!(kept.unwrap(), "the first one's");
}

/// A short fixture dir outside temporary folders, as the runs require.
fn state_dir(tag: &str) -> std::path::PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    std::path::Path::new(&home)
        .join(".cache/lnk-t")
        .join(format!("xc{tag}{}", std::process::id()))
}

/// The programs built with this test (`target/checked` under `ci/test.sh`, `target/release`
/// under `cargo test --release`): the test executable's profile directory.
fn release_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(std::path::Path::parent)
        .expect("target profile directory")
        .to_path_buf()
}

/// The names of the runtime's programs built in `release` (the host and every plugin).
fn built_programs(release: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(release)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n == "link" || n.starts_with("link-plugin-") || n.starts_with("link-mini-")
                })
                .filter(|n| !n.ends_with(".d"))
                .collect()
        })
        .unwrap_or_default()
}

/// A target directory of the test's own whose `release/` links to the built programs, so the
/// benchmark's `bench-sandbox.json` never overwrites a real one. `None` when a program is not
/// built (a failure with `LNK_REQUIRE_RUNTIME=1`).
fn linked_target(tag: &str) -> Option<std::path::PathBuf> {
    let release = release_dir();
    let programs = built_programs(&release);
    let needed = [
        "link",
        "link-plugin-sandbox",
        "link-plugin-link-run",
        "link-mini-harness",
    ];
    if let Some(missing) = needed.iter().find(|n| !programs.iter().any(|p| p == *n)) {
        let why = format!("{missing} is not built in {}", release.display());
        if std::env::var("LNK_REQUIRE_RUNTIME").is_ok_and(|v| v == "1") {
            panic!("LNK_REQUIRE_RUNTIME=1 but {why}");
        }
        link_report::skip::skipped(&format!("SKIPPED: {why} (cargo xtask build)"));
        return None;
    }
    let target = std::env::temp_dir().join(format!("xtask-cli-{tag}{}", std::process::id()));
    let linked = target.join("release");
    std::fs::create_dir_all(&linked).unwrap();
    for p in &programs {
        std::os::unix::fs::symlink(release.join(p), linked.join(p)).unwrap();
    }
    Some(target)
}

#[test]
fn bench_sandbox_refuses_bad_options() {
    let out = xtask()
        .args(["bench-sandbox", "--rounds", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(exit::USAGE.into()), "a usage error");
    let out = xtask()
        .args(["bench-sandbox", "--rounds", "many"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(exit::USAGE.into()));
    let out = xtask()
        .args(["bench-sandbox", "--rounds", "3", "--turn-rounds", "4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(exit::FAILED.into()));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--turn-rounds 4 cannot exceed --rounds 3"),
        "{err}"
    );
}

#[test]
fn bench_sandbox_without_programs_names_them_and_the_build_command() {
    if which("bwrap").is_none() {
        link_report::skip::skipped(
            "SKIPPED: without bwrap the benchmark skips before it looks at programs",
        );
        return;
    }
    let target = std::env::temp_dir().join(format!("xtask-cli-bm{}", std::process::id()));
    std::fs::create_dir_all(&target).unwrap();
    let state = state_dir("bm");
    let out = xtask()
        .arg("bench-sandbox")
        .env("CARGO_TARGET_DIR", &target)
        .env("LNK_TEST_STATE_DIR", &state)
        .output()
        .unwrap();
    let wrote = target.join("bench-sandbox.json").exists();
    std::fs::remove_dir_all(&target).unwrap();
    let _ = std::fs::remove_dir(&state);
    assert_eq!(out.status.code(), Some(exit::FAILED.into()));
    let err = String::from_utf8(out.stderr).unwrap();
    let release = target.join("release");
    assert!(
        err.contains(&format!(
            "missing: {}",
            release.join("link-plugin-sandbox").display()
        )),
        "{err}"
    );
    assert!(
        !err.contains("examples/runtime"),
        "the runner is not needed: {err}"
    );
    assert!(
        err.contains("cargo build --locked --release -p link-cli"),
        "{err}"
    );
    assert!(!wrote, "nothing measured, nothing written");
}

/// Without bwrap on PATH the benchmark is skipped, says why, and writes no figure.
#[test]
fn bench_sandbox_without_bwrap_is_skipped_with_the_reason() {
    let target = std::env::temp_dir().join(format!("xtask-cli-bb{}", std::process::id()));
    let state = state_dir("bb");
    // A PATH with git (the source is named first) and nothing else.
    let bin = std::env::temp_dir().join(format!("xtask-cli-bbpath{}", std::process::id()));
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(which("git").expect("git on PATH"), bin.join("git")).unwrap();
    let out = xtask()
        .arg("bench-sandbox")
        .env("CARGO_TARGET_DIR", &target)
        .env("LNK_TEST_STATE_DIR", &state)
        .env("PATH", &bin)
        .output()
        .unwrap();
    let json = std::fs::read_to_string(target.join("bench-sandbox.json"));
    std::fs::remove_dir_all(&bin).unwrap();
    let _ = std::fs::remove_dir_all(&target);
    let _ = std::fs::remove_dir(&state);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(exit::UNCONFINABLE.into()),
        "{stdout}"
    );
    assert!(
        stdout.contains("SKIPPED, nothing measured: bwrap is not on PATH"),
        "{stdout}"
    );
    let v: serde_json::Value = serde_json::from_str(&json.unwrap()).unwrap();
    assert_eq!(v["status"], "skipped");
    assert!(v["reason"]
        .as_str()
        .unwrap()
        .contains("bwrap is not on PATH"));
    assert!(v["variants"].is_null(), "never zeros: {v}");
    assert_eq!(v["ratios"], serde_json::json!([]));
}

/// A tiny benchmark on the built programs: every variant has a median inside its interval and
/// both ratios have an interval and a verdict. Where confinement is unavailable, the skip
/// must say why (a failure with `LNK_REQUIRE_SANDBOX=1`). No timing is judged.
#[test]
fn a_tiny_sandbox_benchmark_has_every_variant_with_intervals() {
    if which("bwrap").is_none() {
        if std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
            panic!("LNK_REQUIRE_SANDBOX=1 but bwrap is not on PATH");
        }
        link_report::skip::skipped(
            "SKIPPED: bwrap is not on PATH (bench_sandbox_without_bwrap_* covers it)",
        );
        return;
    }
    let Some(target) = linked_target("bt") else {
        return;
    };
    let state = state_dir("bt");
    let out = xtask()
        .args(["bench-sandbox", "--rounds", "3", "--allow-stale"])
        .env("CARGO_TARGET_DIR", &target)
        .env("LNK_TEST_STATE_DIR", &state)
        .output()
        .unwrap();
    let json = std::fs::read_to_string(target.join("bench-sandbox.json"));
    let left: Vec<_> = std::fs::read_dir(&state)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    std::fs::remove_dir_all(&target).unwrap();
    let _ = std::fs::remove_dir_all(&state);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        left.is_empty(),
        "the benchmark left {left:?} in its fixture dir"
    );
    let v: serde_json::Value = serde_json::from_str(&json.expect("bench-sandbox.json")).unwrap();
    if out.status.code() == Some(exit::UNCONFINABLE.into()) {
        assert_eq!(v["status"], "skipped", "{v}");
        let reason = v["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("confinement unavailable"), "{reason}");
        assert!(stdout.contains("SKIPPED, nothing measured"), "{stdout}");
        if std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
            panic!("LNK_REQUIRE_SANDBOX=1 but the benchmark skipped: {reason}");
        }
        link_report::skip::skipped(&format!("SKIPPED: {reason}"));
        return;
    }
    assert_eq!(
        out.status.code(),
        Some(exit::PASSED.into()),
        "{stdout}\n{stderr}"
    );
    assert_eq!(v["status"], "measured");
    assert_eq!(
        (v["rounds"].as_u64(), v["turn_rounds"].as_u64()),
        (Some(3), Some(3))
    );
    for name in [
        "bare_bwrap",
        "cli_exec",
        "plugin_path",
        "confined_run",
        "run_turn",
        "tool_turn",
        "plain_turn",
    ] {
        let var = &v["variants"][name];
        let f = |k: &str| {
            var[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}.{k}: {var}"))
        };
        let (low, median, high) = (f("median_low_ns"), f("median_ns"), f("median_high_ns"));
        assert!(low <= median && median <= high, "{name}: {var}");
        assert_eq!(var["samples"], 3, "{name}");
        assert_eq!(
            var["samples_ns"].as_array().map(Vec::len),
            Some(3),
            "{name}"
        );
        assert!(
            stdout.contains(name),
            "{name} missing from the table:\n{stdout}"
        );
    }
    for name in [
        "bare_bwrap",
        "cli_exec",
        "run_turn",
        "tool_turn",
        "plain_turn",
    ] {
        assert!(
            v["variants"][name]["min_ns"].as_f64().unwrap() > 0.0,
            "{name}: never zero"
        );
    }
    let ratios = v["ratios"].as_array().unwrap();
    let names: Vec<&str> = ratios.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "cli_exec/bare_bwrap",
            "plugin_path/bare_bwrap",
            "confined_run/bare_bwrap"
        ]
    );
    for r in ratios {
        let i = &r["ratio"];
        let f = |k: &str| i[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
        assert!(
            f("low") <= f("estimate") && f("estimate") <= f("high"),
            "{r}"
        );
        assert_eq!(r["goal_max"], 1.3);
        assert!(
            ["met", "not_met", "undecided"].contains(&r["goal"].as_str().unwrap()),
            "{r}"
        );
    }
    assert!(v["programs"].as_array().is_some_and(|p| !p.is_empty()));
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A bwrap that cannot set up a user namespace, first on PATH: the sandbox probe finds
/// confinement unavailable and the benchmark is skipped with the probe's reason, no figure.
#[test]
fn bench_sandbox_where_confinement_is_unavailable_is_skipped_with_the_reason() {
    let Some(target) = linked_target("bu") else {
        return;
    };
    let state = state_dir("bu");
    let bin = target.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("bwrap");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let out = xtask()
        .args(["bench-sandbox", "--rounds", "3", "--allow-stale"])
        .env("CARGO_TARGET_DIR", &target)
        .env("LNK_TEST_STATE_DIR", &state)
        .env("PATH", path)
        .output()
        .unwrap();
    let json = std::fs::read_to_string(target.join("bench-sandbox.json"));
    std::fs::remove_dir_all(&target).unwrap();
    let _ = std::fs::remove_dir_all(&state);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(exit::UNCONFINABLE.into()),
        "{stdout}"
    );
    assert!(
        stdout.contains("SKIPPED, nothing measured: confinement unavailable"),
        "{stdout}"
    );
    let v: serde_json::Value = serde_json::from_str(&json.unwrap()).unwrap();
    assert_eq!(v["status"], "skipped");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("setting up uid map"),
        "the probe's reason: {reason}"
    );
    assert!(v["variants"].is_null(), "never zeros: {v}");
}

#[test]
fn fleet_without_a_comparison_names_the_directory_and_writes_nothing() {
    let dir = state_dir("fleet");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(dir.join("machine-a")).unwrap();
    let out = xtask()
        .args(["fleet", "--out"])
        .arg(&out_dir)
        .arg(dir.join("machine-a"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let wrote = out_dir.exists();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(exit::USAGE.into()), "{err}");
    assert!(
        err.contains("machine-a holds no runtime-comparison.json"),
        "{err}"
    );
    assert!(!wrote, "nothing may be written on bad input");
    let none = xtask().arg("fleet").output().unwrap();
    assert_eq!(
        none.status.code(),
        Some(exit::USAGE.into()),
        "clap's usage error"
    );
}

/// A target directory `dir/<name>` whose `release/` holds hard links to the built programs
/// (and the runner): Landlock lets plugins execute only what lies under the programs
/// directory, which a symlink resolving elsewhere does not. A copy where a link cannot be made.
fn hard_linked_target(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    hard_linked_with(dir, name, "examples/runtime")
}

/// [`hard_linked_target`] with `example` (under the release directory) instead of the runner.
fn hard_linked_with(dir: &std::path::Path, name: &str, example: &str) -> std::path::PathBuf {
    let (built, target) = (release_dir(), dir.join(name));
    let mut programs = built_programs(&built);
    programs.push(example.into());
    for program in programs {
        let (from, to) = (built.join(&program), target.join("release").join(&program));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).unwrap();
        }
    }
    target
}

/// `cargo xtask runtime` with `args` on the programs in `target`, the environment's
/// requirements lifted (a skip is what one run here must show) and `path` first on PATH.
fn runtime_in(
    target: &std::path::Path,
    state: &std::path::Path,
    path: Option<&std::path::Path>,
    args: &[&str],
) -> std::process::Output {
    let mut cmd = xtask();
    cmd.args([
        "runtime",
        "--allow-stale",
        "--budget",
        "10",
        "--rounds",
        "2",
    ])
    .args(args)
    .env("CARGO_TARGET_DIR", target)
    .env("LNK_TEST_STATE_DIR", state);
    for name in [
        "LNK_REQUIRE_SANDBOX",
        "LNK_REQUIRE_NATIVE",
        "LNK_REQUIRE_RUNTIME",
    ] {
        cmd.env_remove(name);
    }
    if let Some(first) = path {
        let rest = std::env::var_os("PATH").unwrap_or_default();
        let paths = std::iter::once(first.to_path_buf()).chain(std::env::split_paths(&rest));
        cmd.env("PATH", std::env::join_paths(paths).unwrap());
    }
    cmd.output().unwrap()
}

/// Issue 41: the fleet table of four real runs made here under different conditions, each
/// standing for a machine: confined; user namespaces refused (a bwrap saying so first on
/// PATH), so skipped; a bwrap failing in a way nobody knows, so failed; diagnostic. Each row
/// says what happened and nothing more: a ratio for the confined pass and, said to be
/// unconfined, the diagnostic one; the reasons and no figure for the others; exit 1, as one
/// machine failed.
#[test]
fn a_fleet_of_real_runs_says_what_happened_on_each_and_nothing_more() {
    if linked_target("fl")
        .map(|t| std::fs::remove_dir_all(t).unwrap())
        .is_none()
    {
        return;
    }
    let dir = state_dir("fl");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let fake = |name: &str, says: &str| {
        let bin = dir.join(name);
        std::fs::create_dir_all(&bin).unwrap();
        let script = format!("#!/bin/sh\necho '{says}' >&2\nexit 1\n");
        std::fs::write(bin.join("bwrap"), script).unwrap();
        let exe = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(bin.join("bwrap"), exe).unwrap();
        bin
    };
    let denied = fake("denied-bin", "bwrap: setting up uid map: Permission denied");
    let broken = fake("broken-bin", "bwrap: a failure nobody has seen");
    let runs: [(&str, Option<&std::path::Path>, &[&str], u8); 4] = [
        ("confined", None, &[], exit::PASSED),
        (
            "denied",
            Some(&denied),
            &["--allow-skip"],
            exit::UNCONFINABLE,
        ),
        ("broken", Some(&broken), &[], exit::FAILED),
        ("diagnostic", None, &["--mode", "diagnostic"], exit::PASSED),
    ];
    let mut machines = Vec::new();
    for (name, path, args, want) in runs {
        let target = hard_linked_target(&dir, name);
        let out = runtime_in(&target, &state, path, args);
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(want.into()), "{name}: {said}");
        machines.push(target);
    }
    let out_dir = dir.join("out");
    let fleet = xtask()
        .args(["fleet", "--out"])
        .arg(&out_dir)
        .args(&machines)
        .output()
        .unwrap();
    let json = std::fs::read_to_string(out_dir.join("fleet.json"));
    let md = std::fs::read_to_string(out_dir.join("fleet.md")).unwrap_or_default();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(fleet.status.code(), Some(exit::FAILED.into()), "{md}");
    let v: serde_json::Value = serde_json::from_str(&json.unwrap()).unwrap();
    let row = |name: &str| {
        v["machines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no row {name}: {v}"))
    };
    let confined = row("confined");
    assert_eq!(
        (&confined["outcome"], &confined["mode"]),
        (&"passed".into(), &"confined".into())
    );
    assert!(
        confined["shared_ratio"]["estimate"].as_f64().is_some(),
        "{confined}"
    );
    assert!(
        confined["machine"]["bwrap_version"].is_string(),
        "{confined}"
    );
    for (name, outcome, why) in [
        ("denied", "skipped", "setting up uid map: Permission denied"),
        (
            "broken",
            "failed",
            "bubblewrap failed (exit status 1): bwrap: a failure nobody has seen",
        ),
    ] {
        let r = row(name);
        assert_eq!(r["outcome"], outcome, "{r}");
        // The stand-in bwrap prints no version: none is claimed.
        assert!(r["machine"]["bwrap_version"].is_null(), "{r}");
        assert!(
            r["shared_ratio"].is_null(),
            "no figure where nothing passed: {r}"
        );
        for side in ["mini", "link"] {
            assert_eq!(r[side]["outcome"], outcome, "{r}");
            assert!(
                r[side]["reason"].as_str().unwrap_or_default().contains(why),
                "{r}"
            );
            assert!(r[side]["execs"].is_null(), "{r}");
        }
    }
    let diagnostic = row("diagnostic");
    assert_eq!(diagnostic["mode"], "diagnostic", "{diagnostic}");
    let line = md
        .lines()
        .find(|l| l.starts_with("| diagnostic |"))
        .unwrap_or_default();
    assert!(line.contains("| passed (diagnostic: unconfined) |"), "{md}");
    assert!(md.contains("4 machine(s): 2 (1 of them diagnostic: unconfined, not a qualification) passed, 1 skipped, 1 failed"), "{md}");
}

#[test]
fn the_qualify_workflow_passes_actionlint() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let workflow = root.join(".github/workflows/qualify.yml");
    assert!(workflow.is_file(), "{} is missing", workflow.display());
    let Some(actionlint) = which("actionlint") else {
        link_report::skip::tool_missing("actionlint");
        return;
    };
    let out = Command::new(&actionlint).arg(&workflow).output().unwrap();
    assert!(
        out.status.success(),
        "actionlint: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The negative control: a job without `runs-on` must be refused, or the check proves nothing.
    let broken = state_dir("actionlint").with_extension("yml");
    std::fs::create_dir_all(broken.parent().unwrap()).unwrap();
    let text = std::fs::read_to_string(&workflow).unwrap();
    std::fs::write(&broken, text.replacen("runs-on: ubuntu-24.04\n", "", 1)).unwrap();
    let refused = Command::new(&actionlint).arg(&broken).output().unwrap();
    std::fs::remove_file(&broken).unwrap();
    assert!(
        !refused.status.success(),
        "actionlint passed a job without runs-on"
    );
}

#[test]
fn load_refuses_bad_options() {
    for args in [
        &["load", "--rounds", "1"][..],
        &["load", "--secs", "0"],
        &["load", "--clients", "0,8"],
        &["load", "--clients", "many"],
    ] {
        let out = xtask().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(exit::USAGE.into()), "{args:?}");
    }
}

/// A tiny load benchmark on the built programs (hard links: Landlock refuses a symlinked
/// program) and its measuring program: both ratios with an interval, the floor beside the run
/// goal, each kind's CPU per process, the samples typed, the JSON valid against its schema.
/// An earlier result is removed first. No figure is judged.
#[test]
fn a_tiny_load_benchmark_has_every_ratio_with_an_interval_and_the_floor() {
    if which("bwrap").is_none() {
        if std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
            panic!("LNK_REQUIRE_SANDBOX=1 but bwrap is not on PATH");
        }
        link_report::skip::skipped("SKIPPED: bwrap is not on PATH");
        return;
    }
    let load = release_dir().join("examples/load");
    if linked_target("ld")
        .map(|t| std::fs::remove_dir_all(t).unwrap())
        .is_none()
    {
        return;
    }
    if !load.is_file() {
        let why = format!("{} is not built", load.display());
        if std::env::var("LNK_REQUIRE_RUNTIME").is_ok_and(|v| v == "1") {
            panic!("LNK_REQUIRE_RUNTIME=1 but {why}");
        }
        link_report::skip::skipped(&format!("SKIPPED: {why}"));
        return;
    }
    let dir = state_dir("ld");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let target = hard_linked_with(&dir, "t", "examples/load");
    std::fs::write(target.join("load.md"), "an earlier run's").unwrap();
    let started = std::time::Instant::now();
    let out = xtask()
        .args(["load", "--clients", "2", "--rounds", "2", "--secs", "0.5"])
        .arg("--allow-stale")
        .env("CARGO_TARGET_DIR", &target)
        .env("LNK_TEST_STATE_DIR", &state)
        .output()
        .unwrap();
    let took = started.elapsed();
    let json = std::fs::read_to_string(target.join("load.json"));
    let md = std::fs::read_to_string(target.join("load.md")).unwrap_or_default();
    let schema =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/load.schema.json");
    let valid = std::process::Command::new("check-jsonschema")
        .arg("--schemafile")
        .arg(&schema)
        .arg(target.join("load.json"))
        .output();
    let left: Vec<_> = std::fs::read_dir(&state)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    std::fs::remove_dir_all(&dir).unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(exit::UNCONFINABLE.into()) {
        if std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
            panic!("LNK_REQUIRE_SANDBOX=1 but the benchmark skipped: {said}");
        }
        link_report::skip::skipped("SKIPPED: confinement unavailable");
        return;
    }
    assert_eq!(out.status.code(), Some(exit::PASSED.into()), "{said}");
    assert!(
        left.is_empty(),
        "the benchmark left {left:?} in its fixture dir"
    );
    eprintln!("load took {took:?}");
    let v: serde_json::Value = serde_json::from_str(&json.expect("load.json")).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["status"], "measured", "{v}");
    let samples: link_report::load::LoadSamples =
        serde_json::from_value(v["samples"].clone()).expect("the samples, typed");
    assert_eq!(samples.counts.len(), 1);
    assert_eq!(samples.counts[0].clients, 2);
    assert_eq!(samples.counts[0].rounds.len(), 2);
    let count = &v["counts"][0];
    assert_eq!(count["clients"], 2);
    let kinds = count["kinds"].as_array().unwrap();
    let names: Vec<&str> = kinds.iter().map(|k| k["kind"].as_str().unwrap()).collect();
    assert_eq!(names, link_report::load::LoadKind::NAMES);
    for k in kinds {
        assert!(k["median_turns_per_s"].as_f64().unwrap() > 0.0, "{k}");
        assert!(!k["cpu"].as_array().unwrap().is_empty(), "{k}");
        if k["kind"] == "mini_plain" {
            assert!(k["ratio"].is_null(), "{k}");
            continue;
        }
        let r = &k["ratio"];
        let f = |x: &str| r[x].as_f64().unwrap_or_else(|| panic!("{x}: {k}"));
        assert!(
            f("low") <= f("estimate") && f("estimate") <= f("high"),
            "{k}"
        );
    }
    let goals = v["goals"].as_array().unwrap();
    let goal_kinds: Vec<&str> = goals.iter().map(|g| g["kind"].as_str().unwrap()).collect();
    assert_eq!(goal_kinds, ["link_write", "link_run"]);
    for g in goals {
        assert!(g["ratio"]["low"].as_f64().is_some(), "{g}");
        assert!(
            ["met", "not_met", "undecided"].contains(&g["verdict"].as_str().unwrap()),
            "{g}"
        );
    }
    assert!(
        goals[1]["floor"]["low"].as_f64().is_some(),
        "the floor: {}",
        goals[1]
    );
    assert!(
        md.contains("## 2 clients") && md.contains("bare bwrap (floor)"),
        "{md}"
    );
    assert!(!md.contains("an earlier run's"), "{md}");
    match valid {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "load.json is not valid against {}: {}{}",
            schema.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => link_report::skip::tool_missing("check-jsonschema"),
    }
}
