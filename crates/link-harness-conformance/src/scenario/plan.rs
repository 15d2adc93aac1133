//! Which phases a run has, which check a failing phase is reported under, and which checks
//! its profile and mode skip before anything starts.

use link_plugin_measure::{CheckName, PhaseName};
use link_protocol::plugin::{Mode, Profile};

/// The timed phases, in run order (shutdown is not one: it runs whenever the host started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Startup,
    ColdTurn,
    WarmTurns,
    SecondAgent,
    Refusals,
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
    /// The phases between the refusals and idle: the protected tools (confined full Link), the
    /// disabled tools' refusal and the scheduler (diagnostic full Link), or none (Mini).
    pub extra: &'static [Step],
    /// Checks that cannot apply, with why.
    pub skipped: Vec<(CheckName, String)>,
}

/// Why diagnostic runs skip the run- and file-tool checks (the runner still checks both are
/// refused: [`Step::ToolsRefused`]).
pub(super) const DIAGNOSTIC_TOOLS: &str =
    "diagnostic mode disables the protected run and file tools";

/// Every run: start-up, cold turn, warm turns, a second agent, refusals, [`Plan::extra`], idle,
/// the status series.
pub(super) fn plan(profile: Profile, mode: Mode) -> Plan {
    match (profile, mode) {
        (Profile::Mini, _) => {
            let why = "Mini has no router and no tools";
            Plan {
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
            extra: &[Step::ProtectedTools],
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
        let p = plan(Profile::Mini, Mode::Confined);
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
        let p = plan(Profile::Link, Mode::Confined);
        assert_eq!(p.extra, [Step::ProtectedTools]);
        assert_eq!(p.skipped.len(), 1);
        assert_eq!(p.skipped[0].0, CheckName::SchedulerFired);
    }

    #[test]
    fn diagnostic_link_runs_the_scheduler_and_skips_the_tools() {
        let p = plan(Profile::Link, Mode::Diagnostic);
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

    #[test]
    fn a_failing_phase_is_reported_under_its_check() {
        assert_eq!(Step::SecondAgent.check(), CheckName::AgentFilesIsolated);
        assert_eq!(Step::Refusals.check(), CheckName::UnauthenticatedRefused);
        assert_eq!(Step::WarmTurns.name(), "warm_turn");
    }
}
