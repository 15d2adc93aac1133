//! Per-phase counts of a parsed trace.

use super::{Exec, Trace, TraceError};
use link_report::{Phase, TracePhase};
use std::collections::HashSet;

impl Trace {
    /// Counts one phase: execs completed within its bounds, processes alive at its end.
    pub fn count(&self, phase: &Phase) -> TracePhase {
        let (start, end) = (phase.start_unix_ns, phase.end_unix_ns);
        let execs: Vec<&Exec> = self
            .execs
            .iter()
            .filter(|e| e.unix_ns >= start && e.unix_ns <= end)
            .collect();
        let pids: HashSet<i32> = execs.iter().map(|e| e.pid).collect();
        let resident = self
            .processes
            .iter()
            .filter(|p| p.born_ns <= end && p.ended_ns.is_none_or(|d| d > end))
            .count();
        TracePhase {
            name: phase.name.clone(),
            round: phase.round,
            execs: execs.len() as u64,
            executing_pids: pids.len() as u64,
            resident_processes: resident as u64,
        }
    }
}

/// Every phase's counts, and the execs within no phase's bounds.
pub(super) struct Counted {
    pub phases: Vec<TracePhase>,
    pub outside_phases_execs: u64,
    pub total_execs: u64,
}

/// Refuses phases the trace cannot speak for, so a wrong file never reads as zero activity.
pub(super) fn count_phases(trace: &Trace, phases: &[Phase]) -> Result<Counted, TraceError> {
    if phases.is_empty() {
        return Err(TraceError::Mismatch("the report has no phases".into()));
    }
    for p in phases {
        if p.start_unix_ns < trace.first_ns || p.end_unix_ns > trace.last_ns {
            return Err(TraceError::Mismatch(format!(
                "phase {} (round {}) runs {}..{} ns but the trace covers {}..{} ns; \
                 was the trace recorded for this report's run?",
                p.name, p.round, p.start_unix_ns, p.end_unix_ns, trace.first_ns, trace.last_ns
            )));
        }
    }
    let within = |e: &Exec| {
        phases
            .iter()
            .any(|p| e.unix_ns >= p.start_unix_ns && e.unix_ns <= p.end_unix_ns)
    };
    Ok(Counted {
        phases: phases.iter().map(|p| trace.count(p)).collect(),
        outside_phases_execs: trace.execs.iter().filter(|e| !within(e)).count() as u64,
        total_execs: trace.execs.len() as u64,
    })
}
