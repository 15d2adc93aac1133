//! Saying that a test skipped. libtest shows a test that returned early as passed, so every
//! skip of the workspace's tests goes through [`skipped`]: it prints the line and appends it,
//! with the test's name, to the [`ENV_SKIP_LOG`] file, from which `bash ci/test.sh` says at
//! its end how many tests skipped and why. Here, not in the conformance kit, so the xtask's
//! own tests use it without the runtime's dependencies.

/// Names a file to which every skip is appended as `test: SKIPPED ...`, one line each, so a
/// test command can say at its end how many tests skipped and why (libtest shows a test that
/// returned early as passed). `bash ci/test.sh` sets it.
pub const ENV_SKIP_LOG: &str = "LNK_SKIP_LOG";

/// Says a test is skipped: `line` (which starts `SKIPPED`) on stderr and, with the running
/// test's name, appended to the [`ENV_SKIP_LOG`] file if one is set.
pub fn skipped(line: &str) {
    eprintln!("{line}");
    note_skip(line);
}

fn note_skip(line: &str) {
    use std::io::Write;
    let Some(path) = std::env::var_os(ENV_SKIP_LOG).filter(|p| !p.is_empty()) else {
        return;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let exe = std::env::current_exe()
        .ok()
        .and_then(|e| e.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // One write per line, appended: concurrent tests never interleave within a line.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(format!("{exe} {test}: {line}\n").as_bytes());
    }
}

/// Set by `.ci/run`: the test tools `ci/requirements.txt` pins must be installed.
pub const ENV_REQUIRE_TOOLS: &str = "LNK_REQUIRE_TOOLS";

/// A test tool from `ci/requirements.txt` is missing: a failure under
/// [`ENV_REQUIRE_TOOLS`]`=1`, else a skip said through [`skipped`].
pub fn tool_missing(tool: &str) {
    let fix = "`python3 -m pip install -r ci/requirements.txt`";
    assert!(
        std::env::var(ENV_REQUIRE_TOOLS).as_deref() != Ok("1"),
        "{ENV_REQUIRE_TOOLS}=1 but {tool} is not installed: {fix}"
    );
    skipped(&format!("SKIPPED: {tool} is not installed ({fix})"));
}
