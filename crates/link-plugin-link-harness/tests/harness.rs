//! The spec's runtime cases: Mini, full Link, and two full Link agents, on the real release
//! programs, confined, through the conformance kit (`link-harness-conformance`).
//!
//! ```text
//! cargo test --locked --release -p link-plugin-link-harness --test harness runtime:: -- --nocapture
//! ```
//!
//! The programs come from the release target directory this test was built into; the kit never
//! builds them. Missing confinement is reported as SKIPPED with the probe's reason;
//! `LNK_REQUIRE_SANDBOX=1` / `LNK_REQUIRE_NATIVE=1` turn that into a failure. State roots go
//! under `LNK_TEST_STATE_DIR` (else `~/.cache/lnk`) and are removed after each case.
//!
//! This is the crate's one test binary: [`engine`] holds the turn engine's cases on a full Link
//! runtime of their own. They share the process with the scenario runs safely because the kit
//! makes them take turns: a scenario run holds the process's exclusive turn, every
//! `RuntimeProcess` a shared one (`link_harness_conformance::runtime_process::exclusive`), and
//! a run counts only the processes it started as its own.

mod engine;

mod runtime {
    use link_harness_conformance::{
        interrupt, reaper, run_scenario, runtime_process, ScenarioConfig,
    };
    use link_protocol::plugin::{Mode, Profile};
    use link_report::{CheckOutcome, Report, Status};
    use std::path::PathBuf;

    fn source() -> String {
        std::env::var("LNK_RUNTIME_SOURCE")
            .unwrap_or_else(|_| format!("cargo-test {}", env!("CARGO_PKG_VERSION")))
    }

    /// Runs one confined case; `None` when it was skipped for a missing capability.
    fn run(case: &str, profile: Profile, concurrent_agents: bool) -> Option<Report> {
        run_with(case, profile, |c| c.concurrent_agents = concurrent_agents)
    }

    /// [`run`] with the configuration as `adjust` leaves it.
    fn run_with(
        case: &str,
        profile: Profile,
        adjust: impl FnOnce(&mut ScenarioConfig),
    ) -> Option<Report> {
        interrupt::install_handler();
        let programs = runtime_process::test_programs();
        let mut config = ScenarioConfig::new(&programs, profile, Mode::Confined, &source());
        adjust(&mut config);
        config.output = programs
            .parent()
            .map(|target| target.join(format!("runtime-test-{case}.json")));
        let report = run_scenario(&config);
        print_summary(case, &report);
        match report.outcome.status {
            Status::Skipped => {
                link_harness_conformance::probe::skipped(&format!(
                    "SKIPPED runtime::{case}: {}",
                    report
                        .outcome
                        .reason
                        .as_deref()
                        .unwrap_or("no reason given")
                ));
                return None;
            }
            Status::Failed => panic!(
                "runtime::{case} failed: {}",
                report
                    .outcome
                    .reason
                    .as_deref()
                    .unwrap_or("see the checks above")
            ),
            Status::Passed => {}
        }
        assert_cleaned_up(&report);
        assert_host_exit_within_shutdown(&report);
        Some(report)
    }

    /// A passed run stopped the host with `link down` alone, so where pidfds work the host's
    /// own exit time was seen on one: it starts with `shutdown` and ends within it.
    fn assert_host_exit_within_shutdown(report: &Report) {
        if link_os::process::pidfd(std::process::id() as i32).is_err() {
            println!("no pidfds here (Linux before 5.3): no host_exit phase to check");
            return;
        }
        let phase = |name: &str| {
            report
                .phases
                .iter()
                .find(|p| p.name == name)
                .unwrap_or_else(|| panic!("no {name} phase in {:?}", report.phases))
        };
        let (shutdown, exit) = (phase("shutdown"), phase("host_exit"));
        assert_eq!(exit.start_unix_ns, shutdown.start_unix_ns);
        assert!(
            0 < exit.duration_ns && exit.duration_ns <= shutdown.duration_ns,
            "host_exit {exit:?} not within shutdown {shutdown:?}"
        );
    }

    fn print_summary(case: &str, report: &Report) {
        println!(
            "\n=== runtime::{case} ({} {}) ===",
            report.profile, report.mode
        );
        println!("state root {}", report.roots.state);
        for p in &report.phases {
            let round = if p.round > 0 {
                format!(" #{}", p.round)
            } else {
                String::new()
            };
            let name = format!("{}{round}", p.name);
            println!("  phase {name:<18} {:>10.1} ms", p.duration_ns as f64 / 1e6);
        }
        for c in &report.checks {
            println!(
                "  check {:<27} {:<8} {}",
                c.name,
                format!("{:?}", c.outcome),
                c.detail
            );
        }
        println!(
            "  processes seen: {}; monitor samples: {}; status points: {}",
            report.processes.len(),
            report.samples.len(),
            report.status_series.len()
        );
        println!(
            "  outcome {:?} {}",
            report.outcome.status,
            report.outcome.reason.as_deref().unwrap_or("")
        );
    }

