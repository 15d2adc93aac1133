//! What one run counts as its own: it holds the process's [`exclusive`] turn for its whole
//! length, so no [`RuntimeProcess`](crate::runtime_process::RuntimeProcess) of this process is
//! up meanwhile, and of the runner's descendants it considers only those it started, i.e. not
//! the ones already there when it began (say an orphan of an earlier runtime of this process
//! still on its way out). The process records, the `processes_stopped` and `no_orphans`
//! checks, and the orphans a run kills all come from here.

use crate::reaper::{self, ProcInfo, Reaped};
use crate::runtime_process::{exclusive, Exclusive};
use link_os::sample::descendants;
use std::collections::HashSet;

/// One run's turn and the processes that are not its own.
pub(super) struct Scope {
    turn: Exclusive,
    /// Descendants of the runner, zombies included, by (pid, start time), when the run began.
    before: HashSet<(i32, u64)>,
    /// How many orphans the reaper had collected when the run began.
    reaped_before: usize,
}

impl Scope {
    /// Waits for the exclusive turn (no runtime and no other run of this process is up), then
    /// notes what is already there.
    pub(super) fn begin() -> Scope {
        let turn = exclusive();
        let me = std::process::id() as i32;
        let before = descendants(me)
            .into_iter()
            .filter_map(reaper::read_proc)
            .map(|p| (p.pid, p.start_time_ticks))
            .collect();
        Scope {
            turn,
            before,
            reaped_before: reaper::global().reaped().len(),
        }
    }

    /// The turn, for the run's own host (its spec is [`within`] it).
    ///
    /// [`within`]: crate::runtime_process::RuntimeSpec::within
    pub(super) fn turn(&self) -> &Exclusive {
        &self.turn
    }

    fn ours(&self, p: &ProcInfo) -> bool {
        !self.before.contains(&(p.pid, p.start_time_ticks))
    }

    /// Every live descendant of the runner this run started.
    pub(super) fn snapshot(&self) -> Vec<ProcInfo> {
        reaper::snapshot()
            .into_iter()
            .filter(|p| self.ours(p))
            .collect()
    }

    /// What of this run is still alive: its live descendants, plus any of `recorded`
    /// (pid, start time) that survive elsewhere.
    pub(super) fn leftovers(&self, recorded: &[(i32, u64)]) -> Vec<ProcInfo> {
        reaper::leftovers(recorded, &HashSet::new())
            .into_iter()
            .filter(|p| self.ours(p))
            .collect()
    }

    /// The zombie children of the runner this run started that the reaper has not collected.
    pub(super) fn unreaped(&self) -> Vec<ProcInfo> {
        reaper::global()
            .unreaped()
            .into_iter()
            .filter(|p| self.ours(p))
            .collect()
    }

    /// The orphans the reaper collected since the run began, except any that was there before
    /// it (by pid and start time).
    pub(super) fn reaped(&self) -> Vec<Reaped> {
        reaper::global()
            .reaped()
            .into_iter()
            .skip(self.reaped_before)
            .filter(|r| !self.before.contains(&(r.pid, r.start_time_ticks)))
            .collect()
    }
}
