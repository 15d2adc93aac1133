//! Reports written before the vocabulary was typed (profile, mode, check names and outcomes as
//! plain strings) still parse, and writing them back yields the same JSON.

use link_report::{CheckName, Mode, Profile, Report, Status, SCHEMA_VERSION};
use serde_json::{json, Value};

/// Parses `legacy` as a [`Report`] and checks that serializing it again changes nothing.
fn parse_unchanged(legacy: &Value) -> Report {
    let report: Report = serde_json::from_value(legacy.clone()).expect("legacy report parses");
    let again = serde_json::to_value(&report).unwrap();
    assert_eq!(&again, legacy, "the report JSON changed on a round trip");
    report
}

#[test]
fn a_recorded_full_link_report_parses_and_writes_back_unchanged() {
    // Recorded by the runner before the vocabulary was typed (same file as xtask's fixture).
    let text = include_str!("data/legacy-runtime-link-traced.json");
    let legacy: Value = serde_json::from_str(text).unwrap();
    let report = parse_unchanged(&legacy);
    // Written at version 1; a reader of today's version still reads it.
    assert_eq!(report.schema_version, 1);
    const { assert!(SCHEMA_VERSION > 1) };
    assert_eq!(
        (report.profile, report.mode),
        (Profile::Link, Mode::Confined)
    );
    assert_eq!(
        (report.configuration.profile, report.configuration.mode),
        (Profile::Link, Mode::Confined)
    );
    assert_eq!(report.outcome.status, Status::Passed);
    let names: Vec<CheckName> = report.checks.iter().map(|c| c.name).collect();
    let expected: Vec<CheckName> = CheckName::ALL
        .into_iter()
        .filter(|n| *n != CheckName::SchedulerFired)
        .collect();
    assert_eq!(names, expected);
    assert!(report.checks.iter().all(|c| c.outcome == Status::Passed));
    assert!(report.trace.as_ref().is_some_and(|t| t.available));
}

/// A report as the old writer produced it, string fields everywhere, with every check name
/// and every outcome word.
fn old_style_report() -> Value {
    let names = [
        "startup",
        "cold_turn",
        "warm_turn",
        "agent_files_isolated",
        "unauthenticated_refused",
        "conversation_write_refused",
        "run_tool_confined",
        "file_tool_confined",
        "scheduler_fired",
        "idle_samples_completed",
        "status_series",
        "processes_stopped",
        "no_orphans",
    ];
    let outcomes = ["passed", "failed", "skipped"];
    let checks: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, name)| json!({"name": name, "outcome": outcomes[i % 3], "detail": format!("d{i}")}))
        .collect();
    json!({
        "schema_version": 1,
        "source": "abc-dirty",
        "profile": "mini",
        "mode": "diagnostic",
        "artifacts": [{"name": "link", "path": "/p/link", "bytes": 10, "sha256": "00"}],
        "platform": {
            "os": "linux", "arch": "x86_64", "kernel": "6.1", "cpus": 2,
            "sandbox": {"status": "unavailable", "reason": "no bwrap"},
            "native": {"subreaper": true}
        },
        "configuration": {
            "profile": "mini",
            "mode": "diagnostic",
            "rounds": 3,
            "monitor_interval_ms": 1000,
            "traced": false,
            "child_env": [["LNK_KEYCHAIN", "off"]]
        },
        "roots": {"programs": "/p", "state": "/s", "output": "/o.json"},
        "phases": [{
            "name": "startup", "round": 0,
            "start_unix_ns": 1700000000000000000u64, "end_unix_ns": 1700000000100000000u64,
            "duration_ns": 100000000
        }],
        "processes": [{
            "pid": 10, "ppid": 1, "role": "host", "exe": "/p/link", "argv": ["link", "up"],
            "start_time_ticks": 5, "phases_seen": ["startup"]
        }],
        "samples": [{"index": 0, "unix_ns": 1700000000050000000u64, "processes": [{
            "pid": 10, "ppid": 1, "name": "link", "rss_bytes": 4096, "cpu_ns": 7, "state": "S"
        }]}],
        "status_series": [{"index": 0, "start_unix_ns": 1, "duration_ns": 2, "http_status": 200}],
        "checks": checks,
        "outcome": {"status": "skipped", "reason": "no bwrap"},
        "coverage": {"exercised": ["startup"], "not_evidence_of": ["memory totals"]}
    })
}

#[test]
fn an_old_style_report_with_every_word_parses_and_writes_back_unchanged() {
    let report = parse_unchanged(&old_style_report());
    assert_eq!(
        (report.profile, report.mode),
        (Profile::Mini, Mode::Diagnostic)
    );
    assert_eq!(report.outcome.status, Status::Skipped);
    assert_eq!(report.checks.len(), CheckName::ALL.len());
    for (i, (check, name)) in report.checks.iter().zip(CheckName::ALL).enumerate() {
        assert_eq!(check.name, name);
        assert_eq!(check.outcome, Status::ALL[i % 3]);
    }
    assert!(report.trace.is_none());
}

#[test]
fn unknown_words_are_refused_with_the_known_ones() {
    for (pointer, bad) in [
        ("/profile", "maxi"),
        ("/configuration/mode", "unconfined"),
        ("/checks/0/name", "start_up"),
        ("/checks/0/outcome", "PASSED"),
        ("/outcome/status", "ok"),
    ] {
        let mut v = old_style_report();
        *v.pointer_mut(pointer).unwrap() = json!(bad);
        let err = serde_json::from_value::<Report>(v).unwrap_err().to_string();
        assert!(err.contains(&format!("unknown variant `{bad}`")), "{err}");
    }
}

#[test]
fn a_new_report_writes_the_same_words() {
    let mut report = Report::new(Profile::Link, Mode::Confined);
    report.checks.push(link_report::Check::skipped(
        CheckName::SchedulerFired,
        "not reached",
    ));
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(v["profile"], "link");
    assert_eq!(v["mode"], "confined");
    assert_eq!(v["configuration"]["profile"], "link");
    assert_eq!(v["checks"][0]["name"], "scheduler_fired");
    assert_eq!(v["checks"][0]["outcome"], "skipped");
    assert_eq!(v["outcome"]["status"], "failed");
    assert!(v.get("trace").is_none());
}