    /// The state root is gone and no recorded process survives (pid and start time).
    fn assert_cleaned_up(report: &Report) {
        assert!(
            !report.roots.state.is_empty() && !PathBuf::from(&report.roots.state).exists(),
            "state root {} was left behind",
            report.roots.state
        );
        let alive: Vec<String> = report
            .processes
            .iter()
            .filter(|p| reaper::is_alive(p.pid, p.start_time_ticks))
            .map(|p| format!("{} (pid {})", p.role, p.pid))
            .collect();
        assert!(alive.is_empty(), "still running: {}", alive.join(", "));
    }

    fn expect(report: &Report, passed: &[&str], skipped: &[&str]) {
        for c in &report.checks {
            let want = if passed.contains(&c.name.as_str()) {
                CheckOutcome::Passed
            } else if skipped.contains(&c.name.as_str()) {
                CheckOutcome::Skipped
            } else {
                panic!("unexpected check {} in the report", c.name);
            };
            assert_eq!(c.outcome, want, "check {}: {}", c.name, c.detail);
        }
        assert_eq!(report.checks.len(), passed.len() + skipped.len());
    }

    const COMMON: &[&str] = &[
        "startup",
        "cold_turn",
        "warm_turn",
        "agent_files_isolated",
        "unauthenticated_refused",
        "idle_samples_completed",
        "status_series",
        "processes_stopped",
        "no_orphans",
    ];

    fn with(extra: &[&'static str]) -> Vec<&'static str> {
        COMMON.iter().chain(extra).copied().collect()
    }

    #[test]
    fn mini() {
        let Some(report) = run("mini", Profile::Mini, false) else {
            return;
        };
        expect(
            &report,
            &with(&[]),
            &[
                "conversation_write_refused",
                "run_tool_confined",
                "file_tool_confined",
                "scheduler_fired",
            ],
        );
        let roles: Vec<&str> = report.processes.iter().map(|p| p.role.as_str()).collect();
        for role in ["host", "link-mini-harness", "link-mini-connection"] {
            assert!(roles.contains(&role), "{role} not among {roles:?}");
        }
        assert!(!report.samples.is_empty());
        // Each refused request is a round of its own; Mini has no refused write.
        assert_eq!(rounds(&report, "refusals"), 5);
        assert_eq!(rounds(&report, "refused_write"), 0);
    }

    fn rounds(report: &Report, name: &str) -> usize {
        report.phases.iter().filter(|p| p.name == name).count()
    }

    /// A timing cycle (what `cargo xtask runtime` pairs): the scenario without the fixed idle
    /// wait and the status series, several samples per phase, and the runtime's CPU time on
    /// every round the runtime's processes outlive.
    #[test]
    fn link_cycle() {
        let Some(report) = run_with("link-cycle", Profile::Link, |c| c.cycle = true) else {
            return;
        };
        let not_in_a_cycle = ["idle_samples_completed", "status_series"];
        let passed: Vec<&str> = with(&[
            "conversation_write_refused",
            "run_tool_confined",
            "file_tool_confined",
        ])
        .into_iter()
        .filter(|c| !not_in_a_cycle.contains(c))
        .collect();
        expect(
            &report,
            &passed,
            &["scheduler_fired", not_in_a_cycle[0], not_in_a_cycle[1]],
        );
        assert_eq!(
            rounds(&report, "cold_turn"),
            link_harness_conformance::COLD_AGENTS as usize
        );
        assert_eq!(rounds(&report, "warm_turn"), 3);
        assert_eq!(
            rounds(&report, "refusals"),
            15,
            "the five refused requests, three times"
        );
        assert_eq!(rounds(&report, "refused_write"), 1);
        assert_eq!(
            rounds(&report, "idle") + rounds(&report, "status_series"),
            0
        );
        for p in &report.phases {
            match p.name.as_str() {
                "shutdown" | "host_exit" => assert_eq!(p.cpu_ns, None, "{p:?}"),
                _ => assert!(p.cpu_ns.is_some_and(|ns| ns > 0), "no CPU time: {p:?}"),
            }
        }
    }

    #[test]
    fn link() {
        let Some(report) = run("link", Profile::Link, false) else {
            return;
        };
        expect(
            &report,
            &with(&[
                "conversation_write_refused",
                "run_tool_confined",
                "file_tool_confined",
            ]),
            &["scheduler_fired"],
        );
        let roles: Vec<&str> = report.processes.iter().map(|p| p.role.as_str()).collect();
        for role in ["host", "link-plugin-link-harness", "link-plugin-sandbox"] {
            assert!(roles.contains(&role), "{role} not among {roles:?}");
        }
    }

    #[test]
    fn two_link_agents() {
        let Some(report) = run("two-link-agents", Profile::Link, true) else {
            return;
        };
        expect(
            &report,
            &with(&[
                "conversation_write_refused",
                "run_tool_confined",
                "file_tool_confined",
            ]),
            &["scheduler_fired"],
        );
        let isolated = report
            .checks
            .iter()
            .find(|c| c.name == "agent_files_isolated")
            .expect("check present");
        assert!(
            isolated.detail.contains("concurrent turns kept apart"),
            "{}",
            isolated.detail
        );
    }
}
