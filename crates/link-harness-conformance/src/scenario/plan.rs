//! Which phases a run has, which check a failing phase is reported under, and which checks
//! its profile and mode skip before anything starts.

use link_protocol::plugin::{Mode, Profile};
use link_report::{CheckName, PhaseName};

/// The timed phases, in run order (shutdown is not one: it runs whenever the host started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Startup,
    ColdTurn,
    WarmTurns,
    SecondAgent,
    Refusals,
    RefusedWrite,
    ProtectedTools,
    ToolsRefused,
    Scheduler,
    Idle,
    StatusSeries,
}

impl Step {
    /// The phase this step records.
    pub(super) fn phase(self) -> PhaseName {
        match self {
            Step::Startup => PhaseName::Startup,
            Step::ColdTurn => PhaseName::ColdTurn,
            Step::WarmTurns => PhaseName::WarmTurn,
            Step::SecondAgent => PhaseName::SecondAgent,
            Step::Refusals => PhaseName::Refusals,
            Step::RefusedWrite => PhaseName::RefusedWrite,
            Step::ProtectedTools => PhaseName::ProtectedTools,
            Step::ToolsRefused => PhaseName::ToolsRefused,
            Step::Scheduler => PhaseName::Scheduler,
            Step::Idle => PhaseName::Idle,
            Step::StatusSeries => PhaseName::StatusSeries,
        }
    }

    pub(super) fn name(self) -> &'static str {
        self.phase().as_str()
    }

    /// The check a failure of this phase is reported under.
    pub(super) fn check(self) -> CheckName {
        match self {
            Step::Startup => CheckName::Startup,
            Step::ColdTurn => CheckName::ColdTurn,
            Step::WarmTurns => CheckName::WarmTurn,
            Step::SecondAgent => CheckName::AgentFilesIsolated,
            Step::Refusals => CheckName::UnauthenticatedRefused,
            Step::RefusedWrite => CheckName::ConversationWriteRefused,
            Step::ProtectedTools => CheckName::RunToolConfined,
            Step::ToolsRefused => CheckName::RunToolConfined,
            Step::Scheduler => CheckName::SchedulerFired,
            Step::Idle => CheckName::IdleSamplesCompleted,
            Step::StatusSeries => CheckName::StatusSeries,
        }
    }
}

/// The profile- and mode-specific part of a run.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// Every phase in run order: the shared ones up to the refusals, [`Plan::extra`], then
    /// (but in a cycle) idle and the status series.
    pub steps: Vec<Step>,
    /// The phases between the refusals and idle, all full Link's own work
    /// ([`PhaseName::link_only`]): the refused conversation write and the protected tools
    /// (confined), the disabled tools' refusal and the scheduler (diagnostic), or none (Mini).
    pub extra: &'static [Step],
    /// Checks that cannot apply, with why.
    pub skipped: Vec<(CheckName, String)>,
}

/// Why diagnostic runs skip the run- and file-tool checks (the runner still checks both are
/// refused: [`Step::ToolsRefused`]).
pub(super) const DIAGNOSTIC_TOOLS: &str =
    "diagnostic mode disables the protected run and file tools";

/// Every run: start-up, cold turn, warm turns, a second agent, refusals, [`Plan::extra`], idle,
/// the status series. The phases every profile runs ([`SHARED`]) make the same requests on both
/// sides; a timing `cycle` leaves out idle and the status series.
pub(super) fn plan(profile: Profile, mode: Mode, cycle: bool) -> Plan {
    let mut plan = profile_plan(profile, mode);
    let (before, after) = SHARED.split_at(5);
    plan.steps = before.iter().chain(plan.extra).copied().collect();
    if cycle {
        for check in [CheckName::IdleSamplesCompleted, CheckName::StatusSeries] {
            plan.skipped.push((check, CYCLE.into()));
        }
    } else {
        plan.steps.extend(after);
    }
    plan
}

/// The phases every run has, in order, whatever its profile: the same requests on both
/// sides. Idle and the status series close a full scenario; a cycle stops before them.
pub(super) const SHARED: [Step; 7] = [
    Step::Startup,
    Step::ColdTurn,
    Step::WarmTurns,
    Step::SecondAgent,
    Step::Refusals,
    Step::Idle,
    Step::StatusSeries,
];

/// Why a timing cycle skips the idle and status-series checks.
pub(super) const CYCLE: &str = "a timing cycle leaves out the fixed idle wait and the status \
    series after it; the full scenario run checks them";

