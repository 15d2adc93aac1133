//! `run_scenario` against stand-in programs (small shell scripts), to check the paths the real
//! runtime should never take: a missing capability skips (or fails when required), and a host
//! that leaves an orphan behind fails `no_orphans`, naming it, while the state root and every
//! process are still cleaned up.

use link_harness_conformance::{programs, reaper, run_scenario, ScenarioConfig};
use link_protocol::plugin::{Mode, Profile};
use link_report::{CheckName, Report, Status};
use std::path::{Path, PathBuf};

fn write_script(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A `link` whose `up` double-forks a `sleep` that outlives it.
const FAKE_LINK: &str = r#"
case "$1" in
  token) echo fake-token ;;
  up)
    state=$5
    echo $$ > "$state/up.pid"
    (sleep 300 >/dev/null 2>&1 &)
    echo "ready $state/run/connection.sock"
    trap 'exit 0' TERM
    while :; do sleep 0.1; done ;;
  down) kill "$(cat "$3/up.pid")" ;;
esac
"#;

fn fake_programs(sandbox_exit: i32) -> PathBuf {
    let home = PathBuf::from(std::env::var("HOME").unwrap());
    let dir = home
        .join(".cache/lnk-t")
        .join(format!("fake-{}-{sandbox_exit}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in programs::required(Profile::Mini) {
        write_script(&dir, name, "exit 1");
    }
    write_script(&dir, "link", FAKE_LINK);
    // The probe's JSON as `link-plugin-sandbox probe` writes it: the verdict its exit status
    // says, and a reason.
    let status = match sandbox_exit {
        0 => "enforced",
        2 => "unavailable",
        _ => "broken",
    };
    write_script(
        &dir,
        "link-plugin-sandbox",
        &format!(
            "echo '{{\"status\":\"{status}\",\"reason\":\"user namespaces are blocked (fake)\"}}'; exit {sandbox_exit}"
        ),
    );
    dir
}

fn outcome(report: &Report, name: CheckName) -> Status {
    report
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap()
        .outcome
}

fn detail(report: &Report, name: CheckName) -> String {
    report
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap()
        .detail
        .clone()
}

#[test]
fn stand_in_programs_take_the_skip_fail_and_orphan_paths() {
    let parent = PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/lnk-t");
    std::fs::create_dir_all(&parent).unwrap();
    std::env::set_var("LNK_TEST_STATE_DIR", &parent);
    std::env::remove_var("LNK_REQUIRE_SANDBOX");

    // Confinement unavailable: skipped with the probe's reason, nothing started.
    let dir = fake_programs(2);
    let out = parent.join(format!("skip-{}.json", std::process::id()));
    let mut config = ScenarioConfig::new(&dir, Profile::Mini, Mode::Confined, "test");
    config.output = Some(out.clone());
    let report = run_scenario(&config);
    assert_eq!(
        report.outcome.status,
        Status::Skipped,
        "{:?}",
        report.outcome
    );
    let reason = report.outcome.reason.clone().unwrap();
    assert!(reason.contains("user namespaces are blocked"), "{reason}");
    assert_eq!(report.checks.len(), CheckName::ALL.len());
    assert!(report.checks.iter().all(|c| c.outcome == Status::Skipped));
    assert!(report.phases.is_empty() && report.processes.is_empty());
    assert!(!Path::new(&report.roots.state).exists());
    let written: Report = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(written.outcome.status, Status::Skipped);
    std::fs::remove_file(&out).unwrap();

    // The same, required: a failure, never a fallback.
    std::env::set_var("LNK_REQUIRE_SANDBOX", "1");
    config.output = None;
    let report = run_scenario(&config);
    std::env::remove_var("LNK_REQUIRE_SANDBOX");
    assert_eq!(report.outcome.status, Status::Failed);
    assert!(detail(&report, CheckName::Startup).contains("LNK_REQUIRE_SANDBOX=1"));
    assert!(report.phases.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();

    // A host that answers nothing and leaves an orphan: the run fails at start-up, still
    // stops the host, names the orphan, kills it and removes the state root.
    let dir = fake_programs(0);
    let config = ScenarioConfig::new(&dir, Profile::Mini, Mode::Confined, "test");
    let report = run_scenario(&config);
    assert_eq!(report.outcome.status, Status::Failed);
    assert_eq!(outcome(&report, CheckName::Startup), Status::Failed);
    assert!(
        detail(&report, CheckName::Startup).contains("host.status"),
        "{}",
        detail(&report, CheckName::Startup)
    );
    assert_eq!(outcome(&report, CheckName::ColdTurn), Status::Skipped);
    assert!(detail(&report, CheckName::ColdTurn).starts_with("not reached"));
    assert_eq!(outcome(&report, CheckName::NoOrphans), Status::Failed);
    let orphans = detail(&report, CheckName::NoOrphans);
    assert!(orphans.contains("sleep 300"), "{orphans}");
    // The fake `down` kills its `up`, which exits alone: its own exit time was seen, within
    // shutdown.
    let phase = |name: &str| report.phases.iter().find(|p| p.name == name).unwrap();
    let (shutdown, exit) = (phase("shutdown"), phase("host_exit"));
    assert!(0 < exit.duration_ns && exit.duration_ns <= shutdown.duration_ns);
    assert!(!Path::new(&report.roots.state).exists());
    let host = report
        .processes
        .iter()
        .find(|p| p.role == "host")
        .expect("host recorded");
    assert!(!reaper::is_alive(host.pid, host.start_time_ticks));
    assert!(reaper::snapshot()
        .iter()
        .all(|p| !p.argv.join(" ").contains("sleep 300")));
    std::fs::remove_dir_all(&dir).unwrap();
}