fn profile_plan(profile: Profile, mode: Mode) -> Plan {
    match (profile, mode) {
        (Profile::Mini, _) => {
            let why = "Mini has no router and no tools";
            Plan {
                steps: Vec::new(),
                extra: &[],
                skipped: vec![
                    (
                        CheckName::ConversationWriteRefused,
                        format!("{why}: no file tool to refuse it"),
                    ),
                    (CheckName::RunToolConfined, format!("{why}: no run tool")),
                    (CheckName::FileToolConfined, format!("{why}: no file tool")),
                    (CheckName::SchedulerFired, "Mini has no scheduler".into()),
                ],
            }
        }
        (Profile::Link, Mode::Confined) => Plan {
            steps: Vec::new(),
            extra: &[Step::RefusedWrite, Step::ProtectedTools],
            skipped: vec![(
                CheckName::SchedulerFired,
                "confined runs exercise the protected run and file tools; the scheduler \
                 is exercised by diagnostic runs"
                    .into(),
            )],
        },
        (Profile::Link, Mode::Diagnostic) => {
            let why = DIAGNOSTIC_TOOLS;
            Plan {
                steps: Vec::new(),
                extra: &[Step::ToolsRefused, Step::Scheduler],
                skipped: vec![
                    (CheckName::RunToolConfined, why.into()),
                    (CheckName::FileToolConfined, why.into()),
                    (
                        CheckName::ConversationWriteRefused,
                        format!("{why}, so a refused write would prove nothing"),
                    ),
                ],
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mini_skips_every_tool_check_and_has_no_extra_phase() {
        let p = plan(Profile::Mini, Mode::Confined, false);
        assert!(p.extra.is_empty());
        let names: Vec<CheckName> = p.skipped.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                CheckName::ConversationWriteRefused,
                CheckName::RunToolConfined,
                CheckName::FileToolConfined,
                CheckName::SchedulerFired
            ]
        );
        assert_eq!(
            p.skipped[1].1,
            "Mini has no router and no tools: no run tool"
        );
    }

    #[test]
    fn confined_link_runs_the_tools_and_skips_only_the_scheduler() {
        let p = plan(Profile::Link, Mode::Confined, false);
        assert_eq!(p.extra, [Step::RefusedWrite, Step::ProtectedTools]);
        assert_eq!(p.skipped.len(), 1);
        assert_eq!(p.skipped[0].0, CheckName::SchedulerFired);
    }

    #[test]
    fn diagnostic_link_runs_the_scheduler_and_skips_the_tools() {
        let p = plan(Profile::Link, Mode::Diagnostic, false);
        assert_eq!(p.extra, [Step::ToolsRefused, Step::Scheduler]);
        assert!(!p
            .skipped
            .iter()
            .any(|(n, _)| *n == CheckName::SchedulerFired));
        assert!(p
            .skipped
            .iter()
            .any(|(n, why)| *n == CheckName::ConversationWriteRefused
                && why.ends_with("so a refused write would prove nothing")));
    }

    /// The comparison divides only like work: every phase a profile runs beyond the shared
    /// ones is full Link's own, and no shared phase is.
    #[test]
    fn only_shared_phases_have_a_ratio_and_extra_phases_are_link_only() {
        for step in SHARED {
            assert!(!step.phase().link_only(), "{} is shared", step.name());
        }
        for profile in Profile::ALL {
            for mode in Mode::ALL {
                let p = plan(profile, mode, false);
                if profile == Profile::Mini {
                    assert!(p.extra.is_empty(), "Mini runs only the shared phases");
                }
                for step in p.extra {
                    assert!(
                        step.phase().link_only(),
                        "{} in {profile} {mode}",
                        step.name()
                    );
                    assert!(!SHARED.contains(step));
                }
            }
        }
        // Every link-only phase is some plan's extra phase.
        for name in PhaseName::ALL.into_iter().filter(|n| n.link_only()) {
            let extra = Mode::ALL
                .into_iter()
                .flat_map(|m| plan(Profile::Link, m, false).extra.to_vec());
            assert!(extra.map(Step::phase).any(|p| p == name), "{name}");
        }
    }

    #[test]
    fn a_cycle_skips_idle_and_the_status_series_and_says_why() {
        let p = plan(Profile::Mini, Mode::Confined, true);
        let skipped: Vec<CheckName> = p.skipped.iter().map(|(n, _)| *n).collect();
        assert!(skipped.contains(&CheckName::IdleSamplesCompleted));
        assert!(skipped.contains(&CheckName::StatusSeries));
        assert!(p.skipped.iter().any(|(_, why)| why == CYCLE));
        assert_eq!(p.steps, &SHARED[..5]);
        let full = plan(Profile::Link, Mode::Confined, false);
        assert_eq!(full.steps.first(), Some(&Step::Startup));
        assert_eq!(full.steps.last(), Some(&Step::StatusSeries));
        assert_eq!(full.steps.len(), SHARED.len() + full.extra.len());
    }

    #[test]
    fn a_failing_phase_is_reported_under_its_check() {
        assert_eq!(Step::SecondAgent.check(), CheckName::AgentFilesIsolated);
        assert_eq!(Step::Refusals.check(), CheckName::UnauthenticatedRefused);
        assert_eq!(Step::WarmTurns.name(), "warm_turn");
    }
}
